//! The sweeper's queries: what is due (by the expiry index, so the cost follows what is
//! due, not how many previews exist), each expiry and warning as its own conditional
//! transaction (so a crash in the middle never acts twice), the lease, notices, and the
//! orphans recorded for removal. Retention is `retention`.

use super::HistoryRow;
use super::{State, pg};
use crate::preview::{HistoryKind, InstallationId, RepoName};

/// A preview near or past its expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueRow {
    pub id: i64,
    pub repo: RepoName,
    pub number: u32,
    pub author: String,
    pub installation_id: Option<InstallationId>,
    pub expires_at: i64,
    pub keep: bool,
    pub warned_expires_at: Option<i64>,
}

impl DueRow {
    pub fn key(&self) -> crate::preview::PreviewKey {
        crate::preview::PreviewKey::new(self.repo.clone(), self.number)
    }
}

/// Previews one pass looks at, at most: a backlog (after an outage) is worked off over a
/// few passes, soonest first, instead of read whole into memory.
pub const DUE_PER_PASS: i64 = 2_000;

/// Live previews whose expiry is at or before `until`, soonest first, at most [`DUE_PER_PASS`].
/// A PR with no preview yet (`opted_out`) has nothing to warn of or expire: it is tracked
/// while it is open, and its close ends it.
pub async fn due_before(state: &State, until: i64) -> sqlx::Result<Vec<DueRow>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::due_before(pg, until).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        DueRow,
        r#"SELECT id AS "id!", repo AS "repo: RepoName", number AS "number: u32", author,
                  installation_id AS "installation_id: InstallationId", expires_at, keep AS "keep: bool",
                  warned_expires_at
           FROM previews INDEXED BY previews_by_expiry
           WHERE expires_at <= ?1 AND desired NOT IN ('absent', 'opted_out') ORDER BY expires_at, id LIMIT ?2"#,
        until,
        DUE_PER_PASS
    )
    .fetch_all(pool)
    .await
}

/// Records the expiry of each preview still live and still expired at `now`, in one
/// transaction (one fsync for the lot). Returns the ids recorded (another sweeper, or an
/// extend in between, makes the condition false for the rest).
pub async fn expire(state: &State, due: &[(i64, &str)], now: i64) -> sqlx::Result<Vec<i64>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::expire(pg, due, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let mut expired = Vec::new();
    for (id, reason) in due {
        if expire_one(&mut tx, *id, reason, now).await? {
            expired.push(*id);
        }
    }
    tx.commit().await?;
    Ok(expired)
}

async fn expire_one(
    tx: &mut sqlx::SqliteConnection,
    id: i64,
    reason: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE previews SET desired = 'absent', end_reason = 'expired', updated_at = ?2
         WHERE id = ?1 AND desired != 'absent' AND expires_at <= ?2",
        id,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    super::changes::touch_in(tx, id).await?;
    super::history::add_of(tx, id, HistoryKind::Expired, reason, now).await?;
    Ok(true)
}

/// Records the warning for the preview's current expiry (once), its history row and the
/// notice the reporter posts, in one transaction.
pub async fn warn(
    state: &State,
    row: &DueRow,
    reason: &str,
    notice: &str,
    now: i64,
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::warn(pg, row, reason, notice, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let done = sqlx::query!(
        "UPDATE previews SET warned_expires_at = expires_at
         WHERE id = ?1 AND expires_at = ?2 AND desired != 'absent'
           AND (warned_expires_at IS NULL OR warned_expires_at != expires_at)",
        row.id,
        row.expires_at
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    let history = HistoryRow::by_previewd(
        row.repo.as_str(),
        row.number,
        HistoryKind::ExpiryWarning,
        reason,
        now,
    );
    super::history::add(&mut tx, &history).await?;
    sqlx::query!(
        "INSERT INTO notices (repo, number, installation_id, kind, body, created_at) VALUES (?1, ?2, ?3, 'expiry_warning', ?4, ?5)",
        row.repo,
        row.number,
        row.installation_id,
        notice,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Takes (or renews) the lease `name` for `holder` until `until`, unless someone else holds
/// an unexpired one.
pub async fn take_lease(
    state: &State,
    name: &str,
    holder: &str,
    until: i64,
    now: i64,
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::take_lease(pg, name, holder, until, now).await;
    }
    let pool = state.pool();
    let done = sqlx::query!(
        "INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE leases.expires_at <= ?4 OR leases.holder = excluded.holder",
        name,
        holder,
        until,
        now
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn release_lease(state: &State, name: &str, holder: &str) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::release_lease(pg, name, holder).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
        name,
        holder
    )
    .execute(pool)
    .await
    .map(drop)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub id: i64,
    pub repo: String,
    pub number: i64,
    pub installation_id: Option<InstallationId>,
    pub body: String,
}

/// The oldest notices still owed, at most 100 (the rest wait for the next report).
pub async fn unposted_notices(state: &State) -> sqlx::Result<Vec<Notice>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::unposted_notices(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        Notice,
        r#"SELECT id AS "id!", repo, number, installation_id AS "installation_id: InstallationId", body
           FROM notices WHERE posted_at IS NULL ORDER BY id LIMIT 100"#
    )
    .fetch_all(pool)
    .await
}

pub async fn notice_posted(state: &State, id: i64, now: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::notice_posted(pg, id, now).await;
    }
    let pool = state.pool();
    sqlx::query!("UPDATE notices SET posted_at = ?2 WHERE id = ?1", id, now)
        .execute(pool)
        .await
        .map(drop)
}

/// Queued previews ahead of this one (its position in the queue is this plus one).
pub async fn queue_position(state: &State, id: i64) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::queue_position(pg, id).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "n!: i64" FROM previews
           WHERE cluster IS NULL AND desired = 'deployed'
             AND (created_at, id) < (SELECT created_at, id FROM previews WHERE id = ?1)"#,
        id
    )
    .fetch_one(pool)
    .await
}

/// Every preview's repository and number (the orphan check derives names from them).
pub async fn preview_keys(state: &State) -> sqlx::Result<Vec<(String, i64)>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::preview_keys(pg).await;
    }
    let pool = state.pool();
    let rows = sqlx::query!("SELECT repo, number FROM previews")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|r| (r.repo, r.number)).collect())
}

/// Every preview's key and recorded names (`Names::to_json`; None before names were recorded).
pub async fn preview_names(state: &State) -> sqlx::Result<Vec<(String, i64, Option<String>)>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::preview_names(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as("SELECT repo, number, names FROM previews")
        .fetch_all(pool)
        .await
}

/// Records `names` as orphans to remove (the reconciler deletes them), in one transaction;
/// returns how many were not recorded already.
pub async fn record_orphans(state: &State, names: &[String], now: i64) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::record_orphans(pg, names, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let mut recorded = 0;
    for name in names {
        let done = sqlx::query("INSERT OR IGNORE INTO orphans (name, found_at) VALUES (?1, ?2)")
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        recorded += done.rows_affected();
    }
    tx.commit().await?;
    Ok(recorded)
}

/// The orphans recorded for removal, oldest first.
pub async fn recorded_orphans(state: &State) -> sqlx::Result<Vec<String>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::recorded_orphans(pg).await;
    }
    let pool = state.pool();
    sqlx::query_scalar("SELECT name FROM orphans ORDER BY found_at, name")
        .fetch_all(pool)
        .await
}

/// `name` is dealt with (deleted, or spared): no longer to remove.
pub async fn forget_orphan(state: &State, name: &str) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::forget_orphan(pg, name).await;
    }
    let pool = state.pool();
    sqlx::query("DELETE FROM orphans WHERE name = ?1")
        .bind(name)
        .execute(pool)
        .await
        .map(drop)
}

/// This state's identity (made once, at first use): the label that tells its Applications
/// from another previewd's.
pub async fn instance_id(state: &State) -> sqlx::Result<String> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::instance_id(pg).await;
    }
    let pool = state.pool();
    let fresh = format!("{:016x}", rand::random::<u64>());
    sqlx::query!(
        "INSERT INTO instance (id) SELECT ?1 WHERE NOT EXISTS (SELECT 1 FROM instance)",
        fresh
    )
    .execute(pool)
    .await?;
    sqlx::query_scalar!("SELECT id FROM instance ORDER BY rowid LIMIT 1")
        .fetch_one(pool)
        .await
}

mod retention;
pub use retention::*;
