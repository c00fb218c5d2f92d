//! Retention's queries: what is forgotten, each kind oldest first by its age index and a
//! small batch per write transaction, so the write lock is never held for a whole pass.

use crate::db::{State, pg};

/// What retention deletes, each kind oldest first and a batch at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retained {
    /// The history of PRs without a preview where nothing happened since the cutoff, but
    /// for the PRs the dashboard lists as recently destroyed.
    History,
    /// Finished commands of PRs without a preview.
    Commands,
    /// Notices posted (or owed to a PR without a preview) before the cutoff.
    Notices,
    /// GitHub threads of PRs without a preview, once their final report is out.
    Threads,
    /// Delivery records (deduplication) received before the cutoff.
    Deliveries,
}

impl Retained {
    /// Not `closed_prs`: a PR's close or end is what keeps a replayed `opened` (signed,
    /// with a fresh GUID) from bringing it back, at any age; it is one small row per PR.
    pub const ALL: [Retained; 5] = [
        Retained::History,
        Retained::Commands,
        Retained::Notices,
        Retained::Threads,
        Retained::Deliveries,
    ];

    /// `?1` the cutoff, `?2` the batch size, `?3` how many recently destroyed PRs to keep.
    /// Each picks its rows by an age index and deletes them by key: one short write.
    fn sql(self) -> &'static str {
        match self {
            Retained::History => {
                "DELETE FROM history WHERE id IN (
                     SELECT h.id FROM history h INDEXED BY history_by_age
                     WHERE h.at < ?1
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = h.repo AND p.number = h.number)
                       AND NOT EXISTS (SELECT 1 FROM history n WHERE n.repo = h.repo AND n.number = h.number AND n.at >= ?1)
                       AND (h.repo, h.number) NOT IN (
                           SELECT repo, number FROM history WHERE what = 'destroyed' ORDER BY at DESC, id DESC LIMIT ?3)
                     ORDER BY h.at LIMIT ?2)"
            }
            Retained::Commands => {
                "DELETE FROM commands WHERE id IN (
                     SELECT c.id FROM commands c INDEXED BY commands_by_age
                     WHERE c.created_at < ?1 AND c.status != 'pending'
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = c.repo AND p.number = c.number)
                     ORDER BY c.created_at LIMIT ?2)"
            }
            Retained::Notices => {
                "DELETE FROM notices WHERE id IN (
                     SELECT n.id FROM notices n INDEXED BY notices_by_age
                     WHERE n.created_at < ?1
                       AND (n.posted_at IS NOT NULL
                            OR NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = n.repo AND p.number = n.number))
                     ORDER BY n.created_at LIMIT ?2)"
            }
            Retained::Threads => {
                "DELETE FROM github_threads WHERE (repo, number) IN (
                     SELECT t.repo, t.number FROM github_threads t INDEXED BY github_threads_by_age
                     WHERE t.updated_at < ?1 AND t.final_pending = 0
                       AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)
                     ORDER BY t.updated_at LIMIT ?2)"
            }
            Retained::Deliveries => {
                "DELETE FROM deliveries WHERE (hook_id, guid) IN (
                     SELECT hook_id, guid FROM deliveries INDEXED BY deliveries_by_age
                     WHERE received_at < ?1 ORDER BY received_at LIMIT ?2)"
            }
        }
    }
}

/// Deletes at most `batch` rows of `what` from before `cutoff`, in one write transaction
/// of its own (so the write lock is held for one small batch, never a whole pass), keeping
/// the history of the `keep_destroyed` most recently destroyed PRs. Returns how many.
pub async fn forget_batch(
    state: &State,
    what: Retained,
    cutoff: i64,
    batch: i64,
    keep_destroyed: i64,
) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::retention::forget_batch(pg, what, cutoff, batch, keep_destroyed).await;
    }
    let mut tx = crate::db::begin_write(state).await?;
    if what == Retained::History {
        // Lets this transaction, and only it, past the append-only trigger (0008).
        sqlx::query("INSERT INTO history_retention (running) VALUES (1)")
            .execute(&mut *tx)
            .await?;
    }
    let done = sqlx::query(what.sql())
        .bind(cutoff)
        .bind(batch)
        .bind(keep_destroyed)
        .execute(&mut *tx)
        .await?;
    if what == Retained::History {
        sqlx::query("DELETE FROM history_retention")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(done.rows_affected())
}

/// PRs with history since `since` (only they can have grown past the cap) and more than
/// `cap` rows of it, at most `limit`: read in one query, so that a sweep after a busy hour
/// (thousands of PRs written, none near the cap) opens no write transaction for them.
pub async fn over_cap(
    state: &State,
    since: i64,
    cap: i64,
    limit: i64,
) -> sqlx::Result<Vec<(String, i64)>> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::retention::over_cap(pg, since, cap, limit).await;
    }
    let pool = state.pool();
    sqlx::query_as(
        "SELECT recent.repo, recent.number
         FROM (SELECT DISTINCT repo, number FROM history INDEXED BY history_by_age WHERE at >= ?1) AS recent
         WHERE EXISTS (SELECT 1 FROM history AS h INDEXED BY history_by_preview
                       WHERE h.repo = recent.repo AND h.number = recent.number LIMIT 1 OFFSET ?2)
         LIMIT ?3",
    )
    .bind(since)
    .bind(cap)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Deletes at most `batch` of a PR's history rows beyond its newest `cap`, oldest first,
/// in one write transaction; returns how many.
pub async fn cap_history(
    state: &State,
    repo: &str,
    number: i64,
    cap: i64,
    batch: i64,
) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::sweep::retention::cap_history(pg, repo, number, cap, batch).await;
    }
    let mut tx = crate::db::begin_write(state).await?;
    // The newest row past the cap: it and everything older go.
    let boundary: Option<(i64, i64)> = sqlx::query_as(
        "SELECT at, id FROM history WHERE repo = ?1 AND number = ?2
         ORDER BY at DESC, id DESC LIMIT 1 OFFSET ?3",
    )
    .bind(repo)
    .bind(number)
    .bind(cap)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((at, id)) = boundary else {
        return Ok(0);
    };
    sqlx::query("INSERT INTO history_retention (running) VALUES (1)")
        .execute(&mut *tx)
        .await?;
    let done = sqlx::query(
        "DELETE FROM history WHERE id IN (
             SELECT id FROM history WHERE repo = ?1 AND number = ?2 AND (at, id) <= (?3, ?4)
             ORDER BY at, id LIMIT ?5)",
    )
    .bind(repo)
    .bind(number)
    .bind(at)
    .bind(id)
    .bind(batch)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM history_retention")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
