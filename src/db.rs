//! The SQLite state: opening it durably, the migrations, and every query previewd runs.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Postgres, Sqlite, SqlitePool};

use crate::intent::Outcome;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// The state's instance id, read without creating, migrating or writing anything: for the
/// offline commands (`previewd render`), which must leave a running `serve`'s state as it
/// is (and read one a newer release migrated). `None` if the state has no id yet.
pub async fn read_instance_id(store: &crate::config::Store) -> anyhow::Result<Option<String>> {
    let Some(path) = store.file() else {
        return pg::read_instance_id(store).await;
    };
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = sqlx::ConnectOptions::connect(&options)
        .await
        .with_context(|| format!("opening state {} read-only", path.display()))?;
    let has_table: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'instance')",
    )
    .fetch_one(&mut conn)
    .await?;
    if !has_table {
        return Ok(None);
    }
    sqlx::query_scalar("SELECT id FROM instance ORDER BY rowid LIMIT 1")
        .fetch_optional(&mut conn)
        .await
        .with_context(|| format!("reading the instance id of {}", path.display()))
}

/// Opens (creating and migrating) the state; the pool is for readers and short writes.
pub async fn open(path: &Path) -> anyhow::Result<SqlitePool> {
    make_state_private(path)?;
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        // An in-process database has no connection to lose; sqlx's check before handing one
        // out is a round trip to its thread: one more hop for every query (issue #17).
        .test_before_acquire(false)
        .connect_with(connection::options(path))
        .await
        .with_context(|| format!("opening state {}", path.display()))?;
    MIGRATOR
        .run(&pool)
        .await
        .with_context(|| format!("migrating state {}", path.display()))?;
    Ok(pool)
}

/// Starts a transaction that writes, holding the write lock from its first statement.
///
/// A plain (deferred) `BEGIN` takes a read snapshot at its first read and must upgrade it at
/// its first write; when another connection holds the write lock then, or has committed
/// since the snapshot, SQLite answers SQLITE_BUSY (or SQLITE_BUSY_SNAPSHOT) at once: its
/// busy handler only runs for a transaction that holds no lock yet (sqlite3.c 3.46,
/// `sqlite3BtreeBeginTrans`: the retry loop requires `pBt->inTransaction==TRANS_NONE`).
/// `BEGIN IMMEDIATE` takes the write lock up front, so it waits the busy timeout instead.
/// SQLite only: every caller asks `State::postgres` first ([`begin`] is for either store).
pub async fn begin_write(state: &State) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
    let pool = state.pool();
    pool.begin_with("BEGIN IMMEDIATE").await
}

/// A write transaction on either store, for callers outside `db` that hold one across
/// several of its functions (a command's effects, shares and outcome commit together).
pub enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Tx {
    /// Commits; dropping a `Tx` instead rolls it back.
    pub async fn commit(self) -> sqlx::Result<()> {
        match self {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
        }
    }
}

/// Starts a write transaction on `state`'s store: on SQLite as [`begin_write`] (the write
/// lock up front); on PostgreSQL a plain one, whose row locks order concurrent writers.
pub async fn begin(state: &State) -> sqlx::Result<Tx> {
    if let Some(pg) = state.postgres() {
        let mut tx = pg.begin().await?;
        // A command's effects stamp the preview: the counter before its row (`lock_first`).
        pg::changes::lock_first(&mut tx).await?;
        return Ok(Tx::Postgres(tx));
    }
    Ok(Tx::Sqlite(begin_write(state).await?))
}

pub async fn ping(state: &State) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return sqlx::query("SELECT 1").execute(pg).await.map(drop);
    }
    let pool = state.pool();
    sqlx::query_scalar!("SELECT 1 AS one")
        .fetch_one(pool)
        .await
        .map(drop)
}

// ---- deliveries ----

/// The outcome recorded for a delivery, if any (the intake reads it on its writer's
/// connection, `db::writer`; this is for everything else).
pub async fn delivery_outcome(
    state: &State,
    hook_id: &str,
    guid: &str,
) -> sqlx::Result<Option<Outcome>> {
    if let Some(pg) = state.postgres() {
        let mut conn = pg.acquire().await?;
        return pg::write::delivery_outcome(&mut conn, hook_id, guid).await;
    }
    let outcome = sqlx::query_scalar!(
        "SELECT outcome FROM deliveries WHERE hook_id = ?1 AND guid = ?2",
        hook_id,
        guid
    )
    .fetch_optional(state.pool())
    .await?;
    Ok(outcome.as_deref().and_then(Outcome::parse))
}

pub struct DeliveryRow<'a> {
    pub hook_id: &'a str,
    pub guid: &'a str,
    pub event: &'a str,
    pub action: Option<&'a str>,
    pub outcome: Outcome,
    pub detail: &'a str,
    pub received_at: i64,
}

mod certs;
pub mod changes;
mod connection;
mod effects;
mod file;
mod gates;
mod github;
pub mod history;
mod inline;
mod ledger;
mod lock;
pub mod login;
pub mod pg;
mod placement;
mod previews;
mod secrets;
pub mod sleep;
mod state;
mod sweep;
mod templates;
mod views;
pub mod write;
pub mod writer;
pub use certs::{Rotation, record_sealing_cert};
pub use connection::{is_busy, is_busy_error};
pub use effects::*;
pub use file::*;
pub use gates::*;
pub use github::*;
pub use history::HistoryRow;
pub use inline::Inline;
pub use ledger::*;
pub use lock::WriteLock;
pub use placement::*;
pub use previews::*;
pub use secrets::*;
pub use state::State;
pub use sweep::*;
pub use templates::*;
pub use views::*;

#[cfg(test)]
mod tests {
    use sqlx::{Connection, Executor};

    use super::*;
    use crate::preview::EndReason;

    #[tokio::test]
    async fn a_lock_held_past_the_busy_timeout_is_a_busy_error_even_in_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let pool = open(&path).await.unwrap();
        let mut holder = begin_write(&State::from(&pool)).await.unwrap();
        holder.execute("DELETE FROM leases").await.unwrap();
        let mut other = sqlx::SqliteConnection::connect_with(
            &connection::options(&path).busy_timeout(Duration::ZERO),
        )
        .await
        .unwrap();
        let busy = other
            .execute("BEGIN IMMEDIATE")
            .await
            .map(drop)
            .unwrap_err();
        assert!(is_busy(&busy), "{busy:?}");
        let wrapped = anyhow::Error::from(busy).context("recording a teardown");
        assert!(is_busy_error(&wrapped));
        let refused = anyhow::Error::from(sqlx::Error::RowNotFound);
        assert!(!is_busy_error(&refused));
    }

    #[tokio::test]
    async fn owed_says_which_of_commands_finals_and_notices_wait() {
        let dir = tempfile::tempdir().unwrap();
        let pool = open(&dir.path().join("state.db")).await.unwrap();
        let nothing = Owed {
            commands: false,
            finals: false,
            notices: false,
        };
        assert_eq!(owed(&State::from(&pool)).await.unwrap(), nothing);
        let run = |sql: &'static str| {
            let pool = pool.clone();
            async move { pool.execute(sql).await.unwrap() }
        };
        // A command run and answered, a notice posted, a thread whose final is posted or
        // whose preview lives: nothing owed.
        run("INSERT INTO commands (repo, number, comment_id, actor, association, line, status, created_at, answered)
             VALUES ('acme/api', 1, 1, 'dev', 'OWNER', '/preview keep', 'done', 0, 1)").await;
        run(
            "INSERT INTO notices (repo, number, kind, body, created_at, posted_at)
             VALUES ('acme/api', 1, 'expiry_warning', 'soon', 0, 0)",
        )
        .await;
        run("INSERT INTO github_threads (repo, number, final_pending, updated_at) VALUES ('acme/api', 1, 0, 0)").await;
        assert_eq!(owed(&State::from(&pool)).await.unwrap(), nothing);
        run("INSERT INTO commands (repo, number, comment_id, actor, association, line, status, created_at, answered)
             VALUES ('acme/api', 1, 2, 'dev', 'OWNER', '/preview keep', 'done', 0, 0)").await;
        assert_eq!(
            owed(&State::from(&pool)).await.unwrap(),
            Owed {
                commands: true,
                ..nothing
            },
            "an answer to post"
        );
        run("UPDATE commands SET answered = 1").await;
        run(
            "INSERT INTO commands (repo, number, comment_id, actor, association, line, created_at)
             VALUES ('acme/api', 1, 3, 'dev', 'OWNER', '/preview keep', 0)",
        )
        .await;
        assert_eq!(
            owed(&State::from(&pool)).await.unwrap(),
            Owed {
                commands: true,
                ..nothing
            },
            "a command to run"
        );
        run("DELETE FROM commands").await;
        run("UPDATE github_threads SET final_pending = 1").await;
        assert_eq!(
            owed(&State::from(&pool)).await.unwrap(),
            Owed {
                finals: true,
                ..nothing
            }
        );
        run("UPDATE github_threads SET given_up = 0").await;
        run("INSERT INTO notices (repo, number, kind, body, created_at) VALUES ('acme/api', 1, 'expiry_warning', 'soon', 0)").await;
        assert_eq!(
            owed(&State::from(&pool)).await.unwrap(),
            Owed {
                notices: true,
                ..nothing
            },
            "a given-up final is not owed"
        );
    }

    /// The feedback worker read the thread, the preview ended (and its row went) while the
    /// worker's report was on its way to GitHub, and then the worker saved what it posted.
    #[tokio::test]
    async fn a_report_saved_after_the_preview_ended_keeps_the_destroyed_report_owed() {
        let dir = tempfile::tempdir().unwrap();
        let pool = open(&dir.path().join("state.db")).await.unwrap();
        pool.execute(
            "INSERT INTO previews (id, repo, number, repo_id, author, head_sha, head_ref, base_ref, fork, draft,
                                   desired, pr_updated_at, created_at, updated_at, expires_at)
             VALUES (7, 'acme/api', 1, 1, 'a', 'abc', 'h', 'main', 0, 0, 'absent', 1, 1, 1, 9)",
        )
        .await
        .unwrap();
        let read = Thread {
            repo: "acme/api".into(),
            number: 1,
            ..Thread::default()
        };
        save_thread(&State::from(&pool), &read, 1).await.unwrap();
        assert!(
            forget_preview(&State::from(&pool), 7, "closed", 10)
                .await
                .unwrap()
        );
        let posted = Thread {
            head_sha: Some("abc".into()),
            body_hash: Some("tearing down".into()),
            ..read
        };
        save_thread(&State::from(&pool), &posted, 11).await.unwrap();
        assert!(
            owed(&State::from(&pool)).await.unwrap().finals,
            "the destroyed report is still owed"
        );
        let saved = thread(&State::from(&pool), "acme/api", 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            saved.body_hash.as_deref(),
            Some("tearing down"),
            "what was posted is kept"
        );
        // Said: not owed any more; a final posted for another ending clears nothing.
        final_posted(
            &State::from(&pool),
            "acme/api",
            1,
            Some(EndReason::Merged),
            12,
        )
        .await
        .unwrap();
        assert!(owed(&State::from(&pool)).await.unwrap().finals);
        final_posted(&State::from(&pool), "acme/api", 1, saved.end_reason, 12)
            .await
            .unwrap();
        assert!(!owed(&State::from(&pool)).await.unwrap().finals);
    }
}
