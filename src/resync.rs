//! Resync with GitHub, a driver beside the sweeper: every `github.resync_interval` the open
//! PRs of each repository are listed and recorded through intake as if their webhooks had
//! arrived (intake then tells the reconciler), so a lost delivery leaves no PR without its
//! preview and no closed PR with one. It only records intent; the reconciler acts. A failed
//! listing changes nothing; a tracked PR missing from the list is only closed once GitHub
//! itself says it is closed. Apart from the reconciler, so that a slow or rate-limited
//! GitHub never holds up a deploy or a teardown.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::Clock;
use crate::config::Config;
use crate::db;
use crate::github::{GitHub, PullInfo};
use crate::intake::Intake;
use crate::intent;
use crate::preview::{PreviewKey, RepoName};
use crate::webhook::{Delivery, Event, PrAction, PullRequestEvent};

pub struct Resync {
    state: crate::db::State,
    config: Config,
    clock: Arc<dyn Clock>,
    /// Lists the open PRs.
    github: Arc<GitHub>,
    /// Where what it finds is recorded (as deliveries).
    intake: Intake,
}

impl Resync {
    pub fn new(
        state: impl Into<crate::db::State>,
        config: Config,
        clock: Arc<dyn Clock>,
        github: Arc<GitHub>,
        intake: Intake,
    ) -> Self {
        Self {
            state: state.into(),
            config,
            clock,
            github,
            intake,
        }
    }

    /// A pass every `github.resync_interval` (and at start), until `cancel`.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let every = self
            .config
            .github
            .resync_interval
            .max(Duration::from_secs(1));
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = cancel.cancelled() => return,
            }
            // Cut short by shutdown, a pass leaves nothing half done: each PR is one delivery.
            let result = tokio::select! {
                result = self.pass().instrument(tracing::info_span!("resync")) => result,
                () = cancel.cancelled() => return,
            };
            if let Err(e) = result {
                tracing::warn!(error = %format!("{e:#}"), "resync failed; retrying at the next one");
            }
        }
    }

    /// One resync of every configured repository (and every repository with previews; with
    /// no `[[repos]]`, every repository previewd has heard of). Returns the deliveries
    /// recorded.
    pub async fn pass(&self) -> anyhow::Result<usize> {
        let (github, intake) = (&self.github, &self.intake);
        // Each preview waiting for CI looks its head's checks up once per resync (the
        // feedback worker asks), so a lost check webhook never leaves it waiting for ever.
        let waiting = db::look_again_at_checks(&self.state).await?;
        if waiting > 0 {
            tracing::debug!(
                waiting,
                "previews waiting for CI look their checks up again"
            );
        }
        let tracked = db::tracked_pulls(&self.state).await?;
        let mut repos: BTreeSet<String> = self
            .config
            .repos
            .iter()
            .map(|r| r.name.as_str().to_owned())
            .collect();
        // Without [[repos]], every repository previewd has heard of (refused ones excluded by
        // intake's own allow-list check when their events are recorded).
        if self.config.repos.is_empty() {
            repos.extend(db::known_repos(&self.state).await?);
        }
        repos.extend(tracked.iter().map(|t| t.repo.clone()));
        let mut recorded = 0;
        for repo in repos {
            let name: RepoName = repo.parse()?;
            let mine: BTreeMap<i64, &db::TrackedPull> = tracked
                .iter()
                .filter(|t| t.repo == repo)
                .map(|t| (t.number, t))
                .collect();
            let installation = mine.values().find_map(|t| installation(t.installation_id));
            let open = match github.open_pulls(&name, installation).await {
                Ok(open) => open,
                Err(e) => {
                    tracing::warn!(repo, error = %e, "listing open PRs failed; nothing changes");
                    continue;
                }
            };
            // Under `trigger = "label"` the label decides too: a lost `labeled` or
            // `unlabeled` at the same head is healed like a lost push.
            let trigger_label = self
                .config
                .policy_for(&name)
                .filter(|p| p.gates.trigger == crate::config::Trigger::Label)
                .map(|p| p.gates.trigger_label.as_str());
            let label_moved = |t: &db::TrackedPull, pull: &PullInfo| {
                trigger_label
                    .is_some_and(|label| pull.labels.iter().any(|l| l == label) != t.labeled)
            };
            let mut events = Vec::new();
            for pull in &open {
                match mine.get(&i64::from(pull.number)) {
                    // Being torn down: the teardown finishes first; a later pass decides.
                    Some(t) if !t.live => {}
                    Some(t) if t.head_sha == pull.head_sha && !label_moved(t, pull) => {}
                    Some(_) => events.push((pull.clone(), PrAction::Synchronize)),
                    None if self.ended_on_purpose(&repo, pull).await? => {}
                    None => events.push((pull.clone(), PrAction::Opened)),
                }
            }
            let listed: BTreeSet<u32> = open.iter().map(|p| p.number).collect();
            for t in mine.values().filter(|t| t.live) {
                let number = u32::try_from(t.number)?;
                if listed.contains(&number) {
                    continue;
                }
                // Missing from the list is not closed: ask about this one PR.
                match github.pull(&name, installation, number).await {
                    Ok(pull) if !pull.open => {
                        let merged = pull.merged;
                        events.push((pull, PrAction::Closed { merged }));
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(repo, number, error = %e, "could not confirm a PR's state; nothing changes")
                    }
                }
            }
            for (pull, action) in events {
                let Some(delivery) = delivery_of(&name, &pull, action, installation) else {
                    tracing::warn!(
                        repo,
                        number = pull.number,
                        sha = pull.head_sha,
                        "GitHub sent a head that is not a SHA; skipped"
                    );
                    continue;
                };
                let intent = intent::decide(&delivery, &self.config, self.clock.now());
                intake.record(delivery, intent).await?;
                recorded += 1;
            }
        }
        Ok(recorded)
    }
}

impl Resync {
    /// An open PR without a preview whose last one was expired, destroyed or evicted at this
    /// very head: that was the point, and only a new push brings it back. (A preview that
    /// ended because the PR closed comes back: the PR was reopened while a webhook was lost.)
    /// Read from `closed_prs`, which retention keeps: history of a long-gone preview is not.
    async fn ended_on_purpose(&self, repo: &str, pull: &PullInfo) -> anyhow::Result<bool> {
        let ended = db::ended_on_purpose_at(&self.state, repo, i64::from(pull.number)).await?;
        Ok(ended.as_deref() == Some(pull.head_sha.as_str()))
    }
}

fn installation(id: Option<i64>) -> Option<u64> {
    id.and_then(|id| u64::try_from(id).ok())
}

/// A pull request as a delivery GitHub could have sent: deduplicated on its head and update
/// time, and ordered by `updated_at` like any webhook, so a newer webhook always wins.
fn delivery_of(
    repo: &RepoName,
    pull: &PullInfo,
    action: PrAction,
    installation_id: Option<u64>,
) -> Option<Delivery> {
    let name = match action {
        PrAction::Opened => "opened",
        PrAction::Closed { .. } => "closed",
        _ => "synchronize",
    };
    Some(Delivery {
        hook_id: "resync".into(),
        guid: format!(
            "resync:{repo}#{}:{name}:{}:{}",
            pull.number,
            pull.head_sha,
            pull.updated_at.unwrap_or(0)
        ),
        event: "pull_request".into(),
        action: Some(name.into()),
        payload: Event::PullRequest(PullRequestEvent {
            action,
            key: PreviewKey::new(repo.clone(), pull.number),
            repo_id: pull.repo_id,
            installation_id,
            title: pull.title.clone(),
            author: pull.author.clone(),
            head_sha: pull.head_sha.parse().ok()?,
            head_ref: pull.head_ref.clone(),
            base_ref: pull.base_ref.clone(),
            base_sha: None,
            fork: pull.fork,
            draft: pull.draft,
            labels: pull.labels.clone(),
            label: None,
            open: pull.open,
            updated_at: pull.updated_at,
            sender: "previewd (resync)".into(),
        }),
    })
}
