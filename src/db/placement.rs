//! Placement's statements, inline (`db::Inline`): each cluster's load, the caps' counts, the
//! preview an eviction replaces, and the decisions. A new PR runs them once each; through
//! sqlx's pool each was a hop to a connection thread and back (issue #17).

use rusqlite::{OptionalExtension, params};

use super::Inline;
use super::previews::history_of;

/// One preview's placement, as `reconcile::place` decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub id: i64,
    /// The cluster it lands on for life; `None`: it waits in the queue.
    pub cluster: Option<String>,
    /// Queued before this pass (no second "queued" row).
    pub already_queued: bool,
    /// Its database is seeded, not cloned, decided at this seed generation: its repository
    /// has no template, so the decision is the one `reconcile::templates` would make at its
    /// first rendering, written with the placement instead of in a commit of its own.
    pub seeded_at: Option<i64>,
}

/// Writes placement decisions with their history rows, in one transaction.
pub async fn record_placements(
    db: &Inline,
    placements: Vec<Placement>,
    now: i64,
) -> anyhow::Result<()> {
    db.write(move |tx| {
        for p in &placements {
            let (what, reason) = match &p.cluster {
                Some(cluster) => {
                    tx.prepare_cached(
                        "UPDATE previews SET cluster = ?2,
                                template_generation = CASE WHEN ?3 IS NULL THEN template_generation ELSE NULL END,
                                template_seed = COALESCE(?3, template_seed)
                          WHERE id = ?1 AND cluster IS NULL",
                    )?
                    .execute(params![p.id, cluster, p.seeded_at])?;
                    ("placed", format!("on cluster {cluster}"))
                }
                None if p.already_queued => continue,
                None => {
                    tx.prepare_cached(
                        "UPDATE previews SET observed = 'queued', updated_at = ?2 WHERE id = ?1",
                    )?
                    .execute(params![p.id, now])?;
                    ("queued", "every cluster is at capacity".to_owned())
                }
            };
            history_of(tx, p.id, what, &reason, now)?;
        }
        Ok(())
    })
    .await
}

/// Live previews per cluster.
pub fn cluster_load(db: &Inline) -> anyhow::Result<Vec<(String, i64)>> {
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT cluster, COUNT(*) FROM previews INDEXED BY previews_by_cluster_live
              WHERE cluster IS NOT NULL AND desired != 'absent' GROUP BY cluster",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
    })
}

/// Live previews of a repository and of an author, among those placed on a cluster.
pub fn live_counts(db: &Inline, repo: &str, author: &str) -> anyhow::Result<(i64, i64)> {
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT COALESCE(SUM(repo = ?1), 0), COALESCE(SUM(author = ?2), 0)
               FROM previews WHERE cluster IS NOT NULL AND desired != 'absent'
                AND (repo = ?1 OR author = ?2)",
        )?
        .query_row(params![repo, author], |r| Ok((r.get(0)?, r.get(1)?)))
    })
}

/// The least recently active (earliest expiry) unpinned live preview of `repo` (or of
/// `author`, when `by_author`): the one eviction replaces. `(id, repo, number)`.
pub fn eviction_victim(
    db: &Inline,
    repo: &str,
    author: &str,
    by_author: bool,
) -> anyhow::Result<Option<(i64, String, i64)>> {
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT id, repo, number FROM previews
              WHERE cluster IS NOT NULL AND desired != 'absent' AND keep = 0
                AND ((?3 = 0 AND repo = ?1) OR (?3 = 1 AND author = ?2))
              ORDER BY expires_at, id LIMIT 1",
        )?
        .query_row(params![repo, author, by_author], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()
    })
}

/// Evicts one preview for another: intent, history and the notice, in one transaction;
/// false when it was pinned or ended meanwhile.
pub async fn evict(
    db: &Inline,
    victim: i64,
    reason: &str,
    notice: &str,
    now: i64,
) -> anyhow::Result<bool> {
    let (reason, notice) = (reason.to_owned(), notice.to_owned());
    db.write(move |tx| {
        let done = tx
            .prepare_cached(
                "UPDATE previews SET desired = 'absent', end_reason = 'evicted', updated_at = ?2
                  WHERE id = ?1 AND desired != 'absent' AND keep = 0",
            )?
            .execute(params![victim, now])?;
        if done == 0 {
            return Ok(false);
        }
        history_of(tx, victim, "evicted", &reason, now)?;
        tx.prepare_cached(
            "INSERT INTO notices (repo, number, installation_id, kind, body, created_at)
             SELECT repo, number, installation_id, 'evicted', ?2, ?3 FROM previews WHERE id = ?1",
        )?
        .execute(params![victim, notice, now])?;
        Ok(true)
    })
    .await
}
