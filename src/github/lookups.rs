//! What previewd reads of a PR to decide whether its preview may run: the files it touches.

use super::transport::PAGE;
use super::wire::{PullFile, read};
use super::{GitHub, GitHubError};
use crate::paths::GITHUB_FILE_CAP;
use crate::preview::RepoName;

/// GitHub lists at most `GITHUB_FILE_CAP` files of a PR: 30 pages of 100, never a 31st.
const FILE_PAGES: usize = GITHUB_FILE_CAP.div_ceil(PAGE);

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
        for file in self.pages(&client, &path, FILE_PAGES).await? {
            let file: PullFile = read(&path, file)?;
            paths.push(file.filename);
            paths.extend(file.previous_filename);
        }
        Ok(paths)
    }
}
