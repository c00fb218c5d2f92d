//! What previewd last reported per PR (`github_threads`): saved after each write GitHub
//! took, counted when GitHub refuses for good, and marked when a preview's end owes its
//! "destroyed" report.

use rusqlite::OptionalExtension;
use sqlx::{SqliteConnection, SqlitePool};

use crate::db::{State, pg};
use crate::preview::{EndReason, InstallationId};

/// What previewd last told GitHub about one PR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Thread {
    pub repo: String,
    pub number: i64,
    pub installation_id: Option<InstallationId>,
    pub head_sha: Option<String>,
    pub comment_id: Option<i64>,
    pub body_hash: Option<String>,
    pub deployment_id: Option<i64>,
    pub deployment_sha: Option<String>,
    pub deployment_state: Option<String>,
    pub end_reason: Option<EndReason>,
    pub final_pending: bool,
    /// The permanent error its reporting ended on: nothing more is sent for this PR.
    pub given_up: Option<String>,
}

pub async fn thread(state: &State, repo: &str, number: i64) -> anyhow::Result<Option<Thread>> {
    if let Some(pg) = state.postgres() {
        return pg::github::thread(pg, repo, number).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT repo, number, installation_id, head_sha, comment_id, body_hash, deployment_id,
                    deployment_sha, deployment_state, end_reason, final_pending, given_up
             FROM github_threads WHERE repo = ?1 AND number = ?2",
        )?
        .query_row(rusqlite::params![repo, number], |r| {
            Ok(Thread {
                repo: r.get("repo")?,
                number: r.get("number")?,
                installation_id: r.get("installation_id")?,
                head_sha: r.get("head_sha")?,
                comment_id: r.get("comment_id")?,
                body_hash: r.get("body_hash")?,
                deployment_id: r.get("deployment_id")?,
                deployment_sha: r.get("deployment_sha")?,
                deployment_state: r.get("deployment_state")?,
                end_reason: r.get("end_reason")?,
                final_pending: r.get("final_pending")?,
                given_up: r.get("given_up")?,
            })
        })
        .optional()
    })
}

/// Threads whose "destroyed" report has not reached GitHub yet.
pub async fn pending_finals(state: &State) -> sqlx::Result<Vec<Thread>> {
    if let Some(pg) = state.postgres() {
        return pg::github::pending_finals(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        Thread,
        r#"SELECT repo, number, installation_id AS "installation_id: InstallationId", head_sha,
                  comment_id, body_hash, deployment_id, deployment_sha, deployment_state,
                  end_reason AS "end_reason: EndReason", final_pending AS "final_pending: bool",
                  given_up
           FROM github_threads t WHERE final_pending = 1 AND given_up IS NULL
             AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)"#
    )
    .fetch_all(pool)
    .await
}

/// Saved after a write GitHub took, which also ends any run of permanent refusals. An
/// existing thread's `final_pending` and `end_reason` are not written here: they belong to
/// the preview's end (`mark_final_report`), which may commit while a report is on its way to
/// GitHub, and a report saved after it must not take back the "destroyed" it owes
/// (`final_posted` clears it once said).
pub async fn save_thread(state: &State, t: &Thread, now: i64) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::github::save_thread(pg, t, now).await;
    }
    let db = state.inline();
    let t = t.clone();
    db.write(move |tx| {
        tx.prepare_cached(
            "INSERT INTO github_threads (repo, number, installation_id, head_sha, comment_id, body_hash,
                                         deployment_id, deployment_sha, deployment_state, final_pending, updated_at, end_reason)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT (repo, number) DO UPDATE SET
                 installation_id = excluded.installation_id, head_sha = excluded.head_sha,
                 comment_id = excluded.comment_id, body_hash = excluded.body_hash,
                 deployment_id = excluded.deployment_id, deployment_sha = excluded.deployment_sha,
                 deployment_state = excluded.deployment_state,
                 updated_at = excluded.updated_at, failures = 0",
        )?
        .execute(rusqlite::params![
            t.repo,
            t.number,
            t.installation_id,
            t.head_sha,
            t.comment_id,
            t.body_hash,
            t.deployment_id,
            t.deployment_sha,
            t.deployment_state,
            t.final_pending,
            now,
            t.end_reason
        ])
        .map(drop)
    })
    .await
}

/// The "destroyed" report for `end_reason` is on GitHub: not owed any more, unless the
/// preview ended again since, for another reason.
pub async fn final_posted(
    state: &State,
    repo: &str,
    number: i64,
    end_reason: Option<EndReason>,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::github::final_posted(pg, repo, number, end_reason, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE github_threads SET final_pending = 0, updated_at = ?4
         WHERE repo = ?1 AND number = ?2 AND end_reason IS ?3",
        repo,
        number,
        end_reason,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Counts one more permanent refusal in the PR's thread.
async fn count_refusal(pool: &SqlitePool, repo: &str, number: i64, now: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO github_threads (repo, number, failures, updated_at) VALUES (?1, ?2, 1, ?3)
         ON CONFLICT (repo, number) DO UPDATE SET failures = github_threads.failures + 1,
             updated_at = excluded.updated_at",
        repo,
        number,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

/// One more permanent refusal of a PR's reporting; with `limit` of them in a row, the
/// thread is given up on `error`. Returns whether it now is.
pub async fn thread_failed(
    state: &State,
    repo: &str,
    number: i64,
    error: &str,
    limit: i64,
    now: i64,
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::github::thread_failed(pg, repo, number, error, limit, now).await;
    }
    let pool = state.pool();
    count_refusal(pool, repo, number, now).await?;
    let given_up = sqlx::query!(
        "UPDATE github_threads SET given_up = ?3, final_pending = 0
         WHERE repo = ?1 AND number = ?2 AND failures >= ?4 AND given_up IS NULL",
        repo,
        number,
        error,
        limit
    )
    .execute(pool)
    .await?;
    Ok(given_up.rows_affected() > 0)
}

/// `deployment_state` of a head whose deployment GitHub refused for good.
pub const GIVEN_UP: &str = "given_up";

/// One more permanent refusal of the deployment of `head_sha`; with `limit` of them in a
/// row, that head's deployment is given up (the comment goes on). Returns whether it now is.
pub async fn deployment_failed(
    state: &State,
    repo: &str,
    number: i64,
    head_sha: &str,
    limit: i64,
    now: i64,
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::github::deployment_failed(pg, repo, number, head_sha, limit, now).await;
    }
    let pool = state.pool();
    count_refusal(pool, repo, number, now).await?;
    let given_up = sqlx::query!(
        "UPDATE github_threads SET deployment_sha = ?3, deployment_state = ?5, failures = 0
         WHERE repo = ?1 AND number = ?2 AND failures >= ?4",
        repo,
        number,
        head_sha,
        limit,
        GIVEN_UP
    )
    .execute(pool)
    .await?;
    Ok(given_up.rows_affected() > 0)
}

/// In the transaction that forgets a preview: its PR still needs the "destroyed" report.
pub async fn mark_final_report(
    tx: &mut SqliteConnection,
    repo: &str,
    number: i64,
    installation_id: Option<InstallationId>,
    head_sha: &str,
    end_reason: Option<EndReason>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO github_threads (repo, number, installation_id, head_sha, end_reason, final_pending, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6)
         ON CONFLICT (repo, number) DO UPDATE SET final_pending = 1, head_sha = excluded.head_sha,
             installation_id = COALESCE(excluded.installation_id, github_threads.installation_id),
             end_reason = excluded.end_reason, updated_at = excluded.updated_at",
        repo,
        number,
        installation_id,
        head_sha,
        end_reason,
        now
    )
    .execute(&mut *tx)
    .await
    .map(drop)
}
