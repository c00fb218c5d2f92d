//! `db::github` on PostgreSQL: queued commands and their outcomes, and what was last
//! reported per PR.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use super::{flag, word_of};
use crate::db::{CommandRow, GIVEN_UP, HistoryRow, Owed, Thread, TrackedPull};
use crate::preview::{CommandStatus, EndReason, HistoryKind, InstallationId};

pub async fn owed(pool: &PgPool) -> anyhow::Result<Owed> {
    let (commands, finals, notices): (bool, bool, bool) = sqlx::query_as(
        "SELECT EXISTS (SELECT 1 FROM commands WHERE status = 'pending' OR answered = 0),
                EXISTS (SELECT 1 FROM github_threads t WHERE final_pending = 1 AND given_up IS NULL
                          AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)),
                EXISTS (SELECT 1 FROM notices WHERE posted_at IS NULL)",
    )
    .fetch_one(pool)
    .await?;
    Ok(Owed {
        commands,
        finals,
        notices,
    })
}

const COMMAND: &str =
    "SELECT id, repo, number, comment_id, actor, association, line, installation_id,
        status, reply, reply_comment_id, created_at, commented_at, standing, answer_failures
     FROM commands";

fn command_of(row: &PgRow) -> sqlx::Result<CommandRow> {
    let repo: String = row.try_get("repo")?;
    let number: i64 = row.try_get("number")?;
    let status: String = row.try_get("status")?;
    Ok(CommandRow {
        id: row.try_get("id")?,
        repo: repo.parse().map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        number: u32::try_from(number).map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        comment_id: row.try_get("comment_id")?,
        actor: row.try_get("actor")?,
        association: row.try_get("association")?,
        line: row.try_get("line")?,
        installation_id: row
            .try_get::<Option<i64>, _>("installation_id")?
            .map(InstallationId),
        status: word_of(&status)?,
        reply: row.try_get("reply")?,
        reply_comment_id: row.try_get("reply_comment_id")?,
        created_at: row.try_get("created_at")?,
        commented_at: row.try_get("commented_at")?,
        standing: row.try_get::<Option<i64>, _>("standing")?.map(|s| s != 0),
        answer_failures: row.try_get("answer_failures")?,
    })
}

pub async fn pending_commands(pool: &PgPool) -> sqlx::Result<Vec<CommandRow>> {
    let sql = format!("{COMMAND} WHERE status = 'pending' ORDER BY id");
    let rows = sqlx::query(&sql).fetch_all(pool).await?;
    rows.iter().map(command_of).collect()
}

pub async fn unanswered_commands(pool: &PgPool) -> sqlx::Result<Vec<CommandRow>> {
    let sql = format!("{COMMAND} WHERE answered = 0 AND status != 'pending' ORDER BY id");
    let rows = sqlx::query(&sql).fetch_all(pool).await?;
    rows.iter().map(command_of).collect()
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
    let done = sqlx::query(
        "UPDATE commands SET status = $2, reply = $3, done_at = $4 WHERE id = $1 AND status = 'pending'",
    )
    .bind(command.id)
    .bind(status.as_str())
    .bind(reply)
    .bind(now)
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
    sqlx::query("UPDATE commands SET standing = $2 WHERE id = $1 AND status = 'pending'")
        .bind(id)
        .bind(flag(standing))
        .execute(pool)
        .await
        .map(drop)
}

pub async fn set_reply_comment(pool: &PgPool, id: i64, comment_id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE commands SET reply_comment_id = $2 WHERE id = $1")
        .bind(id)
        .bind(comment_id)
        .execute(pool)
        .await
        .map(drop)
}

pub async fn mark_answered(pool: &PgPool, id: i64, answer: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE commands SET answered = 1, answer = $2, answered_at = $3 WHERE id = $1")
        .bind(id)
        .bind(answer)
        .bind(now)
        .execute(pool)
        .await
        .map(drop)
}

pub async fn answers_since(pool: &PgPool, actor: &str, since: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM commands
         WHERE lower(actor) = lower($1) AND answer IN ('replied', 'reacted') AND answered_at >= $2",
    )
    .bind(actor)
    .bind(since)
    .fetch_one(pool)
    .await
}

pub async fn answer_failed(pool: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "UPDATE commands SET answer_failures = answer_failures + 1 WHERE id = $1
         RETURNING answer_failures",
    )
    .bind(id)
    .fetch_one(pool)
    .await
}

pub async fn notice_failed(pool: &PgPool, id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "UPDATE notices SET failures = failures + 1 WHERE id = $1 RETURNING failures",
    )
    .bind(id)
    .fetch_one(pool)
    .await
}

const THREAD: &str = "SELECT repo, number, installation_id, head_sha, comment_id, body_hash,
        deployment_id, deployment_sha, deployment_state, end_reason, final_pending, given_up
     FROM github_threads t";

fn thread_of(row: &PgRow) -> sqlx::Result<Thread> {
    let end_reason: Option<String> = row.try_get("end_reason")?;
    Ok(Thread {
        repo: row.try_get("repo")?,
        number: row.try_get("number")?,
        installation_id: row
            .try_get::<Option<i64>, _>("installation_id")?
            .map(InstallationId),
        head_sha: row.try_get("head_sha")?,
        comment_id: row.try_get("comment_id")?,
        body_hash: row.try_get("body_hash")?,
        deployment_id: row.try_get("deployment_id")?,
        deployment_sha: row.try_get("deployment_sha")?,
        deployment_state: row.try_get("deployment_state")?,
        end_reason: end_reason.as_deref().map(word_of).transpose()?,
        final_pending: row.try_get::<i64, _>("final_pending")? != 0,
        given_up: row.try_get("given_up")?,
    })
}

pub async fn thread(pool: &PgPool, repo: &str, number: i64) -> anyhow::Result<Option<Thread>> {
    let sql = format!("{THREAD} WHERE repo = $1 AND number = $2");
    let row = sqlx::query(&sql)
        .bind(repo)
        .bind(number)
        .fetch_optional(pool)
        .await?;
    Ok(row.as_ref().map(thread_of).transpose()?)
}

pub async fn pending_finals(pool: &PgPool) -> sqlx::Result<Vec<Thread>> {
    let sql = format!(
        "{THREAD} WHERE final_pending = 1 AND given_up IS NULL
           AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number)"
    );
    let rows = sqlx::query(&sql).fetch_all(pool).await?;
    rows.iter().map(thread_of).collect()
}

/// `db::github::save_thread` says why `final_pending` and `end_reason` are not updated.
pub async fn save_thread(pool: &PgPool, t: &Thread, now: i64) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO github_threads (repo, number, installation_id, head_sha, comment_id, body_hash,
                                     deployment_id, deployment_sha, deployment_state, final_pending, updated_at, end_reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (repo, number) DO UPDATE SET
             installation_id = excluded.installation_id, head_sha = excluded.head_sha,
             comment_id = excluded.comment_id, body_hash = excluded.body_hash,
             deployment_id = excluded.deployment_id, deployment_sha = excluded.deployment_sha,
             deployment_state = excluded.deployment_state,
             updated_at = excluded.updated_at, failures = 0",
    )
    .bind(&t.repo)
    .bind(t.number)
    .bind(t.installation_id.map(|i| i.0))
    .bind(&t.head_sha)
    .bind(t.comment_id)
    .bind(&t.body_hash)
    .bind(t.deployment_id)
    .bind(&t.deployment_sha)
    .bind(&t.deployment_state)
    .bind(flag(t.final_pending))
    .bind(now)
    .bind(t.end_reason.map(EndReason::as_str))
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
    sqlx::query(
        "UPDATE github_threads SET final_pending = 0, updated_at = $4
         WHERE repo = $1 AND number = $2 AND end_reason IS NOT DISTINCT FROM $3",
    )
    .bind(repo)
    .bind(number)
    .bind(end_reason.map(EndReason::as_str))
    .bind(now)
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
    sqlx::query(
        "INSERT INTO github_threads (repo, number, failures, updated_at) VALUES ($1, $2, 1, $3)
         ON CONFLICT (repo, number) DO UPDATE SET failures = github_threads.failures + 1,
             updated_at = excluded.updated_at",
    )
    .bind(repo)
    .bind(number)
    .bind(now)
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
    let given_up = sqlx::query(
        "UPDATE github_threads SET given_up = $3, final_pending = 0
         WHERE repo = $1 AND number = $2 AND failures >= $4 AND given_up IS NULL",
    )
    .bind(repo)
    .bind(number)
    .bind(error)
    .bind(limit)
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
    let given_up = sqlx::query(
        "UPDATE github_threads SET deployment_sha = $3, deployment_state = $5, failures = 0
         WHERE repo = $1 AND number = $2 AND failures >= $4",
    )
    .bind(repo)
    .bind(number)
    .bind(head_sha)
    .bind(limit)
    .bind(GIVEN_UP)
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
    sqlx::query(
        "INSERT INTO github_threads (repo, number, installation_id, head_sha, end_reason, final_pending, updated_at)
         VALUES ($1, $2, $3, $4, $5, 1, $6)
         ON CONFLICT (repo, number) DO UPDATE SET final_pending = 1, head_sha = excluded.head_sha,
             installation_id = COALESCE(excluded.installation_id, github_threads.installation_id),
             end_reason = excluded.end_reason, updated_at = excluded.updated_at",
    )
    .bind(repo)
    .bind(number)
    .bind(installation_id.map(|i| i.0))
    .bind(head_sha)
    .bind(end_reason.map(EndReason::as_str))
    .bind(now)
    .execute(tx)
    .await
    .map(drop)
}

pub async fn tracked_pulls(pool: &PgPool) -> sqlx::Result<Vec<TrackedPull>> {
    let rows: Vec<(String, i64, String, Option<i64>, bool, i64)> = sqlx::query_as(
        "SELECT repo, number, head_sha, installation_id, desired != 'absent', labeled FROM previews",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(repo, number, head_sha, installation_id, live, labeled)| TrackedPull {
                repo,
                number,
                head_sha,
                installation_id,
                live,
                labeled: labeled != 0,
            },
        )
        .collect())
}

pub async fn known_repos(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("SELECT repo FROM previews UNION SELECT repo FROM history")
        .fetch_all(pool)
        .await
}
