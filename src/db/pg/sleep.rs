//! `db::sleep` on PostgreSQL: the last use, a sleep, a wake, what the quota counted awake,
//! and the previews idle long enough to sleep. Each write is one conditional statement, as
//! on SQLite, so replicas racing each other never both act.

use sqlx::postgres::PgQueryResult;
use sqlx::{PgConnection, PgPool};

use crate::db::sleep::{IDLE_PER_PASS, Idle, USE_EVERY, Usage};
use crate::preview::{HistoryKind, PreviewKey};

pub async fn record_use(pool: &PgPool, id: i64, now: i64) -> anyhow::Result<()> {
    sqlx::query!(
        "UPDATE previews SET last_used_at = $2
         WHERE id = $1 AND (last_used_at IS NULL OR last_used_at <= $2::bigint - $3::bigint)",
        id,
        now,
        USE_EVERY
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `db::sleep::sleep`: false when it was not put to sleep.
pub async fn sleep(
    pool: &PgPool,
    id: i64,
    why: &str,
    idle_until: Option<i64>,
    now: i64,
) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    super::changes::lock_first(&mut tx).await?;
    // `db::sleep::SLEEP`: `$3` NULL for a command, else the idle cutoff.
    let slept = sqlx::query!(
        "UPDATE previews SET sleeping_since = $2, woke_at = NULL
         WHERE id = $1 AND desired = 'deployed' AND sleeping_since IS NULL
           AND ($3::bigint IS NULL OR GREATEST(created_at, head_changed_at,
                COALESCE(last_used_at, 0), COALESCE(woke_at, 0)) <= $3)",
        id,
        now,
        idle_until
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if slept > 0 {
        super::changes::touch(&mut tx, id).await?;
        super::history::add_of(&mut tx, id, HistoryKind::Slept, why, now).await?;
    }
    tx.commit().await?;
    Ok(slept > 0)
}

/// `db::sleep::wake`: false when it was awake.
pub async fn wake(pool: &PgPool, id: i64, why: &str, now: i64) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    super::changes::lock_first(&mut tx).await?;
    let woke = wake_row(&mut tx, id, now).await?.rows_affected();
    if woke > 0 {
        // A wake from the login's check, on whichever replica took the request.
        super::changes::touch(&mut tx, id).await?;
        super::history::add_of(&mut tx, id, HistoryKind::Woke, why, now).await?;
    }
    tx.commit().await?;
    Ok(woke > 0)
}

pub async fn record_usage(pool: &PgPool, id: i64, usage: Usage) -> anyhow::Result<()> {
    sqlx::query!(
        "UPDATE previews SET used_pods = $2, used_cpu_millis = $3, used_memory_bytes = $4
         WHERE id = $1 AND sleeping_since IS NULL",
        id,
        usage.pods,
        usage.cpu_millis,
        usage.memory_bytes
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// `db::sleep::idle_since`, through `previews_by_activity` (the same GREATEST expression).
pub async fn idle_since(pool: &PgPool, repo: &str, until: i64) -> anyhow::Result<Vec<Idle>> {
    // `active_at` is never NULL: `created_at` and `head_changed_at` are NOT NULL.
    let rows = sqlx::query!(
        r#"SELECT id, repo, number,
                GREATEST(created_at, head_changed_at, COALESCE(last_used_at, 0), COALESCE(woke_at, 0)) AS "active_at!"
         FROM previews
         WHERE desired = 'deployed' AND sleeping_since IS NULL AND repo = $1
           AND GREATEST(created_at, head_changed_at, COALESCE(last_used_at, 0), COALESCE(woke_at, 0)) <= $2
           AND observed IN ('ready', 'applied')
         ORDER BY 4 LIMIT $3"#,
        repo,
        until,
        IDLE_PER_PASS
    )
    .fetch_all(pool)
    .await?;
    let idle = rows
        .into_iter()
        .map(|r| {
            let number = u32::try_from(r.number).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            Ok(Idle {
                id: r.id,
                key: PreviewKey::new(super::word_of(&r.repo)?, number),
                active_at: r.active_at,
            })
        })
        .collect::<sqlx::Result<_>>()?;
    Ok(idle)
}

/// `db::sleep::WAKE`: the sleep's length and the pod-seconds it saved added up, for a wake
/// from the login's check and for a `/preview wake` alike.
pub(super) async fn wake_row(
    conn: &mut PgConnection,
    id: i64,
    now: i64,
) -> sqlx::Result<PgQueryResult> {
    sqlx::query!(
        "UPDATE previews SET
             slept_seconds = slept_seconds + GREATEST($2 - sleeping_since, 0),
             saved_pod_seconds = saved_pod_seconds
                 + GREATEST($2 - sleeping_since, 0) * COALESCE(used_pods, 0),
             sleeping_since = NULL, woke_at = $2, last_used_at = $2
         WHERE id = $1 AND sleeping_since IS NOT NULL",
        id,
        now
    )
    .execute(&mut *conn)
    .await
}
