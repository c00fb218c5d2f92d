//! The intake's writer: its lock, its commits on and off the runtime's thread.

use super::*;
use crate::clock::ManualClock;
use crate::webhook::Event;
use std::time::{Duration, Instant};

fn ping(guid: &str) -> (Delivery, Intent) {
    let delivery = Delivery {
        hook_id: "1".into(),
        guid: guid.into(),
        event: "ping".into(),
        action: None,
        payload: Event::Ping,
    };
    let intent = Intent {
        outcome: Outcome::Ignored,
        detail: "ping".into(),
        change: Change::Nothing,
    };
    (delivery, intent)
}

/// A migrated state in a temporary directory, with the pool `serve` opens on it.
struct State {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    pool: sqlx::SqlitePool,
}

impl State {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let pool = crate::db::open(&path).await.unwrap();
        Self {
            _dir: dir,
            path,
            pool,
        }
    }

    /// The intake on a connection of its own, once `prepare` has set it up; the reconciler's
    /// end of its work channel is kept with it.
    fn intake(
        &self,
        prepare: impl FnOnce(&rusqlite::Connection),
    ) -> (Intake, crate::work::Pending) {
        let conn = crate::db::write::open(&self.path).unwrap();
        prepare(&conn);
        let (work, pending) = crate::work::channel();
        let (intake, _writer) =
            Intake::start(Store::Sqlite(conn), Arc::new(ManualClock::at(1)), work);
        (intake, pending)
    }
}

/// Counts the turns a task gets on the runtime, every `period` while the runtime is free:
/// whether something held the runtime's thread.
struct Ticker {
    ticks: Arc<std::sync::atomic::AtomicU32>,
    task: tokio::task::JoinHandle<()>,
}

impl Ticker {
    fn every(period: Duration) -> Self {
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let task = tokio::spawn({
            let ticks = ticks.clone();
            async move {
                loop {
                    tokio::time::sleep(period).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        Self { ticks, task }
    }

    fn ticks(&self) -> u32 {
        self.ticks.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The intake's writer and a look's write take the same `db::WriteLock`: a delivery that
/// arrives while a look commits waits for it, not in SQLite's busy handler (here none at
/// all, so a wait there would have answered 503).
#[tokio::test]
async fn a_delivery_recorded_while_a_look_writes_waits_for_its_commit() {
    let state = State::new().await;
    let (intake, _pending) = state.intake(|conn| conn.busy_timeout(Duration::ZERO).unwrap());
    let inline = crate::db::Inline::of(&state.pool);
    let (began, begun) = std::sync::mpsc::channel();
    let look = tokio::spawn({
        let inline = inline.clone();
        async move {
            inline
                .write(move |tx| {
                    tx.execute("DELETE FROM leases", [])?;
                    began.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                    Ok(())
                })
                .await
        }
    });
    tokio::task::spawn_blocking(move || begun.recv().unwrap())
        .await
        .unwrap();
    let (delivery, intent) = ping("a");
    let recorded = intake.record(delivery, intent).await.unwrap();
    assert!(matches!(recorded, Recorded::New { .. }), "{recorded:?}");
    look.await.unwrap().unwrap();
}

/// Another connection (another process, or sqlx's pool) holds SQLite's write lock: the
/// delivery waits for it on a blocking thread, not in SQLite's busy handler on the
/// runtime's thread, whose other tasks (perhaps the lock holder's) must go on.
#[tokio::test]
async fn a_delivery_behind_another_connections_lock_leaves_the_runtime_running() {
    let state = State::new().await;
    let (intake, _pending) = state.intake(|_| {});
    let (began, begun) = std::sync::mpsc::channel();
    let holder = std::thread::spawn({
        let path = state.path.clone();
        move || {
            let mut other = rusqlite::Connection::open(path).unwrap();
            let tx = other
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .unwrap();
            tx.execute("DELETE FROM leases", []).unwrap();
            began.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            tx.commit().unwrap();
        }
    });
    tokio::task::spawn_blocking(move || begun.recv().unwrap())
        .await
        .unwrap();
    let ticker = Ticker::every(Duration::from_millis(10));
    let started = std::time::Instant::now();
    let (delivery, intent) = ping("a");
    let recorded = intake.record(delivery, intent).await.unwrap();
    assert!(matches!(recorded, Recorded::New { .. }), "{recorded:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "it waited for the lock"
    );
    let ticked = ticker.ticks();
    assert!(
        ticked >= 10,
        "the runtime stood still: {ticked} ticks in 300 ms"
    );
    holder.join().unwrap();
}

/// A disk whose fsync stalls, as a trigger that makes every commit slow: the first slow
/// commit holds the runtime, the ones after it wait on a blocking thread.
#[tokio::test]
async fn after_a_slow_commit_the_next_ones_leave_the_runtime_running() {
    let state = State::new().await;
    let (intake, _pending) = state.intake(|conn| {
        conn.execute_batch(
            "CREATE TEMP TRIGGER slow AFTER INSERT ON deliveries BEGIN
               SELECT count(*) FROM (WITH RECURSIVE c(x) AS
                 (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT x FROM c);
             END;",
        )
        .unwrap();
    });
    let ticker = Ticker::every(Duration::from_millis(5));
    let record = async |guid: &str| {
        let before = ticker.ticks();
        let started = Instant::now();
        let (delivery, intent) = ping(guid);
        let recorded = intake.record(delivery, intent).await.unwrap();
        assert!(matches!(recorded, Recorded::New { .. }), "{recorded:?}");
        let ticked = ticker.ticks() - before;
        (started.elapsed(), ticked)
    };
    let (first, held) = record("a").await;
    assert!(
        first > SLOW_COMMIT * 2,
        "the trigger is not slow enough: {first:?}"
    );
    assert!(
        held <= 1,
        "the first commit ran on the runtime's thread: {held} ticks"
    );
    let (second, ticked) = record("b").await;
    let expected = second.as_millis() / 5;
    assert!(
        u128::from(ticked) * 2 >= expected,
        "the runtime stood still behind a slow commit: {ticked} ticks in {second:?}"
    );
}
