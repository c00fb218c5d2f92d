//! One write lock per state file for this process's writers: they queue on it, not on SQLite.
//!
//! The intake's writer and the inline writes (reconciler, feedback) each hold a connection of
//! their own. When two begin a write at once, SQLite's loser sleeps in its default busy
//! handler, 1 ms, then 2, 5, 10 … up to 100 ms between tries (sqlite3.c
//! `sqliteDefaultBusyCallback`), however soon the lock is free: issue #17's scale run counted
//! 343 such sleeps over 400 new previews (`SCALE_SYSCALLS`, `clock_nanosleep`). Taken here
//! first, the lock hands over as its holder commits. SQLite's own lock and busy timeout still
//! guard against other processes (the CLI) and sqlx's pool.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};

use rusqlite::Connection;

/// The lock of the state file a connection is open on; clones share it.
#[derive(Clone)]
pub struct WriteLock(Arc<Mutex<()>>);

/// The locks in use, by the state file's absolute path (SQLite's `sqlite3_db_filename`).
static LOCKS: LazyLock<Mutex<HashMap<PathBuf, Weak<Mutex<()>>>>> = LazyLock::new(Default::default);

impl WriteLock {
    /// The lock every connection to `conn`'s file shares; one of its own for a database in
    /// memory, which no other connection sees.
    pub fn of(conn: &Connection) -> Self {
        let Some(path) = conn.path().filter(|path| !path.is_empty()) else {
            return WriteLock(Arc::default());
        };
        let mut locks = LOCKS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lock) = locks
            .get(std::path::Path::new(path))
            .and_then(Weak::upgrade)
        {
            return WriteLock(lock);
        }
        // Bounded by the state files open at once: the dead are dropped as one is added.
        locks.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::default();
        locks.insert(PathBuf::from(path), Arc::downgrade(&lock));
        WriteLock(lock)
    }

    /// Held for a write transaction, from its `BEGIN IMMEDIATE` to its commit. A writer that
    /// panicked while holding it left nothing half-done here (SQLite rolled its
    /// transaction back), so a poisoned lock is taken as it is.
    pub fn hold(&self) -> MutexGuard<'_, ()> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock, if no other writer holds it now.
    pub fn try_hold(&self) -> Option<MutexGuard<'_, ()>> {
        match self.0.try_lock() {
            Ok(held) => Some(held),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    #[cfg(test)]
    pub fn is(&self, other: &WriteLock) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_to_one_file_share_its_lock_and_other_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| Connection::open(dir.path().join(name)).unwrap();
        let (a, b, other) = (open("state.db"), open("state.db"), open("other.db"));
        let lock = WriteLock::of(&a);
        assert!(lock.is(&WriteLock::of(&b)));
        assert!(!lock.is(&WriteLock::of(&other)));
        let memory = Connection::open_in_memory().unwrap();
        assert!(!WriteLock::of(&memory).is(&WriteLock::of(&memory)));
    }

    #[test]
    fn a_lock_no_connection_holds_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        drop(WriteLock::of(&Connection::open(&path).unwrap()));
        let other = WriteLock::of(&Connection::open(dir.path().join("other.db")).unwrap());
        let locks = LOCKS.lock().unwrap();
        let resolved = Connection::open(&path).unwrap().path().unwrap().to_owned();
        assert!(!locks.contains_key(std::path::Path::new(&resolved)));
        drop(other);
    }
}
