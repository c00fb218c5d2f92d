//! What the gates of #15 keep: CI reports on live previews' heads (`checks`), and per
//! preview what its files matched and whether its checks were looked up for this head.

use sqlx::SqliteConnection;

use super::connection::text_enum;

use super::{State, pg};
use crate::checks::{CheckReport, CheckState, Source};
use crate::preview::{Desired, HistoryKind, InstallationId, PreviewKey};

/// Records `report` for `sha` of `repo` if a live preview of the repository is at that head
/// and the report is newer than the one kept (`CheckReport::supersedes`). Returns the
/// previews at that head (empty: nobody waits on it, and nothing was written).
pub async fn record_check(
    conn: &mut SqliteConnection,
    repo: &str,
    sha: &str,
    report: &CheckReport,
) -> sqlx::Result<Vec<PreviewKey>> {
    let at_head = previews_at(conn, repo, sha).await?;
    if at_head.is_empty() {
        return Ok(at_head);
    }
    let kept = sqlx::query!(
        r#"SELECT source AS "source: Source", state AS "state: CheckState", conclusion, url, at
           FROM checks WHERE repo = ?1 AND sha = ?2 AND name = ?3"#,
        repo,
        sha,
        report.name,
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| CheckReport {
        source: r.source,
        name: report.name.clone(),
        state: r.state,
        conclusion: r.conclusion,
        url: r.url,
        at: r.at,
    });
    if kept.is_some_and(|old| !report.supersedes(&old)) {
        return Ok(Vec::new());
    }
    sqlx::query!(
        "INSERT INTO checks (repo, sha, name, source, state, conclusion, url, at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (repo, sha, name) DO UPDATE SET source = excluded.source,
             state = excluded.state, conclusion = excluded.conclusion, url = excluded.url,
             at = excluded.at",
        repo,
        sha,
        report.name,
        report.source,
        report.state,
        report.conclusion,
        report.url,
        report.at,
    )
    .execute(&mut *conn)
    .await?;
    Ok(at_head)
}

/// The live previews of `repo` whose head is `sha`.
pub async fn previews_at(
    conn: &mut SqliteConnection,
    repo: &str,
    sha: &str,
) -> sqlx::Result<Vec<PreviewKey>> {
    let rows = sqlx::query!(
        "SELECT number FROM previews INDEXED BY previews_by_head
         WHERE repo = ?1 AND head_sha = ?2 AND desired != 'absent'",
        repo,
        sha,
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            Some(PreviewKey::new(
                repo.parse().ok()?,
                u32::try_from(r.number).ok()?,
            ))
        })
        .collect())
}

/// Every report kept for `sha` of `repo`.
pub async fn checks_of(state: &State, repo: &str, sha: &str) -> anyhow::Result<Vec<CheckReport>> {
    if let Some(pg) = state.postgres() {
        return pg::gates::checks_of(pg, repo, sha).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(
            "SELECT name, source, state, conclusion, url, at
             FROM checks WHERE repo = ?1 AND sha = ?2 ORDER BY name",
        )?
        .query_map(rusqlite::params![repo, sha], |r| {
            Ok(CheckReport {
                name: r.get("name")?,
                source: text_enum(r, "source")?,
                state: text_enum(r, "state")?,
                conclusion: r.get("conclusion")?,
                url: r.get("url")?,
                at: r.get("at")?,
            })
        })?
        .collect()
    })
}

/// Reports on commits no live preview is at any more (a push moved on, a preview ended).
pub async fn prune_checks(state: &State) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::gates::prune_checks(pg).await;
    }
    let pool = state.pool();
    let done = sqlx::query!(
        "DELETE FROM checks WHERE NOT EXISTS (
             SELECT 1 FROM previews p INDEXED BY previews_by_head
             WHERE p.repo = checks.repo AND p.head_sha = checks.sha AND p.desired != 'absent')"
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// A preview whose facts GitHub must be asked for: its files (`paths`) or its checks
/// (`wait_for`) at this head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookUp {
    pub id: i64,
    pub repo: String,
    pub number: i64,
    pub head_sha: String,
    pub installation_id: Option<InstallationId>,
    /// `paths` decides and this head's files were not listed.
    pub files: bool,
    /// The head's checks were not looked up.
    pub checks: bool,
}

/// The repositories whose gates need GitHub's word, for [`lookups_due`].
#[derive(Debug, Clone, Default)]
pub struct Gated {
    /// `paths` decides who gets a preview.
    pub files: Vec<String>,
    /// Of those, the ones with `trigger = "label"`: a PR's files matter only once it
    /// carries the label (listing them before would change nothing).
    pub labeled: Vec<String>,
    /// `wait_for` holds the image back.
    pub checks: Vec<String>,
}

/// Previews that need a look-up: an opted-out PR of a repository in `files` (its `paths`)
/// whose files were not listed at its head, or a deployed one of a repository in `checks`
/// (its `wait_for`) whose checks were not looked up at its head.
pub async fn lookups_due(state: &State, gated: &Gated, limit: i64) -> sqlx::Result<Vec<LookUp>> {
    if let Some(pg) = state.postgres() {
        return pg::gates::lookups_due(pg, gated, limit).await;
    }
    let pool = state.pool();
    let json = |repos: &[String]| serde_json::to_string(repos).expect("strings serialize");
    let (files, labeled, checks) = (
        json(&gated.files),
        json(&gated.labeled),
        json(&gated.checks),
    );
    let rows = sqlx::query!(
        r#"WITH due AS (
               SELECT id, repo, number, head_sha, installation_id,
                      (desired = 'opted_out' AND paths_file IS NULL
                          AND (paths_sha IS NULL OR paths_sha != head_sha)
                          AND repo IN (SELECT value FROM json_each(?1))
                          AND (labeled = 1 OR repo NOT IN (SELECT value FROM json_each(?2)))) AS files,
                      (desired = 'deployed' AND (checks_sha IS NULL OR checks_sha != head_sha)
                          AND (wait_override_sha IS NULL OR wait_override_sha != head_sha)
                          AND repo IN (SELECT value FROM json_each(?3))) AS checks
               FROM previews WHERE desired IN ('opted_out', 'deployed'))
           SELECT id AS "id!", repo AS "repo!", number AS "number!", head_sha AS "head_sha!",
                  installation_id AS "installation_id: InstallationId",
                  files AS "files!: bool", checks AS "checks!: bool"
           FROM due WHERE files OR checks ORDER BY id LIMIT ?4"#,
        files,
        labeled,
        checks,
        limit,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LookUp {
            id: r.id,
            repo: r.repo,
            number: r.number,
            head_sha: r.head_sha,
            installation_id: r.installation_id,
            files: r.files,
            checks: r.checks,
        })
        .collect())
}

/// Records what a look-up found, in one transaction; returns whether any report was new.
pub async fn record_checks(
    state: &State,
    repo: &str,
    sha: &str,
    reports: &[CheckReport],
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::gates::record_checks(pg, repo, sha, reports).await;
    }
    let mut tx = super::begin_write(state).await?;
    let mut new = false;
    for report in reports {
        new |= !record_check(&mut tx, repo, sha, report).await?.is_empty();
    }
    tx.commit().await?;
    Ok(new)
}

/// Marks `sha`'s files as listed for preview `id` without a match (GitHub refused for good).
pub async fn files_looked(state: &State, id: i64, sha: &str) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::gates::files_looked(pg, id, sha).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE previews SET paths_sha = ?2 WHERE id = ?1 AND head_sha = ?2",
        id,
        sha,
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Marks `sha` as looked up for preview `id` (also after a failed look-up: the next
/// resync tries again, never every pass).
pub async fn checks_looked(state: &State, id: i64, sha: &str) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::gates::checks_looked(pg, id, sha).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE previews SET checks_sha = ?2 WHERE id = ?1 AND head_sha = ?2",
        id,
        sha,
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Every waiting preview is looked up again (resync: a lost check webhook is healed).
pub async fn look_again_at_checks(state: &State) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::gates::look_again_at_checks(pg).await;
    }
    let pool = state.pool();
    let done = sqlx::query!(
        "UPDATE previews SET checks_sha = NULL
         WHERE desired = 'deployed' AND observed IN ('waiting_for_ci', 'ci_failed')"
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// What listing a PR's files found, for [`record_paths`].
#[derive(Debug, Clone, Copy)]
pub struct PathsFound<'a> {
    pub id: i64,
    pub repo: &'a str,
    pub number: u32,
    /// The head whose files were listed.
    pub sha: &'a str,
    /// The first file `paths` matched.
    pub file: Option<&'a str>,
    /// What a match admits the PR as (its fork and draft gates).
    pub admit: Desired,
    /// `trigger = "label"`: a match admits it only while it carries the label.
    pub needs_label: bool,
    /// The expiry of the preview a match makes (its lifetime starts now).
    pub expires_at: i64,
}

/// Records what listing a preview's files found, if its head is still the one listed; a
/// match admits it (with a history row). Returns whether it now wants to be deployed.
pub async fn record_paths(state: &State, found: &PathsFound<'_>, now: i64) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::gates::record_paths(pg, found, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let admitted = sqlx::query!(
        // Every SET sees the row as it was: the three CASEs test the same admission.
        "UPDATE previews SET paths_sha = ?2, paths_file = ?3, updated_at = ?6,
             created_at = CASE WHEN ?3 IS NOT NULL AND desired = 'opted_out' AND (?5 = 0 OR labeled = 1)
                               THEN ?6 ELSE created_at END,
             expires_at = CASE WHEN ?3 IS NOT NULL AND desired = 'opted_out' AND (?5 = 0 OR labeled = 1)
                               THEN ?7 ELSE expires_at END,
             desired = CASE WHEN ?3 IS NOT NULL AND desired = 'opted_out' AND (?5 = 0 OR labeled = 1)
                            THEN ?4 ELSE desired END
         WHERE id = ?1 AND head_sha = ?2
         RETURNING desired AS \"desired: Desired\"",
        found.id,
        found.sha,
        found.file,
        found.admit,
        found.needs_label,
        now,
        found.expires_at,
    )
    .fetch_optional(&mut *tx)
    .await?
    .is_some_and(|r| r.desired != Desired::OptedOut);
    if let (true, Some(file)) = (admitted, found.file) {
        let reason = format!("it changes {file}, which [[repos]] paths watch");
        let row = super::HistoryRow {
            repo: found.repo,
            number: found.number,
            what: HistoryKind::PathsMatched,
            actor: "previewd",
            reason: &reason,
            head_sha: Some(found.sha),
            delivery: None,
            at: now,
        };
        super::history::add(&mut tx, &row).await?;
    }
    tx.commit().await?;
    Ok(admitted)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use sqlx::Executor;

    /// Migration 0011 rebuilds `previews` (its CHECK gains `opted_out`) inside sqlx's
    /// transaction, where foreign keys stay on: what references a preview must survive the
    /// old table's drop, and still go with the preview afterwards.
    #[tokio::test]
    async fn upgrading_a_state_keeps_every_previews_ledger_secrets_and_commands() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let pool = sqlx::SqlitePool::connect_with(super::super::connection::options(&path))
            .await
            .unwrap();
        let before = sqlx::migrate::Migrator {
            migrations: Cow::Owned(super::super::MIGRATOR.migrations[..10].to_vec()),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        before.run(&pool).await.unwrap();
        for sql in [
            "INSERT INTO previews (id, repo, number, repo_id, author, head_sha, head_ref, base_ref,
                 fork, draft, desired, pr_updated_at, created_at, updated_at, expires_at)
             VALUES (7, 'octo/app', 2, 1, 'alice', 'abc', 'h', 'main', 0, 0, 'deployed', 1, 1, 1, 9)",
            "INSERT INTO ledger (preview_id, kind, name, state, created_at)
             VALUES (7, 'Application', 'pv-helpers', 'applied', 1)",
            "INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint,
                 encrypted_data, created_at)
             VALUES (7, 'pv', 'pv-db', 'strict', 'f', '{}', 1)",
            "INSERT INTO commands (preview_id, repo, number, comment_id, actor, association, line,
                 created_at)
             VALUES (7, 'octo/app', 2, 55, 'bob', 'MEMBER', '/preview extend 1d', 1)",
        ] {
            pool.execute(sql).await.unwrap();
        }
        super::super::MIGRATOR.run(&pool).await.unwrap();
        let count = |table: &'static str| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(&pool)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(
            (
                count("ledger").await,
                count("sealed_secrets").await,
                count("commands").await
            ),
            (1, 1, 1)
        );
        pool.execute("UPDATE previews SET desired = 'opted_out' WHERE id = 7")
            .await
            .unwrap();
        pool.execute("DELETE FROM previews WHERE id = 7")
            .await
            .unwrap();
        assert_eq!(
            (count("ledger").await, count("sealed_secrets").await),
            (0, 0),
            "teardown still cascades"
        );
    }
}
