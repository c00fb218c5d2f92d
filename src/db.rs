//! The SQLite state: opening it durably, the migrations, and every query previewd runs.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite, SqliteConnection, SqlitePool};

use crate::intent::Outcome;
use crate::webhook::{CommandComment, InstallationChange};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

/// WAL so readers never block the writer; `synchronous=FULL` so a commit survives power
/// loss; foreign keys so teardown cascades; a busy timeout for a second process (a CLI).
fn options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(Duration::from_secs(5))
}

/// The state's instance id, read without creating, migrating or writing anything: for the
/// offline commands (`previewd render`), which must leave a running `serve`'s state as it
/// is (and read one a newer release migrated). `None` if the state has no id yet.
pub async fn read_instance_id(path: &Path) -> anyhow::Result<Option<String>> {
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
        .connect_with(options(path))
        .await
        .with_context(|| format!("opening state {}", path.display()))?;
    MIGRATOR
        .run(&pool)
        .await
        .with_context(|| format!("migrating state {}", path.display()))?;
    Ok(pool)
}

/// A dedicated connection for the single writer (see `intake`).
pub async fn writer_connection(path: &Path) -> anyhow::Result<SqliteConnection> {
    SqliteConnection::connect_with(&options(path))
        .await
        .with_context(|| format!("opening state {} for writing", path.display()))
}

/// Starts a transaction that writes, holding the write lock from its first statement.
///
/// A plain (deferred) `BEGIN` takes a read snapshot at its first read and must upgrade it at
/// its first write; when another connection holds the write lock then, or has committed
/// since the snapshot, SQLite answers SQLITE_BUSY (or SQLITE_BUSY_SNAPSHOT) at once: its
/// busy handler only runs for a transaction that holds no lock yet (sqlite3.c 3.46,
/// `sqlite3BtreeBeginTrans`: the retry loop requires `pBt->inTransaction==TRANS_NONE`).
/// `BEGIN IMMEDIATE` takes the write lock up front, so it waits the busy timeout instead.
pub async fn begin_write(pool: &SqlitePool) -> sqlx::Result<sqlx::Transaction<'static, Sqlite>> {
    pool.begin_with("BEGIN IMMEDIATE").await
}

/// [`begin_write`] on a connection of its own (the intake writer's, a test's).
pub async fn begin_write_on(
    conn: &mut SqliteConnection,
) -> sqlx::Result<sqlx::Transaction<'_, Sqlite>> {
    conn.begin_with("BEGIN IMMEDIATE").await
}

/// The database was busy past the busy timeout (SQLITE_BUSY, SQLITE_LOCKED and their
/// extended codes) or no pooled connection came free: a reason to try again shortly, never
/// a failure to record or to show on a pull request.
pub fn is_busy(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(e) => e
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            // Extended result codes keep the primary code in their low byte.
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        sqlx::Error::PoolTimedOut => true,
        _ => false,
    }
}

/// [`is_busy`] anywhere in an error's chain (for errors wrapped in context).
pub fn is_busy_error(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|e| e.downcast_ref::<sqlx::Error>().is_some_and(is_busy))
}

pub async fn ping(pool: &SqlitePool) -> sqlx::Result<()> {
    sqlx::query_scalar!("SELECT 1 AS one")
        .fetch_one(pool)
        .await
        .map(drop)
}

// ---- deliveries ----

pub async fn delivery_outcome(
    conn: &mut SqliteConnection,
    hook_id: &str,
    guid: &str,
) -> sqlx::Result<Option<Outcome>> {
    let outcome = sqlx::query_scalar!(
        "SELECT outcome FROM deliveries WHERE hook_id = ?1 AND guid = ?2",
        hook_id,
        guid
    )
    .fetch_optional(conn)
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

/// Records a delivery seen for the first time (or last seen failing); returns false, and
/// writes nothing, when it was already handled: the dedup check and the insert in one step.
pub async fn claim_delivery(
    conn: &mut SqliteConnection,
    row: &DeliveryRow<'_>,
) -> sqlx::Result<bool> {
    let outcome = row.outcome.as_str();
    let done = sqlx::query!(
        "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (hook_id, guid) DO UPDATE SET
             outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at
         WHERE deliveries.outcome = 'failed'",
        row.hook_id,
        row.guid,
        row.event,
        row.action,
        outcome,
        row.detail,
        row.received_at,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Records (or overwrites) a delivery's outcome.
pub async fn record_delivery(
    conn: &mut SqliteConnection,
    row: &DeliveryRow<'_>,
) -> sqlx::Result<()> {
    let outcome = row.outcome.as_str();
    sqlx::query!(
        "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (hook_id, guid) DO UPDATE SET
             outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at",
        row.hook_id,
        row.guid,
        row.event,
        row.action,
        outcome,
        row.detail,
        row.received_at,
    )
    .execute(conn)
    .await
    .map(drop)
}

// ---- history ----

pub struct HistoryRow<'a> {
    pub repo: &'a str,
    pub number: u32,
    pub what: &'a str,
    pub actor: &'a str,
    pub reason: &'a str,
    pub head_sha: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub at: i64,
}

pub async fn add_history(conn: &mut SqliteConnection, row: &HistoryRow<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO history (repo, number, what, actor, reason, head_sha, delivery, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        row.repo,
        row.number,
        row.what,
        row.actor,
        row.reason,
        row.head_sha,
        row.delivery,
        row.at,
    )
    .execute(conn)
    .await
    .map(drop)
}

// ---- previews ----

// ---- commands ----

/// Queues a command once per comment id; returns false for a comment already queued.
pub async fn queue_command(
    conn: &mut SqliteConnection,
    command: &CommandComment,
    now: i64,
) -> sqlx::Result<bool> {
    let repo = command.key.repo.as_str();
    let comment_id = command.comment_id as i64;
    let installation = command.installation_id.map(|id| id as i64);
    let done = sqlx::query!(
        "INSERT INTO commands (preview_id, repo, number, comment_id, actor, association, line, created_at, installation_id, commented_at)
         VALUES ((SELECT id FROM previews WHERE repo = ?1 AND number = ?2), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (comment_id) DO NOTHING",
        repo,
        command.key.number,
        comment_id,
        command.actor,
        command.association,
        command.line,
        now,
        installation,
        command.commented_at,
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

// ---- installations ----

pub async fn apply_installation(
    conn: &mut SqliteConnection,
    change: &InstallationChange,
    now: i64,
) -> sqlx::Result<()> {
    let (id, account, added, removed): (u64, Option<&str>, &[_], &[_]) = match change {
        InstallationChange::Present { id, account, repos } => {
            let id_i = *id as i64;
            // The event lists every repository the installation now serves.
            sqlx::query!(
                "DELETE FROM installation_repositories WHERE installation_id = ?1",
                id_i
            )
            .execute(&mut *conn)
            .await?;
            (*id, Some(account), repos, &[])
        }
        InstallationChange::Gone { id } => {
            let id_i = *id as i64;
            sqlx::query!("DELETE FROM installations WHERE id = ?1", id_i)
                .execute(&mut *conn)
                .await?;
            return Ok(());
        }
        InstallationChange::ReposAdded { id, account, repos } => (*id, Some(account), repos, &[]),
        InstallationChange::ReposRemoved { id, repos } => (*id, None, &[], repos),
    };
    let id = id as i64;
    sqlx::query!(
        "INSERT INTO installations (id, account, updated_at) VALUES (?1, COALESCE(?2, ''), ?3)
         ON CONFLICT (id) DO UPDATE SET account = COALESCE(?2, installations.account), updated_at = ?3",
        id,
        account,
        now,
    )
    .execute(&mut *conn)
    .await?;
    for repo in added {
        let repo = repo.as_str();
        sqlx::query!(
            "INSERT INTO installation_repositories (installation_id, repo) VALUES (?1, ?2)
             ON CONFLICT DO NOTHING",
            id,
            repo
        )
        .execute(&mut *conn)
        .await?;
    }
    for repo in removed {
        let repo = repo.as_str();
        sqlx::query!(
            "DELETE FROM installation_repositories WHERE installation_id = ?1 AND repo = ?2",
            id,
            repo
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

mod file;
mod gates;
mod github;
mod ledger;
mod pr_change;
mod previews;
mod sweep;
mod templates;
mod views;
pub use file::*;
pub use gates::*;
pub use github::*;
pub use ledger::*;
pub use pr_change::*;
pub use previews::*;
pub use sweep::*;
pub use templates::*;
pub use views::*;

#[cfg(test)]
mod tests {
    use sqlx::Executor;

    use super::*;

    #[tokio::test]
    async fn a_lock_held_past_the_busy_timeout_is_a_busy_error_even_in_context() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let pool = open(&path).await.unwrap();
        let mut holder = begin_write(&pool).await.unwrap();
        holder.execute("DELETE FROM leases").await.unwrap();
        let mut other = writer_connection(&path).await.unwrap();
        other.execute("PRAGMA busy_timeout = 0").await.unwrap();
        let busy = begin_write_on(&mut other).await.map(drop).unwrap_err();
        assert!(is_busy(&busy), "{busy:?}");
        let wrapped = anyhow::Error::from(busy).context("recording a teardown");
        assert!(is_busy_error(&wrapped));
        let refused = anyhow::Error::from(sqlx::Error::RowNotFound);
        assert!(!is_busy_error(&refused));
    }
}
