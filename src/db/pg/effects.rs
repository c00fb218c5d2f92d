//! `db::effects` on PostgreSQL: what a command does to its preview's row, in the
//! transaction that records the command's outcome.

use sqlx::PgConnection;

use super::flag;
use crate::db::Effect;

/// One change a command makes to its preview. Returns whether a row changed.
pub async fn command_effect(
    tx: &mut PgConnection,
    preview_id: i64,
    effect: &Effect<'_>,
    now: i64,
) -> sqlx::Result<bool> {
    let done = match effect {
        Effect::ExpireAt(at) => sqlx::query!(
            "UPDATE previews SET expires_at = $2, updated_at = $3 WHERE id = $1 AND desired != 'absent'",
            preview_id,
            at,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Destroy => sqlx::query!(
            "UPDATE previews SET desired = 'absent', end_reason = 'destroyed', updated_at = $2
             WHERE id = $1 AND desired != 'absent'",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Keep(keep) => sqlx::query!(
            "UPDATE previews SET keep = $2, updated_at = $3 WHERE id = $1",
            preview_id,
            flag(*keep),
            now
        )
        .execute(&mut *tx)
        .await?,
        // `db::sleep`'s sleep for a command: no idle bound (a writer asked), so only a
        // deployed, awake preview is put to sleep.
        Effect::Sleep => sqlx::query!(
            "UPDATE previews SET sleeping_since = $2, woke_at = NULL
             WHERE id = $1 AND desired = 'deployed' AND sleeping_since IS NULL",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Wake => super::sleep::wake_row(&mut *tx, preview_id, now).await?,
        Effect::Reseed => sqlx::query!(
            "UPDATE previews SET seed_generation = seed_generation + 1, updated_at = $2 WHERE id = $1",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::RefreshTemplate { by } => sqlx::query!(
            "UPDATE template_repos SET refresh = 2, refresh_by = $2, destroy = NULL, updated_at = $3
              WHERE repo = (SELECT repo FROM previews WHERE id = $1)",
            preview_id,
            *by,
            now
        )
        .execute(&mut *tx)
        .await?,
        Effect::Redeploy => sqlx::query!(
            "UPDATE previews SET redeploy_generation = redeploy_generation + 1, updated_at = $2 WHERE id = $1",
            preview_id,
            now
        )
        .execute(&mut *tx)
        .await?,
        // `db::command_effect` says why each guard is there.
        Effect::Deploy {
            by,
            seen_at,
            past_failed_wait,
        } => sqlx::query!(
            "UPDATE previews SET updated_at = $2, deploy_by = $3,
                 wait_override_sha = CASE WHEN $5 AND head_changed_at < $4 THEN head_sha ELSE wait_override_sha END,
                 created_at = CASE WHEN desired = 'opted_out' THEN $2 ELSE created_at END,
                 end_reason = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE end_reason END,
                 sleeping_since = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE sleeping_since END,
                 last_used_at = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN $2 ELSE last_used_at END,
                 desired = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN 'deployed' ELSE desired END
             WHERE id = $1 AND desired != 'awaiting_approval'
               AND (fork = 0 OR (approved_sha = head_sha AND head_changed_at < $4))",
            preview_id,
            now,
            *by,
            seen_at,
            // A condition, never stored: PostgreSQL's boolean.
            past_failed_wait
        )
        .execute(&mut *tx)
        .await?,
        Effect::Approve { sha, seen_at } => sqlx::query!(
            "UPDATE previews SET approved_sha = $2, updated_at = $3,
                    last_used_at = CASE WHEN desired = 'awaiting_approval' AND head_sha = $2 THEN $3 ELSE last_used_at END,
                    desired = CASE WHEN desired = 'awaiting_approval' AND head_sha = $2 THEN 'deployed' ELSE desired END
             WHERE id = $1 AND head_sha = $2 AND head_changed_at < $4",
            preview_id,
            *sha,
            now,
            seen_at
        )
        .execute(&mut *tx)
        .await?,
    };
    let changed = done.rows_affected() > 0;
    if changed {
        // The reconciler's change marker (`db::changes`), in the command's transaction.
        super::changes::touch(tx, preview_id).await?;
    }
    Ok(changed)
}
