//! Reporting on the PR: the sticky status comment (created once, then edited in place, and
//! only when its text changes) and a GitHub Deployment per head SHA with its status. Every
//! write is made idempotent here: before creating a comment or a deployment previewd looks
//! for the one an earlier, unanswered try may have made.

use sha2::{Digest, Sha256};

use super::Reconciler;
use super::obey::installation;
use crate::comment::{self, Shown, StatusView};
use crate::db::{self, PreviewRow, Thread};
use crate::github::{GitHub, GitHubError};
use crate::naming::Names;
use crate::preview::{PreviewKey, RepoName};

impl Reconciler {
    /// Reports on each of `ids`, then posts what is still owed (final reports, notices).
    pub(super) async fn report(&self, ids: &[i64]) {
        self.report_previews(ids).await;
        self.report_finals().await;
        self.post_notices().await;
    }

    /// The sticky comment and deployment of each of `ids`.
    pub(super) async fn report_previews(&self, ids: &[i64]) {
        for id in ids {
            let Ok(Some(row)) = db::preview_row(&self.pool, *id).await else {
                continue;
            };
            let Some(github) = &self.github else {
                self.log_unreported(&row.repo, row.number);
                continue;
            };
            let result = async {
                let mut view = self.status_view(&row).map_err(|e| shape(&e.to_string()))?;
                if view.shown == Shown::Queued {
                    view.position = db::queue_position(&self.pool, row.id)
                        .await
                        .ok()
                        .map(|n| n + 1);
                }
                let thread = self.thread_of(&row.repo, row.number).await?;
                // A live preview (a reopened PR) owes no "destroyed" report any more.
                let thread = Thread {
                    installation_id: row.installation_id.or(thread.installation_id),
                    head_sha: Some(row.head_sha.clone()),
                    final_pending: false,
                    ..thread
                };
                self.publish(github, thread, &view).await.map(drop)
            }
            .await;
            if let Err(e) = result {
                tracing::warn!(repo = row.repo, number = row.number, error = %e, "reporting to GitHub failed; retrying later");
            }
        }
    }

    /// One-off comments (expiry warnings, evictions), each posted once: marked, and looked
    /// for before posting again.
    async fn post_notices(&self) {
        let Some(github) = &self.github else { return };
        let Ok(notices) = db::unposted_notices(&self.pool).await else {
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
                // Posted, or the PR is gone: either way it is not owed any more.
                Ok(()) => {
                    let _ = db::notice_posted(&self.pool, notice.id, self.clock.now()).await;
                }
                Err(e) if e.is_not_found() => {
                    tracing::info!(notice = notice.id, "the PR is gone; notice dropped");
                    let _ = db::notice_posted(&self.pool, notice.id, self.clock.now()).await;
                }
                Err(e) => {
                    tracing::warn!(notice = notice.id, error = %e, "posting a notice failed; retrying later")
                }
            }
        }
    }

    /// The "destroyed" report of previews whose row is gone.
    async fn report_finals(&self) {
        let Some(github) = &self.github else { return };
        let Ok(finals) = db::pending_finals(&self.pool).await else {
            return;
        };
        for thread in finals {
            let head = thread.head_sha.clone().unwrap_or_default();
            let reason = thread.end_reason.clone();
            let view = StatusView {
                shown: Shown::Destroyed,
                url: String::new(),
                head_sha: &head,
                cluster: None,
                expires_at: None,
                keep: false,
                last_error: None,
                dashboard: None,
                end_reason: reason.as_deref(),
                position: None,
            };
            let (repo, number) = (thread.repo.clone(), thread.number);
            match self.publish(github, thread, &view).await {
                Ok(mut thread) => {
                    thread.final_pending = false;
                    let _ = db::save_thread(&self.pool, &thread, self.clock.now()).await;
                }
                Err(e) => {
                    tracing::warn!(repo, number, error = %e, "reporting the end to GitHub failed; retrying later");
                }
            }
        }
    }

    /// Brings the PR's comment and deployment in line with `view`, saving each step.
    async fn publish(
        &self,
        github: &GitHub,
        mut thread: Thread,
        view: &StatusView<'_>,
    ) -> Result<Thread, GitHubError> {
        let repo: RepoName = thread.repo.parse().map_err(|_| shape(&thread.repo))?;
        let number = u32::try_from(thread.number).map_err(|_| shape("number"))?;
        let installation = installation(thread.installation_id);
        let now = self.clock.now();
        let body = comment::status(view);
        let hash = hex::encode(Sha256::digest(body.as_bytes()));
        if thread.body_hash.as_deref() != Some(hash.as_str()) {
            let mut id = thread.comment_id.and_then(|id| u64::try_from(id).ok());
            if let Some(known) = id {
                match github
                    .update_comment(&repo, installation, known, &body)
                    .await
                {
                    Err(e) if e.is_not_found() => id = None, // deleted by someone: post anew
                    other => other?,
                }
            }
            if id.is_none() {
                let login = github.login().await?.to_owned();
                let existing = github
                    .comments(&repo, installation, number)
                    .await?
                    .into_iter()
                    .find(|c| c.author == login && c.body.starts_with(comment::MARKER));
                id = Some(match existing {
                    Some(found) => {
                        github
                            .update_comment(&repo, installation, found.id, &body)
                            .await?;
                        found.id
                    }
                    None => {
                        github
                            .create_comment(&repo, installation, number, &body)
                            .await?
                    }
                });
            }
            thread.comment_id = id.map(|id| id as i64);
            thread.body_hash = Some(hash);
            let _ = db::save_thread(&self.pool, &thread, now).await;
        }
        self.publish_deployment(github, &repo, installation, number, &mut thread, view)
            .await?;
        let _ = db::save_thread(&self.pool, &thread, now).await;
        Ok(thread)
    }

    /// One transient deployment per head SHA; its status follows the preview's state.
    async fn publish_deployment(
        &self,
        github: &GitHub,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
        thread: &mut Thread,
        view: &StatusView<'_>,
    ) -> Result<(), GitHubError> {
        let Some(state) = view.shown.deployment_state() else {
            return Ok(());
        };
        let now = self.clock.now();
        let environment = format!("preview/pr-{number}");
        let log_url = self
            .config
            .public_url
            .as_ref()
            .map(|base| format!("{base}/previews/{}/{}/{number}", repo.owner(), repo.name()));
        let sha = view.head_sha;
        if thread.deployment_sha.as_deref() != Some(sha) && state != "inactive" {
            if let (Some(old), false) = (
                thread.deployment_id,
                thread.deployment_state.as_deref() == Some("inactive"),
            ) {
                let description = comment::deployment_description(Shown::Destroyed, sha);
                github
                    .deployment_status(
                        repo,
                        installation,
                        old as u64,
                        "inactive",
                        None,
                        log_url.as_deref(),
                        &description,
                    )
                    .await?;
            }
            let existing = github
                .deployments(repo, installation, sha, &environment)
                .await?
                .first()
                .copied();
            let id = match existing {
                Some(id) => id,
                None => {
                    let description = comment::deployment_description(view.shown, sha);
                    github
                        .create_deployment(repo, installation, sha, &environment, &description)
                        .await?
                }
            };
            thread.deployment_id = Some(id as i64);
            thread.deployment_sha = Some(sha.to_owned());
            thread.deployment_state = None;
            let _ = db::save_thread(&self.pool, thread, now).await;
        }
        let Some(id) = thread.deployment_id else {
            return Ok(());
        };
        if thread.deployment_state.as_deref() != Some(state) {
            let url = (state == "success").then_some(view.url.as_str());
            let description = comment::deployment_description(view.shown, sha);
            github
                .deployment_status(
                    repo,
                    installation,
                    id as u64,
                    state,
                    url,
                    log_url.as_deref(),
                    &description,
                )
                .await?;
            thread.deployment_state = Some(state.to_owned());
            let _ = db::save_thread(&self.pool, thread, now).await;
        }
        Ok(())
    }

    async fn thread_of(&self, repo: &str, number: i64) -> Result<Thread, GitHubError> {
        Ok(db::thread(&self.pool, repo, number)
            .await
            .map_err(|e| shape(&e.to_string()))?
            .unwrap_or_else(|| Thread {
                repo: repo.to_owned(),
                number,
                ..Thread::default()
            }))
    }

    /// What the status comment shows for a preview.
    pub(super) fn status_view<'a>(&self, row: &'a PreviewRow) -> anyhow::Result<StatusView<'a>> {
        let key = PreviewKey::new(row.repo.parse()?, u32::try_from(row.number)?);
        let policy = self
            .config
            .policy_for(&key.repo)
            .unwrap_or(&self.config.defaults);
        let names = Names::recorded(row.names.as_deref(), &key, &policy.domain)?;
        Ok(StatusView {
            shown: Shown::of(&row.desired, &row.observed),
            url: format!("https://{}", names.host),
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
            end_reason: row.end_reason.as_deref(),
            position: None,
        })
    }

    /// With no GitHub credentials, each preview's first skipped report is logged; the rest
    /// are silent.
    pub(super) fn log_unreported(&self, repo: &str, number: i64) {
        let mut seen = self.unreported.lock().expect("unreported set");
        if seen.insert((repo.to_owned(), number)) {
            tracing::info!(
                repo,
                number,
                "GitHub reporting is off (no github.token or App credentials): not reporting on this PR"
            );
        }
    }
}

fn shape(what: &str) -> GitHubError {
    GitHubError::Shape {
        path: what.into(),
        message: "not stored as expected".into(),
    }
}
