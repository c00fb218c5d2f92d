//! `db::gates` on PostgreSQL: CI reports on live previews' heads, and what each preview's
//! files matched and whether its checks were looked up.

use sqlx::PgPool;

use super::{flag, word_of};
use crate::checks::CheckReport;
use crate::db::{Gated, HistoryRow, LookUp, PathsFound};
use crate::preview::{HistoryKind, InstallationId};

pub async fn checks_of(pool: &PgPool, repo: &str, sha: &str) -> anyhow::Result<Vec<CheckReport>> {
    let rows = sqlx::query!(
        "SELECT name, source, state, conclusion, url, at
         FROM checks WHERE repo = $1 AND sha = $2 ORDER BY name",
        repo,
        sha
    )
    .fetch_all(pool)
    .await?;
    let reports = rows
        .into_iter()
        .map(|r| {
            Ok(CheckReport {
                name: r.name,
                source: word_of(&r.source)?,
                state: word_of(&r.state)?,
                conclusion: r.conclusion,
                url: r.url,
                at: r.at,
            })
        })
        .collect::<sqlx::Result<_>>()?;
    Ok(reports)
}

pub async fn prune_checks(pool: &PgPool) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "DELETE FROM checks WHERE NOT EXISTS (
             SELECT 1 FROM previews p
             WHERE p.repo = checks.repo AND p.head_sha = checks.sha AND p.desired != 'absent')"
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// `db::gates::lookups_due`; the repository lists are arrays here (`json_each` on SQLite).
pub async fn lookups_due(pool: &PgPool, gated: &Gated, limit: i64) -> sqlx::Result<Vec<LookUp>> {
    // `files` and `checks` are expressions: NULL only where a list held a NULL, which a
    // `Vec<String>` cannot; read as false then, as before.
    let rows = sqlx::query!(
        "WITH due AS (
             SELECT id, repo, number, head_sha, installation_id,
                    (desired = 'opted_out' AND paths_file IS NULL
                        AND (paths_sha IS NULL OR paths_sha != head_sha)
                        AND repo = ANY($1)
                        AND (labeled = 1 OR NOT (repo = ANY($2)))) AS files,
                    (desired = 'deployed' AND (checks_sha IS NULL OR checks_sha != head_sha)
                        AND (wait_override_sha IS NULL OR wait_override_sha != head_sha)
                        AND repo = ANY($3)) AS checks
             FROM previews WHERE desired IN ('opted_out', 'deployed'))
         SELECT id, repo, number, head_sha, installation_id, files, checks
         FROM due WHERE files OR checks ORDER BY id LIMIT $4",
        gated.files.as_slice(),
        gated.labeled.as_slice(),
        gated.checks.as_slice(),
        limit
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
            installation_id: r.installation_id.map(InstallationId),
            files: r.files.unwrap_or(false),
            checks: r.checks.unwrap_or(false),
        })
        .collect())
}

/// `db::gates::record_checks`, by the intake writer's statement for one report.
pub async fn record_checks(
    pool: &PgPool,
    repo: &str,
    sha: &str,
    reports: &[CheckReport],
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let mut new = false;
    for report in reports {
        new |= !super::write::record_check(&mut tx, repo, sha, report)
            .await?
            .is_empty();
    }
    tx.commit().await?;
    Ok(new)
}

pub async fn files_looked(pool: &PgPool, id: i64, sha: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET paths_sha = $2 WHERE id = $1 AND head_sha = $2",
        id,
        sha
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn checks_looked(pool: &PgPool, id: i64, sha: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET checks_sha = $2 WHERE id = $1 AND head_sha = $2",
        id,
        sha
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn look_again_at_checks(pool: &PgPool) -> sqlx::Result<u64> {
    // Aliased: SQLite's statement has the same text otherwise, and `.sqlx/` keys a statement by
    // its text alone.
    let done = sqlx::query!(
        "UPDATE previews p SET checks_sha = NULL
         WHERE p.desired = 'deployed' AND p.observed IN ('waiting_for_ci', 'ci_failed')"
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// `db::gates::record_paths`: every SET sees the row as it was, so the three CASEs test
/// the same admission.
pub async fn record_paths(pool: &PgPool, found: &PathsFound<'_>, now: i64) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    // `$5::bigint`: the flag as bound (`$5 = 0` alone would make it an INTEGER).
    let desired = sqlx::query_scalar!(
        "UPDATE previews SET paths_sha = $2, paths_file = $3::text, updated_at = $6,
             created_at = CASE WHEN $3::text IS NOT NULL AND desired = 'opted_out' AND ($5::bigint = 0 OR labeled = 1)
                               THEN $6 ELSE created_at END,
             expires_at = CASE WHEN $3::text IS NOT NULL AND desired = 'opted_out' AND ($5::bigint = 0 OR labeled = 1)
                               THEN $7 ELSE expires_at END,
             desired = CASE WHEN $3::text IS NOT NULL AND desired = 'opted_out' AND ($5::bigint = 0 OR labeled = 1)
                            THEN $4 ELSE desired END
         WHERE id = $1 AND head_sha = $2
         RETURNING desired",
        found.id,
        found.sha,
        found.file,
        found.admit.as_str(),
        flag(found.needs_label),
        now,
        found.expires_at
    )
    .fetch_optional(&mut *tx)
    .await?;
    let admitted = desired.is_some_and(|d| d != "opted_out");
    if let (true, Some(file)) = (admitted, found.file) {
        let reason = format!("it changes {file}, which [[repos]] paths watch");
        let row = HistoryRow {
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
