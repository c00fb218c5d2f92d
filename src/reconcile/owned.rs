//! Whose a preview's objects are: its recorded names, the owner its Applications must carry,
//! a conflict when the name is another's, and the frozen preview of a repository dropped
//! from `[[repos]]`.

use super::Reconciler;
use crate::db::{self, PreviewRow};
use crate::naming::Names;
use crate::plan::{self, Observed};
use crate::preview::{HistoryKind, ObservedState, PreviewKey};
use crate::sink::{self, Owner};

impl Reconciler {
    /// The preview's recorded names; a preview from before names were recorded gets the
    /// ones it was created with, recorded now, so that a later change of the domain or of the
    /// naming rule never renames it.
    pub(super) async fn names_of(
        &self,
        row: &PreviewRow,
        key: &PreviewKey,
    ) -> anyhow::Result<Names> {
        let policy = self.config.policy_for(&key.repo);
        let domain = &policy.unwrap_or(&self.config.defaults).domain;
        let names = Names::recorded(row.names.as_deref(), key, domain)?;
        // Only with the repository's own domain: a frozen one's (dropped from [[repos]]) is
        // no longer known, and the defaults' would record a host the preview does not have.
        if row.names.is_none() && policy.is_some() {
            if !self.config.chart.legacy_names {
                tracing::warn!(preview = %key, namespace = %names.slug,
                    "a preview from before names were recorded keeps its names: until none is left, set chart.legacy_names = true and apply `previewd render --projects`, or the AppProjects refuse it");
            }
            db::record_names(&self.state, row.id, &names.to_json()).await?;
        }
        Ok(names)
    }

    /// A preview whose repository left `[[repos]]`: kept exactly as last applied (never
    /// rendered again, with the defaults or anything else) until its close, a command or
    /// its expiry ends it; only what Argo CD reports of it is still followed.
    pub(super) async fn keep_frozen(
        &self,
        row: &PreviewRow,
        key: &PreviewKey,
        names: &Names,
        owner: &Owner,
        now: i64,
    ) -> anyhow::Result<()> {
        let helper = self.observe(&names.application, owner).await?;
        if let Observed::Foreign { .. } = helper {
            return self
                .report_conflict(row, &names.application, &helper, now)
                .await;
        }
        let (state, message) = plan::state(helper.health(), None);
        if row.observed != state || row.last_error.as_deref() != message {
            tracing::info!(preview = %key, state = %state, "frozen: its repository is no longer in [[repos]]");
            db::set_observed(&self.state, row.id, state, message, None, now).await?;
        }
        self.settled(row.id);
        Ok(())
    }

    /// This state's identity, on every Application it writes (`render::LABEL_INSTANCE`).
    pub(super) async fn instance(&self) -> anyhow::Result<&str> {
        let instance = self
            .instance
            .get_or_try_init(|| db::instance_id(&self.state))
            .await?;
        Ok(instance)
    }

    /// An Application of the preview's name that is not its own: nothing is written, and the
    /// preview shows the conflict (failed, with who holds the name) until the name is free.
    pub(super) async fn report_conflict(
        &self,
        row: &PreviewRow,
        name: &str,
        observed: &Observed,
        now: i64,
    ) -> anyhow::Result<()> {
        let Observed::Foreign { owner } = observed else {
            anyhow::bail!("no conflict at {name}");
        };
        let message = sink::Conflict {
            name: name.to_owned(),
            owner: owner.clone(),
        }
        .to_string();
        if row.last_error.as_deref() != Some(message.as_str()) {
            tracing::error!(preview = %row.key, %message, "name conflict");
            // The history row with the state it records, in one commit: had the state not
            // been written, the next look would tell the same conflict again.
            let seen = plan::Observation {
                state: ObservedState::Failed,
                message: Some(&message),
                history: Some(HistoryKind::Conflict),
                ready_at_seed: None,
            };
            db::record_state(&self.state, row.id, &seen, now).await?;
        }
        self.requeue(row.id);
        Ok(())
    }
}
