//! The reconciler: the one place with side effects. Level-triggered: for each preview it
//! compares what previewd wants (the recorded intent, rendered) with what the sink reports,
//! and does the one next step (`plan`). A lost notification, a crash or a redelivered
//! webhook all converge to the same result on the next pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::ca::PreviewCa;
use crate::checks::{self, Wait};
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{self, PreviewRow};
use crate::feedback::Nudge;
use crate::metrics::Metrics;
use crate::naming::Names;
use crate::plan;
use crate::preview::{Desired, HistoryKind, ObservedState, PreviewKey};
use crate::seal::SealingCert;
use crate::sink::{Owner, Sink};
use crate::work::{Later, Pending};
use step::At;

mod orphans;

/// Previews reconciled at the same time.
const PARALLEL: usize = 4;
/// Preview rows a full pass reads at a time.
const PAGE: i64 = 500;
/// A pass runs at least this often, so a missed notification heals.
pub const RESYNC: Duration = Duration::from_secs(30);
/// Template generations (#16) are looked at this often: one small query when there are
/// none, so a built generation is cloned seconds after Argo CD says so, not a resync later.
const TEMPLATE_LOOK: Duration = Duration::from_secs(5);
/// A preview waiting on Argo CD is looked at again this soon (then less and less often):
/// a look is one GET of an Application. At 2 s, a preview whose Argo CD was done in 0.15 s
/// waited 5.9 s for previewd (`tests/e2e/latency.py`, issue #17).
const REQUEUE_FIRST: Duration = Duration::from_millis(50);
/// Every sink call gets this long, and this many tries with doubling backoff.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const ATTEMPTS: u32 = 3;

pub struct Reconciler {
    state: db::State,
    config: Config,
    sink: Sink,
    certs: BTreeMap<String, SealingCert>,
    ca: Option<PreviewCa>,
    clock: Arc<dyn Clock>,
    /// Tells the feedback worker (`crate::feedback`) which previews a pass looked at:
    /// GitHub hears of them from there, never from inside a pass.
    feedback: Option<Arc<Nudge>>,
    /// This state's identity, labelled on every Application (read once).
    instance: tokio::sync::OnceCell<String>,
    /// Previews waiting on Argo CD (a sync, a deletion) or on a retry, looked at again soon
    /// (after `REQUEUE_FIRST`, doubled each time up to `RESYNC`).
    later: Later,
    /// Where reconciles and teardowns are counted (the process's registry, `with_metrics`).
    metrics: Arc<Metrics>,
    /// Each preview's last rendering, by its inputs and hashes (`rendering::Memo`).
    memo: rendering::Memo,
    /// What changed since each preview's last look, and the cursor into the state's stamps
    /// (`changes.rs`): a pass follows what changed, not how many previews exist.
    changes: changes::Changes,
}

/// A preview to look at: by id (its row read then), or with its row already read.
enum Look {
    Id(i64),
    Row(Box<PreviewRow>),
}

/// When a preview's row was read: just now, or earlier (with a pass's page).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Read {
    Now,
    Earlier,
}

impl Reconciler {
    pub fn new(
        state: impl Into<db::State>,
        config: Config,
        sink: Sink,
        certs: BTreeMap<String, SealingCert>,
        ca: Option<PreviewCa>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            state: state.into(),
            config,
            sink,
            certs,
            ca,
            clock,
            feedback: None,
            later: Later::new(REQUEUE_FIRST, RESYNC),
            instance: tokio::sync::OnceCell::new(),
            metrics: Arc::default(),
            memo: rendering::Memo::default(),
            changes: changes::Changes::default(),
        }
    }

    /// Counts into `metrics` (by default a registry of its own, which nobody scrapes).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Tells `feedback` (the feedback worker's nudge) what every pass looked at.
    pub fn with_feedback(mut self, feedback: Arc<Nudge>) -> Self {
        self.feedback = Some(feedback);
        self
    }

    /// Commits of the state this reconciler made (each an fsync).
    pub fn commits(&self) -> u64 {
        self.state.inline_commits()
    }

    fn tell_feedback(&self, ids: &[i64], placed: &[i64]) {
        // A pass over what changed that found nothing must not wake the worker every 2 s.
        if ids.is_empty() && placed.is_empty() {
            return;
        }
        if let Some(feedback) = &self.feedback {
            feedback.looked_at(&[ids, placed].concat());
        }
    }

    /// Runs until `cancel`: the previews `pending` says have work as they come; what the
    /// state stamped (another replica's writes too) every `CHANGES`; a full pass at start,
    /// then every `RESYNC` a pass over what changed, what the sink reports changed and a
    /// slice of the slow sweep (`changes.rs`), so nothing is missed. Hands `pending` back,
    /// for the next run once this replica leads again.
    pub async fn run(self: Arc<Self>, mut pending: Pending, cancel: CancellationToken) -> Pending {
        tokio::spawn(self.clone().follow_argocd(cancel.clone()));
        let mut resync = tokio::time::interval(RESYNC);
        let mut changed = tokio::time::interval(changes::CHANGES);
        let mut templates = tokio::time::interval(TEMPLATE_LOOK);
        loop {
            let result = tokio::select! {
                _ = resync.tick() => self.pass_changed(true).await,
                _ = changed.tick() => self.pass_changed(false).await,
                _ = templates.tick() => self.templates().await.map(|()| 0),
                due = self.later.due() => self.pass_ids(&due).await,
                Some(keys) = pending.next() => self.pass_for(&keys).await,
                () = cancel.cancelled() => return pending,
            };
            if let Err(e) = result {
                tracing::warn!(error = %format!("{e:#}"), "reconcile pass failed; retrying on the next pass");
            }
        }
    }

    /// Follows Argo CD's changes to previewd's Applications (`Sink::watch`): a preview
    /// waiting on one is looked at as soon as it changes, not at its next poll, which alone
    /// made previewd the slowest part of a preview (`tests/e2e/latency.py`, issue #17). A
    /// failed watch is renewed after a backoff; the polling in `later` covers the gap.
    async fn follow_argocd(self: Arc<Self>, cancel: CancellationToken) {
        if !self.sink.reports_health() {
            return;
        }
        let mut backoff = Duration::from_secs(1);
        loop {
            let started = std::time::Instant::now();
            let watched = async {
                let instance = self.instance().await?;
                self.sink
                    .watch(instance, |name| {
                        // Not waiting on it: settled, so the next pass over what changed
                        // looks at it (a health Argo CD reports anew, a deletion).
                        if !self.later.hurry(name) {
                            self.changes.sink_changed(name);
                        }
                    })
                    .await
            };
            tokio::select! {
                result = watched => if let Err(e) = result {
                    tracing::warn!(error = %format!("{e:#}"), "watching Argo CD's Applications failed; polling until it is renewed");
                },
                () = cancel.cancelled() => return,
            }
            if started.elapsed() > RESYNC {
                backoff = Duration::from_secs(1);
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = cancel.cancelled() => return,
            }
            backoff = (backoff * 2).min(RESYNC);
        }
    }

    /// Only `keys` (and whatever placement just let off the queue).
    pub async fn pass_for(self: &Arc<Self>, keys: &BTreeSet<PreviewKey>) -> anyhow::Result<usize> {
        let mut ids = self.place_waiting().await.context("placing previews")?;
        for key in keys {
            ids.extend(db::preview_id(&self.state, key.repo.as_str(), key.number).await?);
        }
        ids.sort_unstable();
        ids.dedup();
        self.reconcile_all(&ids).await;
        // A teardown that finished freed a slot: let the queue move now, not at the resync.
        let placed = self.place_waiting().await.context("placing previews")?;
        self.reconcile_all(&placed).await;
        self.tell_feedback(&ids, &placed);
        Ok(ids.len() + placed.len())
    }

    /// Only `ids` (previews due for another look).
    async fn pass_ids(self: &Arc<Self>, ids: &[i64]) -> anyhow::Result<usize> {
        self.reconcile_all(ids).await;
        let placed = self.place_waiting().await.context("placing previews")?;
        self.reconcile_all(&placed).await;
        self.tell_feedback(ids, &placed);
        Ok(ids.len() + placed.len())
    }

    /// Looks at `id` again soon: after `REQUEUE_FIRST`, then doubling up to `RESYNC` while it keeps
    /// waiting, so a preview reports ready (or gone) seconds after Argo CD, not a resync later.
    fn requeue(&self, id: i64) {
        self.later.again(id);
    }

    /// `requeue`, and sooner if Argo CD is seen to change either of the preview's Applications.
    fn requeue_following(&self, id: i64, names: &Names) {
        self.later.again(id);
        self.later
            .follow(id, &[&names.application, &names.app_application]);
    }

    /// `id` converged: no early look needed.
    fn settled(&self, id: i64) {
        self.later.settled(id);
    }

    /// One pass over every preview: placement first, one preview at a time in arrival
    /// order (so the queue is first come, first served); then each preview at most once,
    /// `PARALLEL` at a time, its row read with a page of others (a row may be a pass old by
    /// its turn: every change to one is followed by word of it, and so by another look);
    /// then the orphans the sweeper recorded for removal.
    pub async fn pass(self: &Arc<Self>) -> anyhow::Result<usize> {
        let started = std::time::Instant::now();
        // Read first: whatever is stamped after it is read by the next pass over what changed.
        let version = db::changes::change_version(&self.state)
            .await
            .context("the change version")?;
        self.changes.full_pass_begins(self.sink.lists());
        self.place_waiting().await.context("placing previews")?;
        let mut ids = Vec::new();
        loop {
            let after = ids.last().copied().unwrap_or(0);
            let rows = db::preview_rows(&self.state, after, PAGE)
                .await
                .context("listing previews")?;
            if rows.is_empty() {
                break;
            }
            ids.extend(rows.iter().map(|row| row.id));
            self.reconcile_each(rows.into_iter().map(|row| Look::Row(Box::new(row))))
                .await;
        }
        self.tell_feedback(&ids, &[]);
        // Template databases (#16): built, watched and retired beside the previews.
        self.templates().await.context("template databases")?;
        // The sweeper's recorded orphans: this is the one writer to the sink.
        self.remove_orphans().await.context("removing orphans")?;
        self.changes.caught_up(version);
        self.metrics.passed("full", started.elapsed());
        Ok(ids.len())
    }

    /// Each of `ids` once, `PARALLEL` at a time.
    async fn reconcile_all(self: &Arc<Self>, ids: &[i64]) {
        self.reconcile_each(ids.iter().copied().map(Look::Id)).await;
    }

    /// Each look once, `PARALLEL` at a time.
    async fn reconcile_each(self: &Arc<Self>, looks: impl IntoIterator<Item = Look>) {
        let permits = Arc::new(Semaphore::new(PARALLEL));
        let mut running = JoinSet::new();
        for look in looks {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let me = self.clone();
            // Every event of one preview's look carries its key (recorded once the row is
            // read: a look by id does not know it before).
            let span = tracing::info_span!("reconcile", preview = tracing::field::Empty);
            let look = async move {
                let _permit = permit;
                let started = std::time::Instant::now();
                let (id, result) = match look {
                    Look::Id(id) => (id, me.reconcile(id).await),
                    Look::Row(row) => (row.id, me.reconcile_read_earlier(*row).await),
                };
                me.metrics
                    .reconciled(me.sink.kind(), started.elapsed(), result.is_err());
                if let Err(e) = &result {
                    me.record_failure(id, e).await;
                }
                me.changes
                    .looked(id, result.is_ok() && !me.later.is_waiting(id));
            };
            running.spawn(look.instrument(span));
        }
        while running.join_next().await.is_some() {}
    }

    async fn record_failure(&self, id: i64, error: &anyhow::Error) {
        // Refused by the fence: the Lease is lost and this loop is being stopped. The
        // preview did not fail; the replica that leads now looks at it.
        if error.chain().any(|e| e.is::<crate::fence::Fenced>()) {
            tracing::debug!(preview = id, error = %format!("{error:#}"), "not written: no Lease");
            return;
        }
        self.requeue(id);
        // A busy state is the database's contention, not this preview's failure: retried,
        // never recorded (nor shown on the PR) as an error.
        if db::is_busy_error(error) {
            tracing::info!(preview = id, error = %format!("{error:#}"), "state busy; retrying");
            return;
        }
        let message = format!("{error:#}");
        tracing::warn!(preview = id, error = %message, "reconcile failed");
        let now = self.clock.now();
        if let Ok(Some(row)) = db::preview_row(&self.state, id).await {
            // One history row per distinct error, not one per retry: it commits with the
            // state that remembers the error.
            let seen = plan::Observation {
                state: ObservedState::Error,
                message: Some(&message),
                history: (row.last_error.as_deref() != Some(message.as_str()))
                    .then_some(HistoryKind::Error),
                ready_at_seed: None,
            };
            let _ = db::record_state(&self.state, id, &seen, now).await;
        }
    }

    /// The next step for one preview.
    pub async fn reconcile(&self, id: i64) -> anyhow::Result<()> {
        let Some(row) = db::preview_row(&self.state, id).await? else {
            self.settled(id);
            self.memo.forget(id);
            self.changes.forget(id);
            return Ok(());
        };
        self.reconcile_row(row, Read::Now).await
    }

    /// The next step for a preview whose row was read earlier (with a pass's page): as
    /// read, while it shows a deployed preview with no teardown (a look that finds nothing
    /// to write); read again before anything is written, and for a preview going away. A
    /// PR closed and reopened while the page waited must not be torn down on the old word.
    pub async fn reconcile_read_earlier(&self, row: PreviewRow) -> anyhow::Result<()> {
        if row.desired != Desired::Deployed || row.teardown_started_at.is_some() {
            return self.reconcile(row.id).await;
        }
        self.reconcile_row(row, Read::Earlier).await
    }

    /// The next step for the preview of `row`: torn down, kept frozen, or planned on what
    /// Argo CD reports and carried out (`step.rs`).
    async fn reconcile_row(&self, row: PreviewRow, read: Read) -> anyhow::Result<()> {
        let id = row.id;
        let key = row.key.clone();
        tracing::Span::current().record("preview", tracing::field::display(&key));
        let names = self.names_of(&row, &key).await?;
        self.changes.looking(
            id,
            row.version,
            [&names.application, &names.app_application].map(String::as_str),
        );
        let owner = Owner::preview(&names, key.number, self.instance().await?);
        let now = self.clock.now();
        if row.desired == Desired::Absent {
            self.memo.forget(id);
            self.changes.forget(id);
            return self.tear_down(&row, &names, &owner, now).await;
        }
        if row.teardown_started_at.is_some() {
            db::clear_teardown(&self.state, id).await?;
        }
        if self.config.policy_for(&key.repo).is_none() {
            return self.keep_frozen(&row, &key, &names, &owner, now).await;
        }
        let wait = self.wait_of(&row, &key).await?;
        let rendering = match row.desired {
            Desired::Deployed => {
                let image_ready = wait == Wait::Passed;
                match self.rendering(&row, &key, &names, now, image_ready).await? {
                    Some(rendering) => Some(rendering),
                    None => return Ok(()), // queued: no cluster has room
                }
            }
            _ => None,
        };
        let at = At {
            row: &row,
            key: &key,
            names: &names,
            owner: &owner,
            now,
        };
        let Some(looked) = self.look(&at, read, rendering.as_ref(), &wait).await? else {
            self.settled(id);
            return Ok(());
        };
        if looked.step.writes() && read == Read::Earlier {
            let now_row = db::preview_row(&self.state, id).await?;
            if !now_row.is_some_and(|now_row| row.unchanged_in(&now_row)) {
                // Changed since the page was read: decided again on what it is now.
                return Box::pin(self.reconcile(id)).await;
            }
        }
        // The manifests themselves only when something is to be written.
        let whole = match rendering {
            Some(rendering) if looked.step.writes() => {
                Some(self.whole(&row, &names, rendering, now).await?)
            }
            _ => None,
        };
        self.carry_out(&at, looked, whole).await
    }

    /// Whether the PR's image may run: `wait_for` on the head, unless a writer's `/preview
    /// deploy` let this head past it.
    async fn wait_of(&self, row: &PreviewRow, key: &PreviewKey) -> anyhow::Result<Wait> {
        let wait_for = self
            .config
            .policy_for(&key.repo)
            .map_or(&[][..], |p| &p.gates.wait_for[..]);
        if row.desired != Desired::Deployed
            || wait_for.is_empty()
            || row.wait_override_sha.as_deref() == Some(row.head_sha.as_str())
        {
            return Ok(Wait::Passed);
        }
        let reports = db::checks_of(&self.state, row.key.repo.as_str(), &row.head_sha).await?;
        Ok(checks::verdict(wait_for, &reports))
    }
}

mod calls;
mod changes;
mod owned;
mod place;
mod rendering;
mod step;
mod teardown;
pub mod templates;
