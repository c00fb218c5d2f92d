//! Read queries for people and tools (the API, the dashboard, the CLI), and the one write
//! they may make: asking for a preview's destruction.

use sqlx::SqlitePool;

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PreviewSummary {
    pub id: i64,
    pub repo: String,
    pub number: i64,
    pub title: String,
    pub author: String,
    pub head_sha: String,
    pub desired: String,
    pub observed: String,
    pub cluster: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub keep: bool,
    pub fork: bool,
    pub last_error: Option<String>,
    pub end_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub at: i64,
    pub what: String,
    pub actor: String,
    pub reason: String,
    pub head_sha: Option<String>,
}

/// Every tracked preview, filtered on what SQL can see; ordered by repository and number.
pub async fn previews(
    pool: &SqlitePool,
    repo: Option<&str>,
    author: Option<&str>,
    cluster: Option<&str>,
) -> sqlx::Result<Vec<PreviewSummary>> {
    sqlx::query_as!(
        PreviewSummary,
        r#"SELECT id AS "id!", repo, number, title, author, head_sha, desired, observed, cluster,
                  created_at, expires_at, keep AS "keep: bool", fork AS "fork: bool", last_error, end_reason
           FROM previews
           WHERE (?1 IS NULL OR repo = ?1) AND (?2 IS NULL OR author = ?2) AND (?3 IS NULL OR cluster = ?3)
           ORDER BY repo, number"#,
        repo,
        author,
        cluster
    )
    .fetch_all(pool)
    .await
}

pub async fn preview_summary(
    pool: &SqlitePool,
    repo: &str,
    number: i64,
) -> sqlx::Result<Option<PreviewSummary>> {
    sqlx::query_as!(
        PreviewSummary,
        r#"SELECT id AS "id!", repo, number, title, author, head_sha, desired, observed, cluster,
                  created_at, expires_at, keep AS "keep: bool", fork AS "fork: bool", last_error, end_reason
           FROM previews WHERE repo = ?1 AND number = ?2"#,
        repo,
        number
    )
    .fetch_optional(pool)
    .await
}

/// A PR's history, oldest first (it outlives the preview).
pub async fn history(
    pool: &SqlitePool,
    repo: &str,
    number: i64,
) -> sqlx::Result<Vec<HistoryEntry>> {
    sqlx::query_as!(
        HistoryEntry,
        "SELECT at, what, actor, reason, head_sha FROM history WHERE repo = ?1 AND number = ?2 ORDER BY at, id",
        repo,
        number
    )
    .fetch_all(pool)
    .await
}

/// The most recently destroyed previews: (repo, number, when, reason).
pub async fn recently_destroyed(
    pool: &SqlitePool,
    limit: i64,
) -> sqlx::Result<Vec<(String, i64, i64, String)>> {
    let rows = sqlx::query!(
        "SELECT repo, number, at, reason FROM history WHERE what = 'destroyed' ORDER BY at DESC, id DESC LIMIT ?1",
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.repo, r.number, r.at, r.reason))
        .collect())
}

/// Previews by shown state and cluster, for the metrics.
pub async fn preview_counts(pool: &SqlitePool) -> sqlx::Result<Vec<(String, String, String, i64)>> {
    let rows = sqlx::query!(
        r#"SELECT desired, observed, COALESCE(cluster, '') AS "cluster!: String", COUNT(*) AS "n!: i64"
           FROM previews GROUP BY desired, observed, cluster"#
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.desired, r.observed, r.cluster, r.n))
        .collect())
}

/// An operator (API or CLI) asks for a preview's teardown. `None`: no such preview;
/// `Some(false)`: it is already ending.
pub async fn request_destroy(
    pool: &SqlitePool,
    repo: &str,
    number: i64,
    actor: &str,
    now: i64,
) -> sqlx::Result<Option<bool>> {
    let mut tx = super::begin_write(pool).await?;
    let exists = sqlx::query_scalar!(
        r#"SELECT desired != 'absent' AS "live!: bool" FROM previews WHERE repo = ?1 AND number = ?2"#,
        repo,
        number
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(true) = exists else {
        return Ok(exists);
    };
    sqlx::query!(
        "UPDATE previews SET desired = 'absent', end_reason = 'destroyed', updated_at = ?3
         WHERE repo = ?1 AND number = ?2",
        repo,
        number,
        now
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO history (repo, number, what, actor, reason, at)
         VALUES (?1, ?2, 'destroy_requested', ?3, 'an operator asked for its teardown', ?4)",
        repo,
        number,
        actor,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(true))
}
