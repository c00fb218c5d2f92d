//! What a command does to its preview's row (`Effect`): one conditional statement each, in
//! the transaction that records the command's outcome (`finish_command`).

use super::{Tx, pg};

/// One change a command makes to its preview. Returns whether a row changed.
pub async fn command_effect(
    tx: &mut Tx,
    preview_id: i64,
    effect: &Effect<'_>,
    now: i64,
) -> sqlx::Result<bool> {
    let tx = match tx {
        Tx::Postgres(tx) => return pg::effects::command_effect(tx, preview_id, effect, now).await,
        Tx::Sqlite(tx) => &mut **tx,
    };
    let done = match effect {
        Effect::ExpireAt(at) => sqlx::query!(
            "UPDATE previews SET expires_at = ?2, updated_at = ?3 WHERE id = ?1 AND desired != 'absent'",
            preview_id,
            at,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Destroy => sqlx::query!(
            "UPDATE previews SET desired = 'absent', end_reason = 'destroyed', updated_at = ?2
             WHERE id = ?1 AND desired != 'absent'",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Keep(keep) => sqlx::query!(
            "UPDATE previews SET keep = ?2, updated_at = ?3 WHERE id = ?1",
            preview_id,
            keep,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Sleep => {
            sqlx::query(super::sleep::SLEEP)
                .bind(preview_id)
                .bind(now)
                .bind(None::<i64>)
                .execute(&mut *tx)
                .await?
        }
        Effect::Wake => {
            sqlx::query(super::sleep::WAKE)
                .bind(preview_id)
                .bind(now)
                .execute(&mut *tx)
                .await?
        }
        Effect::Reseed => sqlx::query!(
            "UPDATE previews SET seed_generation = seed_generation + 1, updated_at = ?2 WHERE id = ?1",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        // The base the template knows, or a first one: the PR's base branch head is not
        // known here, so a repository without any is built at the next push or PR event.
        Effect::RefreshTemplate { by } => sqlx::query!(
            "UPDATE template_repos SET refresh = 2, refresh_by = ?2, destroy = NULL, updated_at = ?3
              WHERE repo = (SELECT repo FROM previews WHERE id = ?1)",
            preview_id,
            by,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Redeploy => sqlx::query!(
            "UPDATE previews SET redeploy_generation = redeploy_generation + 1, updated_at = ?2 WHERE id = ?1",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        // Opts the PR in past trigger, paths and authors for good; a PR that gets its
        // preview only now starts its lifetime now. A fork's only while its approved commit
        // is still the head (the command read the row before asking GitHub for write
        // access: a push in between must not ride along). Past a failed `wait_for` only the
        // head the writer could see (a push since resets the wait).
        Effect::Deploy {
            by,
            seen_at,
            past_failed_wait,
        } => sqlx::query!(
            "UPDATE previews SET updated_at = ?2, deploy_by = ?3,
                 wait_override_sha = CASE WHEN ?5 AND head_changed_at < ?4 THEN head_sha ELSE wait_override_sha END,
                 created_at = CASE WHEN desired = 'opted_out' THEN ?2 ELSE created_at END,
                 end_reason = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE end_reason END,
                 sleeping_since = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE sleeping_since END,
                 last_used_at = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN ?2 ELSE last_used_at END,
                 desired = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN 'deployed' ELSE desired END
             WHERE id = ?1 AND desired != 'awaiting_approval'
               AND (fork = 0 OR (approved_sha = head_sha AND head_changed_at < ?4))",
            preview_id,
            now,
            by,
            seen_at,
            past_failed_wait
        )
        .execute(&mut *tx)
        .await?,
        Effect::Approve { sha, seen_at } => sqlx::query!(
            "UPDATE previews SET approved_sha = ?2, updated_at = ?3,
                    last_used_at = CASE WHEN desired = 'awaiting_approval' AND head_sha = ?2 THEN ?3 ELSE last_used_at END,
                    desired = CASE WHEN desired = 'awaiting_approval' AND head_sha = ?2 THEN 'deployed' ELSE desired END
             WHERE id = ?1 AND head_sha = ?2 AND head_changed_at < ?4",
            preview_id,
            sha,
            now,
            seen_at
        )
        .execute(&mut *tx)
        .await?,
    };
    let changed = done.rows_affected() > 0;
    if changed {
        // The reconciler's change marker (`db::changes`), in the command's transaction.
        super::changes::touch_in(tx, preview_id).await?;
    }
    Ok(changed)
}

/// What a command does to the state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<'a> {
    ExpireAt(i64),
    Destroy,
    Keep(bool),
    Reseed,
    /// A writer's `/preview refresh-template`: the repository's next template generation,
    /// at once (`template_repos.refresh = 2`).
    RefreshTemplate {
        by: &'a str,
    },
    Redeploy,
    /// `/preview sleep` and `/preview wake` (`db::sleep` does the same for the sweeper and
    /// a request).
    Sleep,
    Wake,
    /// A writer's `/preview deploy`: by whom, when they commented (GitHub's clock), and
    /// whether it lets the head past a failed `wait_for`.
    Deploy {
        by: &'a str,
        seen_at: i64,
        past_failed_wait: bool,
    },
    /// Approves exactly this head SHA, if it was the head when the approver commented.
    Approve {
        sha: &'a str,
        seen_at: i64,
    },
}
