//! `db::sweep::retention` on PostgreSQL: what is forgotten, a small batch per transaction.
//! History is append-only by its trigger unless the deleting transaction holds a
//! `history_retention` row; other transactions never see that uncommitted row, so only
//! retention's own statements get past.

use sqlx::{PgConnection, PgPool};

use crate::db::Retained;

/// Lets the caller's transaction, and only it, past history's append-only trigger.
async fn mark(tx: &mut PgConnection) -> sqlx::Result<()> {
    // `AS r`: SQLite's statement has the same words, and `.sqlx/` keeps one file per text.
    sqlx::query!("INSERT INTO history_retention AS r (running) VALUES (1)")
        .execute(tx)
        .await
        .map(drop)
}

/// Takes the mark away before commit: a committed row would let everyone delete history.
async fn unmark(tx: &mut PgConnection) -> sqlx::Result<()> {
    // `AS r`, as in `mark`.
    sqlx::query!("DELETE FROM history_retention AS r")
        .execute(tx)
        .await
        .map(drop)
}

pub async fn forget_batch(
    pool: &PgPool,
    what: Retained,
    cutoff: i64,
    batch: i64,
    keep_destroyed: i64,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    // `$1` the cutoff, `$2` the batch size, `$3` how many recently destroyed PRs to keep.
    let done = match what {
        Retained::History => {
            mark(&mut tx).await?;
            let done = sqlx::query!(
                "DELETE FROM history WHERE id IN (
                     SELECT h.id FROM history h
                     WHERE h.at < $1
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = h.repo AND p.number = h.number)
                       AND NOT EXISTS (SELECT 1 FROM history n WHERE n.repo = h.repo AND n.number = h.number AND n.at >= $1)
                       AND (h.repo, h.number) NOT IN (
                           SELECT repo, number FROM history WHERE what = 'destroyed' ORDER BY at DESC, id DESC LIMIT $3)
                     ORDER BY h.at LIMIT $2)",
                cutoff,
                batch,
                keep_destroyed
            )
            .execute(&mut *tx)
            .await?;
            unmark(&mut tx).await?;
            done
        }
        Retained::Commands => {
            sqlx::query!(
                "DELETE FROM commands WHERE id IN (
                     SELECT c.id FROM commands c
                     WHERE c.created_at < $1 AND c.status != 'pending'
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = c.repo AND p.number = c.number)
                     ORDER BY c.created_at LIMIT $2)",
                cutoff,
                batch
            )
            .execute(&mut *tx)
            .await?
        }
        Retained::Notices => {
            sqlx::query!(
                "DELETE FROM notices WHERE id IN (
                     SELECT n.id FROM notices n
                     WHERE n.created_at < $1
                       AND (n.posted_at IS NOT NULL
                            OR NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = n.repo AND p.number = n.number))
                     ORDER BY n.created_at LIMIT $2)",
                cutoff,
                batch
            )
            .execute(&mut *tx)
            .await?
        }
        Retained::Threads => {
            sqlx::query!(
                "DELETE FROM github_threads WHERE (repo, number) IN (
                     SELECT t.repo, t.number FROM github_threads t
                     WHERE t.updated_at < $1 AND t.final_pending = 0
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)
                     ORDER BY t.updated_at LIMIT $2)",
                cutoff,
                batch
            )
            .execute(&mut *tx)
            .await?
        }
        Retained::Deliveries => {
            sqlx::query!(
                "DELETE FROM deliveries WHERE (hook_id, guid) IN (
                     SELECT hook_id, guid FROM deliveries
                     WHERE received_at < $1 ORDER BY received_at LIMIT $2)",
                cutoff,
                batch
            )
            .execute(&mut *tx)
            .await?
        }
    };
    tx.commit().await?;
    Ok(done.rows_affected())
}

pub async fn over_cap(
    pool: &PgPool,
    since: i64,
    cap: i64,
    limit: i64,
) -> sqlx::Result<Vec<(String, i64)>> {
    let rows = sqlx::query!(
        "SELECT recent.repo, recent.number
         FROM (SELECT DISTINCT repo, number FROM history WHERE at >= $1) AS recent
         WHERE EXISTS (SELECT 1 FROM history AS h
                       WHERE h.repo = recent.repo AND h.number = recent.number LIMIT 1 OFFSET $2)
         LIMIT $3",
        since,
        cap,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.repo, r.number)).collect())
}

pub async fn cap_history(
    pool: &PgPool,
    repo: &str,
    number: i64,
    cap: i64,
    batch: i64,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    // The newest row past the cap: it and everything older go.
    let boundary = sqlx::query!(
        "SELECT at, id FROM history WHERE repo = $1 AND number = $2
         ORDER BY at DESC, id DESC LIMIT 1 OFFSET $3",
        repo,
        number,
        cap
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(boundary) = boundary else {
        return Ok(0);
    };
    mark(&mut tx).await?;
    let done = sqlx::query!(
        "DELETE FROM history WHERE id IN (
             SELECT id FROM history WHERE repo = $1 AND number = $2 AND (at, id) <= ($3, $4)
             ORDER BY at, id LIMIT $5)",
        repo,
        number,
        boundary.at,
        boundary.id,
        batch
    )
    .execute(&mut *tx)
    .await?;
    unmark(&mut tx).await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
