//! The intake writer's statements, run synchronously (rusqlite) where the writer runs.
//!
//! sqlx-sqlite hands every statement to a connection thread and back: two context switches
//! a statement, half the intake's CPU in issue #17's profile. The writer instead owns its
//! connection and runs a whole batch on it, on the runtime's thread (`intake`). The statements
//! are the ones the async functions beside them ran; tests/intake covers each.

use rusqlite::{Connection, OptionalExtension, params};

use super::DeliveryRow;
use super::connection::text_enum;
use crate::checks::CheckReport;
use crate::intent::{Ended, Outcome, PrChange, StoredPr};
use crate::preview::{Desired, PreviewKey};
use crate::webhook::{CommandComment, InstallationChange};

pub use rusqlite::{Connection as WriterConnection, Error, Result};

pub use super::connection::open;

fn word<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

// ---- deliveries ----

pub fn delivery_outcome(conn: &Connection, hook_id: &str, guid: &str) -> Result<Option<Outcome>> {
    let outcome: Option<String> = conn
        .prepare_cached("SELECT outcome FROM deliveries WHERE hook_id = ?1 AND guid = ?2")?
        .query_row(params![hook_id, guid], |r| r.get(0))
        .optional()?;
    Ok(outcome.as_deref().and_then(Outcome::parse))
}

/// Records a delivery seen for the first time (or last seen failing); returns false, and
/// writes nothing, when it was already handled: the dedup check and the insert in one step.
pub fn claim_delivery(conn: &Connection, row: &DeliveryRow<'_>) -> Result<bool> {
    let done = conn
        .prepare_cached(
            "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (hook_id, guid) DO UPDATE SET
                 outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at
             WHERE deliveries.outcome = 'failed'",
        )?
        .execute(params![
            row.hook_id,
            row.guid,
            row.event,
            row.action,
            row.outcome.as_str(),
            row.detail,
            row.received_at
        ])?;
    Ok(done > 0)
}

/// Records (or overwrites) a delivery's outcome.
pub fn record_delivery(conn: &Connection, row: &DeliveryRow<'_>) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (hook_id, guid) DO UPDATE SET
             outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at",
    )?
    .execute(params![
        row.hook_id,
        row.guid,
        row.event,
        row.action,
        row.outcome.as_str(),
        row.detail,
        row.received_at
    ])
    .map(drop)
}

pub use super::history::write as add_history;

// ---- pull requests ----

/// A PR change that applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// What the PR now wants.
    pub desired: Desired,
    /// Whether the reconciler has anything new to see (`StoredPr::moves_preview`).
    pub moved: bool,
    /// The recorded state again (a redelivery, `intent::merge`): nothing was written.
    pub again: bool,
}

/// Writes a PR's new state unless the row already holds a newer event (or the PR's end
/// forbids it): reads the row and the PR's end in one statement, merges the change into it
/// (`intent::merge`, pure) and writes the result, in the writer's transaction. Returns what
/// the PR now wants and whether that moved the preview, if the change applied.
pub fn apply_pr_change(conn: &Connection, change: &PrChange, now: i64) -> Result<Option<Applied>> {
    let pr = &change.pr;
    let repo = pr.key.repo.as_str();
    let number = pr.key.number;
    // A PR has a row, an end, both or neither: one query answers for both.
    let found = conn
        .prepare_cached(
            "SELECT p.id, p.repo_id, p.installation_id, p.title, p.author, p.head_sha, p.head_ref,
                    p.base_ref, p.fork, p.draft, p.desired, p.end_reason, p.approved_sha,
                    p.pr_updated_at, p.created_at, p.updated_at, p.expires_at, p.head_changed_at,
                    p.names, p.labeled, p.deploy_by, p.paths_file,
                    c.pr_updated_at AS closed_at, c.ended_at
             FROM (SELECT ?1 AS repo, ?2 AS number) k
             LEFT JOIN previews p ON p.repo = k.repo AND p.number = k.number
             LEFT JOIN closed_prs c ON c.repo = k.repo AND c.number = k.number",
        )?
        .query_row(params![repo, number], |r| {
            let id: Option<i64> = r.get("id")?;
            let stored = match id {
                None => None,
                Some(_) => Some(StoredPr {
                    repo_id: r.get("repo_id")?,
                    installation_id: r.get("installation_id")?,
                    title: r.get("title")?,
                    author: r.get("author")?,
                    head_sha: r.get("head_sha")?,
                    head_ref: r.get("head_ref")?,
                    base_ref: r.get("base_ref")?,
                    fork: r.get("fork")?,
                    draft: r.get("draft")?,
                    desired: r.get("desired")?,
                    end_reason: r.get("end_reason")?,
                    approved_sha: r.get("approved_sha")?,
                    pr_updated_at: r.get("pr_updated_at")?,
                    created_at: r.get("created_at")?,
                    updated_at: r.get("updated_at")?,
                    expires_at: r.get("expires_at")?,
                    head_changed_at: r.get("head_changed_at")?,
                    names: r.get("names")?,
                    labeled: r.get("labeled")?,
                    deploy_by: r.get("deploy_by")?,
                    paths_file: r.get("paths_file")?,
                }),
            };
            let ended = match r.get::<_, Option<i64>>("closed_at")? {
                None => None,
                Some(closed_at) => Some(Ended {
                    closed_at,
                    ended_at: r.get("ended_at")?,
                }),
            };
            Ok((id, stored, ended))
        })?;
    let (id, stored, ended) = found;
    let merged = crate::intent::merge(stored.as_ref(), ended.as_ref(), change, now);
    let moved = merged
        .as_ref()
        .is_some_and(|m| m.moves_preview(stored.as_ref()));
    match (&merged, id) {
        // The recorded state again (`intent::merge`: a redelivery): nothing to write, and
        // the commit holds the delivery's claim alone.
        (Some(new), Some(_)) if stored.as_ref() == Some(new) => {}
        // Only the times moved (a newer `synchronize` of a known head): writing just
        // them leaves the row's other indexes (desired, author, head...) untouched, pages
        // the commit's fsync would otherwise write again (issue #17's profile).
        (Some(new), Some(id)) if !moved => {
            conn.prepare_cached(
                "UPDATE previews SET pr_updated_at = ?2, updated_at = ?3, expires_at = ?4
                 WHERE id = ?1",
            )?
            .execute(params![
                id,
                new.pr_updated_at,
                new.updated_at,
                new.expires_at
            ])?;
        }
        (Some(new), id) => write_pr(conn, id, repo, number, new)?,
        (None, _) => {}
    }
    // A close, or a label taken away (`trigger = "label"`): only a newer event brings the
    // preview back. A close newer than an end on purpose clears that end's head (a reopen
    // comes back); an older one, replayed under a fresh id, leaves it.
    if change.desired == Some(Desired::Absent)
        || merged
            .as_ref()
            .is_some_and(|m| m.desired == Desired::Absent)
    {
        conn.prepare_cached(
            "INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (repo, number) DO UPDATE SET pr_updated_at = MAX(pr_updated_at, excluded.pr_updated_at),
                 ended_sha = CASE WHEN excluded.pr_updated_at > COALESCE(ended_at, 0) THEN NULL
                                  ELSE ended_sha END",
        )?
        .execute(params![repo, number, change.pr_updated_at])?;
    }
    let again = stored.is_some() && stored == merged;
    Ok(merged.map(|m| Applied {
        desired: m.desired,
        moved,
        again,
    }))
}

/// Writes a merged PR preview: a new row, or every column a PR change owns of row `id`.
fn write_pr(
    conn: &Connection,
    id: Option<i64>,
    repo: &str,
    number: u32,
    new: &StoredPr,
) -> Result<()> {
    let Some(id) = id else {
        conn.prepare_cached(
                "INSERT INTO previews (repo, number, repo_id, installation_id, title, author, head_sha,
                     head_ref, base_ref, fork, draft, desired, end_reason, pr_updated_at, created_at,
                     updated_at, expires_at, head_changed_at, names, labeled)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            )?
            .execute(params![
                repo,
                number,
                new.repo_id,
                new.installation_id,
                new.title,
                new.author,
                new.head_sha,
                new.head_ref,
                new.base_ref,
                new.fork,
                new.draft,
                new.desired.as_str(),
                new.end_reason,
                new.pr_updated_at,
                new.created_at,
                new.updated_at,
                new.expires_at,
                new.head_changed_at,
                new.names,
                new.labeled,
            ])?;
        // The reconciler's change marker (`db::changes`): a new preview is work.
        return super::changes::touch_pr(conn, repo, number);
    };
    conn.prepare_cached(
        "UPDATE previews SET repo_id = ?2, installation_id = ?3, title = ?4, author = ?5,
             head_sha = ?6, head_ref = ?7, base_ref = ?8, fork = ?9, draft = ?10, desired = ?11,
             end_reason = ?12, pr_updated_at = ?13, updated_at = ?14, expires_at = ?15,
             head_changed_at = ?16, labeled = ?17, created_at = ?18,
             -- A new head wakes a sleeping preview: it is deployed awake, hooks and all. So
             -- does any change of what is wanted (closed, reopened, out of draft): a sleep
             -- never outlives the preview it was for. (The right-hand sides read the row as
             -- it was.)
             slept_seconds = slept_seconds
                 + CASE WHEN head_sha <> ?6 OR desired <> ?11
                   THEN MAX(?14 - COALESCE(sleeping_since, ?14), 0) ELSE 0 END,
             saved_pod_seconds = saved_pod_seconds
                 + CASE WHEN head_sha <> ?6 OR desired <> ?11
                   THEN MAX(?14 - COALESCE(sleeping_since, ?14), 0) * COALESCE(used_pods, 0) ELSE 0 END,
             sleeping_since = CASE WHEN head_sha <> ?6 OR desired <> ?11 THEN NULL ELSE sleeping_since END,
             -- Deployed just now (out of draft, approved, reopened): its idle time starts now.
             last_used_at = CASE WHEN ?11 = 'deployed' AND desired <> 'deployed' THEN ?14
                            ELSE last_used_at END
         WHERE id = ?1",
    )?
    .execute(params![
        id,
        new.repo_id,
        new.installation_id,
        new.title,
        new.author,
        new.head_sha,
        new.head_ref,
        new.base_ref,
        new.fork,
        new.draft,
        new.desired.as_str(),
        new.end_reason,
        new.pr_updated_at,
        new.updated_at,
        new.expires_at,
        new.head_changed_at,
        new.labeled,
        new.created_at,
    ])?;
    super::changes::touch(conn, id)
}

pub fn has_preview(conn: &Connection, repo: &str, number: u32) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM previews WHERE repo = ?1 AND number = ?2")?
        .exists(params![repo, number])
}

// ---- commands ----

/// Queues a command once per comment id; returns false for a comment already queued.
pub fn queue_command(conn: &Connection, command: &CommandComment, now: i64) -> Result<bool> {
    let done = conn
        .prepare_cached(
            "INSERT INTO commands (preview_id, repo, number, comment_id, actor, association, line, created_at, installation_id, commented_at)
             VALUES ((SELECT id FROM previews WHERE repo = ?1 AND number = ?2), ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (comment_id) DO NOTHING",
        )?
        .execute(params![
            command.key.repo.as_str(),
            command.key.number,
            command.comment_id as i64,
            command.actor,
            command.association,
            command.line,
            now,
            command.installation_id.map(|id| id as i64),
            command.commented_at,
        ])?;
    if done > 0 {
        // The leader's reconciler tells the feedback worker, which runs it.
        super::changes::touch_pr(conn, command.key.repo.as_str(), command.key.number)?;
    }
    Ok(done > 0)
}

// ---- installations ----

pub fn apply_installation(conn: &Connection, change: &InstallationChange, now: i64) -> Result<()> {
    let (id, account, added, removed): (u64, Option<&str>, &[_], &[_]) = match change {
        InstallationChange::Present { id, account, repos } => {
            // The event lists every repository the installation now serves.
            conn.prepare_cached(
                "DELETE FROM installation_repositories WHERE installation_id = ?1",
            )?
            .execute([*id as i64])?;
            (*id, Some(account), repos, &[])
        }
        InstallationChange::Gone { id } => {
            conn.prepare_cached("DELETE FROM installations WHERE id = ?1")?
                .execute([*id as i64])?;
            return Ok(());
        }
        InstallationChange::ReposAdded { id, account, repos } => (*id, Some(account), repos, &[]),
        InstallationChange::ReposRemoved { id, repos } => (*id, None, &[], repos),
    };
    let id = id as i64;
    conn.prepare_cached(
        "INSERT INTO installations (id, account, updated_at) VALUES (?1, COALESCE(?2, ''), ?3)
         ON CONFLICT (id) DO UPDATE SET account = COALESCE(?2, installations.account), updated_at = ?3",
    )?
    .execute(params![id, account, now])?;
    for repo in added {
        conn.prepare_cached(
            "INSERT INTO installation_repositories (installation_id, repo) VALUES (?1, ?2)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![id, repo.as_str()])?;
    }
    for repo in removed {
        conn.prepare_cached(
            "DELETE FROM installation_repositories WHERE installation_id = ?1 AND repo = ?2",
        )?
        .execute(params![id, repo.as_str()])?;
    }
    Ok(())
}

// ---- templates (#16) ----

/// `db::note_template_base`, on the writer's connection.
pub fn note_template_base(
    conn: &Connection,
    repo: &str,
    sha: &str,
    pushed_at: i64,
    by: &str,
    now: i64,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO template_repos (repo, base_sha, base_at, refresh, refresh_by, last_used_at, updated_at)
         VALUES (?1, ?2, ?3, 1, ?4, ?5, ?5)
         ON CONFLICT (repo) DO UPDATE SET
           base_sha = excluded.base_sha,
           base_at = excluded.base_at,
           refresh = max(template_repos.refresh, 1),
           refresh_by = CASE WHEN template_repos.refresh = 2 THEN template_repos.refresh_by
                             ELSE excluded.refresh_by END,
           updated_at = excluded.updated_at
         WHERE excluded.base_at > template_repos.base_at",
    )?
    .execute(params![repo, sha, pushed_at, by, now])
    .map(drop)
}

/// A PR's base commit, for a repository whose template has no base yet: its first
/// generation is built from it. A known base (a push's, newer) is never replaced by a PR's.
pub fn first_template_base(conn: &Connection, repo: &str, sha: &str, now: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO template_repos (repo, base_sha, last_used_at, updated_at)
         VALUES (?1, ?2, ?3, ?3) ON CONFLICT (repo) DO NOTHING",
    )?
    .execute(params![repo, sha, now])
    .map(drop)
}

// ---- checks (#15) ----

/// The live previews of `repo` whose head is `sha`.
pub fn previews_at(conn: &Connection, repo: &str, sha: &str) -> Result<Vec<PreviewKey>> {
    let Ok(name) = repo.parse::<crate::preview::RepoName>() else {
        return Ok(Vec::new());
    };
    let mut statement = conn.prepare_cached(
        "SELECT number FROM previews INDEXED BY previews_by_head
         WHERE repo = ?1 AND head_sha = ?2 AND desired != 'absent'",
    )?;
    let numbers = statement.query_map(params![repo, sha], |r| r.get::<_, i64>(0))?;
    let mut keys = Vec::new();
    for number in numbers {
        if let Ok(number) = u32::try_from(number?) {
            keys.push(PreviewKey::new(name.clone(), number));
        }
    }
    Ok(keys)
}

/// `db::record_check`, on the writer's connection: records `report` if a live preview is at
/// `sha` and the report is newer than the one kept; returns the previews at that head.
pub fn record_check(
    conn: &Connection,
    repo: &str,
    sha: &str,
    report: &CheckReport,
) -> Result<Vec<PreviewKey>> {
    let at_head = previews_at(conn, repo, sha)?;
    if at_head.is_empty() {
        return Ok(at_head);
    }
    let kept = conn
        .prepare_cached(
            "SELECT source, state, conclusion, url, at FROM checks
             WHERE repo = ?1 AND sha = ?2 AND name = ?3",
        )?
        .query_row(params![repo, sha, report.name], |r| {
            Ok(CheckReport {
                source: text_enum(r, "source")?,
                name: report.name.clone(),
                state: text_enum(r, "state")?,
                conclusion: r.get("conclusion")?,
                url: r.get("url")?,
                at: r.get("at")?,
            })
        })
        .optional()?;
    if kept.is_some_and(|old| !report.supersedes(&old)) {
        return Ok(Vec::new());
    }
    conn.prepare_cached(
        "INSERT INTO checks (repo, sha, name, source, state, conclusion, url, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (repo, sha, name) DO UPDATE SET source = excluded.source,
             state = excluded.state, conclusion = excluded.conclusion, url = excluded.url,
             at = excluded.at",
    )?
    .execute(params![
        repo,
        sha,
        report.name,
        word(&report.source),
        word(&report.state),
        report.conclusion,
        report.url,
        report.at
    ])?;
    // The previews at that head decide their `wait_for` again.
    super::changes::touch_head(conn, repo, sha)?;
    Ok(at_head)
}

/// Marks the previews waiting at `sha` for a look-up (a check suite completed: it names no
/// check). One that passed has nothing to learn from it.
pub fn look_again_at(conn: &Connection, repo: &str, sha: &str) -> Result<()> {
    conn.prepare_cached(
        "UPDATE previews SET checks_sha = NULL
         WHERE repo = ?1 AND head_sha = ?2 AND observed IN ('waiting_for_ci', 'ci_failed')",
    )?
    .execute(params![repo, sha])?;
    super::changes::touch_head(conn, repo, sha)
}
