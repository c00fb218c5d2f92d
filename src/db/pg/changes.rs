//! `db::changes` on PostgreSQL: a write that gives a preview work stamps it with the next
//! change version. The counter's one row is locked by the bump until the writer commits, so
//! writers commit in version order and a reader's cursor never skips a late commit.

use sqlx::{PgConnection, PgPool};

/// Takes the counter's row lock first, at the start of a transaction that will stamp a
/// preview: every such writer then locks the counter before any preview row, so two of them
/// never hold one each and wait for the other (a deadlock PostgreSQL would abort one of).
pub async fn lock_first(conn: &mut PgConnection) -> sqlx::Result<()> {
    // The row is read only for its lock (a query with columns has no `execute`).
    sqlx::query_scalar!("SELECT version FROM change_counter WHERE id = 1 FOR UPDATE")
        .fetch_optional(conn)
        .await
        .map(drop)
}

async fn bump(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "UPDATE change_counter SET version = version + 1 WHERE id = 1 RETURNING version"
    )
    .fetch_one(conn)
    .await
}

/// Stamps preview `id`.
pub async fn touch(conn: &mut PgConnection, id: i64) -> sqlx::Result<()> {
    let version = bump(conn).await?;
    sqlx::query!(
        "UPDATE previews SET version = $2 WHERE id = $1",
        id,
        version
    )
    .execute(conn)
    .await
    .map(drop)
}

/// Stamps the preview of PR `number` of `repo`, if there is one.
pub async fn touch_pr(conn: &mut PgConnection, repo: &str, number: i64) -> sqlx::Result<()> {
    let version = bump(conn).await?;
    sqlx::query!(
        "UPDATE previews SET version = $3 WHERE repo = $1 AND number = $2",
        repo,
        number,
        version
    )
    .execute(conn)
    .await
    .map(drop)
}

/// Stamps the live previews of `repo` whose head is `sha`.
pub async fn touch_head(conn: &mut PgConnection, repo: &str, sha: &str) -> sqlx::Result<()> {
    let version = bump(conn).await?;
    sqlx::query!(
        "UPDATE previews SET version = $3 WHERE repo = $1 AND head_sha = $2 AND desired != 'absent'",
        repo,
        sha,
        version
    )
    .execute(conn)
    .await
    .map(drop)
}

/// `db::changes::change_version`: the last version handed out. Versions are bumped under
/// the counter's row lock and committed in order, so everything stamped up to it is
/// committed (or still holds the lock, and is read on the next pass).
pub async fn change_version(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar!("SELECT version FROM change_counter WHERE id = 1")
            .fetch_one(pool)
            .await?,
    )
}

/// `db::changes::changed_since`: (id, version) stamped after `after`, by `previews_by_version`.
pub async fn changed_since(pool: &PgPool, after: i64) -> anyhow::Result<Vec<(i64, i64)>> {
    let rows = sqlx::query!(
        "SELECT id, version FROM previews WHERE version > $1 ORDER BY version, id",
        after
    )
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|r| (r.id, r.version)).collect())
}

/// `db::changes::ids_after`: the slow sweep's next slice.
pub async fn ids_after(pool: &PgPool, after: i64, limit: i64) -> anyhow::Result<Vec<i64>> {
    Ok(sqlx::query_scalar!(
        "SELECT id FROM previews WHERE id > $1 ORDER BY id LIMIT $2",
        after,
        limit
    )
    .fetch_all(pool)
    .await?)
}
