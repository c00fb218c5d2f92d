//! `db::effects` on PostgreSQL: what a command does to its preview's row, in the
//! transaction that records the command's outcome.

use sqlx::PgConnection;

use super::flag;
use crate::db::Effect;

/// `db::sleep`'s sleep for a command: no idle bound (a writer asked), so only a deployed,
/// awake preview is put to sleep.
const SLEEP: &str = "UPDATE previews SET sleeping_since = $2, woke_at = NULL
     WHERE id = $1 AND desired = 'deployed' AND sleeping_since IS NULL";

/// `db::sleep`'s wake: the sleep's length and the pod-seconds it saved added up.
const WAKE: &str = "UPDATE previews SET
         slept_seconds = slept_seconds + GREATEST($2 - sleeping_since, 0),
         saved_pod_seconds = saved_pod_seconds
             + GREATEST($2 - sleeping_since, 0) * COALESCE(used_pods, 0),
         sleeping_since = NULL, woke_at = $2, last_used_at = $2
     WHERE id = $1 AND sleeping_since IS NOT NULL";

/// One change a command makes to its preview. Returns whether a row changed.
pub async fn command_effect(
    tx: &mut PgConnection,
    preview_id: i64,
    effect: &Effect<'_>,
    now: i64,
) -> sqlx::Result<bool> {
    let query = match effect {
        Effect::ExpireAt(at) => sqlx::query(
            "UPDATE previews SET expires_at = $2, updated_at = $3 WHERE id = $1 AND desired != 'absent'",
        )
        .bind(preview_id)
        .bind(at)
        .bind(now),
        Effect::Destroy => sqlx::query(
            "UPDATE previews SET desired = 'absent', end_reason = 'destroyed', updated_at = $2
             WHERE id = $1 AND desired != 'absent'",
        )
        .bind(preview_id)
        .bind(now),
        Effect::Keep(keep) => {
            sqlx::query("UPDATE previews SET keep = $2, updated_at = $3 WHERE id = $1")
                .bind(preview_id)
                .bind(flag(*keep))
                .bind(now)
        }
        Effect::Sleep => sqlx::query(SLEEP).bind(preview_id).bind(now),
        Effect::Wake => sqlx::query(WAKE).bind(preview_id).bind(now),
        Effect::Reseed => sqlx::query(
            "UPDATE previews SET seed_generation = seed_generation + 1, updated_at = $2 WHERE id = $1",
        )
        .bind(preview_id)
        .bind(now),
        Effect::RefreshTemplate { by } => sqlx::query(
            "UPDATE template_repos SET refresh = 2, refresh_by = $2, destroy = NULL, updated_at = $3
              WHERE repo = (SELECT repo FROM previews WHERE id = $1)",
        )
        .bind(preview_id)
        .bind(*by)
        .bind(now),
        Effect::Redeploy => sqlx::query(
            "UPDATE previews SET redeploy_generation = redeploy_generation + 1, updated_at = $2 WHERE id = $1",
        )
        .bind(preview_id)
        .bind(now),
        // `db::command_effect` says why each guard is there.
        Effect::Deploy {
            by,
            seen_at,
            past_failed_wait,
        } => sqlx::query(
            "UPDATE previews SET updated_at = $2, deploy_by = $3,
                 wait_override_sha = CASE WHEN $5 AND head_changed_at < $4 THEN head_sha ELSE wait_override_sha END,
                 created_at = CASE WHEN desired = 'opted_out' THEN $2 ELSE created_at END,
                 end_reason = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE end_reason END,
                 sleeping_since = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN NULL ELSE sleeping_since END,
                 last_used_at = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN $2 ELSE last_used_at END,
                 desired = CASE WHEN desired IN ('draft', 'absent', 'opted_out') THEN 'deployed' ELSE desired END
             WHERE id = $1 AND desired != 'awaiting_approval'
               AND (fork = 0 OR (approved_sha = head_sha AND head_changed_at < $4))",
        )
        .bind(preview_id)
        .bind(now)
        .bind(*by)
        .bind(seen_at)
        // A condition, never stored: PostgreSQL's boolean.
        .bind(past_failed_wait),
        Effect::Approve { sha, seen_at } => sqlx::query(
            "UPDATE previews SET approved_sha = $2, updated_at = $3,
                    last_used_at = CASE WHEN desired = 'awaiting_approval' AND head_sha = $2 THEN $3 ELSE last_used_at END,
                    desired = CASE WHEN desired = 'awaiting_approval' AND head_sha = $2 THEN 'deployed' ELSE desired END
             WHERE id = $1 AND head_sha = $2 AND head_changed_at < $4",
        )
        .bind(preview_id)
        .bind(*sha)
        .bind(now)
        .bind(seen_at),
    };
    let changed = query.execute(&mut *tx).await?.rows_affected() > 0;
    if changed {
        // The reconciler's change marker (`db::changes`), in the command's transaction.
        super::changes::touch(tx, preview_id).await?;
    }
    Ok(changed)
}
