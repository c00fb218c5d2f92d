//! `db::github` on PostgreSQL: queued commands and their outcomes, and what was last
//! reported per PR.

use sqlx::{PgConnection, PgPool};

use super::{flag, word_of};
use crate::db::{CommandRow, GIVEN_UP, HistoryRow, Owed, Thread, TrackedPull};
use crate::preview::{CommandStatus, EndReason, HistoryKind, InstallationId};

pub async fn owed(pool: &PgPool) -> anyhow::Result<Owed> {
    // EXISTS is never NULL.
    let owed = sqlx::query!(
        r#"SELECT EXISTS (SELECT 1 FROM commands WHERE status = 'pending' OR answered = 0) AS "commands!",
                EXISTS (SELECT 1 FROM github_threads t WHERE final_pending = 1 AND given_up IS NULL
                          AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)) AS "finals!",
                EXISTS (SELECT 1 FROM notices WHERE posted_at IS NULL) AS "notices!""#
    )
    .fetch_one(pool)
    .await?;
    Ok(Owed {
        commands: owed.commands,
        finals: owed.finals,
        notices: owed.notices,
    })
}

/// A row of `commands` as both readers select it: the compiler holds each of their column
/// lists to these fields.
struct Command {
    id: i64,
    repo: String,
    number: i64,
    comment_id: i64,
    actor: String,
    association: String,
    line: String,
    installation_id: Option<i64>,
    status: String,
    reply: Option<String>,
    reply_comment_id: Option<i64>,
    created_at: i64,
    commented_at: Option<i64>,
    standing: Option<i64>,
    answer_failures: i64,
}

fn command_of(row: Command) -> sqlx::Result<CommandRow> {
    Ok(CommandRow {
        id: row.id,
        repo: row
            .repo
            .parse()
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        number: u32::try_from(row.number).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        comment_id: row.comment_id,
        actor: row.actor,
        association: row.association,
        line: row.line,
        installation_id: row.installation_id.map(InstallationId),
        status: word_of(&row.status)?,
        reply: row.reply,
        reply_comment_id: row.reply_comment_id,
        created_at: row.created_at,
        commented_at: row.commented_at,
        standing: row.standing.map(|s| s != 0),
        answer_failures: row.answer_failures,
    })
}

pub async fn pending_commands(pool: &PgPool) -> sqlx::Result<Vec<CommandRow>> {
    let rows = sqlx::query_as!(
        Command,
        "SELECT id, repo, number, comment_id, actor, association, line, installation_id,
            status, reply, reply_comment_id, created_at, commented_at, standing, answer_failures
         FROM commands WHERE status = 'pending' ORDER BY id"
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(command_of).collect()
}

pub async fn unanswered_commands(pool: &PgPool) -> sqlx::Result<Vec<CommandRow>> {
    let rows = sqlx::query_as!(
        Command,
        "SELECT id, repo, number, comment_id, actor, association, line, installation_id,
            status, reply, reply_comment_id, created_at, commented_at, standing, answer_failures
         FROM commands WHERE answered = 0 AND status != 'pending' ORDER BY id"
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(command_of).collect()
}

/// A command's outcome and its history row, in the transaction that made its effect;
/// false (nothing written) if it had already run. The `status = 'pending'` guard waits for
/// another replica's outcome of the same command and then finds the row done.
pub async fn finish_command(
    tx: &mut PgConnection,
    command: &CommandRow,
    status: CommandStatus,
    what: HistoryKind,
    reply: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE commands SET status = $2, reply = $3, done_at = $4 WHERE id = $1 AND status = 'pending'",
        command.id,
        status.as_str(),
        reply,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    let reason = format!("{}: {reply}", command.line);
    let history = HistoryRow {
        actor: &command.actor,
        ..HistoryRow::by_previewd(command.repo.as_str(), command.number, what, &reason, now)
    };
    super::history::add(tx, &history).await?;
    Ok(true)
}

pub async fn set_standing(pool: &PgPool, id: i64, standing: bool) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE commands SET standing = $2 WHERE id = $1 AND status = 'pending'",
        id,
        flag(standing)
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn set_reply_comment(pool: &PgPool, id: i64, comment_id: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE commands SET reply_comment_id = $2 WHERE id = $1",
        id,
        comment_id
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn mark_answered(pool: &PgPool, id: i64, answer: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE commands SET answered = 1, answer = $2, answered_at = $3 WHERE id = $1",
        id,
        answer,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn answers_since(pool: &PgPool, actor: &str, since: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "answers!" FROM commands
         WHERE lower(actor) = lower($1) AND answer IN ('replied', 'reacted') AND answered_at >= $2"#,
        actor,
        since
    )
    .fetch_one(pool)
    .await
}

pub async fn answer_failed(pool: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "UPDATE commands SET answer_failures = answer_failures + 1 WHERE id = $1
         RETURNING answer_failures",
        id
    )
    .fetch_one(pool)
    .await
}

pub async fn notice_failed(pool: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "UPDATE notices SET failures = failures + 1 WHERE id = $1 RETURNING failures",
        id
    )
    .fetch_one(pool)
    .await
}

/// A row of `github_threads` as both readers select it: the compiler holds each of their
/// column lists to these fields.
struct ThreadRow {
    repo: String,
    number: i64,
    installation_id: Option<i64>,
    head_sha: Option<String>,
    comment_id: Option<i64>,
    body_hash: Option<String>,
    deployment_id: Option<i64>,
    deployment_sha: Option<String>,
    deployment_state: Option<String>,
    end_reason: Option<String>,
    final_pending: i64,
    given_up: Option<String>,
}

fn thread_of(row: ThreadRow) -> sqlx::Result<Thread> {
    Ok(Thread {
        repo: row.repo,
        number: row.number,
        installation_id: row.installation_id.map(InstallationId),
        head_sha: row.head_sha,
        comment_id: row.comment_id,
        body_hash: row.body_hash,
        deployment_id: row.deployment_id,
        deployment_sha: row.deployment_sha,
        deployment_state: row.deployment_state,
        end_reason: row.end_reason.as_deref().map(word_of).transpose()?,
        final_pending: row.final_pending != 0,
        given_up: row.given_up,
    })
}

pub async fn thread(pool: &PgPool, repo: &str, number: i64) -> anyhow::Result<Option<Thread>> {
    let row = sqlx::query_as!(
        ThreadRow,
        "SELECT repo, number, installation_id, head_sha, comment_id, body_hash,
            deployment_id, deployment_sha, deployment_state, end_reason, final_pending, given_up
         FROM github_threads t WHERE repo = $1 AND number = $2",
        repo,
        number
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(thread_of).transpose()?)
}

pub async fn pending_finals(pool: &PgPool) -> sqlx::Result<Vec<Thread>> {
    let rows = sqlx::query_as!(
        ThreadRow,
        "SELECT repo, number, installation_id, head_sha, comment_id, body_hash,
            deployment_id, deployment_sha, deployment_state, end_reason, final_pending, given_up
         FROM github_threads t WHERE final_pending = 1 AND given_up IS NULL
           AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)"
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(thread_of).collect()
}

/// `db::github::save_thread` says why `final_pending` and `end_reason` are not updated.
pub async fn save_thread(pool: &PgPool, t: &Thread, now: i64) -> anyhow::Result<()> {
    sqlx::query!(
        "INSERT INTO github_threads (repo, number, installation_id, head_sha, comment_id, body_hash,
                                     deployment_id, deployment_sha, deployment_state, final_pending, updated_at, end_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (repo, number) DO UPDATE SET
             installation_id = excluded.installation_id, head_sha = excluded.head_sha,
             comment_id = excluded.comment_id, body_hash = excluded.body_hash,
             deployment_id = excluded.deployment_id, deployment_sha = excluded.deployment_sha,
             deployment_state = excluded.deployment_state,
             updated_at = excluded.updated_at, failures = 0",
        t.repo,
        t.number,
        t.installation_id.map(|i| i.0),
        t.head_sha,
        t.comment_id,
        t.body_hash,
        t.deployment_id,
        t.deployment_sha,
        t.deployment_state,
        flag(t.final_pending),
        now,
        t.end_reason.map(EndReason::as_str)
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn final_posted(
    pool: &PgPool,
    repo: &str,
    number: i64,
    end_reason: Option<EndReason>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE github_threads SET final_pending = 0, updated_at = $4
         WHERE repo = $1 AND number = $2 AND end_reason IS NOT DISTINCT FROM $3",
        repo,
        number,
        end_reason.map(EndReason::as_str),
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

async fn count_refusal(
    conn: &mut PgConnection,
    repo: &str,
    number: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO github_threads (repo, number, failures, updated_at) VALUES ($1, $2, 1, $3)
         ON CONFLICT (repo, number) DO UPDATE SET failures = github_threads.failures + 1,
             updated_at = excluded.updated_at",
        repo,
        number,
        now
    )
    .execute(conn)
    .await
    .map(drop)
}

/// `db::github::thread_failed`: the count and the give-up in one transaction, so a refusal
/// another replica counts meanwhile cannot slip between them.
pub async fn thread_failed(
    pool: &PgPool,
    repo: &str,
    number: i64,
    error: &str,
    limit: i64,
    now: i64,
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    count_refusal(&mut tx, repo, number, now).await?;
    let given_up = sqlx::query!(
        "UPDATE github_threads SET given_up = $3, final_pending = 0
         WHERE repo = $1 AND number = $2 AND failures >= $4 AND given_up IS NULL",
        repo,
        number,
        error,
        limit
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(given_up.rows_affected() > 0)
}

pub async fn deployment_failed(
    pool: &PgPool,
    repo: &str,
    number: i64,
    head_sha: &str,
    limit: i64,
    now: i64,
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    count_refusal(&mut tx, repo, number, now).await?;
    let given_up = sqlx::query!(
        "UPDATE github_threads SET deployment_sha = $3, deployment_state = $5, failures = 0
         WHERE repo = $1 AND number = $2 AND failures >= $4",
        repo,
        number,
        head_sha,
        limit,
        GIVEN_UP
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(given_up.rows_affected() > 0)
}

/// In the transaction that forgets a preview: its PR still needs the "destroyed" report.
pub async fn mark_final_report(
    tx: &mut PgConnection,
    repo: &str,
    number: i64,
    installation_id: Option<InstallationId>,
    head_sha: &str,
    end_reason: Option<EndReason>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO github_threads (repo, number, installation_id, head_sha, end_reason, final_pending, updated_at)
         VALUES ($1, $2, $3, $4, $5, 1, $6)
         ON CONFLICT (repo, number) DO UPDATE SET final_pending = 1, head_sha = excluded.head_sha,
             installation_id = COALESCE(excluded.installation_id, github_threads.installation_id),
             end_reason = excluded.end_reason, updated_at = excluded.updated_at",
        repo,
        number,
        installation_id.map(|i| i.0),
        head_sha,
        end_reason.map(EndReason::as_str),
        now
    )
    .execute(tx)
    .await
    .map(drop)
}

pub async fn tracked_pulls(pool: &PgPool) -> sqlx::Result<Vec<TrackedPull>> {
    // `desired` is NOT NULL, so is the comparison.
    let rows = sqlx::query!(
        r#"SELECT repo, number, head_sha, installation_id, desired != 'absent' AS "live!", labeled FROM previews"#
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| TrackedPull {
            repo: r.repo,
            number: r.number,
            head_sha: r.head_sha,
            installation_id: r.installation_id,
            live: r.live,
            labeled: r.labeled != 0,
        })
        .collect())
}

pub async fn known_repos(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    // Both columns are NOT NULL. Aliased: SQLite's statement has the same text otherwise,
    // and `.sqlx/` keys a statement by its text alone.
    sqlx::query_scalar!(
        r#"SELECT p.repo AS "repo!" FROM previews p UNION SELECT h.repo FROM history h"#
    )
    .fetch_all(pool)
    .await
}
