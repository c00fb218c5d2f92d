//! The one handle to the state. Every query in `db` takes it and picks what runs its
//! statement: on SQLite, sqlx's pool for what awaits (writes that wait their turn, reads
//! beside them) and rusqlite inline for the short statements of a look (`inline.rs` says
//! why); on PostgreSQL, sqlx's pool for everything (`db::pg`). Callers never choose.

use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{PgPool, SqlitePool};

use super::Inline;
use crate::config::Store;

/// Connections to a PostgreSQL state, per replica: the intake's group commit needs one, the
/// reconciler's looks a few, the HTTP reads the rest. Bounded, as every connection is.
const PG_CONNECTIONS: u32 = 12;
/// How long a statement waits for a connection before it is a busy error to retry.
const PG_ACQUIRE: Duration = Duration::from_secs(5);

pub static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

/// An open, migrated state. Clones share its connections.
#[derive(Clone)]
pub struct State {
    store: Kind,
}

#[derive(Clone)]
enum Kind {
    Sqlite { pool: SqlitePool, inline: Inline },
    Postgres(PgPool),
}

impl State {
    /// Opens (creating and migrating) the state `store` names.
    pub async fn open(store: &Store) -> anyhow::Result<Self> {
        match store {
            Store::Sqlite(path) => Ok(Self::from(super::open(path).await?)),
            Store::Postgres(_) => {
                let pool = open_postgres(store).await?;
                Ok(Self {
                    store: Kind::Postgres(pool),
                })
            }
        }
    }

    /// sqlx's SQLite pool, for the statements that await (and for tests that look at the
    /// state with SQL of their own). Every function of `db` asks [`State::postgres`] first:
    /// reaching here with a PostgreSQL state is a function not taught PostgreSQL, a bug.
    pub fn pool(&self) -> &SqlitePool {
        match &self.store {
            Kind::Sqlite { pool, .. } => pool,
            Kind::Postgres(_) => panic!("an SQLite statement was run on a PostgreSQL state"),
        }
    }

    /// The PostgreSQL pool, when that is the store.
    pub fn postgres(&self) -> Option<&PgPool> {
        match &self.store {
            Kind::Postgres(pool) => Some(pool),
            Kind::Sqlite { .. } => None,
        }
    }

    /// Whether several replicas may share this state.
    pub fn is_shared(&self) -> bool {
        self.postgres().is_some()
    }

    /// The rusqlite connections, for the statements run where they are asked for.
    pub(crate) fn inline(&self) -> &Inline {
        match &self.store {
            Kind::Sqlite { inline, .. } => inline,
            Kind::Postgres(_) => panic!("an SQLite statement was run on a PostgreSQL state"),
        }
    }

    /// Write transactions committed inline so far (each an fsync); none on PostgreSQL.
    pub fn inline_commits(&self) -> u64 {
        match &self.store {
            Kind::Sqlite { inline, .. } => inline.commits(),
            Kind::Postgres(_) => 0,
        }
    }

    /// The same state on connections of its own (a look's inline statements apart from
    /// another's); on PostgreSQL the one pool is shared.
    pub fn apart(&self) -> Self {
        match &self.store {
            Kind::Sqlite { pool, .. } => Self::from(pool),
            Kind::Postgres(_) => self.clone(),
        }
    }

    /// Closes the pool's connections (the inline ones close as the last clone drops).
    pub async fn close(&self) {
        match &self.store {
            Kind::Sqlite { pool, .. } => pool.close().await,
            Kind::Postgres(pool) => pool.close().await,
        }
    }
}

/// Connects to and migrates a PostgreSQL state. sqlx's migrator holds an advisory lock
/// while it runs, so replicas starting together migrate once.
async fn open_postgres(store: &Store) -> anyhow::Result<PgPool> {
    let url = store.url().expect("a PostgreSQL store has a URL");
    let options: PgConnectOptions = url
        .parse()
        .with_context(|| format!("reading state {store}"))?;
    let pool = PgPoolOptions::new()
        .max_connections(PG_CONNECTIONS)
        .acquire_timeout(PG_ACQUIRE)
        .connect_with(options.application_name("previewd"))
        .await
        .with_context(|| format!("connecting to state {store}"))?;
    PG_MIGRATOR
        .run(&pool)
        .await
        .with_context(|| format!("migrating state {store}"))?;
    Ok(pool)
}

impl From<SqlitePool> for State {
    fn from(pool: SqlitePool) -> Self {
        Self {
            store: Kind::Sqlite {
                inline: Inline::of(&pool),
                pool,
            },
        }
    }
}

impl From<&SqlitePool> for State {
    fn from(pool: &SqlitePool) -> Self {
        Self::from(pool.clone())
    }
}

impl From<PgPool> for State {
    fn from(pool: PgPool) -> Self {
        Self {
            store: Kind::Postgres(pool),
        }
    }
}
