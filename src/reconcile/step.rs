//! One preview's step, from the look to the last write: what Argo CD reports of both
//! Applications (the watch's copy when it has one), the step `plan::step` decides on it, and
//! carrying it out, each Application written the one way every write goes (`apply`).

use anyhow::Context;
use serde_json::Value;

use super::Reconciler;
use super::calls::stale;
use super::rendering::{Rendering, Whole};
use crate::checks::Wait;
use crate::db::{self, NewSecrets, PreviewRow};
use crate::ledger::{self, Entry};
use crate::naming::Names;
use crate::plan::{self, Act, Action, Observation, Observed, Recorded, Step};
use crate::preview::{ObservedState, PreviewKey};
use crate::render;
use crate::sink::Owner;

/// The preview a step is for, as the reconciler resolved it.
pub(super) struct At<'a> {
    pub(super) row: &'a PreviewRow,
    pub(super) key: &'a PreviewKey,
    pub(super) names: &'a Names,
    pub(super) owner: &'a Owner,
    pub(super) now: i64,
}

/// What a look found: both Applications as Argo CD reports them, and the step they lead to.
pub(super) struct Looked {
    pub(super) step: Step,
    helper: Observed,
    app: Option<Observed>,
}

/// One Application write: the ledger entries it provisions, recorded as intended before it
/// and as applied after it.
struct Write<'a> {
    name: &'a str,
    manifest: &'a Value,
    entries: &'a [Entry],
    /// Sealed values new with this rendering, stored with the intent that carries them.
    secrets: Option<NewSecrets>,
    /// The rendering's hash, for the helper Application (the app's is on its manifest).
    hash: Option<&'a str>,
    reason: String,
}

/// How an Application's part of a step ended.
enum Written {
    Applied,
    /// Nothing to write (a sync may have been asked for).
    Nothing,
    /// The sink found the object changed under it: nothing written, looked at again soon.
    Stale,
    /// The name is another's (`Observed::Foreign`): reported, nothing written.
    Conflict,
}

impl Reconciler {
    /// Argo CD's word on the preview's Applications and the step it leads to. A row read
    /// earlier (with a pass's page) whose watched Applications change nothing is `None`:
    /// an idle pass over thousands of previews, or a push, asks the API server for nothing.
    pub(super) async fn look(
        &self,
        at: &At<'_>,
        read: super::Read,
        rendering: Option<&Rendering>,
        wait: &Wait,
    ) -> anyhow::Result<Option<Looked>> {
        let (row, names, owner) = (at.row, at.names, at.owner);
        let hash = rendering.map(|r| r.helper_hash.as_str());
        let app_hash = rendering.and_then(|r| r.app_hash.as_deref());
        let decide = |helper: &Observed, app: Option<&Observed>| {
            let health = self.sink.reports_health();
            plan::step(row.desired, hash, helper, app_hash.zip(app), health, wait)
                .asleep(row.sleeping_since.is_some())
        };
        let seen = self.seen_by_watch(names, owner, app_hash.is_some());
        if read == super::Read::Earlier
            && let Some((helper, app)) = &seen
            && decide(helper, app.as_ref()).changes_nothing(row.observed, row.last_error.as_deref())
        {
            return Ok(None);
        }
        let (seen_helper, seen_app) =
            seen.map_or((None, None), |(helper, app)| (Some(helper), app));
        let helper = self
            .observe_unless_seen(seen_helper, &names.application, owner)
            .await?;
        let app = match app_hash {
            Some(_) => Some(
                self.observe_unless_seen(seen_app, &names.app_application, owner)
                    .await?,
            ),
            None => None,
        };
        let step = decide(&helper, app.as_ref());
        Ok(Some(Looked { step, helper, app }))
    }

    /// Carries `looked.step` out: the helper Application, then the app's, each applied or
    /// synced as the step says; the look's state rides on the commit of the last apply.
    pub(super) async fn carry_out(
        &self,
        at: &At<'_>,
        looked: Looked,
        whole: Option<Whole>,
    ) -> anyhow::Result<()> {
        let (row, names, owner, now) = (at.row, at.names, at.owner, at.now);
        let Looked { step, helper, app } = looked;
        let (rendered, mut secrets) =
            whole.map_or((None, None), |w| (Some(w.rendered), w.new_secrets));
        let recorded = Recorded {
            state: row.observed,
            error: row.last_error.as_deref(),
            seed_generation: row.seed_generation,
        };
        let mut seen = step.observation(recorded);
        self.log_failure(at.key, &row.head_sha[..7], seen.as_ref());
        let app_applies = app.is_some()
            && step
                .app
                .as_ref()
                .is_some_and(|act| act.action == Action::Apply);
        let mut applied = false;
        match step.helper.action {
            Action::Conflict => {
                return self
                    .report_conflict(row, &names.application, &helper, now)
                    .await;
            }
            Action::Apply => {
                let rendered = rendered.as_ref().context("nothing to apply")?;
                let write = Write {
                    name: &names.application,
                    manifest: &rendered.helper.manifest,
                    entries: &rendered.entries,
                    secrets: secrets.take(),
                    hash: Some(&rendered.helper.hash),
                    reason: format!(
                        "helper Application {} applied at {}",
                        names.application,
                        &row.head_sha[..7]
                    ),
                };
                // The app's apply, if any, is the last: the state rides on its commit.
                let rides = if app_applies { None } else { seen.take() };
                match self.apply(at, write, rides.as_ref()).await? {
                    Written::Stale => return Ok(()),
                    _ => applied = true,
                }
            }
            _ => {}
        }
        if step.helper.sync {
            self.request_sync(&names.application, owner).await?;
        }
        if let (Some(act), Some(app)) = (&step.app, &app) {
            match self
                .carry_out_app(at, act, app, rendered.as_ref(), &mut seen)
                .await?
            {
                Written::Stale | Written::Conflict => return Ok(()),
                Written::Applied => applied = true,
                Written::Nothing => {}
            }
        }
        if let Some(seen) = &seen {
            db::record_state(&self.state, row.id, seen, now).await?;
        }
        if step.state == ObservedState::Ready && row.observed != ObservedState::Ready {
            self.count_usage(row.id, names).await;
        }
        if step.requeue {
            // A step forward (an Application applied, a new state) starts the looks afresh:
            // the next phase is watched as closely as the first, not at the doubled delay.
            if applied || row.observed != step.state {
                self.settled(row.id);
            }
            self.requeue_following(row.id, names);
        } else {
            self.settled(row.id);
        }
        Ok(())
    }

    /// The app's own Application, as `act` says.
    async fn carry_out_app(
        &self,
        at: &At<'_>,
        act: &Act,
        observed: &Observed,
        rendered: Option<&render::Rendered>,
        seen: &mut Option<Observation<'_>>,
    ) -> anyhow::Result<Written> {
        let names = at.names;
        let written = match act.action {
            Action::Conflict => {
                self.report_conflict(at.row, &names.app_application, observed, at.now)
                    .await?;
                return Ok(Written::Conflict);
            }
            Action::Apply => {
                let rendering = rendered
                    .and_then(|r| r.app.as_ref())
                    .context("nothing to apply")?;
                let entries = [ledger::app_entry(names, &self.config)];
                let write = Write {
                    name: &names.app_application,
                    manifest: &rendering.manifest,
                    entries: &entries,
                    secrets: None,
                    hash: None,
                    reason: format!(
                        "app Application {} applied at {}: the helpers are ready",
                        names.app_application,
                        &at.row.head_sha[..7]
                    ),
                };
                match self.apply(at, write, seen.take().as_ref()).await? {
                    Written::Applied => Written::Applied,
                    other => return Ok(other),
                }
            }
            _ => Written::Nothing,
        };
        if act.sync {
            self.request_sync(&names.app_application, at.owner).await?;
        }
        Ok(written)
    }

    /// The one way an Application is written: its ledger entries recorded as intended
    /// (so a crash after the apply leaves nothing unaccounted), the apply (retried), then
    /// the entries recorded as applied, with `seen` on the same commit. A stale write is
    /// looked at again soon.
    async fn apply(
        &self,
        at: &At<'_>,
        write: Write<'_>,
        seen: Option<&Observation<'_>>,
    ) -> anyhow::Result<Written> {
        let (id, now) = (at.row.id, at.now);
        db::record_intended(&self.state, id, write.entries, write.secrets, now).await?;
        let written = self.retry("apply", || {
            self.sink.apply(write.name, write.manifest, at.owner)
        });
        if stale(written.await)? {
            self.requeue(id);
            return Ok(Written::Stale);
        }
        db::record_applied(
            &self.state,
            id,
            write.entries,
            write.hash,
            &write.reason,
            seen,
            now,
        )
        .await?;
        let sha = &at.row.head_sha[..7];
        tracing::info!(preview = %at.key, sha, application = write.name, "applied");
        Ok(Written::Applied)
    }

    /// What the preview's namespace requests now that it is ready awake, as its quota
    /// counts it (the dashboard's cost, and what a sleep then saves). Best effort: a quota
    /// not readable leaves the last count.
    async fn count_usage(&self, id: i64, names: &Names) {
        let quota = format!("{}-quota", names.slug);
        match self.sink.quota_used(&names.slug, &quota).await {
            Ok(Some(used)) => {
                let usage = db::sleep::Usage {
                    pods: used.pods,
                    cpu_millis: used.cpu_millis,
                    memory_bytes: used.memory_bytes,
                };
                if let Err(e) = db::sleep::record_usage(&self.state, id, usage).await {
                    tracing::warn!(error = %e, "the preview's usage could not be recorded");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "the preview's quota could not be read"),
        }
    }

    /// A new failure, once (not once per look).
    fn log_failure(&self, key: &PreviewKey, sha: &str, seen: Option<&Observation<'_>>) {
        let Some(seen) = seen else { return };
        let Some(message) = seen.message else { return };
        if seen.state == ObservedState::CiFailed {
            tracing::info!(preview = %key, sha, error = message, "CI failed on the head");
        } else {
            tracing::warn!(preview = %key, sha, error = message, "Argo CD reports a failure");
        }
    }
}
