//! Placement's statements, inline (`db::Inline`): each cluster's load, the caps' counts, the
//! preview an eviction replaces, and the decisions. A new PR runs them once each; through
//! sqlx's pool each was a hop to a connection thread and back (issue #17).

use rusqlite::{OptionalExtension, params};

use super::State;
use super::history::write_of;
use crate::preview::HistoryKind;

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
    state: &State,
    placements: Vec<Placement>,
    now: i64,
) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::placement::record_placements(pg, placements, now).await;
    }
    let db = state.inline();
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
                    (HistoryKind::Placed, format!("on cluster {cluster}"))
                }
                None if p.already_queued => continue,
                None => {
                    tx.prepare_cached(
                        "UPDATE previews SET observed = 'queued', updated_at = ?2 WHERE id = ?1",
                    )?
                    .execute(params![p.id, now])?;
                    (HistoryKind::Queued, "every cluster is at capacity".to_owned())
                }
            };
            write_of(tx, p.id, what, &reason, now)?;
        }
        Ok(())
    })
    .await
}

/// Live previews per cluster, as the triggers of `migrations/0015_cluster_live.sql` keep them.
pub async fn cluster_load(state: &State) -> anyhow::Result<Vec<(String, i64)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::placement::cluster_load(pg).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached("SELECT cluster, live FROM cluster_live WHERE live > 0")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    })
}

/// Live previews of a repository and of an author, among those placed on a cluster.
pub async fn live_counts(state: &State, repo: &str, author: &str) -> anyhow::Result<(i64, i64)> {
    if let Some(pg) = state.postgres() {
        return super::pg::placement::live_counts(pg, repo, author).await;
    }
    let db = state.inline();
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
/// `author`, when `by_author`): the one eviction replaces. `(id, repo, number, cluster)`.
pub async fn eviction_victim(
    state: &State,
    repo: &str,
    author: &str,
    by_author: bool,
) -> anyhow::Result<Option<(i64, String, i64, String)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::placement::eviction_victim(pg, repo, author, by_author).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT id, repo, number, cluster FROM previews
              WHERE cluster IS NOT NULL AND desired != 'absent' AND keep = 0
                AND ((?3 = 0 AND repo = ?1) OR (?3 = 1 AND author = ?2))
              ORDER BY expires_at, id LIMIT 1",
        )?
        .query_row(params![repo, author, by_author], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()
    })
}

/// Evicts one preview for another: intent, history and the notice, in one transaction;
/// false when it was pinned or ended meanwhile.
pub async fn evict(
    state: &State,
    victim: i64,
    reason: &str,
    notice: &str,
    now: i64,
) -> anyhow::Result<bool> {
    if let Some(pg) = state.postgres() {
        return super::pg::placement::evict(pg, victim, reason, notice, now).await;
    }
    let db = state.inline();
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
        write_of(tx, victim, HistoryKind::Evicted, &reason, now)?;
        tx.prepare_cached(
            "INSERT INTO notices (repo, number, installation_id, kind, body, created_at)
             SELECT repo, number, installation_id, 'evicted', ?2, ?3 FROM previews WHERE id = ?1",
        )?
        .execute(params![victim, notice, now])?;
        Ok(true)
    })
    .await
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rusqlite::Connection;

    use super::*;

    const DESIRED: [&str; 4] = ["deployed", "awaiting_approval", "draft", "absent"];
    const CLUSTERS: [Option<&str>; 3] = [None, Some("eu-1"), Some("us-1")];

    /// What `cluster_load` answered before the counts were kept: every live preview counted.
    fn counted(conn: &Connection) -> Vec<(String, i64)> {
        conn.prepare(
            "SELECT cluster, COUNT(*) FROM previews
              WHERE cluster IS NOT NULL AND desired != 'absent' GROUP BY cluster ORDER BY cluster",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
    }

    async fn kept(db: &State) -> Vec<(String, i64)> {
        let mut load = cluster_load(db).await.unwrap();
        load.sort();
        load
    }

    fn insert(conn: &Connection, number: i64, cluster: Option<&str>, desired: &str) {
        conn.execute(
            "INSERT INTO previews (repo, number, repo_id, author, head_sha, head_ref, base_ref,
                                   fork, draft, desired, cluster, pr_updated_at, created_at,
                                   updated_at, expires_at)
             VALUES ('acme/api', ?1, 1, 'a', 'abc', 'h', 'main', 0, 0, ?2, ?3, 1, 1, 1, 9)",
            params![number, desired, cluster],
        )
        .unwrap();
    }

    /// Inserts, placements, closes and reopens, deletions, and updates that name the columns
    /// without moving them, in a random order: the counts agree with a count after each.
    #[tokio::test]
    async fn the_kept_counts_agree_with_counting_after_any_change() {
        let dir = tempfile::tempdir().unwrap();
        let pool = super::super::open(&dir.path().join("state.db"))
            .await
            .unwrap();
        let db = State::from(&pool);
        let conn = Connection::open(dir.path().join("state.db")).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        let mut numbers = 0;
        for step in 0..2_000 {
            let any = "(SELECT number FROM previews ORDER BY random() LIMIT 1)";
            let desired = DESIRED[rng.gen_range(0..DESIRED.len())];
            let cluster = CLUSTERS[rng.gen_range(0..CLUSTERS.len())];
            match rng.gen_range(0..6) {
                0 | 1 => {
                    numbers += 1;
                    insert(&conn, numbers, cluster, desired);
                }
                2 => {
                    let sql = format!("UPDATE previews SET cluster = ?1 WHERE number = {any}");
                    conn.execute(&sql, params![cluster]).unwrap();
                }
                3 => {
                    let sql = format!("UPDATE previews SET desired = ?1 WHERE number = {any}");
                    conn.execute(&sql, params![desired]).unwrap();
                }
                4 => {
                    conn.execute(
                        "UPDATE previews SET cluster = cluster, desired = desired",
                        [],
                    )
                    .unwrap();
                }
                _ => {
                    let sql = format!("DELETE FROM previews WHERE number = {any}");
                    conn.execute(&sql, []).unwrap();
                }
            }
            assert_eq!(kept(&db).await, counted(&conn), "after step {step}");
        }
    }

    /// A state from before the counts were kept starts with its previews counted.
    #[tokio::test]
    async fn the_migration_counts_the_previews_already_placed() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("state.db")).unwrap();
        let mut migrations: Vec<_> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
                .unwrap()
                .map(|entry| entry.unwrap().path())
                // SQLite's own: `migrations/postgres` is the other store's schema.
                .filter(|path| path.extension().is_some_and(|e| e == "sql"))
                .collect();
        migrations.sort();
        let (before, from) = migrations.split_at(
            migrations
                .iter()
                .position(|m| m.ends_with("0015_cluster_live.sql"))
                .unwrap(),
        );
        for migration in before {
            conn.execute_batch(&std::fs::read_to_string(migration).unwrap())
                .unwrap();
        }
        for (number, (cluster, desired)) in [
            (Some("eu-1"), "deployed"),
            (Some("eu-1"), "draft"),
            (Some("eu-1"), "absent"),
            (Some("us-1"), "deployed"),
            (None, "deployed"),
        ]
        .into_iter()
        .enumerate()
        {
            insert(&conn, number as i64 + 1, cluster, desired);
        }
        for migration in from {
            conn.execute_batch(&std::fs::read_to_string(migration).unwrap())
                .unwrap();
        }
        let path = dir.path().join("state.db");
        let db = State::from(sqlx::SqlitePool::connect_lazy_with(
            crate::db::connection::options(&path),
        ));
        assert_eq!(kept(&db).await, [("eu-1".into(), 2), ("us-1".into(), 1)]);
        assert_eq!(kept(&db).await, counted(&conn));
    }
}
