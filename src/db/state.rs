//! The one handle to the state. Every query in `db` takes it and picks the driver that runs
//! its statement: sqlx's pool for what awaits (writes that wait their turn, reads beside
//! them), rusqlite inline for the short statements of a look (`inline.rs` says why). Callers
//! never choose, so a store of another kind can sit behind the same functions.

use std::path::Path;

use sqlx::SqlitePool;

use super::Inline;

/// An open, migrated state. Clones share its connections.
#[derive(Clone)]
pub struct State {
    pool: SqlitePool,
    inline: Inline,
}

impl State {
    /// Opens (creating and migrating) the state at `path`.
    pub async fn open(path: &Path) -> anyhow::Result<Self> {
        Ok(Self::from(super::open(path).await?))
    }

    /// sqlx's pool, for the statements that await (and for tests that look at the state
    /// with SQL of their own).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The rusqlite connections, for the statements run where they are asked for.
    pub(crate) fn inline(&self) -> &Inline {
        &self.inline
    }

    /// Write transactions committed inline so far (each an fsync).
    pub fn inline_commits(&self) -> u64 {
        self.inline.commits()
    }

    /// Closes the pool's connections (the inline ones close as the last clone drops).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl From<SqlitePool> for State {
    fn from(pool: SqlitePool) -> Self {
        Self {
            inline: Inline::of(&pool),
            pool,
        }
    }
}

impl From<&SqlitePool> for State {
    fn from(pool: &SqlitePool) -> Self {
        Self::from(pool.clone())
    }
}
