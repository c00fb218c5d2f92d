//! Queries behind GitHub feedback: queued commands and their outcomes (each command's effect,
//! `effects`, history row and outcome in one transaction), and what was last reported per PR.

use super::HistoryRow;
use super::{State, Tx, pg};
use crate::preview::{CommandStatus, HistoryKind, InstallationId, PreviewKey, RepoName};

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

mod threads;
pub use threads::*;
