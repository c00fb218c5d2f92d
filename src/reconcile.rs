//! The reconciler: the one place with side effects. Level-triggered: for each preview it
//! compares what previewd wants (the recorded intent, rendered) with what the sink reports,
//! and does the one next step (`plan`). A lost notification, a crash or a redelivered
//! webhook all converge to the same result on the next pass.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use sqlx::SqlitePool;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;

use crate::ca::PreviewCa;
use crate::clock::Clock;
use crate::config::Config;
use crate::db::{self, PreviewRow};
use crate::github::GitHub;
use crate::intake::Intake;
use crate::ledger;
use crate::metrics::METRICS;
use crate::naming::Names;
use crate::plan::{self, Action, Observed};
use crate::preview::{Desired, Preview, PreviewKey};
use crate::render::{self, SealedSecret};
use crate::seal::SealingCert;
use crate::sink::{APPLIED_HASH, Sink};

/// Previews reconciled at the same time.
const PARALLEL: usize = 4;
/// A pass runs at least this often, so a missed notification heals.
pub const RESYNC: Duration = Duration::from_secs(30);
/// Every sink call gets this long, and this many tries with doubling backoff.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const ATTEMPTS: u32 = 3;

pub struct Reconciler {
    pool: SqlitePool,
    config: Config,
    sink: Sink,
    certs: BTreeMap<String, SealingCert>,
    ca: Option<PreviewCa>,
    clock: Arc<dyn Clock>,
    /// Reporting and commands' confirmations; `None` without credentials.
    github: Option<Arc<GitHub>>,
    /// Where resync records what it finds (as deliveries).
    intake: Option<Intake>,
    /// Previews whose skipped report was logged (once each).
    unreported: Mutex<HashSet<(String, i64)>>,
}

impl Reconciler {
    pub fn new(
        pool: SqlitePool,
        config: Config,
        sink: Sink,
        certs: BTreeMap<String, SealingCert>,
        ca: Option<PreviewCa>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            pool,
            config,
            sink,
            certs,
            ca,
            clock,
            github: None,
            intake: None,
            unreported: Mutex::new(HashSet::new()),
        }
    }

    /// Reports to GitHub and confirms commands with it (`github`), and resyncs open PRs
    /// through `intake`.
    pub fn with_github(mut self, github: Option<Arc<GitHub>>, intake: Intake) -> Self {
        self.github = github;
        self.intake = Some(intake);
        self
    }

    /// Runs until `stop` is notified: the previews intake reports changed as they come, and
    /// a full pass over every preview every `RESYNC` (and at start), so nothing is missed.
    pub async fn run(
        self: Arc<Self>,
        mut changed: mpsc::UnboundedReceiver<PreviewKey>,
        stop: Arc<Notify>,
    ) {
        let mut resync = tokio::time::interval(RESYNC);
        let every = self
            .config
            .github
            .resync_interval
            .max(Duration::from_secs(1));
        let mut github_resync = tokio::time::interval(every);
        loop {
            let result = tokio::select! {
                _ = resync.tick() => self.pass().await,
                _ = github_resync.tick() => self.resync().await,
                Some(key) = changed.recv() => {
                    let mut keys = BTreeSet::from([key]);
                    while let Ok(key) = changed.try_recv() {
                        keys.insert(key);
                    }
                    self.pass_for(&keys).await
                }
                () = stop.notified() => return,
            };
            if let Err(e) = result {
                tracing::warn!(error = %format!("{e:#}"), "reconcile pass failed; retrying on the next pass");
            }
        }
    }

    /// Only `keys` (and whatever placement just let off the queue).
    pub async fn pass_for(self: &Arc<Self>, keys: &BTreeSet<PreviewKey>) -> anyhow::Result<usize> {
        let mut ids = self.obey().await.context("running commands")?;
        ids.extend(self.place_waiting().await.context("placing previews")?);
        for key in keys {
            ids.extend(db::preview_id(&self.pool, key.repo.as_str(), key.number).await?);
        }
        ids.sort_unstable();
        ids.dedup();
        self.reconcile_all(&ids).await;
        // A teardown that finished freed a slot: let the queue move now, not at the resync.
        let placed = self.place_waiting().await.context("placing previews")?;
        self.reconcile_all(&placed).await;
        self.report(&ids).await;
        self.report(&placed).await;
        Ok(ids.len() + placed.len())
    }

    /// One pass over every preview: placement first, one preview at a time in arrival
    /// order (so the queue is first come, first served); then each preview at most once,
    /// `PARALLEL` at a time.
    pub async fn pass(self: &Arc<Self>) -> anyhow::Result<usize> {
        self.obey().await.context("running commands")?;
        self.place_waiting().await.context("placing previews")?;
        let ids = db::preview_ids(&self.pool)
            .await
            .context("listing previews")?;
        self.reconcile_all(&ids).await;
        self.report(&ids).await;
        Ok(ids.len())
    }

    /// Each of `ids` once, `PARALLEL` at a time.
    async fn reconcile_all(self: &Arc<Self>, ids: &[i64]) {
        let permits = Arc::new(Semaphore::new(PARALLEL));
        let mut running = JoinSet::new();
        for id in ids.iter().copied() {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            let me = self.clone();
            running.spawn(async move {
                let _permit = permit;
                let started = std::time::Instant::now();
                let result = me.reconcile(id).await;
                METRICS.reconciled(me.sink.kind(), started.elapsed(), result.is_err());
                if let Err(e) = result {
                    me.record_failure(id, &e).await;
                }
            });
        }
        while running.join_next().await.is_some() {}
    }

    async fn record_failure(&self, id: i64, error: &anyhow::Error) {
        let message = format!("{error:#}");
        tracing::warn!(preview = id, error = %message, "reconcile failed");
        let now = self.clock.now();
        if let Ok(Some(row)) = db::preview_row(&self.pool, id).await {
            // One history row per distinct error, not one per retry.
            if row.last_error.as_deref() != Some(message.as_str()) {
                let _ =
                    db::add_history_now(&self.pool, &row.repo, row.number, "error", &message, now)
                        .await;
            }
            let _ = db::set_observed(&self.pool, id, "error", Some(&message), None, now).await;
        }
    }

    /// The next step for one preview.
    pub async fn reconcile(&self, id: i64) -> anyhow::Result<()> {
        let Some(row) = db::preview_row(&self.pool, id).await? else {
            return Ok(());
        };
        let desired = desired_of(&row)?;
        let key = PreviewKey::new(row.repo.parse()?, u32::try_from(row.number)?);
        let domain = &self
            .config
            .policy_for(&key.repo)
            .unwrap_or(&self.config.defaults)
            .domain;
        let names = Names::of(&key, domain);
        let now = self.clock.now();
        if desired == Desired::Absent {
            return self.tear_down(&row, &names, now).await;
        }
        if row.teardown_started_at.is_some() {
            db::clear_teardown(&self.pool, id).await?;
        }
        let rendered = match desired {
            Desired::Deployed => match self.desired_manifests(&row, &key, &names, now).await? {
                Some(rendered) => Some(rendered),
                None => return Ok(()), // queued: no cluster has room
            },
            _ => None,
        };
        let hash = rendered.as_ref().map(|r| r.helper.1.as_str());
        let mut helper = self.observe(&names.application).await?;
        let sha = &row.head_sha[..7];
        if plan::plan(desired, hash, &helper) == Action::Apply {
            let rendered = rendered.as_ref().context("nothing to apply")?;
            let (manifest, hash) = &rendered.helper;
            self.retry("apply", || self.sink.apply(&names.application, manifest))
                .await?;
            let reason = format!("helper Application {} applied at {sha}", names.application);
            db::record_applied(&self.pool, id, &rendered.entries, Some(hash), &reason, now).await?;
            tracing::info!(preview = %key, sha, "applied");
            helper = Observed::Present {
                hash: Some(hash.clone()),
                ready: self.sink.reports_health().then_some(false),
            };
        }
        let mut app_ready = None;
        if let Some((manifest, app_hash)) = rendered.as_ref().and_then(|r| r.app.as_ref()) {
            let app = self.observe(&names.app_application).await?;
            match plan::plan_app(desired, hash, &helper, Some(app_hash), &app) {
                Action::Apply => {
                    self.retry("apply", || {
                        self.sink.apply(&names.app_application, manifest)
                    })
                    .await?;
                    let reason = format!(
                        "app Application {} applied at {sha}: the helpers are ready",
                        names.app_application
                    );
                    let entry = ledger::app_entry(&names, &self.config);
                    db::record_applied(&self.pool, id, &[entry], None, &reason, now).await?;
                    app_ready = Some(false);
                }
                Action::Nothing => app_ready = Some(ready_of(&app) != Some(false)),
                _ => app_ready = Some(false),
            }
        }
        let state = match (desired, ready_of(&helper), app_ready) {
            (Desired::Deployed, _, Some(false)) => "syncing",
            (Desired::Deployed, Some(true), _) => "ready",
            (Desired::Deployed, Some(false), _) => "syncing",
            (Desired::Deployed, None, _) => "applied",
            _ => desired.as_str(),
        };
        if row.observed != state || row.last_error.is_some() {
            if state == "ready" {
                db::confirm_ledger(&self.pool, id, now).await?;
            }
            db::set_observed(&self.pool, id, state, None, None, now).await?;
        }
        Ok(())
    }

    /// Gives each deployable preview without a cluster the least loaded one with room, in
    /// arrival order; the rest wait, visibly, as `queued`. Returns the previews placed.
    async fn place_waiting(&self) -> anyhow::Result<Vec<i64>> {
        let waiting = db::unplaced(&self.pool).await?;
        if waiting.is_empty() {
            return Ok(Vec::new());
        }
        let mut load = db::cluster_load(&self.pool).await?;
        let mut decisions = Vec::with_capacity(waiting.len());
        let mut placed_now: HashMap<String, i64> = HashMap::new();
        let mut evicted = Vec::new();
        for row in &waiting {
            match self.quota(row, &placed_now).await? {
                Quota::Room => {}
                Quota::Full => {
                    decisions.push((row.id, None, row.observed == "queued"));
                    continue;
                }
                Quota::Evicted(victim) => {
                    evicted.push(victim);
                    load = db::cluster_load(&self.pool).await?;
                }
            }
            let cluster = place(&self.config, &load);
            if let Some(cluster) = &cluster {
                match load.iter_mut().find(|(c, _)| c == cluster) {
                    Some((_, used)) => *used += 1,
                    None => load.push((cluster.clone(), 1)),
                }
            }
            if cluster.is_some() {
                *placed_now.entry(format!("repo:{}", row.repo)).or_default() += 1;
                *placed_now
                    .entry(format!("author:{}", row.author))
                    .or_default() += 1;
            }
            decisions.push((row.id, cluster, row.observed == "queued"));
        }
        // One transaction for the whole queue: placement must not cost a commit per preview.
        db::record_placements(&self.pool, &decisions, self.clock.now()).await?;
        Ok(decisions
            .into_iter()
            .filter(|(_, c, _)| c.is_some())
            .map(|(id, _, _)| id)
            .chain(evicted)
            .collect())
    }

    /// The repository's and the author's caps: room, full (wait in the queue), or room made
    /// by evicting the least recently active unpinned preview (`at_cap = "evict"`).
    async fn quota(
        &self,
        row: &PreviewRow,
        placed_now: &HashMap<String, i64>,
    ) -> anyhow::Result<Quota> {
        let repo: crate::preview::RepoName = row.repo.parse()?;
        let policy = self
            .config
            .policy_for(&repo)
            .unwrap_or(&self.config.defaults);
        if policy.max_per_repo.is_none() && policy.max_per_author.is_none() {
            return Ok(Quota::Room);
        }
        let (repo_live, author_live) = db::live_counts(&self.pool, &row.repo, &row.author).await?;
        let now_placed = |key: String| placed_now.get(&key).copied().unwrap_or(0);
        let repo_live = repo_live + now_placed(format!("repo:{}", row.repo));
        let author_live = author_live + now_placed(format!("author:{}", row.author));
        let repo_full = policy
            .max_per_repo
            .is_some_and(|cap| repo_live >= i64::from(cap));
        let author_full = policy
            .max_per_author
            .is_some_and(|cap| author_live >= i64::from(cap));
        if !repo_full && !author_full {
            return Ok(Quota::Room);
        }
        if policy.at_cap == crate::config::AtCap::Queue {
            return Ok(Quota::Full);
        }
        let by_author = !repo_full;
        let Some((victim, victim_repo, victim_number, _)) =
            db::eviction_victim(&self.pool, &row.repo, &row.author, by_author).await?
        else {
            return Ok(Quota::Full); // everything at the cap is pinned
        };
        let newcomer = format!("{}#{}", row.repo, row.number);
        let reason = format!(
            "evicted for {newcomer}: at the cap, and the least recently active unpinned preview"
        );
        if db::evict(
            &self.pool,
            victim,
            &reason,
            &crate::comment::evicted(&newcomer),
            self.clock.now(),
        )
        .await?
        {
            tracing::info!(victim = %format!("{victim_repo}#{victim_number}"), %newcomer, "evicted");
            Ok(Quota::Evicted(victim))
        } else {
            Ok(Quota::Full)
        }
    }

    /// The Applications to apply and the ledger they make; `None` while the preview waits
    /// for a cluster.
    async fn desired_manifests(
        &self,
        row: &PreviewRow,
        key: &PreviewKey,
        names: &Names,
        now: i64,
    ) -> anyhow::Result<Option<Rendered>> {
        let Some(cluster) = row.cluster.clone() else {
            return Ok(None);
        };
        let preview = Preview {
            key: key.clone(),
            head_sha: row.head_sha.parse()?,
            author: row.author.clone(),
            title: row.title.clone(),
            fork: row.fork,
            approved_sha: row.approved_sha.as_deref().map(str::parse).transpose()?,
            cluster: cluster.clone(),
            seed_generation: u32::try_from(row.seed_generation)?,
            redeploy_generation: u32::try_from(row.redeploy_generation)?,
        };
        let sealed = self.sealed_secrets(row, names, &cluster, now).await?;
        let helper = render::helper_application(&preview, &self.config, &sealed)?;
        let dns = helper["spec"]["source"]["helm"]["valuesObject"]["dns"]["enabled"] == true;
        let app = render::app_application(&preview, &self.config)?;
        Ok(Some(Rendered {
            helper: stamped(helper)?,
            app: app.map(stamped).transpose()?,
            entries: ledger::provisioned(names, &self.config, dns),
        }))
    }

    /// The preview's secrets sealed for its cluster: the stored ones while the cluster's
    /// certificate is the one they were sealed for; otherwise new ones, generated and stored.
    async fn sealed_secrets(
        &self,
        row: &PreviewRow,
        names: &Names,
        cluster: &str,
        now: i64,
    ) -> anyhow::Result<Vec<SealedSecret>> {
        let cert = self
            .certs
            .get(cluster)
            .with_context(|| format!("no sealing certificate for cluster {cluster}"))?;
        let stored = db::sealed_secrets(&self.pool, row.id).await?;
        if !stored.is_empty()
            && stored
                .iter()
                .all(|(_, fingerprint)| fingerprint == &cert.fingerprint)
        {
            return Ok(stored.into_iter().map(|(secret, _)| secret).collect());
        }
        // A certificate that outlives any extension: no preview may run past max_lifetime.
        let repo = row.repo.parse()?;
        let policy = self
            .config
            .policy_for(&repo)
            .unwrap_or(&self.config.defaults);
        let valid_until = now.saturating_add(i64::try_from(policy.max_lifetime.as_secs())?);
        let specs = crate::secrets::for_preview(
            &self.config,
            names,
            self.ca.as_ref(),
            now,
            valid_until,
            &mut rand::rngs::OsRng,
        )?;
        let sealed = specs
            .iter()
            .map(|spec| crate::seal::seal_secret(cert, spec))
            .collect::<Result<Vec<_>, _>>()?;
        db::store_sealed_secrets(&self.pool, row.id, &sealed, &cert.fingerprint, now).await?;
        Ok(sealed)
    }

    async fn observe(&self, name: &str) -> anyhow::Result<Observed> {
        self.retry("observe", || self.sink.observe(name)).await
    }

    /// A sink call with a timeout and a bounded retry with doubling backoff.
    async fn retry<T, F, Fut>(&self, what: &str, call: F) -> anyhow::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let mut backoff = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            let result = match tokio::time::timeout(CALL_TIMEOUT, call()).await {
                Ok(result) => result,
                Err(_) => Err(anyhow::anyhow!("{what} timed out after {CALL_TIMEOUT:?}")),
            };
            match result {
                Ok(value) => return Ok(value),
                Err(e) if attempt >= ATTEMPTS => {
                    return Err(e.context(format!("{what} failed {ATTEMPTS} times")));
                }
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
            }
        }
    }
}

enum Quota {
    Room,
    Full,
    /// Room made: this preview was evicted (its teardown is the reconciler's next step).
    Evicted(i64),
}

/// What one preview should look like now.
struct Rendered {
    /// The helper Application and the hash of its rendering.
    helper: (serde_json::Value, String),
    app: Option<(serde_json::Value, String)>,
    /// What the helper Application provisions, itself included (the ledger).
    entries: Vec<ledger::Entry>,
}

/// The manifest with the hash of its rendering recorded in it (see `APPLIED_HASH`).
fn stamped(mut manifest: serde_json::Value) -> anyhow::Result<(serde_json::Value, String)> {
    let hash = hex::encode(Sha256::digest(serde_json::to_vec(&manifest)?));
    manifest["metadata"]["annotations"][APPLIED_HASH] = hash.clone().into();
    Ok((manifest, hash))
}

fn ready_of(observed: &Observed) -> Option<bool> {
    match observed {
        Observed::Present { ready, .. } => *ready,
        _ => Some(false),
    }
}

fn desired_of(row: &PreviewRow) -> anyhow::Result<Desired> {
    Ok(match row.desired.as_str() {
        "deployed" => Desired::Deployed,
        "awaiting_approval" => Desired::AwaitingApproval,
        "draft" => Desired::Draft,
        "absent" => Desired::Absent,
        other => anyhow::bail!("unknown desired state {other:?}"),
    })
}

/// Placement: the least loaded cluster with room (`capacity` unset = unlimited); ties go to
/// the first configured. A preview stays on its cluster for life.
pub fn place(config: &Config, load: &[(String, i64)]) -> Option<String> {
    let used = |name: &str| load.iter().find(|(c, _)| c == name).map_or(0, |(_, n)| *n);
    config
        .clusters
        .iter()
        .filter(|c| c.capacity.is_none_or(|cap| used(&c.name) < i64::from(cap)))
        .min_by_key(|c| used(&c.name))
        .map(|c| c.name.clone())
}

mod obey;
mod report;
mod resync;
mod teardown;

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_toml(
            "[[clusters]]\nname = \"a\"\nserver = \"https://a\"\ncapacity = 2\n[[clusters]]\nname = \"b\"\nserver = \"https://b\"\ncapacity = 1\n",
            Vec::new(),
        )
        .unwrap()
    }

    #[test]
    fn new_previews_go_to_the_least_loaded_cluster_with_room() {
        assert_eq!(place(&config(), &[]).as_deref(), Some("a"));
        assert_eq!(place(&config(), &[("a".into(), 1)]).as_deref(), Some("b"));
        assert_eq!(
            place(&config(), &[("a".into(), 1), ("b".into(), 1)]).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn with_every_cluster_full_a_preview_waits() {
        assert_eq!(place(&config(), &[("a".into(), 2), ("b".into(), 1)]), None);
    }
}
