//! What changed for the reconciler, as the state records it (issue #42): every write that
//! gives a preview work stamps it with the next change version (`touch`), and the reconciler
//! reads the previews stamped past its cursor through `previews_by_version`. The mark is in
//! the state, not only in a process's memory, so a write on any replica (the intake of every
//! replica, `previewd destroy` from a shell) reaches the reconciler wherever it runs.
//!
//! Each touch is two statements in the writer's transaction: the counter's one row bumped,
//! then the preview stamped with it. On PostgreSQL the bump's row lock makes concurrent
//! writers commit in version order, so no version below one a reader saw commits later.

use rusqlite::{Connection, params};
use sqlx::SqliteConnection;

use super::State;

const BUMP: &str = "UPDATE change_counter SET version = version + 1 WHERE id = 1";

/// Stamps preview `id` (rusqlite: the intake writer's and the inline transactions).
pub fn touch(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(BUMP)?.execute([])?;
    conn.prepare_cached(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
         WHERE id = ?1",
    )?
    .execute([id])
    .map(drop)
}

/// Stamps the preview of PR `number` of `repo`, if there is one.
pub fn touch_pr(conn: &Connection, repo: &str, number: u32) -> rusqlite::Result<()> {
    conn.prepare_cached(BUMP)?.execute([])?;
    conn.prepare_cached(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
         WHERE repo = ?1 AND number = ?2",
    )?
    .execute(params![repo, number])
    .map(drop)
}

/// Stamps the live previews of `repo` whose head is `sha` (a CI report moves them).
pub fn touch_head(conn: &Connection, repo: &str, sha: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(BUMP)?.execute([])?;
    conn.prepare_cached(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
         WHERE repo = ?1 AND head_sha = ?2 AND desired != 'absent'",
    )?
    .execute(params![repo, sha])
    .map(drop)
}

/// `touch`, for sqlx's transactions.
pub async fn touch_in(tx: &mut SqliteConnection, id: i64) -> sqlx::Result<()> {
    sqlx::query(BUMP).execute(&mut *tx).await?;
    sqlx::query(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
         WHERE id = ?1",
    )
    .bind(id)
    .execute(&mut *tx)
    .await
    .map(drop)
}

/// `touch_pr`, for sqlx's transactions.
pub async fn touch_pr_in(tx: &mut SqliteConnection, repo: &str, number: i64) -> sqlx::Result<()> {
    sqlx::query(BUMP).execute(&mut *tx).await?;
    sqlx::query(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
         WHERE repo = ?1 AND number = ?2",
    )
    .bind(repo)
    .bind(number)
    .execute(&mut *tx)
    .await
    .map(drop)
}

/// The last version handed out: everything stamped up to it is committed and readable.
pub async fn change_version(state: &State) -> anyhow::Result<i64> {
    if let Some(pg) = state.postgres() {
        return super::pg::changes::change_version(pg).await;
    }
    state.inline().read(|conn| {
        conn.prepare_cached("SELECT version FROM change_counter WHERE id = 1")?
            .query_row([], |r| r.get(0))
    })
}

/// The previews stamped after version `after`, as (id, version), oldest change first: one
/// probe of the index when nothing changed, whatever the number of previews.
pub async fn changed_since(state: &State, after: i64) -> anyhow::Result<Vec<(i64, i64)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::changes::changed_since(pg, after).await;
    }
    state.inline().read(|conn| {
        conn.prepare_cached(
            "SELECT id, version FROM previews WHERE version > ?1 ORDER BY version, id",
        )?
        .query_map([after], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
    })
}

/// Up to `limit` preview ids after `after`, in id order: the slow sweep's next slice.
pub async fn ids_after(state: &State, after: i64, limit: i64) -> anyhow::Result<Vec<i64>> {
    if let Some(pg) = state.postgres() {
        return super::pg::changes::ids_after(pg, after, limit).await;
    }
    state.inline().read(|conn| {
        conn.prepare_cached("SELECT id FROM previews WHERE id > ?1 ORDER BY id LIMIT ?2")?
            .query_map(params![after, limit], |r| r.get(0))?
            .collect()
    })
}
