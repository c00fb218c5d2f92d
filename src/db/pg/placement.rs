//! `db::placement` on PostgreSQL: each cluster's load, the caps' counts, the preview an
//! eviction replaces, and the decisions.

use sqlx::PgPool;

use super::flag;
use super::history::add_of;
use crate::db::Placement;
use crate::preview::HistoryKind;

/// `db::record_placements`: the decisions with their history rows, in one transaction.
pub async fn record_placements(
    pool: &PgPool,
    placements: Vec<Placement>,
    now: i64,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    for p in &placements {
        let (what, reason) = match &p.cluster {
            Some(cluster) => {
                sqlx::query!(
                    "UPDATE previews SET cluster = $2,
                            template_generation = CASE WHEN $3::bigint IS NULL THEN template_generation ELSE NULL END,
                            template_seed = COALESCE($3, template_seed)
                      WHERE id = $1 AND cluster IS NULL",
                    p.id,
                    cluster,
                    p.seeded_at
                )
                .execute(&mut *tx)
                .await?;
                (HistoryKind::Placed, format!("on cluster {cluster}"))
            }
            None if p.already_queued => continue,
            None => {
                sqlx::query!(
                    "UPDATE previews SET observed = 'queued', updated_at = $2 WHERE id = $1",
                    p.id,
                    now
                )
                .execute(&mut *tx)
                .await?;
                (
                    HistoryKind::Queued,
                    "every cluster is at capacity".to_owned(),
                )
            }
        };
        add_of(&mut tx, p.id, what, &reason, now).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// `db::cluster_load`: live previews per cluster, as the `cluster_live` triggers keep them.
pub async fn cluster_load(pool: &PgPool) -> anyhow::Result<Vec<(String, i64)>> {
    let rows = sqlx::query!("SELECT cluster, live FROM cluster_live WHERE live > 0")
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(|r| (r.cluster, r.live)).collect())
}

/// `db::live_counts`: live placed previews of a repository and of an author.
pub async fn live_counts(pool: &PgPool, repo: &str, author: &str) -> anyhow::Result<(i64, i64)> {
    // A count is never NULL.
    let counts = sqlx::query!(
        r#"SELECT COUNT(*) FILTER (WHERE repo = $1) AS "repo!", COUNT(*) FILTER (WHERE author = $2) AS "author!"
           FROM previews WHERE cluster IS NOT NULL AND desired != 'absent'
            AND (repo = $1 OR author = $2)"#,
        repo,
        author
    )
    .fetch_one(pool)
    .await?;
    Ok((counts.repo, counts.author))
}

/// `db::eviction_victim`: `(id, repo, number, cluster)`.
pub async fn eviction_victim(
    pool: &PgPool,
    repo: &str,
    author: &str,
    by_author: bool,
) -> anyhow::Result<Option<(i64, String, i64, String)>> {
    // `cluster!`: the WHERE keeps only placed rows. `$3::bigint`: the flag is a BIGINT as
    // bound (`$3 = 0` alone would make it an INTEGER).
    let victim = sqlx::query!(
        r#"SELECT id, repo, number, cluster AS "cluster!" FROM previews
          WHERE cluster IS NOT NULL AND desired != 'absent' AND keep = 0
            AND (($3::bigint = 0 AND repo = $1) OR ($3::bigint = 1 AND author = $2))
          ORDER BY expires_at, id LIMIT 1"#,
        repo,
        author,
        flag(by_author)
    )
    .fetch_optional(pool)
    .await?;
    Ok(victim.map(|v| (v.id, v.repo, v.number, v.cluster)))
}

/// `db::evict`: intent, history and the notice, in one transaction; false when the victim
/// was pinned or ended meanwhile.
pub async fn evict(
    pool: &PgPool,
    victim: i64,
    reason: &str,
    notice: &str,
    now: i64,
) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query!(
        "UPDATE previews SET desired = 'absent', end_reason = 'evicted', updated_at = $2
          WHERE id = $1 AND desired != 'absent' AND keep = 0",
        victim,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    add_of(&mut tx, victim, HistoryKind::Evicted, reason, now).await?;
    sqlx::query!(
        "INSERT INTO notices (repo, number, installation_id, kind, body, created_at)
         SELECT repo, number, installation_id, 'evicted', $2, $3 FROM previews WHERE id = $1",
        victim,
        notice,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}
