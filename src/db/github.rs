//! Queries behind GitHub feedback: queued commands and their outcomes (each command's effect,
//! `effects`, history row and outcome in one transaction), and what was last reported per PR.

use rusqlite::OptionalExtension;
use sqlx::{SqliteConnection, SqlitePool};

use super::HistoryRow;
use super::{State, Tx, pg};
use crate::preview::{CommandStatus, EndReason, HistoryKind, InstallationId, PreviewKey, RepoName};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub id: i64,
    pub repo: RepoName,
    pub number: u32,
    pub comment_id: i64,
    pub actor: String,
    pub association: String,
    pub line: String,
    pub installation_id: Option<InstallationId>,
    pub status: CommandStatus,
    pub reply: Option<String>,
    pub reply_comment_id: Option<i64>,
    /// When intake queued it (previewd's clock).
    pub created_at: i64,
    /// `comment.created_at` (GitHub's clock).
    pub commented_at: Option<i64>,
    /// The commenter's standing when it ran (`None`: it ran before standing was recorded).
    pub standing: Option<bool>,
    /// Permanent refusals of its answer so far.
    pub answer_failures: i64,
}

impl CommandRow {
    /// The PR it was asked on.
    pub fn key(&self) -> PreviewKey {
        PreviewKey::new(self.repo.clone(), self.number)
    }
}

/// What the feedback worker owes besides the reports of the previews it was told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owed {
    /// Commands to run, or answers to post.
    pub commands: bool,
    /// "Destroyed" reports of previews whose row is gone (`pending_finals`).
    pub finals: bool,
    /// Notices to post (`unposted_notices`).
    pub notices: bool,
}

impl Owed {
    pub const EVERYTHING: Self = Self {
        commands: true,
        finals: true,
        notices: true,
    };
}

/// One look at what is owed, instead of a query for each: the worker wakes after every look
/// the reconciler takes, and almost always owes none of it (issue #17: four of the 37
/// statements a push ran, twice).
pub async fn owed(state: &State) -> anyhow::Result<Owed> {
    if let Some(pg) = state.postgres() {
        return pg::github::owed(pg).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM commands WHERE status = 'pending' OR answered = 0) AS commands,
                    EXISTS (SELECT 1 FROM github_threads t WHERE final_pending = 1 AND given_up IS NULL
                              AND NOT EXISTS (SELECT 1 FROM previews p WHERE p.repo = t.repo AND p.number = t.number))
                        AS finals,
                    EXISTS (SELECT 1 FROM notices WHERE posted_at IS NULL) AS notices",
        )?
        .query_row([], |r| {
            Ok(Owed {
                commands: r.get("commands")?,
                finals: r.get("finals")?,
                notices: r.get("notices")?,
            })
        })
    })
}

/// Commands not yet run, oldest first.
pub async fn pending_commands(state: &State) -> sqlx::Result<Vec<CommandRow>> {
    if let Some(pg) = state.postgres() {
        return pg::github::pending_commands(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        CommandRow,
        r#"SELECT id AS "id!", repo AS "repo: RepoName", number AS "number: u32", comment_id, actor, association, line,
                installation_id AS "installation_id: InstallationId", status AS "status: CommandStatus",
                reply, reply_comment_id, created_at, commented_at, standing AS "standing: bool", answer_failures
         FROM commands WHERE status = 'pending' ORDER BY id"#
    )
    .fetch_all(pool)
    .await
}

/// Commands that ran but whose answer is not yet on GitHub, oldest first.
pub async fn unanswered_commands(state: &State) -> sqlx::Result<Vec<CommandRow>> {
    if let Some(pg) = state.postgres() {
        return pg::github::unanswered_commands(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        CommandRow,
        r#"SELECT id AS "id!", repo AS "repo: RepoName", number AS "number: u32", comment_id, actor, association, line,
                installation_id AS "installation_id: InstallationId", status AS "status: CommandStatus",
                reply, reply_comment_id, created_at, commented_at, standing AS "standing: bool", answer_failures
         FROM commands WHERE answered = 0 AND status != 'pending' ORDER BY id"#
    )
    .fetch_all(pool)
    .await
}

/// A command's outcome, with its history row, inside the transaction that made its effect.
/// Returns false (and writes nothing) if the command had already run.
pub async fn finish_command(
    tx: &mut Tx,
    command: &CommandRow,
    status: CommandStatus,
    what: HistoryKind,
    reply: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let tx = match tx {
        Tx::Postgres(tx) => {
            return pg::github::finish_command(tx, command, status, what, reply, now).await;
        }
        Tx::Sqlite(tx) => &mut **tx,
    };
    let done = sqlx::query!(
        "UPDATE commands SET status = ?2, reply = ?3, done_at = ?4 WHERE id = ?1 AND status = 'pending'",
        command.id,
        status,
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
    super::history::add(&mut *tx, &history).await?;
    Ok(true)
}

/// The commenter's standing, recorded while the command is still pending (its outcome's
/// transaction follows): a crash in between runs it again, and records it again.
pub async fn set_standing(state: &State, id: i64, standing: bool) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::github::set_standing(pg, id, standing).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE commands SET standing = ?2 WHERE id = ?1 AND status = 'pending'",
        id,
        standing
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn set_reply_comment(state: &State, id: i64, comment_id: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::github::set_reply_comment(pg, id, comment_id).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE commands SET reply_comment_id = ?2 WHERE id = ?1",
        id,
        comment_id
    )
    .execute(pool)
    .await
    .map(drop)
}

/// `answer`: `replied`, `reacted`, `silent` or `given_up` (see migration 0009).
pub async fn mark_answered(state: &State, id: i64, answer: &str, now: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::github::mark_answered(pg, id, answer, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE commands SET answered = 1, answer = ?2, answered_at = ?3 WHERE id = ?1",
        id,
        answer,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Commands of `actor` (any case) answered on GitHub since `since`.
pub async fn answers_since(state: &State, actor: &str, since: i64) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::github::answers_since(pg, actor, since).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"SELECT COUNT(*) AS "n!: i64" FROM commands
           WHERE lower(actor) = lower(?1) AND answer IN ('replied', 'reacted') AND answered_at >= ?2"#,
        actor,
        since
    )
    .fetch_one(pool)
    .await
}

/// One more permanent refusal of a command's answer; the count so far.
pub async fn answer_failed(state: &State, id: i64) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::github::answer_failed(pg, id).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"UPDATE commands SET answer_failures = answer_failures + 1 WHERE id = ?1
           RETURNING answer_failures AS "n!: i64""#,
        id
    )
    .fetch_one(pool)
    .await
}

/// One more permanent refusal of a notice; the count so far.
pub async fn notice_failed(state: &State, id: i64) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::github::notice_failed(pg, id).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"UPDATE notices SET failures = failures + 1 WHERE id = ?1 RETURNING failures AS "n!: i64""#,
        id
    )
    .fetch_one(pool)
    .await
}

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

/// What resync compares GitHub's open PRs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackedPull {
    pub repo: String,
    pub number: i64,
    pub head_sha: String,
    pub installation_id: Option<i64>,
    /// Not being torn down.
    pub live: bool,
    /// Carries its repository's `trigger_label`, as last recorded.
    pub labeled: bool,
}

pub async fn tracked_pulls(state: &State) -> sqlx::Result<Vec<TrackedPull>> {
    if let Some(pg) = state.postgres() {
        return pg::github::tracked_pulls(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        TrackedPull,
        r#"SELECT repo, number, head_sha, installation_id, desired != 'absent' AS "live!: bool",
                  labeled AS "labeled: bool" FROM previews"#
    )
    .fetch_all(pool)
    .await
}

/// Every repository previewd has had previews for (not merely every repository an App
/// installation grants: resyncing those would deploy every old open PR at once).
pub async fn known_repos(state: &State) -> sqlx::Result<Vec<String>> {
    if let Some(pg) = state.postgres() {
        return pg::github::known_repos(pg).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(r#"SELECT repo AS "repo!" FROM previews UNION SELECT repo FROM history"#)
        .fetch_all(pool)
        .await
}
