//! What previewd reads of a PR to decide whether its preview may run: the files it touches,
//! and the CI reports on its head commit.

use serde::de::DeserializeOwned;

use super::transport::{Items, PAGE};
use super::wire::{CheckRun, CommitStatus, PullFile, WorkflowRun, read};
use super::{Caller, GitHub, GitHubError};
use crate::checks::CheckReport;
use crate::paths::GITHUB_FILE_CAP;
use crate::preview::{RepoName, Sha};

/// GitHub lists at most `GITHUB_FILE_CAP` files of a PR: 30 pages of 100, never a 31st.
const FILE_PAGES: usize = GITHUB_FILE_CAP.div_ceil(PAGE);
/// At most this many pages of each CI listing: 1,000 reports, as many as GitHub lists of a
/// commit's workflow runs (`head_sha` searches stop there).
const CHECK_PAGES: usize = 10;

impl GitHub {
    /// The paths PR `number` touches: each file's `filename`, and its `previous_filename`
    /// too when it was renamed (a rename out of a directory touches that directory), so a
    /// listing of `GITHUB_FILE_CAP` files may hold more paths than that. GitHub lists at
    /// most `GITHUB_FILE_CAP` files; any failed page fails the whole call, since a partial
    /// listing must not be taken for "these are all".
    ///
    /// REST: pulls/pulls#list-pull-requests-files
    /// (`GET /repos/{owner}/{repo}/pulls/{pull_number}/files`).
    pub async fn pull_files(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
    ) -> Result<Vec<String>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/pulls/{number}/files");
        let mut paths = Vec::new();
        for file in self.pages(&client, &path, Items::Page, FILE_PAGES).await? {
            let file: PullFile = read(&path, file)?;
            paths.push(file.filename);
            paths.extend(file.previous_filename);
        }
        Ok(paths)
    }

    /// Every report of the checks named `names` on commit `sha`: its check runs (a GitHub
    /// Actions job's name; GitHub lists the latest run of each), its commit statuses (by
    /// context; the combined status holds the latest of each) and its workflow runs (by
    /// workflow name). Names match exactly; nothing named asks nothing. Any failed call or
    /// page fails the whole look-up: a missing report must not be taken for "not reported".
    ///
    /// REST: checks/runs#list-check-runs-for-a-git-reference
    /// (`GET /repos/{owner}/{repo}/commits/{ref}/check-runs`),
    /// commits/statuses#get-the-combined-status-for-a-specific-reference
    /// (`GET /repos/{owner}/{repo}/commits/{ref}/status`),
    /// actions/workflow-runs#list-workflow-runs-for-a-repository
    /// (`GET /repos/{owner}/{repo}/actions/runs?head_sha={sha}`).
    pub async fn commit_checks(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        sha: &Sha,
        names: &[String],
    ) -> Result<Vec<CheckReport>, GitHubError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let client = self.client_for(repo, installation).await?;
        let mut reports = Vec::new();
        let path = format!("/repos/{repo}/commits/{sha}/check-runs");
        reports.extend(
            self.listing::<CheckRun>(&client, &path, "check_runs")
                .await?
                .into_iter()
                .map(CheckReport::from),
        );
        let path = format!("/repos/{repo}/commits/{sha}/status");
        reports.extend(
            self.listing::<CommitStatus>(&client, &path, "statuses")
                .await?
                .into_iter()
                .map(CheckReport::from),
        );
        let path = format!("/repos/{repo}/actions/runs?head_sha={sha}");
        reports.extend(
            self.listing::<WorkflowRun>(&client, &path, "workflow_runs")
                .await?
                .into_iter()
                .map(CheckReport::from),
        );
        reports.retain(|r| names.contains(&r.name));
        Ok(reports)
    }

    /// The items under `key` of `path`'s pages (at most `CHECK_PAGES`), each read as `T`.
    async fn listing<T: DeserializeOwned>(
        &self,
        client: &Caller,
        path: &str,
        key: &'static str,
    ) -> Result<Vec<T>, GitHubError> {
        self.pages(client, path, Items::Under(key), CHECK_PAGES)
            .await?
            .into_iter()
            .map(|item| read(path, item))
            .collect()
    }
}
