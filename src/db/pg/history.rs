//! `db::history` on PostgreSQL: the rows that outlive their preview.

use sqlx::PgConnection;

use crate::db::HistoryRow;
use crate::db::history::PREVIEWD;
use crate::preview::HistoryKind;

/// `row`, in the caller's transaction.
pub async fn add(conn: &mut PgConnection, row: &HistoryRow<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO history (repo, number, what, actor, reason, head_sha, delivery, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        row.repo,
        i64::from(row.number),
        row.what.as_str(),
        row.actor,
        row.reason,
        row.head_sha,
        row.delivery,
        row.at
    )
    .execute(conn)
    .await
    .map(drop)
}

/// A row by previewd about the preview with row `id` (nothing if the row is gone).
pub async fn add_of(
    conn: &mut PgConnection,
    id: i64,
    what: HistoryKind,
    reason: &str,
    at: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO history (repo, number, what, actor, reason, at)
         SELECT repo, number, $2, $3, $4, $5 FROM previews WHERE id = $1",
        id,
        what.as_str(),
        PREVIEWD,
        reason,
        at
    )
    .execute(conn)
    .await
    .map(drop)
}

/// A row by previewd for each live preview on `cluster` that holds sealed values, in the
/// caller's transaction; returns how many.
pub async fn add_for_sealed_on(
    conn: &mut PgConnection,
    cluster: &str,
    what: HistoryKind,
    reason: &str,
    at: i64,
) -> sqlx::Result<u64> {
    sqlx::query!(
        "INSERT INTO history (repo, number, what, actor, reason, at)
         SELECT p.repo, p.number, $2, $3, $4, $5 FROM previews p
         WHERE p.cluster = $1 AND p.desired != 'absent'
           AND EXISTS (SELECT 1 FROM sealed_secrets s WHERE s.preview_id = p.id)",
        cluster,
        what.as_str(),
        PREVIEWD,
        reason,
        at
    )
    .execute(conn)
    .await
    .map(|done| done.rows_affected())
}
