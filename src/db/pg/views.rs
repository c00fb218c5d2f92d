//! `db::views` on PostgreSQL: the reads of the API, the dashboard and the CLI, and an
//! operator's request to destroy a preview.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, QueryBuilder, Row};

use super::word_of;
use crate::db::HistoryRow;
use crate::db::views::{HISTORY_SHOWN, HistoryEntry, PreviewFilter, PreviewSummary};
use crate::preview::{Desired, HistoryKind, ObservedState};

/// The columns of a [`PreviewSummary`].
const SUMMARY: &str = "id, repo, number, title, author, head_sha, desired, observed, cluster,
     created_at, expires_at, keep, fork, last_error, end_reason, names, head_changed_at,
     sleeping_since, last_used_at, slept_seconds, saved_pod_seconds, used_pods,
     used_cpu_millis, used_memory_bytes";

/// A row of `SELECT {SUMMARY}` (0/1 flags are BIGINT here, words are text).
fn summary_of(r: &PgRow) -> sqlx::Result<PreviewSummary> {
    Ok(PreviewSummary {
        id: r.try_get("id")?,
        repo: r.try_get("repo")?,
        number: r.try_get("number")?,
        title: r.try_get("title")?,
        author: r.try_get("author")?,
        head_sha: r.try_get("head_sha")?,
        desired: word_of(&r.try_get::<String, _>("desired")?)?,
        observed: word_of(&r.try_get::<String, _>("observed")?)?,
        cluster: r.try_get("cluster")?,
        created_at: r.try_get("created_at")?,
        expires_at: r.try_get("expires_at")?,
        keep: r.try_get::<i64, _>("keep")? != 0,
        fork: r.try_get::<i64, _>("fork")? != 0,
        last_error: r.try_get("last_error")?,
        end_reason: r.try_get("end_reason")?,
        names: r.try_get("names")?,
        head_changed_at: r.try_get("head_changed_at")?,
        sleeping_since: r.try_get("sleeping_since")?,
        last_used_at: r.try_get("last_used_at")?,
        slept_seconds: r.try_get("slept_seconds")?,
        saved_pod_seconds: r.try_get("saved_pod_seconds")?,
        used_pods: r.try_get("used_pods")?,
        used_cpu_millis: r.try_get("used_cpu_millis")?,
        used_memory_bytes: r.try_get("used_memory_bytes")?,
    })
}

pub async fn count_previews(pool: &PgPool) -> sqlx::Result<i64> {
    // A count is never NULL.
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM previews"#)
        .fetch_one(pool)
        .await
}

/// `db::previews_query` in PostgreSQL's dialect: only the conditions asked for, in the
/// (repo, number) order of the unique index, keyset from the last row of the page before.
fn previews_query<'a>(filter: &PreviewFilter<'a>, limit: i64) -> QueryBuilder<'a, Postgres> {
    let mut query = QueryBuilder::new(format!("SELECT {SUMMARY} FROM previews WHERE true"));
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

pub async fn previews(
    pool: &PgPool,
    filter: &PreviewFilter<'_>,
    limit: i64,
) -> sqlx::Result<Vec<PreviewSummary>> {
    let rows = previews_query(filter, limit)
        .build()
        .fetch_all(pool)
        .await?;
    rows.iter().map(summary_of).collect()
}

pub async fn preview_summary(
    pool: &PgPool,
    repo: &str,
    number: i64,
) -> sqlx::Result<Option<PreviewSummary>> {
    let row = sqlx::query(&format!(
        "SELECT {SUMMARY} FROM previews WHERE repo = $1 AND number = $2"
    ))
    .bind(repo)
    .bind(number)
    .fetch_optional(pool)
    .await?;
    row.as_ref().map(summary_of).transpose()
}

pub async fn history(pool: &PgPool, repo: &str, number: i64) -> sqlx::Result<Vec<HistoryEntry>> {
    let mut rows = sqlx::query_as!(
        HistoryEntry,
        "SELECT at, what, actor, reason, head_sha FROM history
         WHERE repo = $1 AND number = $2 ORDER BY at DESC, id DESC LIMIT $3",
        repo,
        number,
        HISTORY_SHOWN
    )
    .fetch_all(pool)
    .await?;
    rows.reverse();
    Ok(rows)
}

pub async fn recently_destroyed(
    pool: &PgPool,
    limit: i64,
) -> sqlx::Result<Vec<(String, i64, i64, String)>> {
    let rows = sqlx::query!(
        "SELECT repo, number, at, reason FROM history
         WHERE what = 'destroyed' ORDER BY at DESC, id DESC LIMIT $1",
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.repo, r.number, r.at, r.reason))
        .collect())
}

pub async fn preview_counts(
    pool: &PgPool,
) -> sqlx::Result<Vec<(Desired, ObservedState, String, i64)>> {
    // COALESCE with '' and a count are never NULL.
    let rows = sqlx::query!(
        r#"SELECT desired, observed, COALESCE(cluster, '') AS "cluster!", COUNT(*) AS "n!"
         FROM previews GROUP BY desired, observed, cluster"#
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| Ok((word_of(&r.desired)?, word_of(&r.observed)?, r.cluster, r.n)))
        .collect()
}

/// `db::request_destroy`: `None`, no such preview; `Some(false)`, it is already ending.
pub async fn request_destroy(
    pool: &PgPool,
    repo: &str,
    number: u32,
    actor: &str,
    now: i64,
) -> sqlx::Result<Option<bool>> {
    let mut tx = pool.begin().await?;
    super::changes::lock_first(&mut tx).await?;
    // Locked, so a concurrent request (another replica) waits and then sees it ending.
    // `desired` is NOT NULL, so the comparison is never NULL.
    let exists = sqlx::query_scalar!(
        r#"SELECT desired != 'absent' AS "live!" FROM previews WHERE repo = $1 AND number = $2 FOR UPDATE"#,
        repo,
        i64::from(number)
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(true) = exists else {
        return Ok(exists);
    };
    sqlx::query!(
        "UPDATE previews SET desired = 'absent', end_reason = 'destroyed', updated_at = $3
         WHERE repo = $1 AND number = $2",
        repo,
        i64::from(number),
        now
    )
    .execute(&mut *tx)
    .await?;
    // From a shell too (`previewd destroy`): the state tells the reconciler, not a word.
    super::changes::touch_pr(&mut tx, repo, i64::from(number)).await?;
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
