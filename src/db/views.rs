//! Read queries for people and tools (the API, the dashboard, the CLI), and the one write
//! they may make: asking for a preview's destruction.

use sqlx::{QueryBuilder, Sqlite};

use super::HistoryRow;
use super::State;
use crate::preview::{Desired, HistoryKind, ObservedState};

/// How many recently destroyed previews the dashboard lists; retention keeps their history.
pub const RECENTLY_DESTROYED_SHOWN: i64 = 20;
/// The newest history rows one preview's page and API answer show.
pub const HISTORY_SHOWN: i64 = 200;

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PreviewSummary {
    pub id: i64,
    pub repo: String,
    pub number: i64,
    pub title: String,
    pub author: String,
    pub head_sha: String,
    pub desired: Desired,
    pub observed: ObservedState,
    pub cluster: Option<String>,
    pub created_at: i64,
    pub expires_at: i64,
    pub keep: bool,
    pub fork: bool,
    pub last_error: Option<String>,
    pub end_reason: Option<String>,
    /// The names recorded at creation (`Names::recorded`).
    pub names: Option<String>,
    /// When the head last changed (GitHub's clock): a wait for CI counts from here.
    pub head_changed_at: i64,
    /// Sleep (`db::sleep`): asleep since, last used, sleeps ended and what they saved.
    pub sleeping_since: Option<i64>,
    pub last_used_at: Option<i64>,
    pub slept_seconds: i64,
    pub saved_pod_seconds: i64,
    /// What the namespace's quota last counted awake (`None`: never counted).
    pub used_pods: Option<i64>,
    pub used_cpu_millis: Option<i64>,
    pub used_memory_bytes: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct HistoryEntry {
    pub at: i64,
    pub what: String,
    pub actor: String,
    pub reason: String,
    pub head_sha: Option<String>,
}

/// What a page of previews is filtered on, and where it starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreviewFilter<'a> {
    pub repo: Option<&'a str>,
    pub author: Option<&'a str>,
    pub cluster: Option<&'a str>,
    /// Only previews after this (repo, number): the last one of the previous page.
    pub after: Option<(&'a str, i64)>,
}

/// How many previews there are (the dashboard's "N live", above a page of them).
pub async fn count_previews(state: &State) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::count_previews(pg).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!: i64" FROM previews"#)
        .fetch_one(pool)
        .await
}

/// The query of one page: only the conditions asked for, so each can use its index
/// (`(?1 IS NULL OR repo = ?1)` would make SQLite scan), in the (repo, number) order of the
/// unique index, so a page reads `limit` rows from where the last one ended (keyset), never
/// the rows before it.
pub fn previews_query<'a>(filter: &PreviewFilter<'a>, limit: i64) -> QueryBuilder<'a, Sqlite> {
    let mut query = QueryBuilder::new(
        "SELECT id, repo, number, title, author, head_sha, desired, observed, cluster,
                created_at, expires_at, keep, fork, last_error, end_reason, names, head_changed_at,
                sleeping_since, last_used_at, slept_seconds, saved_pod_seconds, used_pods,
                used_cpu_millis, used_memory_bytes
         FROM previews WHERE 1",
    );
    if let Some(repo) = filter.repo {
        query.push(" AND repo = ").push_bind(repo);
    }
    if let Some(author) = filter.author {
        query.push(" AND author = ").push_bind(author);
    }
    if let Some(cluster) = filter.cluster {
        query.push(" AND cluster = ").push_bind(cluster);
    }
    match (filter.repo, filter.after) {
        // Within one repository only the number moves on, and SQLite seeks (repo=? AND
        // number>?) instead of reading the repository's rows before the cursor.
        (Some(repo), Some((after_repo, number))) if repo == after_repo => {
            query.push(" AND number > ").push_bind(number);
        }
        (_, Some((repo, number))) => {
            query
                .push(" AND (repo, number) > (")
                .push_bind(repo)
                .push(", ")
                .push_bind(number)
                .push(")");
        }
        (_, None) => {}
    }
    query.push(" ORDER BY repo, number LIMIT ").push_bind(limit);
    query
}

/// One page of tracked previews (at most `limit`), by repository and number.
pub async fn previews(
    state: &State,
    filter: &PreviewFilter<'_>,
    limit: i64,
) -> sqlx::Result<Vec<PreviewSummary>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::previews(pg, filter, limit).await;
    }
    let pool = state.pool();
    previews_query(filter, limit)
        .build_query_as()
        .fetch_all(pool)
        .await
}

pub async fn preview_summary(
    state: &State,
    repo: &str,
    number: i64,
) -> sqlx::Result<Option<PreviewSummary>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::preview_summary(pg, repo, number).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        PreviewSummary,
        r#"SELECT id AS "id!", repo, number, title, author, head_sha, desired AS "desired: Desired",
                  observed AS "observed: ObservedState", cluster,
                  created_at, expires_at, keep AS "keep: bool", fork AS "fork: bool", last_error, end_reason, names,
                  head_changed_at, sleeping_since, last_used_at, slept_seconds, saved_pod_seconds,
                  used_pods, used_cpu_millis, used_memory_bytes
           FROM previews WHERE repo = ?1 AND number = ?2"#,
        repo,
        number
    )
    .fetch_optional(pool)
    .await
}

/// The newest [`HISTORY_SHOWN`] rows of a PR's history, by its index.
pub const HISTORY: &str = "SELECT at, what, actor, reason, head_sha FROM history
     WHERE repo = ?1 AND number = ?2 ORDER BY at DESC, id DESC LIMIT ?3";

/// A PR's newest history, oldest first (it outlives the preview).
pub async fn history(state: &State, repo: &str, number: i64) -> sqlx::Result<Vec<HistoryEntry>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::history(pg, repo, number).await;
    }
    let pool = state.pool();
    let mut rows: Vec<HistoryEntry> = sqlx::query_as(HISTORY)
        .bind(repo)
        .bind(number)
        .bind(HISTORY_SHOWN)
        .fetch_all(pool)
        .await?;
    rows.reverse();
    Ok(rows)
}

/// The dashboard's "recently destroyed", by the partial index `history_destroyed` (0008).
pub const RECENTLY_DESTROYED: &str = "SELECT repo, number, at, reason FROM history
     WHERE what = 'destroyed' ORDER BY at DESC, id DESC LIMIT ?1";

/// The most recently destroyed previews: (repo, number, when, reason).
pub async fn recently_destroyed(
    state: &State,
    limit: i64,
) -> sqlx::Result<Vec<(String, i64, i64, String)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::recently_destroyed(pg, limit).await;
    }
    let pool = state.pool();
    sqlx::query_as(RECENTLY_DESTROYED)
        .bind(limit)
        .fetch_all(pool)
        .await
}

/// Previews by shown state and cluster, for the metrics.
pub async fn preview_counts(
    state: &State,
) -> sqlx::Result<Vec<(Desired, ObservedState, String, i64)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::preview_counts(pg).await;
    }
    let pool = state.pool();
    let rows = sqlx::query!(
        r#"SELECT desired AS "desired: Desired", observed AS "observed: ObservedState", COALESCE(cluster, '') AS "cluster!: String", COUNT(*) AS "n!: i64"
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
    state: &State,
    repo: &str,
    number: u32,
    actor: &str,
    now: i64,
) -> sqlx::Result<Option<bool>> {
    if let Some(pg) = state.postgres() {
        return super::pg::views::request_destroy(pg, repo, number, actor, now).await;
    }
    let mut tx = super::begin_write(state).await?;
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
    // From a shell too (`previewd destroy`): the state tells the reconciler, not a word.
    super::changes::touch_pr_in(&mut tx, repo, i64::from(number)).await?;
    let history = HistoryRow {
        actor,
        ..HistoryRow::by_previewd(
            repo,
            number,
            HistoryKind::DestroyRequested,
            "an operator asked for its teardown",
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    tx.commit().await?;
    Ok(Some(true))
}
