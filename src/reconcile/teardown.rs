//! Teardown: durably marked, the app's Application deleted first, then the helper
//! Application (whose cascade removes everything it made), each item of the ledger
//! confirmed gone where previewd can see it, and only then the preview forgotten.

use std::time::Duration;

use super::Reconciler;
use crate::db::{self, LedgerRow, PreviewRow};
use crate::ledger::{self, Entry};
use crate::naming::Names;
use crate::plan::{self, Teardown};
use crate::preview::{EndReason, HistoryKind, LedgerState, ObservedState};
use crate::sink::Owner;

impl Reconciler {
    pub(super) async fn tear_down(
        &self,
        row: &PreviewRow,
        names: &Names,
        owner: &Owner,
        now: i64,
    ) -> anyhow::Result<()> {
        if row.teardown_started_at.is_none() {
            db::start_teardown(&self.state, row.id, now).await?;
            self.settled(row.id); // a teardown is watched closely from its start
        }
        let argocd = &self.config.sink.argocd_namespace;
        let application = |name: &str| Entry {
            kind: "Application".into(),
            namespace: argocd.clone(),
            name: name.into(),
        };
        // Acting, then looking again: a sink without finalizers (a directory) deletes the app,
        // the helpers and confirms the rest in one pass.
        for _ in 0..3 {
            let app = self.observe(&names.app_application, owner).await?;
            let helper = self.observe(&names.application, owner).await?;
            for (name, observed) in [
                (&names.app_application, &app),
                (&names.application, &helper),
            ] {
                if !matches!(observed, plan::Observed::Foreign { .. }) {
                    continue;
                }
                // One this preview applied that now carries another's labels (a recreated
                // state, a relabelling) still holds what it made: never taken for gone, and
                // the preview stays until someone sorts it out. One it never applied is
                // another's and, for this preview, absent.
                let applied = db::ledger(&self.state, row.id)
                    .await?
                    .into_iter()
                    .any(|item| {
                        item.kind == "Application"
                            && &item.name == name
                            && item.state != LedgerState::Gone
                    });
                if applied {
                    return self.report_conflict(row, name, observed, now).await;
                }
                tracing::warn!(preview = row.id, application = %name,
                    "not deleting an Application that belongs to another preview");
            }
            let (entry, name) = match plan::plan_teardown(&app, &helper) {
                Teardown::DeleteApp => {
                    (application(&names.app_application), &names.app_application)
                }
                Teardown::DeleteHelper => (application(&names.application), &names.application),
                Teardown::Wait => {
                    // The app's name held by another's object counts as gone (plan_teardown):
                    // the running sync to stop is the helpers'.
                    let deleting = if matches!(
                        app,
                        plan::Observed::Missing | plan::Observed::Foreign { .. }
                    ) {
                        &names.application
                    } else {
                        &names.app_application
                    };
                    // Argo CD finalizes a deletion only once no sync runs, and a sync has no
                    // timeout: one whose wave never gets healthy would hold this forever.
                    if self
                        .retry("stop", || self.sink.stop_operation(deleting, owner))
                        .await?
                    {
                        tracing::info!(preview = row.id, application = %deleting,
                            "terminated its running sync so that the deletion can proceed");
                    }
                    let waiting = format!(
                        "for Argo CD to delete Application {deleting} (finalizers still running)"
                    );
                    self.requeue_following(row.id, names);
                    return self.report_if_stuck(row, &waiting, now).await;
                }
                Teardown::Confirm => return self.confirm_and_forget(row, now).await,
            };
            db::record_ledger(
                &self.state,
                row.id,
                &entry,
                LedgerState::Deleting,
                None,
                now,
            )
            .await?;
            self.retry("delete", || self.sink.delete(name, owner))
                .await?;
        }
        Ok(())
    }

    /// Both Applications are gone. Every other ledger item is confirmed gone: looked up where
    /// previewd can see it (its own cluster, through the Kubernetes API), otherwise on Argo
    /// CD's word (its cascade finalizer deletes before it lets the Application go). Anything
    /// still there keeps the preview; it is reported if it stays.
    async fn confirm_and_forget(&self, row: &PreviewRow, now: i64) -> anyhow::Result<()> {
        let visible = self.sees_cluster_of(row);
        let mut waiting = Vec::new();
        let mut summary = Vec::new();
        for item in db::ledger(&self.state, row.id).await? {
            let (state, detail) = self.confirm(&item, visible).await?;
            if state == LedgerState::Deleting {
                waiting.push(format!("{} {}", item.kind, item.name));
            } else {
                summary.push(format!("{} {} {state}", item.kind, item.name));
            }
            if item.state != state || item.detail.as_deref() != Some(detail.as_str()) {
                db::record_ledger(
                    &self.state,
                    row.id,
                    &item.entry(),
                    state,
                    Some(&detail),
                    now,
                )
                .await?;
            }
        }
        if !waiting.is_empty() {
            self.requeue(row.id);
            let waiting = format!("for {} to go", waiting.join(", "));
            return self.report_if_stuck(row, &waiting, now).await;
        }
        let reason = format!(
            "PR {}: {}",
            row.end_reason.map_or("closed", EndReason::as_str),
            if summary.is_empty() {
                "nothing had been provisioned".to_owned()
            } else {
                summary.join(", ")
            }
        );
        self.settled(row.id);
        if db::forget_preview(&self.state, row.id, &reason, now).await? {
            let took = now - row.teardown_started_at.unwrap_or(now);
            self.metrics
                .torn_down(Duration::from_secs(took.max(0) as u64));
            tracing::info!(preview = %row.key, "preview destroyed");
        }
        Ok(())
    }

    /// One ledger item after both Applications are gone: its state and how that is known.
    async fn confirm(
        &self,
        item: &LedgerRow,
        visible: bool,
    ) -> anyhow::Result<(LedgerState, String)> {
        if item.kind == "Application" {
            return Ok((LedgerState::Gone, "deleted; Argo CD released it".into()));
        }
        if let Some(api) = ledger::api_of(&item.kind).filter(|_| visible) {
            let entry = item.entry();
            let exists = self
                .retry("look up", || self.sink.exists(api, &entry))
                .await?;
            match exists {
                Some(true) => return Ok((LedgerState::Deleting, "still present".into())),
                Some(false) => {
                    return Ok((
                        LedgerState::Gone,
                        "confirmed absent through the Kubernetes API".into(),
                    ));
                }
                None => {}
            }
        }
        let (state, detail) = ledger::unseen_gone_detail(&item.kind, &self.config);
        Ok((state, detail.into()))
    }

    /// previewd's client talks to its own cluster; a preview placed elsewhere is out of sight.
    fn sees_cluster_of(&self, row: &PreviewRow) -> bool {
        self.config
            .clusters
            .iter()
            .find(|c| Some(&c.name) == row.cluster.as_ref())
            .is_some_and(|c| c.server == ledger::LOCAL_SERVER)
    }

    /// A teardown still waiting after `sink.stuck_after` is reported once (history, log, and
    /// the preview's state), never forced: previewd does not strip finalizers.
    async fn report_if_stuck(
        &self,
        row: &PreviewRow,
        waiting: &str,
        now: i64,
    ) -> anyhow::Result<()> {
        let started = row.teardown_started_at.unwrap_or(now);
        let stuck_after = self.config.sink.stuck_after.as_secs() as i64;
        if now - started < stuck_after || row.observed == ObservedState::TeardownStuck {
            return Ok(());
        }
        let message = format!(
            "teardown has waited {} {waiting}",
            crate::duration::format(Duration::from_secs((now - started) as u64))
        );
        tracing::warn!(preview = %row.key, %message, "teardown stuck");
        self.metrics.stuck_teardown();
        // With the state that stops it being told again: one commit.
        let seen = plan::Observation {
            state: ObservedState::TeardownStuck,
            message: Some(&message),
            history: Some(HistoryKind::TeardownStuck),
            ready_at_seed: None,
        };
        db::record_state(&self.state, row.id, &seen, now).await
    }
}
