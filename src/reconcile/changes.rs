//! A pass that follows what changed, not how many previews exist (issue #42). At 50,000
//! previews a full pass with nothing to do took 2.5 s, a look at each. Between full passes
//! a pass looks only at:
//!
//! - the previews the state stamped past its cursor (`db::changes`: every write that gives
//!   a preview work, on whichever replica), less those already looked at at that stamp (a
//!   word from the writer got there first);
//! - the previews whose Applications the sink says changed: Argo CD's watch events as they
//!   come, a directory's files whose stamp moved (asked each resync);
//! - a slice of the slow sweep (`SWEEP` previews a resync, in id order, round and round), so
//!   a stamp some writer missed, or a change no signal told, still converges at a bounded
//!   cost.
//!
//! A full pass, every preview looked at, still comes first after a start, and after the
//! watch lists afresh (a deletion between two watches is in no event).

use std::collections::{BTreeSet, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::Reconciler;
use crate::db;

/// Previews the slow sweep looks at each resync, changed or not: every one of 50,000 within
/// 25 minutes (50 resyncs of 30 s), for a fiftieth of a full pass's cost each time.
pub(super) const SWEEP: i64 = 1_000;
/// How often the state is asked what changed between resyncs: one probe of an index, so a
/// change written by another replica (which cannot tell this process) waits seconds.
pub const CHANGES: Duration = Duration::from_secs(2);

/// What the reconciler knows of each preview's last look, and what it is owed a look for.
#[derive(Default)]
pub(super) struct Changes {
    inner: Mutex<Inner>,
    /// Looks made since the start (`Reconciler::looks`).
    looks: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Every stamp up to this version has been read; `None` until a full pass.
    cursor: Option<i64>,
    /// The sink's lists (`Sink::lists`) when the last full pass began.
    lists: u64,
    known: HashMap<i64, Known>,
    /// Which preview an Application is, by a hash of its name (a collision only costs a
    /// look at the wrong preview; the sweep still comes round to the right one).
    by_name: HashMap<u64, i64>,
    /// Previews the sink reported changed since their last look.
    dirty: BTreeSet<i64>,
    /// The slow sweep's place: the last id it looked at.
    swept_to: i64,
    /// Its slice, when not `SWEEP` (`Reconciler::with_sweep`).
    sweep: Option<i64>,
}

struct Known {
    /// Its change version at the last look that left it settled: a stamp equal to it is
    /// nothing new. `None` while a look is under way, or after one that left it waiting.
    clean: Option<i64>,
    /// The version the look under way read.
    looking: Option<i64>,
    names: [u64; 2],
}

fn hash(name: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

impl Changes {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing that can panic runs under this lock; poisoned, it is still the same map.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A look at `id` begins on its row at `version`; `names` are its Applications'.
    pub(super) fn looking(&self, id: i64, version: i64, names: [&str; 2]) {
        let names = names.map(hash);
        let mut inner = self.lock();
        let Inner { known, by_name, .. } = &mut *inner;
        let entry = known.entry(id).or_insert(Known {
            clean: None,
            looking: None,
            names,
        });
        entry.clean = None;
        entry.looking = Some(version);
        if entry.names != names {
            for old in entry.names {
                if by_name.get(&old) == Some(&id) {
                    by_name.remove(&old);
                }
            }
            entry.names = names;
        }
        for name in names {
            by_name.insert(name, id);
        }
    }

    /// The look at `id` ended; `settled`: without an error, and nothing waits for another.
    pub(super) fn looked(&self, id: i64, settled: bool) {
        self.looks.fetch_add(1, Ordering::Relaxed);
        if let Some(entry) = self.lock().known.get_mut(&id) {
            let version = entry.looking.take();
            entry.clean = version.filter(|_| settled);
        }
    }

    /// `id` is gone (or going): nothing is kept of it.
    pub(super) fn forget(&self, id: i64) {
        let mut inner = self.lock();
        if let Some(entry) = inner.known.remove(&id) {
            for name in entry.names {
                if inner.by_name.get(&name) == Some(&id) {
                    inner.by_name.remove(&name);
                }
            }
        }
    }

    /// Someone changed the Application `name` (Argo CD, a person): its preview is looked at
    /// in the next pass. False when no preview known here has that name.
    pub(super) fn sink_changed(&self, name: &str) -> bool {
        let mut inner = self.lock();
        let Some(&id) = inner.by_name.get(&hash(name)) else {
            return false;
        };
        inner.dirty.insert(id);
        true
    }

    /// Whether the next pass must look at every preview: none has yet, or the sink's watch
    /// listed afresh since the last one began.
    pub(super) fn wants_full(&self, lists: u64) -> bool {
        let inner = self.lock();
        inner.cursor.is_none() || inner.lists != lists
    }

    /// A full pass begins, with the sink at `lists`.
    pub(super) fn full_pass_begins(&self, lists: u64) {
        self.lock().lists = lists;
    }

    /// A full pass read every row after the state's version was `version`.
    pub(super) fn caught_up(&self, version: i64) {
        let mut inner = self.lock();
        inner.cursor = Some(inner.cursor.map_or(version, |c| c.max(version)));
    }

    pub(super) fn cursor(&self) -> i64 {
        self.lock().cursor.unwrap_or(-1)
    }

    /// Of `changed` (id, version), those not already looked at at that version, then every
    /// preview the sink reported changed; the cursor moves past them all.
    pub(super) fn to_look_at(&self, changed: &[(i64, i64)]) -> Vec<i64> {
        let mut inner = self.lock();
        let mut ids = Vec::new();
        for &(id, version) in changed {
            inner.cursor = Some(inner.cursor.map_or(version, |c| c.max(version)));
            if inner.known.get(&id).and_then(|k| k.clean) != Some(version) {
                ids.push(id);
            }
        }
        ids.extend(std::mem::take(&mut inner.dirty));
        ids
    }

    /// Where the sweep is, and how many its next slice takes.
    fn sweep(&self) -> (i64, i64) {
        let inner = self.lock();
        (inner.swept_to, inner.sweep.unwrap_or(SWEEP))
    }

    fn sweep_to(&self, last: i64) {
        self.lock().swept_to = last;
    }
}

impl Reconciler {
    /// The slow sweep looks at `previews` a resync (`SWEEP` unless told; 0: no sweep).
    pub fn with_sweep(self, previews: i64) -> Self {
        self.changes.lock().sweep = Some(previews);
        self
    }

    /// Looks made since the start (a full pass, a word, a requeue, a pass over what changed).
    pub fn looks(&self) -> u64 {
        self.changes.looks.load(Ordering::Relaxed)
    }

    /// A pass over what changed (the module's doc); a full one while `Changes::wants_full`.
    /// `resync`: the periodic pass, which also asks the sink what changed, sweeps its slice,
    /// and does the template databases and the orphans.
    pub async fn pass_changed(self: &Arc<Self>, resync: bool) -> anyhow::Result<usize> {
        if self.changes.wants_full(self.sink.lists()) {
            return self.pass().await;
        }
        let started = Instant::now();
        let mut ids = self.place_waiting().await.context("placing previews")?;
        if resync {
            for name in self.sink.changed().await.context("what the sink changed")? {
                self.changes.sink_changed(&name);
            }
            let swept = self.sweep_slice().await.context("the sweep's previews")?;
            ids.extend(swept);
        }
        let changed = db::changes::changed_since(&self.state, self.changes.cursor())
            .await
            .context("what changed")?;
        ids.extend(self.changes.to_look_at(&changed));
        ids.sort_unstable();
        ids.dedup();
        self.reconcile_all(&ids).await;
        // A teardown that finished freed a slot: let the queue move now.
        let placed = self.place_waiting().await.context("placing previews")?;
        self.reconcile_all(&placed).await;
        self.tell_feedback(&ids, &placed);
        if resync {
            self.templates().await.context("template databases")?;
            self.remove_orphans().await.context("removing orphans")?;
            self.metrics.passed("resync", started.elapsed());
        }
        Ok(ids.len() + placed.len())
    }

    /// The sweep's next slice: the ids after where it stopped, and on from the first once
    /// it passes the last.
    async fn sweep_slice(&self) -> anyhow::Result<Vec<i64>> {
        let (after, limit) = self.changes.sweep();
        let mut swept = db::changes::ids_after(&self.state, after, limit).await?;
        let short = limit - swept.len() as i64;
        if short > 0 && after > 0 {
            let from_start = db::changes::ids_after(&self.state, 0, short).await?;
            swept.extend(from_start.into_iter().filter(|&id| id <= after));
        }
        self.changes.sweep_to(swept.last().copied().unwrap_or(0));
        Ok(swept)
    }
}
