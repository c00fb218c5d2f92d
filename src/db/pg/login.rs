//! `db::login` on PostgreSQL: a preview found by its host, and share links.

use sqlx::{PgConnection, PgPool};

use super::word_of;
use crate::db::HistoryRow;
use crate::db::login::{HostPreview, MAX_SHARES, Share, Shareable, new_share_id};
use crate::preview::{HistoryKind, InstallationId, PreviewKey};

/// The preview whose recorded host is `host` (by `previews_by_host`'s expression).
pub async fn preview_by_host(pool: &PgPool, host: &str) -> anyhow::Result<Option<HostPreview>> {
    let row = sqlx::query!(
        "SELECT id, repo, number, installation_id, desired, observed, sleeping_since, woke_at,
                last_used_at
         FROM previews WHERE (names::jsonb ->> 'host') = $1",
        host
    )
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    Ok(Some(HostPreview {
        id: row.id,
        key: PreviewKey::new(row.repo.parse()?, u32::try_from(row.number)?),
        installation: row.installation_id.map(InstallationId),
        live: row.desired != "absent",
        observed: word_of(&row.observed)?,
        sleeping_since: row.sleeping_since,
        woke_at: row.woke_at,
        last_used_at: row.last_used_at,
    }))
}

pub async fn create_share(
    pool: &PgPool,
    preview_id: i64,
    by: &str,
    now: i64,
    expires_at: i64,
) -> anyhow::Result<Option<Share>> {
    let mut conn = pool.acquire().await?;
    create_share_in(&mut conn, preview_id, by, now, expires_at).await
}

/// A share, unless the preview has [`MAX_SHARES`] valid ones. Two replicas counting at once
/// could each see room for one more: the preview's row is locked first, so they count in
/// turn (SQLite's one writer does the same).
pub async fn create_share_in(
    conn: &mut PgConnection,
    preview_id: i64,
    by: &str,
    now: i64,
    expires_at: i64,
) -> anyhow::Result<Option<Share>> {
    let id = new_share_id()?;
    // The row is read only for its lock (a query with columns has no `execute`).
    sqlx::query_scalar!(
        "SELECT 1 AS locked FROM previews WHERE id = $1 FOR UPDATE",
        preview_id
    )
    .fetch_optional(&mut *conn)
    .await?;
    let inserted = sqlx::query!(
        "INSERT INTO shares (id, preview_id, created_by, created_at, expires_at) \
         SELECT $1, $2, $3, $4, $5 WHERE (SELECT count(*) FROM shares WHERE preview_id = $2 \
         AND revoked_at IS NULL AND expires_at > $4) < $6",
        &id,
        preview_id,
        by,
        now,
        expires_at,
        MAX_SHARES
    )
    .execute(&mut *conn)
    .await?;
    Ok((inserted.rows_affected() == 1).then(|| Share {
        id,
        preview_id,
        created_by: by.to_owned(),
        created_at: now,
        expires_at,
        revoked_at: None,
    }))
}

pub async fn revoke_shares(pool: &PgPool, preview_id: i64, now: i64) -> anyhow::Result<u64> {
    let mut conn = pool.acquire().await?;
    revoke_shares_in(&mut conn, preview_id, now).await
}

pub async fn revoke_shares_in(
    conn: &mut PgConnection,
    preview_id: i64,
    now: i64,
) -> anyhow::Result<u64> {
    let done = sqlx::query!(
        "UPDATE shares SET revoked_at = $2 WHERE preview_id = $1 AND revoked_at IS NULL \
         AND expires_at > $2",
        preview_id,
        now
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

pub async fn shareable(
    pool: &PgPool,
    repo: &str,
    number: u32,
) -> anyhow::Result<Option<Shareable>> {
    let row = sqlx::query!(
        "SELECT id, desired, expires_at, (names::jsonb ->> 'host') AS host FROM previews \
         WHERE repo = $1 AND number = $2",
        repo,
        i64::from(number)
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| Shareable {
        id: row.id,
        live: row.desired != "absent",
        expires_at: row.expires_at,
        host: row.host,
    }))
}

/// `db::login::share_by`: the share and its history row in one transaction.
pub async fn share_by(
    pool: &PgPool,
    key: &PreviewKey,
    preview_id: i64,
    actor: &str,
    now: i64,
    expires_at: i64,
    reason: &str,
) -> anyhow::Result<Option<Share>> {
    let mut tx = pool.begin().await?;
    let Some(share) = create_share_in(&mut tx, preview_id, actor, now, expires_at).await? else {
        return Ok(None);
    };
    let history = HistoryRow {
        actor,
        ..HistoryRow::by_previewd(
            key.repo.as_str(),
            key.number,
            HistoryKind::Shared,
            reason,
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    tx.commit().await?;
    Ok(Some(share))
}

/// `db::login::unshare_by`: the revocation and, when any share was valid, its history row.
pub async fn unshare_by(
    pool: &PgPool,
    key: &PreviewKey,
    preview_id: i64,
    actor: &str,
    now: i64,
) -> anyhow::Result<u64> {
    let mut tx = pool.begin().await?;
    let revoked = revoke_shares_in(&mut tx, preview_id, now).await?;
    if revoked > 0 {
        let reason = format!("{revoked} share link(s) revoked");
        let history = HistoryRow {
            actor,
            ..HistoryRow::by_previewd(
                key.repo.as_str(),
                key.number,
                HistoryKind::Unshared,
                &reason,
                now,
            )
        };
        super::history::add(&mut tx, &history).await?;
    }
    tx.commit().await?;
    Ok(revoked)
}

pub async fn share(pool: &PgPool, id: &str) -> anyhow::Result<Option<Share>> {
    Ok(sqlx::query_as!(
        Share,
        "SELECT id, preview_id, created_by, created_at, expires_at, revoked_at FROM shares \
         WHERE id = $1",
        id
    )
    .fetch_optional(pool)
    .await?)
}

pub async fn valid_shares(pool: &PgPool, preview_id: i64, now: i64) -> anyhow::Result<Vec<Share>> {
    Ok(sqlx::query_as!(
        Share,
        "SELECT id, preview_id, created_by, created_at, expires_at, revoked_at FROM shares \
         WHERE preview_id = $1 AND revoked_at IS NULL AND expires_at > $2 \
         ORDER BY created_at DESC, id",
        preview_id,
        now
    )
    .fetch_all(pool)
    .await?)
}
