//! The intake writer's statements on PostgreSQL: the twins of `db::write`, in the batch's
//! transaction. The merge of a PR change is `intent::merge`, shared; only SQL differs.

use sqlx::PgConnection;

use super::{flag, word, word_of};
use crate::checks::CheckReport;
use crate::db::DeliveryRow;
use crate::db::write::Applied;
use crate::intent::{Ended, Outcome, PrChange, StoredPr};
use crate::preview::{Desired, PreviewKey};
use crate::webhook::{CommandComment, InstallationChange};

// ---- deliveries ----

pub async fn delivery_outcome(
    conn: &mut PgConnection,
    hook_id: &str,
    guid: &str,
) -> sqlx::Result<Option<Outcome>> {
    let outcome: Option<String> = sqlx::query_scalar!(
        "SELECT outcome FROM deliveries WHERE hook_id = $1 AND guid = $2",
        hook_id,
        guid
    )
    .fetch_optional(conn)
    .await?;
    Ok(outcome.as_deref().and_then(Outcome::parse))
}

/// The dedup check and the insert in one statement: a delivery sent to several replicas at
/// once is one row, whichever commits first (the loser's `ON CONFLICT` waits for it).
pub async fn claim_delivery(conn: &mut PgConnection, row: &DeliveryRow<'_>) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (hook_id, guid) DO UPDATE SET
             outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at
         WHERE deliveries.outcome = 'failed'",
        row.hook_id,
        row.guid,
        row.event,
        row.action,
        row.outcome.as_str(),
        row.detail,
        row.received_at
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn record_delivery(conn: &mut PgConnection, row: &DeliveryRow<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO deliveries (hook_id, guid, event, action, outcome, detail, received_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (hook_id, guid) DO UPDATE SET
             outcome = excluded.outcome, detail = excluded.detail, received_at = excluded.received_at",
        row.hook_id,
        row.guid,
        row.event,
        row.action,
        row.outcome.as_str(),
        row.detail,
        row.received_at
    )
    .execute(conn)
    .await
    .map(drop)
}

// ---- pull requests ----

/// `db::write::apply_pr_change`: the row and the PR's end in one statement, merged
/// (`intent::merge`), written back.
pub async fn apply_pr_change(
    conn: &mut PgConnection,
    change: &PrChange,
    now: i64,
) -> sqlx::Result<Option<Applied>> {
    let pr = &change.pr;
    let repo = pr.key.repo.as_str();
    let number = i64::from(pr.key.number);
    // What the merge reads must stay what it writes over, as under SQLite's one writer: the
    // PR's advisory lock holds off another replica's intake when there is no row yet (both
    // would insert), the row's lock holds off everyone else (the sweeper's expiry, a
    // command's effect, an operator's destroy); the read after them sees what they committed.
    // `$2::bigint::int`: the number is passed as the BIGINT it is everywhere else, then
    // cast as before (the macro would otherwise ask for an i32).
    sqlx::query!(
        "SELECT pg_advisory_xact_lock(hashtext($1), $2::bigint::int)",
        repo,
        number
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query!(
        "SELECT id FROM previews WHERE repo = $1 AND number = $2 FOR UPDATE",
        repo,
        number
    )
    .fetch_optional(&mut *conn)
    .await?;
    // Every column of a LEFT JOIN may be NULL (`?`); `p`'s NOT NULL columns are there
    // whenever `p.id` is, and `present` says so.
    let r = sqlx::query!(
        r#"SELECT p.id AS "id?", p.repo_id AS "repo_id?", p.installation_id,
                p.title AS "title?", p.author AS "author?", p.head_sha AS "head_sha?",
                p.head_ref AS "head_ref?", p.base_ref AS "base_ref?", p.fork AS "fork?",
                p.draft AS "draft?", p.desired AS "desired?", p.end_reason, p.approved_sha,
                p.pr_updated_at AS "pr_updated_at?", p.created_at AS "created_at?",
                p.updated_at AS "updated_at?", p.expires_at AS "expires_at?",
                p.head_changed_at AS "head_changed_at?", p.names, p.labeled AS "labeled?",
                p.deploy_by, p.paths_file,
                c.pr_updated_at AS "closed_at?", c.ended_at
         FROM (SELECT $1::text AS repo, $2::bigint AS number) k
         LEFT JOIN previews p ON p.repo = k.repo AND p.number = k.number
         LEFT JOIN closed_prs c ON c.repo = k.repo AND c.number = k.number"#,
        repo,
        number
    )
    .fetch_one(&mut *conn)
    .await?;
    let id: Option<i64> = r.id;
    let stored = match id {
        None => None,
        Some(_) => Some(StoredPr {
            repo_id: present(r.repo_id, "repo_id")?,
            installation_id: r.installation_id,
            title: present(r.title, "title")?,
            author: present(r.author, "author")?,
            head_sha: present(r.head_sha, "head_sha")?,
            head_ref: present(r.head_ref, "head_ref")?,
            base_ref: present(r.base_ref, "base_ref")?,
            fork: present(r.fork, "fork")? != 0,
            draft: present(r.draft, "draft")? != 0,
            desired: word_of(&present(r.desired, "desired")?)?,
            end_reason: match r.end_reason {
                Some(text) => Some(word_of(&text)?),
                None => None,
            },
            approved_sha: r.approved_sha,
            pr_updated_at: present(r.pr_updated_at, "pr_updated_at")?,
            created_at: present(r.created_at, "created_at")?,
            updated_at: present(r.updated_at, "updated_at")?,
            expires_at: present(r.expires_at, "expires_at")?,
            head_changed_at: present(r.head_changed_at, "head_changed_at")?,
            names: r.names,
            labeled: present(r.labeled, "labeled")? != 0,
            deploy_by: r.deploy_by,
            paths_file: r.paths_file,
        }),
    };
    let ended = match r.closed_at {
        None => None,
        Some(closed_at) => Some(Ended {
            closed_at,
            ended_at: r.ended_at,
        }),
    };
    let merged = crate::intent::merge(stored.as_ref(), ended.as_ref(), change, now);
    let moved = merged
        .as_ref()
        .is_some_and(|m| m.moves_preview(stored.as_ref()));
    match (&merged, id) {
        (Some(new), Some(_)) if stored.as_ref() == Some(new) => {}
        (Some(new), Some(id)) if !moved => {
            sqlx::query!(
                "UPDATE previews SET pr_updated_at = $2, updated_at = $3, expires_at = $4
                 WHERE id = $1",
                id,
                new.pr_updated_at,
                new.updated_at,
                new.expires_at
            )
            .execute(&mut *conn)
            .await?;
        }
        (Some(new), id) => write_pr(conn, id, repo, number, new).await?,
        (None, _) => {}
    }
    if change.desired == Some(Desired::Absent)
        || merged
            .as_ref()
            .is_some_and(|m| m.desired == Desired::Absent)
    {
        sqlx::query!(
            "INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (repo, number) DO UPDATE SET
                 pr_updated_at = GREATEST(closed_prs.pr_updated_at, excluded.pr_updated_at),
                 ended_sha = CASE WHEN excluded.pr_updated_at > COALESCE(closed_prs.ended_at, 0)
                                  THEN NULL ELSE closed_prs.ended_sha END",
            repo,
            number,
            change.pr_updated_at
        )
        .execute(&mut *conn)
        .await?;
    }
    let again = stored.is_some() && stored == merged;
    Ok(merged.map(|m| Applied {
        desired: m.desired,
        moved,
        again,
    }))
}

/// `db::write::write_pr`: a new row, or every column a PR change owns of row `id`.
async fn write_pr(
    conn: &mut PgConnection,
    id: Option<i64>,
    repo: &str,
    number: i64,
    new: &StoredPr,
) -> sqlx::Result<()> {
    let Some(id) = id else {
        let id: i64 = sqlx::query_scalar!(
            "INSERT INTO previews (repo, number, repo_id, installation_id, title, author, head_sha,
                 head_ref, base_ref, fork, draft, desired, end_reason, pr_updated_at, created_at,
                 updated_at, expires_at, head_changed_at, names, labeled)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)
             RETURNING id",
            repo,
            number,
            new.repo_id,
            new.installation_id,
            &new.title,
            &new.author,
            &new.head_sha,
            &new.head_ref,
            &new.base_ref,
            flag(new.fork),
            flag(new.draft),
            new.desired.as_str(),
            new.end_reason.map(|r| r.as_str()),
            new.pr_updated_at,
            new.created_at,
            new.updated_at,
            new.expires_at,
            new.head_changed_at,
            new.names.as_deref(),
            flag(new.labeled)
        )
        .fetch_one(&mut *conn)
        .await?;
        return super::changes::touch(conn, id).await;
    };
    sqlx::query!(
        "UPDATE previews SET repo_id = $2, installation_id = $3, title = $4, author = $5,
             head_sha = $6, head_ref = $7, base_ref = $8, fork = $9, draft = $10, desired = $11,
             end_reason = $12, pr_updated_at = $13, updated_at = $14, expires_at = $15,
             head_changed_at = $16, labeled = $17, created_at = $18,
             slept_seconds = slept_seconds
                 + CASE WHEN head_sha <> $6 OR desired <> $11
                   THEN GREATEST($14 - COALESCE(sleeping_since, $14), 0) ELSE 0 END,
             saved_pod_seconds = saved_pod_seconds
                 + CASE WHEN head_sha <> $6 OR desired <> $11
                   THEN GREATEST($14 - COALESCE(sleeping_since, $14), 0) * COALESCE(used_pods, 0) ELSE 0 END,
             sleeping_since = CASE WHEN head_sha <> $6 OR desired <> $11 THEN NULL ELSE sleeping_since END,
             last_used_at = CASE WHEN $11 = 'deployed' AND desired <> 'deployed' THEN $14
                            ELSE last_used_at END
         WHERE id = $1",
        id,
        new.repo_id,
        new.installation_id,
        &new.title,
        &new.author,
        &new.head_sha,
        &new.head_ref,
        &new.base_ref,
        flag(new.fork),
        flag(new.draft),
        new.desired.as_str(),
        new.end_reason.map(|r| r.as_str()),
        new.pr_updated_at,
        new.updated_at,
        new.expires_at,
        new.head_changed_at,
        flag(new.labeled),
        new.created_at
    )
    .execute(&mut *conn)
    .await?;
    super::changes::touch(conn, id).await
}

pub async fn has_preview(conn: &mut PgConnection, repo: &str, number: u32) -> sqlx::Result<bool> {
    // EXISTS is never NULL.
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM previews WHERE repo = $1 AND number = $2) AS "exists!""#,
        repo,
        i64::from(number)
    )
    .fetch_one(conn)
    .await
}

// ---- commands ----

pub async fn queue_command(
    conn: &mut PgConnection,
    command: &CommandComment,
    now: i64,
) -> sqlx::Result<bool> {
    let repo = command.key.repo.as_str();
    let number = i64::from(command.key.number);
    // The preview's row held (or found gone) first: a row being forgotten meanwhile would
    // otherwise be named by the insert and fail its foreign key.
    let preview: Option<i64> = sqlx::query_scalar!(
        "SELECT id FROM previews WHERE repo = $1 AND number = $2 FOR KEY SHARE",
        repo,
        number
    )
    .fetch_optional(&mut *conn)
    .await?;
    let done = sqlx::query!(
        "INSERT INTO commands (preview_id, repo, number, comment_id, actor, association, line, created_at, installation_id, commented_at)
         VALUES ($10, $1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (comment_id) DO NOTHING",
        repo,
        number,
        command.comment_id as i64,
        &command.actor,
        &command.association,
        &command.line,
        now,
        command.installation_id.map(|id| id as i64),
        command.commented_at,
        preview
    )
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() > 0 {
        super::changes::touch_pr(conn, repo, number).await?;
    }
    Ok(done.rows_affected() > 0)
}

// ---- installations ----

pub async fn apply_installation(
    conn: &mut PgConnection,
    change: &InstallationChange,
    now: i64,
) -> sqlx::Result<()> {
    let (id, account, added, removed): (u64, Option<&str>, &[_], &[_]) = match change {
        InstallationChange::Present { id, account, repos } => {
            sqlx::query!(
                "DELETE FROM installation_repositories WHERE installation_id = $1",
                *id as i64
            )
            .execute(&mut *conn)
            .await?;
            (*id, Some(account), repos, &[])
        }
        InstallationChange::Gone { id } => {
            sqlx::query!("DELETE FROM installations WHERE id = $1", *id as i64)
                .execute(&mut *conn)
                .await?;
            return Ok(());
        }
        InstallationChange::ReposAdded { id, account, repos } => (*id, Some(account), repos, &[]),
        InstallationChange::ReposRemoved { id, repos } => (*id, None, &[], repos),
    };
    let id = id as i64;
    sqlx::query!(
        "INSERT INTO installations (id, account, updated_at) VALUES ($1, COALESCE($2, ''), $3)
         ON CONFLICT (id) DO UPDATE SET account = COALESCE($2, installations.account), updated_at = $3",
        id,
        account,
        now
    )
    .execute(&mut *conn)
    .await?;
    for repo in added {
        sqlx::query!(
            "INSERT INTO installation_repositories (installation_id, repo) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            id,
            repo.as_str()
        )
        .execute(&mut *conn)
        .await?;
    }
    for repo in removed {
        sqlx::query!(
            "DELETE FROM installation_repositories WHERE installation_id = $1 AND repo = $2",
            id,
            repo.as_str()
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

// ---- templates (#16) ----

pub async fn note_template_base(
    conn: &mut PgConnection,
    repo: &str,
    sha: &str,
    pushed_at: i64,
    by: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO template_repos (repo, base_sha, base_at, refresh, refresh_by, last_used_at, updated_at)
         VALUES ($1, $2, $3, 1, $4, $5, $5)
         ON CONFLICT (repo) DO UPDATE SET
           base_sha = excluded.base_sha,
           base_at = excluded.base_at,
           refresh = GREATEST(template_repos.refresh, 1),
           refresh_by = CASE WHEN template_repos.refresh = 2 THEN template_repos.refresh_by
                             ELSE excluded.refresh_by END,
           updated_at = excluded.updated_at
         WHERE excluded.base_at > template_repos.base_at",
        repo,
        sha,
        pushed_at,
        by,
        now
    )
    .execute(conn)
    .await
    .map(drop)
}

pub async fn first_template_base(
    conn: &mut PgConnection,
    repo: &str,
    sha: &str,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO template_repos (repo, base_sha, last_used_at, updated_at)
         VALUES ($1, $2, $3, $3) ON CONFLICT (repo) DO NOTHING",
        repo,
        sha,
        now
    )
    .execute(conn)
    .await
    .map(drop)
}

// ---- checks (#15) ----

pub async fn previews_at(
    conn: &mut PgConnection,
    repo: &str,
    sha: &str,
) -> sqlx::Result<Vec<PreviewKey>> {
    let Ok(name) = repo.parse::<crate::preview::RepoName>() else {
        return Ok(Vec::new());
    };
    let numbers: Vec<i64> = sqlx::query_scalar!(
        "SELECT number FROM previews WHERE repo = $1 AND head_sha = $2 AND desired != 'absent'
         ORDER BY id",
        repo,
        sha
    )
    .fetch_all(conn)
    .await?;
    Ok(numbers
        .into_iter()
        .filter_map(|n| u32::try_from(n).ok())
        .map(|n| PreviewKey::new(name.clone(), n))
        .collect())
}

pub async fn record_check(
    conn: &mut PgConnection,
    repo: &str,
    sha: &str,
    report: &CheckReport,
) -> sqlx::Result<Vec<PreviewKey>> {
    let at_head = previews_at(conn, repo, sha).await?;
    if at_head.is_empty() {
        return Ok(at_head);
    }
    let kept = sqlx::query!(
        "SELECT source, state, conclusion, url, at FROM checks
         WHERE repo = $1 AND sha = $2 AND name = $3",
        repo,
        sha,
        &report.name
    )
    .fetch_optional(&mut *conn)
    .await?;
    let kept = match kept {
        None => None,
        Some(r) => Some(CheckReport {
            source: word_of(&r.source)?,
            name: report.name.clone(),
            state: word_of(&r.state)?,
            conclusion: r.conclusion,
            url: r.url,
            at: r.at,
        }),
    };
    if kept.is_some_and(|old| !report.supersedes(&old)) {
        return Ok(Vec::new());
    }
    sqlx::query!(
        "INSERT INTO checks (repo, sha, name, source, state, conclusion, url, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (repo, sha, name) DO UPDATE SET source = excluded.source,
             state = excluded.state, conclusion = excluded.conclusion, url = excluded.url,
             at = excluded.at",
        repo,
        sha,
        &report.name,
        word(&report.source),
        word(&report.state),
        &report.conclusion,
        report.url.as_deref(),
        report.at
    )
    .execute(&mut *conn)
    .await?;
    super::changes::touch_head(conn, repo, sha).await?;
    Ok(at_head)
}

pub async fn look_again_at(conn: &mut PgConnection, repo: &str, sha: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE previews SET checks_sha = NULL
         WHERE repo = $1 AND head_sha = $2 AND observed IN ('waiting_for_ci', 'ci_failed')",
        repo,
        sha
    )
    .execute(&mut *conn)
    .await?;
    super::changes::touch_head(conn, repo, sha).await
}

/// A column of the row `apply_pr_change` reads that is NOT NULL in `previews`, read where the
/// row is there: NULL is the decode error a runtime `try_get` gives it (never a panic).
fn present<T>(value: Option<T>, column: &str) -> sqlx::Result<T> {
    value.ok_or_else(|| sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(sqlx::error::UnexpectedNullError),
    })
}
