//! The intake's writer on SQLite: it owns its connection and runs each batch synchronously on
//! the runtime's thread while no other writer holds the state, on a blocking thread behind
//! one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{
    IntakeError, Job, MAX_BATCH, Recorded, SLOW_BACKOFF, SLOW_COMMIT, answer, delivery_row,
    next_batch, record_one, tell,
};
use crate::clock::Clock;
use crate::db::writer::{self as db, Lite, now as at_once};
use crate::intent::Outcome;
use crate::work::Work;

/// The writer: waits for a delivery, lets the handlers already woken join it, takes every
/// one queued (up to [`MAX_BATCH`]), commits them together, answers each.
///
/// The commit runs right here, on the runtime's thread, when no other writer holds the
/// state: a hop to a thread of its own and back was two context switches a delivery, a
/// quarter of the CPU a delivery costs at 2 connections (issue #17). The runtime's other
/// tasks wait for that one commit, as they wait for an inline read. Behind another writer
/// of this process, or another process's lock, the batch waits on a blocking thread
/// instead: never the runtime, which may be what the lock's holder needs to finish.
pub(super) async fn write_batches(
    conn: rusqlite::Connection,
    mut queue: mpsc::Receiver<Job>,
    clock: Arc<dyn Clock>,
    work: Work,
) {
    let mut writer = match Writer::new(conn) {
        Ok(writer) => writer,
        Err(e) => {
            tracing::error!(error = %e, "the intake's writer could not start");
            return;
        }
    };
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while next_batch(&mut queue, &mut batch).await {
        let now = clock.now();
        let committed = match writer.commit_here(&batch, now) {
            Some(committed) => committed,
            None => {
                let joined = writer.commit_behind(batch, now).await;
                let Ok((back, jobs, committed)) = joined else {
                    tracing::error!("the intake's writer stopped");
                    return;
                };
                (writer, batch) = (back, jobs);
                committed
            }
        };
        let results = match committed {
            Ok(results) => results,
            Err(e) => {
                tracing::error!(error = %e, deliveries = batch.len(), "commit failed; deliveries answered 503");
                batch
                    .iter()
                    .map(|_| Err(IntakeError::Write(e.to_string())))
                    .collect()
            }
        };
        at_once(tell(&mut Lite(&writer.conn), &work, &batch, &results));
        answer(&mut batch, results);
    }
}

type Committed = db::Result<Vec<Result<Recorded, IntakeError>>>;

/// The intake's connection and the lock it shares with this process's other writers.
struct Writer {
    conn: rusqlite::Connection,
    lock: crate::db::WriteLock,
    /// How long a commit behind another process's lock waits: the connection's busy
    /// timeout as opened. On the runtime's thread it waits not at all.
    patience: Duration,
    /// Commits wait on a blocking thread until then, after a slow one ([`SLOW_COMMIT`]).
    here_after: Instant,
}

impl Writer {
    fn new(conn: rusqlite::Connection) -> db::Result<Self> {
        let millis: u64 = conn.pragma_query_value(None, "busy_timeout", |r| r.get(0))?;
        conn.busy_timeout(Duration::ZERO)?;
        Ok(Self {
            lock: crate::db::WriteLock::of(&conn),
            conn,
            patience: Duration::from_millis(millis),
            here_after: Instant::now(),
        })
    }

    /// Commits `batch` on this thread, unless a writer holds the state or a commit here
    /// was slow a moment ago (`None`: nothing was written).
    fn commit_here(&mut self, batch: &[Job], now: i64) -> Option<Committed> {
        let started = Instant::now();
        if started < self.here_after {
            return None;
        }
        let _held = self.lock.try_hold()?;
        let committed = match commit(&mut self.conn, batch, now) {
            Err(e) if e.is_busy() => return None,
            committed => committed,
        };
        let took = started.elapsed();
        if took > SLOW_COMMIT {
            tracing::warn!(
                ?took,
                deliveries = batch.len(),
                "a slow commit held the runtime; the next second's commit on a blocking thread"
            );
            self.here_after = Instant::now() + SLOW_BACKOFF;
        }
        Some(committed)
    }

    /// Commits `batch` on a blocking thread, once the writer that holds the state is done.
    async fn commit_behind(
        mut self,
        batch: Vec<Job>,
        now: i64,
    ) -> Result<(Self, Vec<Job>, Committed), tokio::task::JoinError> {
        tokio::task::spawn_blocking(move || {
            let committed = match self.conn.busy_timeout(self.patience) {
                Ok(()) => {
                    let _held = self.lock.hold();
                    commit(&mut self.conn, &batch, now)
                }
                Err(e) => Err(e.into()),
            };
            let _ = self.conn.busy_timeout(Duration::ZERO);
            (self, batch, committed)
        })
        .await
    }
}

/// One transaction for the whole batch. A delivery whose write fails is rare, so the batch
/// first runs without per-delivery savepoints; only when one fails is it run again with
/// them, so that one bad delivery fails alone (recorded as failed) while the rest commit.
///
/// `BEGIN IMMEDIATE` takes the write lock up front, so a busy state waits the busy timeout
/// rather than failing at the first write (see `db::begin_write`).
fn commit(
    conn: &mut rusqlite::Connection,
    batch: &[Job],
    now: i64,
) -> db::Result<Vec<Result<Recorded, IntakeError>>> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        match at_once(record_one(&mut Lite(&tx), &job.delivery, &job.intent, now)) {
            Ok(recorded) => results.push(Ok(recorded)),
            Err(_) => {
                tx.rollback()?;
                return commit_isolated(conn, batch, now);
            }
        }
    }
    tx.commit()?;
    Ok(results)
}

fn commit_isolated(
    conn: &mut rusqlite::Connection,
    batch: &[Job],
    now: i64,
) -> db::Result<Vec<Result<Recorded, IntakeError>>> {
    let mut tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        let mut savepoint = tx.savepoint()?;
        match at_once(record_one(
            &mut Lite(&savepoint),
            &job.delivery,
            &job.intent,
            now,
        )) {
            Ok(recorded) => {
                savepoint.commit()?;
                results.push(Ok(recorded));
            }
            Err(e) => {
                savepoint.rollback()?;
                drop(savepoint);
                let d = &job.delivery;
                tracing::error!(delivery = %d.guid, event = %d.event, error = %e, "delivery not recorded");
                // Stored as failed so that GitHub's redelivery is processed again.
                crate::db::write::record_delivery(
                    &tx,
                    &delivery_row(d, Outcome::Failed, &e.to_string(), now),
                )?;
                results.push(Err(IntakeError::Write(e.to_string())));
            }
        }
    }
    tx.commit()?;
    Ok(results)
}
