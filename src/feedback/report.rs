//! Reporting on the PR, from the feedback worker: the sticky status comment (created once,
//! then edited in place, and only when its text changes) and a GitHub Deployment per head
//! SHA with its status. Every write is made idempotent here: before creating a comment or a
//! deployment previewd looks for the one an earlier, unanswered try may have made. A PR
//! whose reporting GitHub refuses for good `PERMANENT_TRIES` times is given up.

use sha2::{Digest, Sha256};
use tracing::Instrument;

use super::{installation, shape};
use crate::comment::{self, Shown, StatusView};
use crate::db::{self, PreviewRow, Thread};
use crate::feedback::{self, Feedback};
use crate::github::{GitHub, GitHubError};
use crate::intent::OptOut;
use crate::naming::Names;
use crate::preview::{Desired, RepoName};

impl Feedback {
    /// Reports on every preview (nothing is sent where nothing changed), then posts what is
    /// still owed (final reports, notices).
    pub async fn report(&self) {
        match db::preview_ids(&self.state).await {
            Ok(ids) => self.report_owed(&ids, db::Owed::EVERYTHING).await,
            Err(e) => tracing::warn!(error = %e, "listing previews to report on failed"),
        }
    }

    /// Reports on each of `ids`, then posts the final reports and notices `owed` says are
    /// owed (`db::owed`, looked at before).
    pub(crate) async fn report_owed(&self, ids: &[i64], owed: db::Owed) {
        self.report_previews(ids).await;
        if owed.finals {
            self.report_finals().await;
        }
        if owed.notices {
            self.post_notices().await;
        }
    }

    /// The sticky comment and deployment of each of `ids`.
    async fn report_previews(&self, ids: &[i64]) {
        for id in ids {
            let Ok(Some(row)) = db::preview_row(&self.state, *id).await else {
                continue;
            };
            let Some(github) = &self.github else {
                self.log_unreported(row.key.repo.as_str(), i64::from(row.key.number));
                continue;
            };
            let result = async {
                let stored = |e: GitHubError| (Part::Comment, e);
                let view = self
                    .full_status_view(&row)
                    .await
                    .map_err(|e| stored(shape(&e.to_string())))?;
                // Not before the PR's files are listed: "changes no watched file" would be a
                // guess, and then an edit.
                if view
                    .opt_out
                    .as_ref()
                    .is_some_and(|(why, _)| *why == OptOut::Paths)
                    && row.paths_sha.as_deref() != Some(row.head_sha.as_str())
                {
                    return Ok(());
                }
                let thread = self
                    .thread_of(row.key.repo.as_str(), i64::from(row.key.number))
                    .await
                    .map_err(stored)?;
                if thread.given_up.is_some() {
                    return Ok(());
                }
                // A live preview (a reopened PR) owes no "destroyed" report (`pending_finals`
                // skips it), whatever `final_pending` says: that is the preview's end's to set.
                let stored = thread.clone();
                let thread = Thread {
                    installation_id: row.installation_id.or(thread.installation_id),
                    head_sha: Some(row.head_sha.clone()),
                    ..thread
                };
                self.publish(github, thread, &stored, &view).await.map(drop)
            }
            .instrument(tracing::info_span!("report", preview = %row.key))
            .await;
            if let Err((part, e)) = result {
                if !e.is_permanent() {
                    self.owe(row.id);
                }
                self.report_failed(
                    row.key.repo.as_str(),
                    i64::from(row.key.number),
                    &row.head_sha,
                    part,
                    &e,
                )
                .await;
            }
        }
    }

    /// A failed report: a permanent refusal counts towards giving up (the PR's comment and
    /// all: the PR is gone or locked; or only this head's deployment, say without the
    /// `deployments` permission, so that the comment goes on); anything else is tried again
    /// later.
    async fn report_failed(
        &self,
        repo: &str,
        number: i64,
        head_sha: &str,
        part: Part,
        error: &GitHubError,
    ) {
        if !error.is_permanent() {
            return feedback::log_transient(error, "reporting to GitHub");
        }
        let (now, limit, message) = (
            self.clock.now(),
            feedback::PERMANENT_TRIES,
            error.to_string(),
        );
        let given_up = match part {
            Part::Comment => {
                db::thread_failed(&self.state, repo, number, &message, limit, now).await
            }
            Part::Deployment => {
                db::deployment_failed(&self.state, repo, number, head_sha, limit, now).await
            }
        };
        match given_up {
            Ok(true) => {
                tracing::warn!(repo, number, ?part, error = %error, "GitHub keeps refusing this report; given up");
            }
            Ok(false) => {
                tracing::info!(repo, number, ?part, error = %error, "GitHub refused this report; trying a few times");
            }
            Err(e) => tracing::warn!(repo, number, error = %e, "recording a refused report failed"),
        }
    }

    /// One-off comments (expiry warnings, evictions), each posted once: marked, and looked
    /// for before posting again.
    async fn post_notices(&self) {
        let Some(github) = &self.github else { return };
        let Ok(notices) = db::unposted_notices(&self.state).await else {
            return;
        };
        for notice in notices {
            let result = async {
                let repo: RepoName = notice.repo.parse().map_err(|_| shape(&notice.repo))?;
                let number = u32::try_from(notice.number).map_err(|_| shape("number"))?;
                let installation = installation(notice.installation_id);
                let marker = format!("<!-- previewd:notice {} -->", notice.id);
                let login = github.login().await?.to_owned();
                let posted = github
                    .comments(&repo, installation, number)
                    .await?
                    .iter()
                    .any(|c| c.author == login && c.body.contains(&marker));
                if !posted {
                    let body = format!("{marker}\n{}", notice.body);
                    github
                        .create_comment(&repo, installation, number, &body)
                        .await?;
                }
                Ok::<_, GitHubError>(())
            }
            .await;
            match result {
                Ok(()) => {
                    let _ = db::notice_posted(&self.state, notice.id, self.clock.now()).await;
                }
                // The PR is gone or locked: after a few tries the notice is not owed any more.
                Err(e) if e.is_permanent() => {
                    let failures = db::notice_failed(&self.state, notice.id)
                        .await
                        .unwrap_or(i64::MAX);
                    if failures >= feedback::PERMANENT_TRIES {
                        tracing::warn!(notice = notice.id, error = %e, "GitHub keeps refusing this notice; dropped");
                        let _ = db::notice_posted(&self.state, notice.id, self.clock.now()).await;
                    }
                }
                Err(e) => feedback::log_transient(&e, "posting a notice"),
            }
        }
    }

    /// The "destroyed" report of previews whose row is gone.
    async fn report_finals(&self) {
        let Some(github) = &self.github else { return };
        let Ok(finals) = db::pending_finals(&self.state).await else {
            return;
        };
        for thread in finals {
            let head = thread.head_sha.clone().unwrap_or_default();
            let reason = thread.end_reason;
            let view = StatusView {
                shown: Shown::Destroyed,
                url: String::new(),
                head_sha: &head,
                cluster: None,
                expires_at: None,
                keep: false,
                last_error: None,
                dashboard: None,
                end_reason: reason,
                position: None,
                opt_out: None,
                ci: None,
                access: None,
                inbox: None,
                sleeping_since: None,
            };
            let (repo, number) = (thread.repo.clone(), thread.number);
            let stored = thread.clone();
            match self.publish(github, thread, &stored, &view).await {
                Ok(_) => {
                    let now = self.clock.now();
                    let _ = db::final_posted(&self.state, &repo, number, reason, now).await;
                }
                Err((part, e)) => self.report_failed(&repo, number, &head, part, &e).await,
            }
        }
    }

    /// Brings the PR's comment and deployment in line with `view`, then saves the thread
    /// once unless it is still `stored` (as the state holds it); a failure says which part
    /// failed.
    async fn publish(
        &self,
        github: &GitHub,
        mut thread: Thread,
        stored: &Thread,
        view: &StatusView<'_>,
    ) -> Result<Thread, (Part, GitHubError)> {
        let repo: RepoName = thread
            .repo
            .parse()
            .map_err(|_| (Part::Comment, shape(&thread.repo)))?;
        let number = u32::try_from(thread.number).map_err(|_| (Part::Comment, shape("number")))?;
        let installation = installation(thread.installation_id);
        let pr = OnGitHub {
            github,
            repo: &repo,
            installation,
            number,
        };
        let outcome = async {
            self.publish_comment(&pr, &mut thread, view)
                .await
                .map_err(|e| (Part::Comment, e))?;
            self.publish_deployment(&pr, &mut thread, view)
                .await
                .map_err(|e| (Part::Deployment, e))
        }
        .await;
        // One save for whatever GitHub took, also when the deployment then failed: the
        // comment is remembered (and its save ends any run of refusals before this one is
        // counted). A refused comment took nothing, and saves nothing: the save would reset
        // the count of refusals that gives a PR up. Not saved where nothing changed: a
        // report pass over thousands of settled previews would otherwise commit each of
        // them. A crash before the save loses nothing GitHub holds: the comment is found
        // again by its marker and the deployment by its SHA; a status may be posted twice.
        let took = !matches!(outcome, Err((Part::Comment, _)));
        if took && thread != *stored {
            let _ = db::save_thread(&self.state, &thread, self.clock.now()).await;
        }
        outcome.map(|()| thread)
    }

    /// The sticky comment, created once (found again by its marker), then edited in place
    /// when its text changes.
    async fn publish_comment(
        &self,
        pr: &OnGitHub<'_>,
        thread: &mut Thread,
        view: &StatusView<'_>,
    ) -> Result<(), GitHubError> {
        let (github, repo, installation, number) = (pr.github, pr.repo, pr.installation, pr.number);
        let body = comment::status(view);
        let hash = hex::encode(Sha256::digest(body.as_bytes()));
        if thread.body_hash.as_deref() != Some(hash.as_str()) {
            let mut id = thread.comment_id.and_then(|id| u64::try_from(id).ok());
            if let Some(known) = id {
                match github
                    .update_comment(repo, installation, known, &body)
                    .await
                {
                    Err(e) if e.is_not_found() => id = None, // deleted by someone: post anew
                    other => other?,
                }
            }
            if id.is_none() {
                let login = github.login().await?.to_owned();
                let existing = github
                    .comments(repo, installation, number)
                    .await?
                    .into_iter()
                    .find(|c| c.author == login && c.body.starts_with(comment::MARKER));
                id = Some(match existing {
                    Some(found) => {
                        github
                            .update_comment(repo, installation, found.id, &body)
                            .await?;
                        found.id
                    }
                    None => {
                        github
                            .create_comment(repo, installation, number, &body)
                            .await?
                    }
                });
            }
            thread.comment_id = id.map(|id| id as i64);
            thread.body_hash = Some(hash);
        }
        Ok(())
    }

    /// One transient deployment per head SHA; its status follows the preview's state.
    async fn publish_deployment(
        &self,
        pr: &OnGitHub<'_>,
        thread: &mut Thread,
        view: &StatusView<'_>,
    ) -> Result<(), GitHubError> {
        let Some(state) = view.shown.deployment_state() else {
            return Ok(());
        };
        let sha = view.head_sha;
        // Refused for good at this head: the next push tries again.
        if thread.deployment_state.as_deref() == Some(db::GIVEN_UP)
            && thread.deployment_sha.as_deref() == Some(sha)
        {
            return Ok(());
        }
        let environment = format!("preview/pr-{}", pr.number);
        let log_url = self.config.public_url.as_ref().map(|base| {
            format!(
                "{base}/previews/{}/{}/{}",
                pr.repo.owner(),
                pr.repo.name(),
                pr.number
            )
        });
        if thread.deployment_sha.as_deref() != Some(sha) && state != "inactive" {
            if let (Some(old), false) = (
                thread.deployment_id,
                thread.deployment_state.as_deref() == Some("inactive"),
            ) {
                let description = comment::deployment_description(Shown::Destroyed, sha);
                pr.github
                    .deployment_status(
                        pr.repo,
                        pr.installation,
                        old as u64,
                        "inactive",
                        None,
                        log_url.as_deref(),
                        &description,
                    )
                    .await?;
            }
            let existing = pr
                .github
                .deployments(pr.repo, pr.installation, sha, &environment)
                .await?
                .first()
                .copied();
            let id = match existing {
                Some(id) => id,
                None => {
                    let description = comment::deployment_description(view.shown, sha);
                    pr.github
                        .create_deployment(
                            pr.repo,
                            pr.installation,
                            sha,
                            &environment,
                            &description,
                        )
                        .await?
                }
            };
            thread.deployment_id = Some(id as i64);
            thread.deployment_sha = Some(sha.to_owned());
            thread.deployment_state = None;
        }
        let Some(id) = thread.deployment_id else {
            return Ok(());
        };
        if thread.deployment_state.as_deref() != Some(state) {
            let url = (state == "success").then_some(view.url.as_str());
            let mut description = comment::deployment_description(view.shown, sha);
            // CI failed: the status names the check, and "View logs" opens it.
            let mut log_url = log_url;
            if let Some((crate::checks::Wait::Failed { name, url, .. }, _)) = &view.ci {
                description = comment::ci_failed_description(name, sha);
                if let Some(url) = url.as_ref().filter(|u| u.starts_with("https://")) {
                    log_url = Some(url.clone());
                }
            }
            pr.github
                .deployment_status(
                    pr.repo,
                    pr.installation,
                    id as u64,
                    state,
                    url,
                    log_url.as_deref(),
                    &description,
                )
                .await?;
            thread.deployment_state = Some(state.to_owned());
        }
        Ok(())
    }

    async fn thread_of(&self, repo: &str, number: i64) -> Result<Thread, GitHubError> {
        Ok(db::thread(&self.state, repo, number)
            .await
            .map_err(|e| shape(&e.to_string()))?
            .unwrap_or_else(|| Thread {
                repo: repo.to_owned(),
                number,
                ..Thread::default()
            }))
    }

    /// [`Self::status_view`] with what the state holds beside the row: the place in the
    /// queue, and CI's verdict on the head.
    pub(crate) async fn full_status_view<'a>(
        &self,
        row: &'a PreviewRow,
    ) -> anyhow::Result<StatusView<'a>> {
        let mut view = self.status_view(row)?;
        if view.shown == Shown::Queued {
            view.position = db::queue_position(&self.state, row.id)
                .await
                .ok()
                .map(|n| n + 1);
        }
        if matches!(view.shown, Shown::WaitingForCi | Shown::CiFailed) {
            let wait_for = self
                .config
                .policy_for(&row.key.repo)
                .map_or(&[][..], |p| &p.gates.wait_for[..]);
            let reports = db::checks_of(&self.state, row.key.repo.as_str(), &row.head_sha).await?;
            view.ci = Some((
                crate::checks::verdict(wait_for, &reports),
                row.head_changed_at,
            ));
        }
        Ok(view)
    }

    /// What the status comment shows for a preview.
    pub(crate) fn status_view<'a>(&self, row: &'a PreviewRow) -> anyhow::Result<StatusView<'a>> {
        let key = &row.key;
        let policy = self
            .config
            .policy_for(&key.repo)
            .unwrap_or(&self.config.defaults);
        let names = Names::recorded(row.names.as_deref(), key, &policy.domain)?;
        let url = format!("https://{}", names.host);
        let inbox =
            crate::render::services::inbox_url(&self.config, &self.config.app_for(&key.repo), &url);
        Ok(StatusView {
            shown: Shown::of(row.desired, row.observed),
            url,
            inbox,
            head_sha: &row.head_sha,
            cluster: row.cluster.as_deref(),
            expires_at: Some(row.expires_at),
            keep: row.keep,
            last_error: row.last_error.as_deref(),
            dashboard: self.config.public_url.as_ref().map(|base| {
                format!(
                    "{base}/previews/{}/{}/{}",
                    key.repo.owner(),
                    key.repo.name(),
                    key.number
                )
            }),
            end_reason: row.end_reason,
            position: None,
            opt_out: OptOut::of_stored(
                &policy.gates,
                &row.author,
                row.labeled,
                row.deploy_by.is_some(),
                row.paths_file.is_some(),
            )
            .filter(|_| row.desired == Desired::OptedOut)
            .map(|why| (why, policy.gates.trigger_label.clone())),
            ci: None,
            access: Some((policy.access, key.repo.as_str())),
            sleeping_since: row.sleeping_since,
        })
    }
}

/// The part of a PR's report a failure came from.
#[derive(Debug, Clone, Copy)]
enum Part {
    Comment,
    Deployment,
}

/// The PR a report is published on, and the client that publishes it.
struct OnGitHub<'a> {
    github: &'a GitHub,
    repo: &'a RepoName,
    installation: Option<u64>,
    number: u32,
}
