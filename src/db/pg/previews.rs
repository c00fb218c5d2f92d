//! `db::previews` on PostgreSQL: a preview as the reconciler reads and records it, and the
//! end of a preview.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use super::word_of;
use crate::db::HistoryRow;
use crate::db::PreviewRow;
use crate::db::previews::{COLUMNS, Noted};
use crate::plan::Observation;
use crate::preview::{EndReason, HistoryKind, InstallationId, PreviewKey};

/// A stored number as a PR number (`u32`); out of range is a decode error.
fn pr_number(number: i64) -> sqlx::Result<u32> {
    u32::try_from(number).map_err(|e| sqlx::Error::Decode(Box::new(e)))
}

/// A stored word that may be NULL.
fn maybe_word<T: serde::de::DeserializeOwned>(text: Option<String>) -> sqlx::Result<Option<T>> {
    text.as_deref().map(word_of).transpose()
}

/// A row of `SELECT {COLUMNS}` (0/1 flags are BIGINT on PostgreSQL).
fn preview_of(r: &PgRow) -> sqlx::Result<PreviewRow> {
    let flag = |name: &str| r.try_get::<i64, _>(name).map(|v| v != 0);
    Ok(PreviewRow {
        id: r.try_get("id")?,
        key: PreviewKey::new(
            word_of(&r.try_get::<String, _>("repo")?)?,
            pr_number(r.try_get("number")?)?,
        ),
        title: r.try_get("title")?,
        author: r.try_get("author")?,
        head_sha: r.try_get("head_sha")?,
        fork: flag("fork")?,
        approved_sha: r.try_get("approved_sha")?,
        desired: word_of(&r.try_get::<String, _>("desired")?)?,
        observed: word_of(&r.try_get::<String, _>("observed")?)?,
        end_reason: maybe_word(r.try_get("end_reason")?)?,
        last_error: r.try_get("last_error")?,
        cluster: r.try_get("cluster")?,
        applied_hash: r.try_get("applied_hash")?,
        teardown_started_at: r.try_get("teardown_started_at")?,
        seed_generation: r.try_get("seed_generation")?,
        expires_at: r.try_get("expires_at")?,
        installation_id: r
            .try_get::<Option<i64>, _>("installation_id")?
            .map(InstallationId),
        keep: flag("keep")?,
        redeploy_generation: r.try_get("redeploy_generation")?,
        created_at: r.try_get("created_at")?,
        head_changed_at: r.try_get("head_changed_at")?,
        names: r.try_get("names")?,
        draft: flag("draft")?,
        labeled: flag("labeled")?,
        deploy_by: r.try_get("deploy_by")?,
        paths_file: r.try_get("paths_file")?,
        paths_sha: r.try_get("paths_sha")?,
        wait_override_sha: r.try_get("wait_override_sha")?,
        template_generation: r.try_get("template_generation")?,
        template_seed: r.try_get("template_seed")?,
        sleeping_since: r.try_get("sleeping_since")?,
        woke_at: r.try_get("woke_at")?,
        version: r.try_get("version")?,
    })
}

pub async fn ended_on_purpose_at(
    pool: &PgPool,
    repo: &str,
    number: i64,
) -> sqlx::Result<Option<String>> {
    let sha = sqlx::query_scalar!(
        "SELECT ended_sha FROM closed_prs WHERE repo = $1 AND number = $2",
        repo,
        number
    )
    .fetch_optional(pool)
    .await?;
    Ok(sha.flatten())
}

pub async fn record_names(pool: &PgPool, id: i64, names: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET names = $2 WHERE id = $1 AND names IS NULL",
        id,
        names
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn preview_id(pool: &PgPool, repo: &str, number: u32) -> anyhow::Result<Option<i64>> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM previews WHERE repo = $1 AND number = $2",
        repo,
        i64::from(number)
    )
    .fetch_optional(pool)
    .await?)
}

pub async fn preview_ids(pool: &PgPool) -> sqlx::Result<Vec<i64>> {
    // Aliased: SQLite's statement has the same text otherwise, and `.sqlx/` keys a statement by
    // its text alone.
    sqlx::query_scalar!("SELECT p.id FROM previews p ORDER BY p.id")
        .fetch_all(pool)
        .await
}

pub async fn preview_rows(
    pool: &PgPool,
    after: i64,
    limit: i64,
) -> anyhow::Result<Vec<PreviewRow>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM previews WHERE id > $1 ORDER BY id LIMIT $2"
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.iter().map(preview_of).collect::<sqlx::Result<_>>()?)
}

pub async fn preview_row(pool: &PgPool, id: i64) -> anyhow::Result<Option<PreviewRow>> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM previews WHERE id = $1"))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(preview_of).transpose()?)
}

/// Deployable previews still without a cluster, oldest first (by `previews_unplaced`).
pub async fn unplaced(pool: &PgPool) -> anyhow::Result<Vec<PreviewRow>> {
    let rows = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM previews
         WHERE desired = 'deployed' AND cluster IS NULL ORDER BY created_at, id"
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows.iter().map(preview_of).collect::<sqlx::Result<_>>()?)
}

/// `db::record_state`: the state, its history row, the ledger's confirmation, one commit.
pub async fn record_state(
    pool: &PgPool,
    id: i64,
    seen: &Observation<'_>,
    now: i64,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    write_noted(&mut tx, &Noted::from(seen), id, now).await?;
    tx.commit().await?;
    Ok(())
}

/// `Noted::write`, in the caller's transaction.
pub(in crate::db) async fn write_noted(
    conn: &mut PgConnection,
    noted: &Noted,
    id: i64,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(seed) = noted.ready_at_seed {
        sqlx::query!(
            "UPDATE ledger SET state = 'confirmed', confirmed_at = $2
             WHERE preview_id = $1 AND state = 'applied'",
            id,
            now
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query!(
            "UPDATE previews SET template_confirmed = $2 WHERE id = $1 AND template_seed = $2",
            id,
            seed
        )
        .execute(&mut *conn)
        .await?;
    }
    if let Some((what, message)) = &noted.history {
        super::history::add_of(conn, id, *what, message, now).await?;
    }
    sqlx::query!(
        "UPDATE previews SET observed = $2, last_error = $3, updated_at = $4,
             woke_at = CASE WHEN $2 IN ('ready', 'applied') THEN NULL ELSE woke_at END
         WHERE id = $1",
        id,
        noted.state,
        noted.message.as_deref(),
        now
    )
    .execute(conn)
    .await
    .map(drop)
}

pub async fn set_observed(
    pool: &PgPool,
    id: i64,
    observed: crate::preview::ObservedState,
    error: Option<&str>,
    applied_hash: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET observed = $2, last_error = $3,
             applied_hash = COALESCE($4, applied_hash), updated_at = $5 WHERE id = $1",
        id,
        observed.as_str(),
        error,
        applied_hash,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

/// `db::start_teardown`: false when it had already begun.
pub async fn start_teardown(pool: &PgPool, id: i64, now: i64) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let done = sqlx::query!(
        "UPDATE previews SET teardown_started_at = $2, observed = 'tearing_down', applied_hash = NULL
         WHERE id = $1 AND teardown_started_at IS NULL",
        id,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    let row = sqlx::query!(
        "SELECT repo, number, head_sha, end_reason FROM previews WHERE id = $1",
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    let (repo, number, head_sha) = (row.repo, row.number, row.head_sha);
    let end_reason: Option<EndReason> = maybe_word(row.end_reason)?;
    let reason = format!("PR {}", end_reason.map_or("closed", EndReason::as_str));
    let history = HistoryRow {
        head_sha: Some(&head_sha),
        ..HistoryRow::by_previewd(
            &repo,
            pr_number(number)?,
            HistoryKind::TeardownStarted,
            &reason,
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    tx.commit().await?;
    Ok(true)
}

pub async fn clear_teardown(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET teardown_started_at = NULL WHERE id = $1",
        id
    )
    .execute(pool)
    .await
    .map(drop)
}

/// What the end of a preview reports: its PR, head, installation and why it ended.
struct Ending {
    repo: String,
    number: i64,
    head_sha: String,
    installation_id: Option<i64>,
    end_reason: Option<String>,
}

/// `db::forget_preview`: the row deleted and the final history row written, in one
/// transaction, only if the preview is still meant to be absent.
pub async fn forget_preview(pool: &PgPool, id: i64, reason: &str, now: i64) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    // Locked, so two replicas' teardowns write one "destroyed" row.
    let row = sqlx::query_as!(
        Ending,
        "SELECT repo, number, head_sha, installation_id, end_reason
         FROM previews WHERE id = $1 AND desired = 'absent' FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(Ending {
        repo,
        number,
        head_sha,
        installation_id,
        end_reason,
    }) = row
    else {
        return Ok(false);
    };
    // Commands are answered even after their preview is gone: keyed by repo and number.
    sqlx::query!(
        "UPDATE commands SET preview_id = NULL WHERE preview_id = $1",
        id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!("DELETE FROM previews WHERE id = $1", id)
        .execute(&mut *tx)
        .await?;
    let history = HistoryRow {
        head_sha: Some(&head_sha),
        ..HistoryRow::by_previewd(
            &repo,
            pr_number(number)?,
            HistoryKind::Destroyed,
            reason,
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    super::github::mark_final_report(
        &mut tx,
        &repo,
        number,
        installation_id.map(InstallationId),
        &head_sha,
        maybe_word::<EndReason>(end_reason)?,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

pub async fn add_history_now(
    pool: &PgPool,
    key: &PreviewKey,
    what: HistoryKind,
    reason: &str,
    now: i64,
) -> sqlx::Result<()> {
    let row = HistoryRow::by_previewd(key.repo.as_str(), key.number, what, reason, now);
    super::history::add(&mut *pool.acquire().await?, &row).await
}
