//! `db::sweep` on PostgreSQL: what is due, each expiry and warning as its own conditional
//! transaction, the lease, notices, orphans and the state's instance id. Retention is
//! `retention`.

use sqlx::{PgConnection, PgPool};

use crate::db::{DUE_PER_PASS, DueRow, HistoryRow, Notice};
use crate::preview::{HistoryKind, InstallationId};

pub async fn due_before(pool: &PgPool, until: i64) -> sqlx::Result<Vec<DueRow>> {
    let rows = sqlx::query!(
        "SELECT id, repo, number, author, installation_id, expires_at, keep, warned_expires_at
         FROM previews
         WHERE expires_at <= $1 AND desired NOT IN ('absent', 'opted_out')
         ORDER BY expires_at, id LIMIT $2",
        until,
        DUE_PER_PASS
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(DueRow {
                id: r.id,
                repo: r
                    .repo
                    .parse()
                    .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                number: u32::try_from(r.number).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
                author: r.author,
                installation_id: r.installation_id.map(InstallationId),
                expires_at: r.expires_at,
                keep: r.keep != 0,
                warned_expires_at: r.warned_expires_at,
            })
        })
        .collect()
}

pub async fn expire(pool: &PgPool, due: &[(i64, &str)], now: i64) -> sqlx::Result<Vec<i64>> {
    let mut tx = pool.begin().await?;
    super::changes::lock_first(&mut tx).await?;
    let mut expired = Vec::new();
    for (id, reason) in due {
        if expire_one(&mut tx, *id, reason, now).await? {
            expired.push(*id);
        }
    }
    tx.commit().await?;
    Ok(expired)
}

async fn expire_one(tx: &mut PgConnection, id: i64, reason: &str, now: i64) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE previews SET desired = 'absent', end_reason = 'expired', updated_at = $2
         WHERE id = $1 AND desired != 'absent' AND expires_at <= $2",
        id,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    super::changes::touch(tx, id).await?;
    super::history::add_of(tx, id, HistoryKind::Expired, reason, now).await?;
    Ok(true)
}

pub async fn warn(
    pool: &PgPool,
    row: &DueRow,
    reason: &str,
    notice: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query!(
        "UPDATE previews SET warned_expires_at = expires_at
         WHERE id = $1 AND expires_at = $2 AND desired != 'absent'
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
        "INSERT INTO notices (repo, number, installation_id, kind, body, created_at)
         VALUES ($1, $2, $3, 'expiry_warning', $4, $5)",
        row.repo.as_str(),
        i64::from(row.number),
        row.installation_id.map(|i| i.0),
        notice,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// One statement: replicas racing for the lease serialize on its row, and exactly one
/// insert or update wins.
pub async fn take_lease(
    pool: &PgPool,
    name: &str,
    holder: &str,
    until: i64,
    now: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
         WHERE leases.expires_at <= $4 OR leases.holder = excluded.holder",
        name,
        holder,
        until,
        now
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn release_lease(pool: &PgPool, name: &str, holder: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM leases WHERE name = $1 AND holder = $2",
        name,
        holder
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn unposted_notices(pool: &PgPool) -> sqlx::Result<Vec<Notice>> {
    let rows = sqlx::query!(
        "SELECT id, repo, number, installation_id, body
         FROM notices WHERE posted_at IS NULL ORDER BY id LIMIT 100"
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Notice {
            id: r.id,
            repo: r.repo,
            number: r.number,
            installation_id: r.installation_id.map(InstallationId),
            body: r.body,
        })
        .collect())
}

pub async fn notice_posted(pool: &PgPool, id: i64, now: i64) -> sqlx::Result<()> {
    sqlx::query!("UPDATE notices SET posted_at = $2 WHERE id = $1", id, now)
        .execute(pool)
        .await
        .map(drop)
}

pub async fn queue_position(pool: &PgPool, id: i64) -> sqlx::Result<i64> {
    // COUNT(*) is never NULL.
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "ahead!" FROM previews
         WHERE cluster IS NULL AND desired = 'deployed'
           AND (created_at, id) < (SELECT created_at, id FROM previews WHERE id = $1)"#,
        id
    )
    .fetch_one(pool)
    .await
}

pub async fn preview_keys(pool: &PgPool) -> sqlx::Result<Vec<(String, i64)>> {
    // `AS p`: SQLite's statement has the same words, and `.sqlx/` keeps one file per text.
    let rows = sqlx::query!("SELECT repo, number FROM previews AS p")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|r| (r.repo, r.number)).collect())
}

pub async fn preview_names(pool: &PgPool) -> sqlx::Result<Vec<(String, i64, Option<String>)>> {
    // `AS p`, as in `preview_keys`.
    let rows = sqlx::query!("SELECT repo, number, names FROM previews AS p")
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.repo, r.number, r.names))
        .collect())
}

pub async fn record_orphans(pool: &PgPool, names: &[String], now: i64) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let mut recorded = 0;
    for name in names {
        let done = sqlx::query!(
            "INSERT INTO orphans (name, found_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            name,
            now
        )
        .execute(&mut *tx)
        .await?;
        recorded += done.rows_affected();
    }
    tx.commit().await?;
    Ok(recorded)
}

pub async fn recorded_orphans(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    // `AS o`, as in `preview_keys`.
    sqlx::query_scalar!("SELECT name FROM orphans AS o ORDER BY found_at, name")
        .fetch_all(pool)
        .await
}

pub async fn forget_orphan(pool: &PgPool, name: &str) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM orphans WHERE name = $1", name)
        .execute(pool)
        .await
        .map(drop)
}

/// The state's identity. Replicas starting together each offer an id; the one-row table's
/// primary key keeps the first committed and the others' inserts do nothing, so every
/// replica reads the same one.
pub async fn instance_id(pool: &PgPool) -> sqlx::Result<String> {
    let fresh = format!("{:016x}", rand::random::<u64>());
    sqlx::query!(
        "INSERT INTO instance (id) VALUES ($1) ON CONFLICT DO NOTHING",
        fresh
    )
    .execute(pool)
    .await?;
    sqlx::query_scalar!("SELECT id FROM instance")
        .fetch_one(pool)
        .await
}

pub mod retention;
