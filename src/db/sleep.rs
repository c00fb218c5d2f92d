//! Sleep and wake as the state records them: the last use the login saw, a sleep (idle, or
//! `/preview sleep`), a wake (a request, `/preview wake`, a push), and what the preview's
//! quota counted awake, for what sleeping saved. Each is one conditional statement, so a
//! sweeper, a check and a command racing each other never both act.

use rusqlite::params;

use super::State;
use crate::preview::{HistoryKind, PreviewKey};

/// A use is written at most this often per preview: a busy preview costs one write a
/// minute, not one per request.
pub const USE_EVERY: i64 = 60;

/// Puts preview `?1` to sleep at `?2`, if it is deployed, awake, and (unless `?3` is NULL)
/// still idle past `?3`. The one statement of every sleep: the sweeper's, a command's.
pub(super) const SLEEP: &str = "UPDATE previews SET sleeping_since = ?2, woke_at = NULL
     WHERE id = ?1 AND desired = 'deployed' AND sleeping_since IS NULL
       AND (?3 IS NULL OR MAX(created_at, head_changed_at,
            COALESCE(last_used_at, 0), COALESCE(woke_at, 0)) <= ?3)";

/// Wakes preview `?1` at `?2`, if it sleeps: the sleep's length and the pod-seconds it saved
/// added up. The one statement of every wake: a request's, a command's.
pub(super) const WAKE: &str = "UPDATE previews SET
         slept_seconds = slept_seconds + MAX(?2 - sleeping_since, 0),
         saved_pod_seconds = saved_pod_seconds
             + MAX(?2 - sleeping_since, 0) * COALESCE(used_pods, 0),
         sleeping_since = NULL, woke_at = ?2, last_used_at = ?2
     WHERE id = ?1 AND sleeping_since IS NOT NULL";

/// What is recorded of `id`'s use at `now`, unless a use this recent is already.
pub async fn record_use(state: &State, id: i64, now: i64) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::sleep::record_use(pg, id, now).await;
    }
    state
        .inline()
        .write(move |tx| {
            tx.prepare_cached(
                "UPDATE previews SET last_used_at = ?2
                 WHERE id = ?1 AND (last_used_at IS NULL OR last_used_at <= ?2 - ?3)",
            )?
            .execute(params![id, now, USE_EVERY])
            .map(drop)
        })
        .await
}

/// Puts a deployed, awake preview to sleep, saying why in its history. `idle_until`: the
/// sweeper's cutoff, which the preview must still be idle past (a push or a visit since the
/// sweeper read it keeps it awake); `None` for a command. False when it was not put to
/// sleep (asleep already, ending, not deployed, or active since).
pub async fn sleep(
    state: &State,
    id: i64,
    why: &str,
    idle_until: Option<i64>,
    now: i64,
) -> anyhow::Result<bool> {
    if let Some(pg) = state.postgres() {
        return super::pg::sleep::sleep(pg, id, why, idle_until, now).await;
    }
    let why = why.to_owned();
    state
        .inline()
        .write(move |tx| {
            let slept = tx
                .prepare_cached(SLEEP)?
                .execute(params![id, now, idle_until])?;
            if slept > 0 {
                super::changes::touch(tx, id)?;
                super::history::write_of(tx, id, HistoryKind::Slept, &why, now)?;
            }
            Ok(slept > 0)
        })
        .await
}

/// Wakes a sleeping preview: the sleep's length and the pod-seconds it saved are added up,
/// the wake is stamped (the login shows the waking page until the preview is ready).
/// False when it was awake.
pub async fn wake(state: &State, id: i64, why: &str, now: i64) -> anyhow::Result<bool> {
    if let Some(pg) = state.postgres() {
        return super::pg::sleep::wake(pg, id, why, now).await;
    }
    let why = why.to_owned();
    state
        .inline()
        .write(move |tx| {
            let woke = tx.prepare_cached(WAKE)?.execute(params![id, now])?;
            if woke > 0 {
                // A wake from the login's check, on whichever replica took the request.
                super::changes::touch(tx, id)?;
                super::history::write_of(tx, id, HistoryKind::Woke, &why, now)?;
            }
            Ok(woke > 0)
        })
        .await
}

/// What a preview namespace's ResourceQuota counts in use (`status.used`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub pods: i64,
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

/// Records what the quota counted while the preview was awake and ready.
pub async fn record_usage(state: &State, id: i64, usage: Usage) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::sleep::record_usage(pg, id, usage).await;
    }
    state
        .inline()
        .write(move |tx| {
            tx.prepare_cached(
                "UPDATE previews SET used_pods = ?2, used_cpu_millis = ?3, used_memory_bytes = ?4
                 WHERE id = ?1 AND sleeping_since IS NULL",
            )?
            .execute(params![
                id,
                usage.pods,
                usage.cpu_millis,
                usage.memory_bytes
            ])
            .map(drop)
        })
        .await
}

/// An awake deployed preview and when it was last active (a request, a push, a wake, its
/// start), for the sweeper to put to sleep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    pub id: i64,
    pub key: PreviewKey,
    pub active_at: i64,
}

/// Previews one pass puts to sleep in one repository, at most.
pub const IDLE_PER_PASS: i64 = 500;

/// `repo`'s settled (ready, or written where nobody reports) awake previews last active at
/// or before `until`, least recently first, through `previews_by_activity`: a repository
/// that never sleeps costs nothing, and its idle previews take no other's places.
pub async fn idle_since(state: &State, repo: &str, until: i64) -> anyhow::Result<Vec<Idle>> {
    if let Some(pg) = state.postgres() {
        return super::pg::sleep::idle_since(pg, repo, until).await;
    }
    state.inline().read(|conn| {
        conn.prepare_cached(
            "SELECT id, repo, number,
                    MAX(created_at, head_changed_at, COALESCE(last_used_at, 0), COALESCE(woke_at, 0))
             FROM previews INDEXED BY previews_by_activity
             WHERE desired = 'deployed' AND sleeping_since IS NULL AND repo = ?1
               AND MAX(created_at, head_changed_at, COALESCE(last_used_at, 0), COALESCE(woke_at, 0)) <= ?2
               AND observed IN ('ready', 'applied')
             ORDER BY 4 LIMIT ?3",
        )?
        .query_map(params![repo, until, IDLE_PER_PASS], |r| {
            Ok(Idle {
                id: r.get(0)?,
                key: PreviewKey::new(r.get(1)?, r.get(2)?),
                active_at: r.get(3)?,
            })
        })?
        .collect()
    })
}
