//! The reconciler's statements, run synchronously (rusqlite) on the caller's thread.
//!
//! Through sqlx's pool a statement is a hop to its connection's thread and back, and a
//! ping (two more hops) as the connection returns to the pool (sqlx-core 0.8.6,
//! `pool/connection.rs` `return_to_pool`, unconditional). `benches/statements.rs` measures
//! a one-row read at 15× the CPU that way (issue #17); a look at a preview runs a dozen.
//! A read here runs where it is asked for: a few pages, from SQLite's cache or the OS's,
//! in microseconds; in WAL mode a writer never holds it up (only WAL recovery after a crash,
//! or another process taking the state exclusively, could make it wait, up to the busy
//! timeout). A write transaction runs on a blocking thread, one hop for all of it, because
//! it waits for the write lock and for its fsync.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::Context;
use rusqlite::{Connection, Transaction, TransactionBehavior};
use sqlx::SqlitePool;

use super::lock::WriteLock;

/// Connections kept open between statements; more are opened while more threads ask at
/// once (at most one a thread: a statement here never awaits), and closed after.
const IDLE: usize = 4;

/// The state's connections for statements run inline. Clones share them.
#[derive(Clone)]
pub struct Inline {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    /// Write transactions committed: each is an fsync (`synchronous=FULL`).
    commits: AtomicU64,
    /// Shared with this process's other writers of the file (`db::lock`).
    lock: OnceLock<WriteLock>,
}

impl Inline {
    /// The state `pool` is open on, with the same settings (`db::write::open`).
    pub fn of(pool: &SqlitePool) -> Self {
        Self::open(pool.connect_options().get_filename())
    }

    pub fn open(path: &Path) -> Self {
        Self {
            shared: Arc::new(Shared {
                path: path.to_owned(),
                idle: Mutex::new(Vec::new()),
                commits: AtomicU64::new(0),
                lock: OnceLock::new(),
            }),
        }
    }

    /// Runs `f` on a connection of its own, on this thread.
    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> anyhow::Result<T>) -> anyhow::Result<T> {
        let idle = self.idle().pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => super::connection::open(&self.shared.path)?,
        };
        let result = f(&mut conn);
        // Back for the next statement, unless enough wait, or it is somehow still inside a
        // transaction (a `Transaction` rolls back as it drops, so it should never be).
        let mut idle = self.idle();
        if idle.len() < IDLE && conn.is_autocommit() {
            idle.push(conn);
        }
        result
    }

    /// Write transactions committed through these connections so far.
    pub fn commits(&self) -> u64 {
        self.shared.commits.load(Ordering::Relaxed)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A panic while holding the lock cannot leave the list half-changed (push and pop).
        self.shared
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A read (one statement, or several in one snapshot when `f` opens a transaction).
    pub fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> anyhow::Result<T> {
        self.with(|conn| Ok(f(conn)?))
    }

    /// A write transaction, taking the write lock at its start (`BEGIN IMMEDIATE`, as
    /// `db::begin_write` and for its reason), committed if `f` returns Ok.
    pub async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            me.with(|conn| {
                let lock = me.shared.lock.get_or_init(|| WriteLock::of(conn));
                let _held = lock.hold();
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                me.shared.commits.fetch_add(1, Ordering::Relaxed);
                Ok(out)
            })
        })
        .await
        .context("a write to the state stopped")?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn state() -> (tempfile::TempDir, SqlitePool, Inline) {
        let dir = tempfile::tempdir().unwrap();
        let pool = super::super::open(&dir.path().join("state.db"))
            .await
            .unwrap();
        let inline = Inline::of(&pool);
        (dir, pool, inline)
    }

    fn leases(conn: &Connection) -> rusqlite::Result<i64> {
        conn.query_row("SELECT count(*) FROM leases", [], |r| r.get(0))
    }

    #[tokio::test]
    async fn a_read_sees_what_the_pool_committed_and_a_write_what_the_pool_reads() {
        let (_dir, pool, inline) = state().await;
        assert_eq!(inline.read(leases).unwrap(), 0);
        sqlx::query("INSERT INTO leases (name, holder, expires_at) VALUES ('sweep', 'a', 1)")
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(inline.read(leases).unwrap(), 1);
        inline
            .write(|tx| tx.execute("DELETE FROM leases", []).map(drop))
            .await
            .unwrap();
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM leases")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(left, 0);
    }

    /// What `db::options` gives the pool's connections, these have too: a commit survives
    /// power loss, and teardown's cascades run.
    #[tokio::test]
    async fn its_connections_are_durable_and_cascade_like_the_pools() {
        let (_dir, _pool, inline) = state().await;
        let pragma = |name: &str| {
            let value = inline.read(|conn| {
                conn.query_row(&format!("PRAGMA {name}"), [], |r| {
                    r.get::<_, rusqlite::types::Value>(0)
                })
            });
            match value.unwrap() {
                rusqlite::types::Value::Text(text) => text,
                rusqlite::types::Value::Integer(n) => n.to_string(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(pragma("journal_mode"), "wal");
        assert_eq!(pragma("synchronous"), "2", "FULL");
        assert_eq!(pragma("foreign_keys"), "1");
        assert_eq!(pragma("busy_timeout"), "5000");
    }

    #[tokio::test]
    async fn a_write_that_fails_commits_none_of_it_and_its_connection_is_used_again() {
        let (_dir, _pool, inline) = state().await;
        let failed = inline
            .write(|tx| {
                tx.execute(
                    "INSERT INTO leases (name, holder, expires_at) VALUES ('sweep', 'a', 1)",
                    [],
                )?;
                tx.execute("INSERT INTO no_such_table VALUES (1)", [])
                    .map(drop)
            })
            .await;
        assert!(failed.is_err());
        assert_eq!(inline.read(leases).unwrap(), 0, "rolled back");
        assert_eq!(inline.idle().len(), 1, "kept for the next statement");
        assert!(inline.idle()[0].is_autocommit());
    }

    #[tokio::test]
    async fn connections_kept_are_bounded_however_many_ask_at_once() {
        let (_dir, _pool, inline) = state().await;
        let writes: Vec<_> = (0..3 * IDLE)
            .map(|i| {
                let inline = inline.clone();
                tokio::spawn(async move {
                    inline
                        .write(move |tx| {
                            tx.execute(
                                "INSERT INTO leases (name, holder, expires_at) VALUES (?1, 'a', 1)",
                                [format!("lease-{i}")],
                            )
                            .map(drop)
                        })
                        .await
                })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        assert_eq!(inline.read(leases).unwrap(), 3 * IDLE as i64);
        assert!(inline.idle().len() <= IDLE);
    }

    /// Two of this process's writes at once queue on `db::WriteLock`, not in SQLite's busy
    /// handler, which sleeps 1 ms, then 2, 5, 10 … however soon the lock is free: with no
    /// busy timeout at all, the second waits for the first's commit and commits after it.
    #[tokio::test]
    async fn a_write_begun_while_another_holds_the_lock_waits_for_its_commit() {
        let (_dir, _pool, inline) = state().await;
        for _ in 0..2 {
            let conn = super::super::connection::open(&inline.shared.path).unwrap();
            conn.busy_timeout(std::time::Duration::ZERO).unwrap();
            inline.idle().push(conn);
        }
        let insert = |tx: &Transaction<'_>, name: &str| {
            tx.execute(
                "INSERT INTO leases (name, holder, expires_at) VALUES (?1, 'a', 1)",
                [name],
            )
            .map(drop)
        };
        let (began, begun) = std::sync::mpsc::channel();
        let first = tokio::spawn({
            let inline = inline.clone();
            async move {
                inline
                    .write(move |tx| {
                        insert(tx, "first")?;
                        began.send(()).unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(300));
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || begun.recv().unwrap())
            .await
            .unwrap();
        inline.write(move |tx| insert(tx, "second")).await.unwrap();
        first.await.unwrap().unwrap();
        assert_eq!(inline.read(leases).unwrap(), 2);
    }

    #[tokio::test]
    async fn a_locked_state_is_a_busy_error_to_retry() {
        let (_dir, pool, inline) = state().await;
        // Held by another connection past a busy timeout of nothing.
        let mut holder = super::super::begin_write(&super::super::State::from(&pool))
            .await
            .unwrap();
        sqlx::query("DELETE FROM leases")
            .execute(&mut *holder)
            .await
            .unwrap();
        let conn = inline.idle().pop();
        let conn =
            conn.unwrap_or_else(|| super::super::connection::open(&inline.shared.path).unwrap());
        conn.busy_timeout(std::time::Duration::ZERO).unwrap();
        inline.idle().push(conn);
        let busy = inline
            .write(|tx| tx.execute("DELETE FROM leases", []).map(drop))
            .await
            .unwrap_err();
        assert!(super::super::is_busy_error(&busy), "{busy:#}");
        let refused = inline.read(|conn| conn.execute("INSERT INTO no_such_table VALUES (1)", []));
        assert!(!super::super::is_busy_error(&refused.unwrap_err()));
    }
}
