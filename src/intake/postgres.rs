//! The intake's writer on PostgreSQL: each batch is one transaction on a pooled connection,
//! awaited; the statements are `db::writer::Statements`, as on SQLite.

use std::sync::Arc;

use sqlx::PgPool;
use tokio::sync::mpsc;

use super::{
    IntakeError, Job, MAX_BATCH, Recorded, answer, delivery_row, next_batch, record_one, tell,
};
use crate::clock::Clock;
use crate::db::writer::{self as db, Statements};
use crate::intent::Outcome;
use crate::work::Work;

/// The writer on PostgreSQL: a batch is one transaction, committed before any of its
/// deliveries is answered (group commit, as on SQLite: one WAL flush a batch).
pub(super) async fn write_batches(
    pool: PgPool,
    mut queue: mpsc::Receiver<Job>,
    clock: Arc<dyn Clock>,
    work: Work,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while next_batch(&mut queue, &mut batch).await {
        let now = clock.now();
        let results = match commit(&pool, &batch, now).await {
            Ok(results) => results,
            Err(e) => {
                tracing::error!(error = %e, deliveries = batch.len(), "commit failed; deliveries answered 503");
                batch
                    .iter()
                    .map(|_| Err(IntakeError::Write(e.to_string())))
                    .collect()
            }
        };
        match pool.acquire().await {
            Ok(mut conn) => tell(&mut *conn, &work, &batch, &results).await,
            Err(e) => tracing::warn!(error = %e, "finding the previews a batch moved failed"),
        }
        answer(&mut batch, results);
    }
}

/// `intake::commit` on PostgreSQL: the batch in one transaction; if a delivery fails, again with a
/// savepoint around each, so that one fails alone (recorded as failed).
async fn commit(
    pool: &PgPool,
    batch: &[Job],
    now: i64,
) -> db::Result<Vec<Result<Recorded, IntakeError>>> {
    let mut tx = pool.begin().await?;
    // The change counter before any preview row, as every writer that stamps one takes them.
    crate::db::pg::changes::lock_first(&mut tx).await?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        match record_one(&mut *tx, &job.delivery, &job.intent, now).await {
            Ok(recorded) => results.push(Ok(recorded)),
            Err(_) => {
                tx.rollback().await?;
                return commit_isolated(pool, batch, now).await;
            }
        }
    }
    tx.commit().await?;
    Ok(results)
}

async fn commit_isolated(
    pool: &PgPool,
    batch: &[Job],
    now: i64,
) -> db::Result<Vec<Result<Recorded, IntakeError>>> {
    use sqlx::Connection;
    let mut tx = pool.begin().await?;
    // The change counter before any preview row, as every writer that stamps one takes them.
    crate::db::pg::changes::lock_first(&mut tx).await?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        // A nested transaction is a savepoint.
        let mut savepoint = (*tx).begin().await?;
        match record_one(&mut *savepoint, &job.delivery, &job.intent, now).await {
            Ok(recorded) => {
                savepoint.commit().await?;
                results.push(Ok(recorded));
            }
            Err(e) => {
                savepoint.rollback().await?;
                let d = &job.delivery;
                tracing::error!(delivery = %d.guid, event = %d.event, error = %e, "delivery not recorded");
                let detail = e.to_string();
                let failed = delivery_row(d, Outcome::Failed, &detail, now);
                tx.record_delivery(&failed).await?;
                results.push(Err(IntakeError::Write(e.to_string())));
            }
        }
    }
    tx.commit().await?;
    Ok(results)
}
