//! The sweeper, previewd's third driver after webhooks and commands: on an interval it finds
//! the previews that are due (one indexed query), records their expiry (the reconciler tears
//! them down), warns once per expiry before that, forgets what belongs to previews long gone
//! (and old delivery records) in small batches, and looks for orphaned Applications (and
//! records those to remove: the reconciler deletes them). It only ever records intent, under
//! a lease, so two sweepers on one state never both act, and a crash mid-pass leaves nothing
//! done twice or forgotten; the sink it only reads.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::Clock;
use crate::comment;
use crate::config::Config;
use crate::db::{self, DueRow};
use crate::naming::Names;
use crate::preview::PreviewKey;
use crate::sink::Sink;
use crate::work::Work;

const LEASE: &str = "sweep";
/// A lease outlives a pass by far; a crashed holder's lease lapses after this.
const LEASE_FOR: i64 = 300;
/// Orphans need every Application listed, so they are looked for every this many passes.
const ORPHANS_EVERY: u64 = 10;
/// How far the sweeps after the first run off the reconciler's full passes, which run every
/// 30 s from the start (`reconcile::RESYNC`): on previewd's one runtime thread a sweep and
/// a full pass at the same moment share it, each waiting on the other's turns (issue #17).
const OFF_RESYNC: Duration = Duration::from_secs(15);

/// A PR without a preview keeps its history (and its finished commands, notices, GitHub
/// thread and close) until nothing has happened to it for this long: the history outlives
/// the preview, for a bounded window.
pub const RETENTION: i64 = 30 * 86_400;
/// The newest history rows a PR keeps, however long it lives and however busy it is.
pub const HISTORY_CAP: i64 = 1_000;
/// Rows deleted per write transaction: the write lock is held for one batch, not a pass.
const BATCH: i64 = 500;
/// Batches per kind per pass: a pass stays bounded; a backlog drains over a few passes.
const BATCHES_PER_PASS: usize = 20;
/// PRs with history this recent are checked against the cap (only they can have grown).
const CAP_LOOKBACK: i64 = 3_600;

/// When the `k`th sweep is due, from the start: the first at once (with the orphan check),
/// the later ones every `period` and `OFF_RESYNC` past it — between the full passes when
/// `period` is a whole number of half minutes, as the default minute is. None past what a
/// `Duration` holds.
pub fn due(k: u32, period: Duration) -> Option<Duration> {
    match k {
        0 => Some(Duration::ZERO),
        k => period.checked_mul(k)?.checked_add(OFF_RESYNC),
    }
}

/// Sleeps until `at`; forever when None.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Whether a pass records what is due or only says what it would record (`previewd sweep
/// --dry-run`). A named mode, not a bare `bool`, so that `pass(Pass::DryRun)` says what it
/// does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Under the lease: expiries, warnings and forgetting recorded.
    Record,
    /// No lease taken and nothing changed; orphans are looked for all the same.
    DryRun,
}

/// Whether a plan looks for orphaned Applications, which lists every Application the sink
/// holds: so only every [`ORPHANS_EVERY`] passes, and on a dry run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orphans {
    /// List the sink's Applications and name those without a preview.
    Look,
    /// Not this pass.
    Skip,
}

/// What one pass does (or, dry, would do).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Previews past their expiry, with the reason recorded.
    pub expire: Vec<(DueRow, String)>,
    /// Previews entering their warning window: the reason and the comment posted.
    pub warn: Vec<(DueRow, String, String)>,
    /// Delivery records received before this are pruned.
    pub prune_before: i64,
    /// What belongs to PRs without a preview, and quiet since before this, is forgotten.
    pub forget_before: i64,
    /// Helper or app Applications previewd manages that have no preview.
    pub orphans: Vec<String>,
    /// Ready previews idle past their repository's `sleep_after`, with the reason.
    /// The cutoff each was read against: still idle past it when the sleep is written.
    pub sleep: Vec<(db::sleep::Idle, String, i64)>,
}

impl Plan {
    /// One line per action, for `previewd sweep --dry-run` and the log.
    pub fn lines(&self, remove_orphans: bool) -> Vec<String> {
        let mut lines = Vec::new();
        for (row, reason) in &self.expire {
            lines.push(format!("expire {}#{}: {reason}", row.repo, row.number));
        }
        for (row, reason, _) in &self.warn {
            lines.push(format!("warn {}#{}: {reason}", row.repo, row.number));
        }
        for (idle, reason, _) in &self.sleep {
            lines.push(format!("sleep {}: {reason}", idle.key));
        }
        for name in &self.orphans {
            let what = if remove_orphans { "remove" } else { "report" };
            lines.push(format!("{what} orphaned Application {name}"));
        }
        lines.push(format!(
            "prune delivery records received before {}",
            comment::stamp(self.prune_before)
        ));
        lines.push(format!(
            "forget the history of previews gone and quiet since before {} (but the recently destroyed)",
            comment::stamp(self.forget_before)
        ));
        lines
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    pub expired: usize,
    pub warned: usize,
    pub pruned: u64,
    /// Rows retention deleted (history, commands, notices, threads, closes).
    pub forgotten: u64,
    /// Orphans recorded for the reconciler to remove.
    pub orphans_recorded: u64,
    /// Idle previews put to sleep.
    pub slept: usize,
}

pub struct Sweeper {
    state: db::State,
    config: Config,
    clock: Arc<dyn Clock>,
    sink: Option<Sink>,
    /// Tells the reconciler which previews now have work.
    work: Option<Work>,
    holder: String,
    passes: std::sync::atomic::AtomicU64,
    /// Where passes are timed (the process's registry, `with_metrics`).
    metrics: Arc<crate::metrics::Metrics>,
}

impl Sweeper {
    pub fn new(state: impl Into<db::State>, config: Config, clock: Arc<dyn Clock>) -> Self {
        Self {
            state: state.into(),
            config,
            clock,
            sink: None,
            work: None,
            holder: format!("{}-{:016x}", std::process::id(), rand::random::<u64>()),
            passes: std::sync::atomic::AtomicU64::new(0),
            metrics: Arc::default(),
        }
    }

    /// Times its passes into `metrics` (by default a registry of its own).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Looks for orphans in `sink` (and records them for removal if `sweep.remove_orphans`);
    /// it never writes to it.
    pub fn with_sink(mut self, sink: Sink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Tells `work` of the previews a pass gave work (expiries, warnings).
    pub fn notifying(mut self, work: Work) -> Self {
        self.work = Some(work);
        self
    }

    /// Sweeps every `sweep.interval` until `cancel`.
    pub async fn run(self, cancel: CancellationToken) {
        let period = self.config.sweep_interval.max(Duration::from_secs(1));
        let start = tokio::time::Instant::now();
        for k in 0.. {
            // An interval too long to add to a clock is never due.
            let at = due(k, period).and_then(|after| start.checked_add(after));
            tokio::select! {
                biased; // a pass overdue after a long one never delays shutdown
                () = cancel.cancelled() => return,
                () = sleep_until(at) => self.pass_logged().await,
            }
        }
    }

    /// One pass, its outcome logged: a failed pass is tried again at the next tick.
    async fn pass_logged(&self) {
        match self
            .pass(Pass::Record)
            .instrument(tracing::info_span!("sweep"))
            .await
        {
            Ok(Some((_, report))) if report != Report::default() => {
                tracing::info!(?report, "swept");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "sweep failed; trying again next interval")
            }
        }
    }

    /// One pass: `None` when another sweeper holds the lease. A dry run takes no lease and
    /// changes nothing.
    pub async fn pass(&self, mode: Pass) -> anyhow::Result<Option<(Plan, Report)>> {
        let now = self.clock.now();
        if mode == Pass::DryRun {
            let plan = self.plan(now, Orphans::Look).await?;
            return Ok(Some((plan, Report::default())));
        }
        if !db::take_lease(&self.state, LEASE, &self.holder, now + LEASE_FOR, now).await? {
            tracing::debug!("another sweeper holds the lease; skipping this pass");
            return Ok(None);
        }
        let pass = self
            .passes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = std::time::Instant::now();
        let result = async {
            let orphans = if pass % ORPHANS_EVERY == 0 {
                Orphans::Look
            } else {
                Orphans::Skip
            };
            let plan = self.plan(now, orphans).await?;
            let report = self.apply(&plan, now).await?;
            anyhow::Ok((plan, report))
        }
        .await;
        db::release_lease(&self.state, LEASE, &self.holder).await?;
        self.metrics.swept(started.elapsed());
        result.map(Some)
    }

    /// What is due at `now`, read-only.
    pub async fn plan(&self, now: i64, orphans: Orphans) -> anyhow::Result<Plan> {
        let longest_warning = std::iter::once(&self.config.defaults)
            .chain(self.config.repos.iter().map(|r| &r.policy))
            .map(|p| secs(p.warn_before))
            .max()
            .unwrap_or(0);
        let delivery_retention = secs(self.config.delivery_retention);
        let mut plan = Plan {
            prune_before: now - delivery_retention,
            // Never shorter than the deduplication window: a forgotten command or close
            // could otherwise be brought back by a redelivery its record no longer stops.
            forget_before: now.saturating_sub(RETENTION.max(delivery_retention)),
            ..Plan::default()
        };
        for row in db::due_before(&self.state, now.saturating_add(longest_warning)).await? {
            let policy = self
                .config
                .policy_for(&row.repo)
                .unwrap_or(&self.config.defaults);
            if row.expires_at <= now {
                let reason = if row.keep {
                    format!(
                        "kept until its maximum lifetime, which ended {}",
                        comment::stamp(row.expires_at)
                    )
                } else {
                    format!(
                        "no push or extend for {}; expired {}",
                        crate::duration::format(policy.ttl),
                        comment::stamp(row.expires_at)
                    )
                };
                plan.expire.push((row, reason));
            } else if row.expires_at - now <= secs(policy.warn_before)
                && row.warned_expires_at != Some(row.expires_at)
            {
                let reason = format!("expires {}", comment::stamp(row.expires_at));
                let notice = comment::expiry_warning(&row.author, row.expires_at, now, row.keep);
                plan.warn.push((row, reason, notice));
            }
        }
        plan.sleep = self.idle(now).await?;
        if orphans == Orphans::Look {
            plan.orphans = self.orphans().await?;
        }
        Ok(plan)
    }

    /// Ready previews idle past their repository's `sleep_after` at `now`, in the
    /// repositories that sleep and whose requests pass previewd's login (`app_service`:
    /// elsewhere no use is ever seen, and no request could wake one), least recently
    /// active first.
    async fn idle(&self, now: i64) -> anyhow::Result<Vec<(db::sleep::Idle, String, i64)>> {
        let mut idle = Vec::new();
        for repo in &self.config.repos {
            let Some(after) = repo
                .policy
                .sleep_after
                .filter(|_| repo.app.service.is_some())
            else {
                continue;
            };
            let cutoff = now - secs(after);
            for row in db::sleep::idle_since(&self.state, repo.name.as_str(), cutoff).await? {
                let reason = format!(
                    "no request for {} (since {})",
                    crate::duration::format(after),
                    comment::stamp(row.active_at)
                );
                idle.push((row, reason, cutoff));
            }
        }
        Ok(idle)
    }

    /// Records the plan with conditional writes (expiries in batches, each warning on its
    /// own), so a pass cut short is finished by the next one and nothing is done twice.
    pub async fn apply(&self, plan: &Plan, now: i64) -> anyhow::Result<Report> {
        let mut report = Report::default();
        // Expiries in batches: one commit each, and each batch all or nothing.
        for batch in plan.expire.chunks(500) {
            let due: Vec<(i64, &str)> = batch
                .iter()
                .map(|(row, reason)| (row.id, reason.as_str()))
                .collect();
            let expired = db::expire(&self.state, &due, now).await?;
            report.expired += expired.len();
            for (row, _) in batch.iter().filter(|(row, _)| expired.contains(&row.id)) {
                self.notify(row.key());
            }
        }
        for (row, reason, notice) in &plan.warn {
            if db::warn(&self.state, row, reason, notice, now).await? {
                report.warned += 1;
                self.notify(row.key());
            }
        }
        for (idle, reason, cutoff) in &plan.sleep {
            if db::sleep::sleep(&self.state, idle.id, reason, Some(*cutoff), now).await? {
                report.slept += 1;
                self.notify(idle.key.clone());
            }
        }
        self.forget(plan, now, &mut report).await?;
        // Never delete on doubt: an empty or foreign state (a fresh previewd.db, a second
        // instance on the same Argo CD) would make every Application look orphaned.
        let mut removable = self.config.remove_orphans && !plan.orphans.is_empty();
        if removable {
            let tracked = db::preview_keys(&self.state).await?.len();
            removable = tracked > 0 && plan.orphans.len() <= tracked / 2 + 1;
            if !removable {
                tracing::warn!(
                    orphans = plan.orphans.len(),
                    tracked,
                    "too many orphans for the previews this state tracks; removing none (is this the right state?)"
                );
            }
        }
        // The plan may be old by now (a dry run's, or one whose expiries took a while): a
        // preview created since may own a listed name. Look again before recording; the
        // reconciler looks once more before it deletes, and deletes only this instance's
        // object under the uid it just read.
        let still = if removable {
            self.orphans().await?
        } else {
            Vec::new()
        };
        let mut remove = Vec::new();
        for name in &plan.orphans {
            let removing = removable && still.contains(name);
            tracing::warn!(
                application = name,
                remove = removing,
                "orphaned Application: no preview owns it"
            );
            if removing {
                remove.push(name.clone());
            }
        }
        report.orphans_recorded = db::record_orphans(&self.state, &remove, now).await?;
        Ok(report)
    }

    /// Retention, a batch per write transaction: what belongs to PRs gone past the window,
    /// delivery records past theirs, and each recently busy PR's history beyond the cap.
    async fn forget(&self, plan: &Plan, now: i64, report: &mut Report) -> anyhow::Result<()> {
        // CI reports on commits no live preview is at any more.
        report.forgotten += db::prune_checks(&self.state).await?;
        for what in db::Retained::ALL {
            let cutoff = match what {
                db::Retained::Deliveries => plan.prune_before,
                _ => plan.forget_before,
            };
            let mut deleted = 0;
            for _ in 0..BATCHES_PER_PASS {
                let n = db::forget_batch(
                    &self.state,
                    what,
                    cutoff,
                    BATCH,
                    db::RECENTLY_DESTROYED_SHOWN,
                )
                .await?;
                deleted += n;
                if n < BATCH as u64 {
                    break;
                }
                // Let the other writers (intake, reconciler, API) in between batches.
                tokio::task::yield_now().await;
            }
            match what {
                db::Retained::Deliveries => report.pruned += deleted,
                _ => report.forgotten += deleted,
            }
        }
        let since = now - CAP_LOOKBACK.max(2 * secs(self.config.sweep_interval));
        for (repo, number) in db::over_cap(&self.state, since, HISTORY_CAP, BATCH).await? {
            for _ in 0..BATCHES_PER_PASS {
                let n = db::cap_history(&self.state, &repo, number, HISTORY_CAP, BATCH).await?;
                report.forgotten += n;
                if n < BATCH as u64 {
                    break;
                }
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    /// Applications the sink holds that no preview row accounts for.
    async fn orphans(&self) -> anyhow::Result<Vec<String>> {
        let Some(sink) = &self.sink else {
            return Ok(Vec::new());
        };
        let instance = db::instance_id(&self.state).await?;
        let listed = sink.list(&instance).await?;
        if listed.is_empty() {
            return Ok(Vec::new());
        }
        let owned = owned_names(&self.state, &self.config).await?;
        Ok(listed
            .into_iter()
            .filter(|name| !owned.contains(name))
            .collect())
    }

    fn notify(&self, key: PreviewKey) {
        if let Some(work) = &self.work {
            work.notify(key);
        }
    }
}

/// Every Application name a preview owns (helper and app), from the recorded names. An
/// unreadable record owns nothing, so is never counted as orphaned by error: it is an error,
/// which leaves the whole pass without removals.
pub(crate) async fn owned_names(
    state: &crate::db::State,
    config: &Config,
) -> anyhow::Result<BTreeSet<String>> {
    let mut owned = BTreeSet::new();
    for (repo, number, names) in db::preview_names(state).await? {
        let (Ok(repo), Ok(number)) = (repo.parse(), u32::try_from(number)) else {
            continue;
        };
        let key = PreviewKey::new(repo, number);
        let domain = &config
            .policy_for(&key.repo)
            .unwrap_or(&config.defaults)
            .domain;
        let names = Names::recorded(names.as_deref(), &key, domain)?;
        owned.insert(names.application);
        owned.insert(names.app_application);
    }
    // Template generations' Applications (#16) are owned by their recorded rows: every one,
    // never the API's capped listing (a generation left out would look orphaned).
    for repo in db::template_repos(state).await? {
        for row in db::generations(state, &repo).await? {
            owned.insert(row.names()?.application);
        }
    }
    Ok(owned)
}

fn secs(duration: Duration) -> i64 {
    i64::try_from(duration.as_secs()).unwrap_or(i64::MAX)
}
