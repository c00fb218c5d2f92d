//! The writer's side of a PR change: the stored row read, the change merged into it
//! (`intent::merge`, pure), the result written, in the single writer's transaction.

use sqlx::SqliteConnection;

use crate::intent::{Ended, PrChange, StoredPr};
use crate::preview::Desired;

/// A PR change that applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// What the PR now wants.
    pub desired: Desired,
    /// Whether the reconciler has anything new to see (`StoredPr::moves_preview`).
    pub moved: bool,
}

/// Writes a PR's new state unless the row already holds a newer event (or the PR's end
/// forbids it): reads the row, merges the change into it (`intent::merge`, pure) and writes
/// the result, all in the caller's transaction (the single writer's). Returns what the PR
/// now wants and whether that moved the preview, if the change applied.
pub async fn apply_pr_change(
    conn: &mut SqliteConnection,
    change: &PrChange,
    now: i64,
) -> sqlx::Result<Option<Applied>> {
    let pr = &change.pr;
    let repo = pr.key.repo.as_str();
    let row = sqlx::query!(
        r#"SELECT id AS "id!", repo_id, installation_id, title, author, head_sha, head_ref, base_ref,
                  fork AS "fork: bool", draft AS "draft: bool", desired AS "desired: Desired",
                  end_reason, approved_sha, pr_updated_at, created_at, updated_at, expires_at,
                  head_changed_at, names, labeled AS "labeled: bool", deploy_by, paths_file
           FROM previews WHERE repo = ?1 AND number = ?2"#,
        repo,
        pr.key.number,
    )
    .fetch_optional(&mut *conn)
    .await?;
    let (id, stored) = match row {
        Some(r) => (
            Some(r.id),
            Some(StoredPr {
                repo_id: r.repo_id,
                installation_id: r.installation_id,
                title: r.title,
                author: r.author,
                head_sha: r.head_sha,
                head_ref: r.head_ref,
                base_ref: r.base_ref,
                fork: r.fork,
                draft: r.draft,
                desired: r.desired,
                end_reason: r.end_reason,
                approved_sha: r.approved_sha,
                pr_updated_at: r.pr_updated_at,
                created_at: r.created_at,
                updated_at: r.updated_at,
                expires_at: r.expires_at,
                head_changed_at: r.head_changed_at,
                names: r.names,
                labeled: r.labeled,
                deploy_by: r.deploy_by,
                paths_file: r.paths_file,
            }),
        ),
        None => (None, None),
    };
    let ended = sqlx::query!(
        "SELECT pr_updated_at, ended_at FROM closed_prs WHERE repo = ?1 AND number = ?2",
        repo,
        pr.key.number,
    )
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| Ended {
        closed_at: r.pr_updated_at,
        ended_at: r.ended_at,
    });
    let merged = crate::intent::merge(stored.as_ref(), ended.as_ref(), change, now);
    if let Some(new) = &merged {
        write_pr(conn, id, repo, pr.key.number, new).await?;
    }
    // A close, or a label taken away (`trigger = "label"`): only a newer event brings the
    // preview back.
    if change.desired == Some(Desired::Absent)
        || merged
            .as_ref()
            .is_some_and(|m| m.desired == Desired::Absent)
    {
        sqlx::query!(
            "INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (repo, number) DO UPDATE SET pr_updated_at = MAX(pr_updated_at, excluded.pr_updated_at),
                 ended_sha = NULL",
            repo,
            pr.key.number,
            change.pr_updated_at,
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(merged.map(|m| Applied {
        desired: m.desired,
        moved: m.moves_preview(stored.as_ref()),
    }))
}

/// Writes a merged PR preview: a new row, or every column a PR change owns of row `id`.
async fn write_pr(
    conn: &mut SqliteConnection,
    id: Option<i64>,
    repo: &str,
    number: u32,
    new: &StoredPr,
) -> sqlx::Result<()> {
    let Some(id) = id else {
        return sqlx::query!(
            "INSERT INTO previews (repo, number, repo_id, installation_id, title, author, head_sha,
                 head_ref, base_ref, fork, draft, desired, end_reason, pr_updated_at, created_at,
                 updated_at, expires_at, head_changed_at, names, labeled)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
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
            new.desired,
            new.end_reason,
            new.pr_updated_at,
            new.created_at,
            new.updated_at,
            new.expires_at,
            new.head_changed_at,
            new.names,
            new.labeled,
        )
        .execute(&mut *conn)
        .await
        .map(drop);
    };
    sqlx::query!(
        "UPDATE previews SET repo_id = ?2, installation_id = ?3, title = ?4, author = ?5,
             head_sha = ?6, head_ref = ?7, base_ref = ?8, fork = ?9, draft = ?10, desired = ?11,
             end_reason = ?12, pr_updated_at = ?13, updated_at = ?14, expires_at = ?15,
             head_changed_at = ?16, labeled = ?17, created_at = ?18
         WHERE id = ?1",
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
        new.desired,
        new.end_reason,
        new.pr_updated_at,
        new.updated_at,
        new.expires_at,
        new.head_changed_at,
        new.labeled,
        new.created_at,
    )
    .execute(&mut *conn)
    .await
    .map(drop)
}
