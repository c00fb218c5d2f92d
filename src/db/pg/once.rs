//! Values used once, shared by every replica: a hand-off code or sign-in state opens once
//! wherever it is presented.

use sqlx::PgPool;

/// Used values kept at most (each expires within minutes; a flood is refused, not
/// forgotten: a forgotten used value would open again).
const MAX_KEPT: i64 = 100_000;

/// Marks `nonce` (good until `until`) used; false when it already was, or when the table is
/// full of unexpired values.
pub async fn take(pool: &PgPool, nonce: &str, until: i64, now: i64) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    sqlx::query!("DELETE FROM used_once WHERE until <= $1", now)
        .execute(&mut *tx)
        .await?;
    let kept = sqlx::query_scalar!(r#"SELECT COUNT(*) AS "kept!" FROM used_once"#)
        .fetch_one(&mut *tx)
        .await?;
    if kept >= MAX_KEPT {
        return Ok(false);
    }
    let taken = sqlx::query!(
        "INSERT INTO used_once (nonce, until) VALUES ($1, $2) ON CONFLICT (nonce) DO NOTHING",
        nonce,
        until
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    tx.commit().await?;
    Ok(taken)
}
