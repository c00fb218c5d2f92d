//! What the login reads and writes: a preview found by its host (every check), and share
//! links (made by `/preview share` or the API, revoked by `/preview unshare`, the API and
//! the preview's end, gone with the preview's row).

use sqlx::{Row, SqliteConnection};

use super::history::HistoryRow;
use super::{State, Tx, pg};
use crate::preview::{HistoryKind, InstallationId, ObservedState, PreviewKey};

/// The preview a host serves, as the login needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPreview {
    pub id: i64,
    pub key: PreviewKey,
    pub installation: Option<InstallationId>,
    /// Not ending (an ended preview's host admits no one while its teardown runs).
    pub live: bool,
    /// What the reconciler last saw, and the sleep (`login::visit`).
    pub observed: ObservedState,
    pub sleeping_since: Option<i64>,
    pub woke_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// The preview whose recorded host is `host` (lower-case, without a port).
pub async fn preview_by_host(state: &State, host: &str) -> anyhow::Result<Option<HostPreview>> {
    if let Some(pg) = state.postgres() {
        return pg::login::preview_by_host(pg, host).await;
    }
    let row = sqlx::query(
        "SELECT id, repo, number, installation_id, desired, observed, sleeping_since, woke_at,
                last_used_at
         FROM previews WHERE json_extract(names, '$.host') = ?1",
    )
    .bind(host)
    .fetch_optional(state.pool())
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let repo: String = row.try_get("repo")?;
    let number: i64 = row.try_get("number")?;
    let desired: String = row.try_get("desired")?;
    Ok(Some(HostPreview {
        id: row.try_get("id")?,
        key: PreviewKey::new(repo.parse()?, u32::try_from(number)?),
        installation: row
            .try_get::<Option<i64>, _>("installation_id")?
            .map(InstallationId),
        live: desired != "absent",
        observed: row.try_get("observed")?,
        sleeping_since: row.try_get("sleeping_since")?,
        woke_at: row.try_get("woke_at")?,
        last_used_at: row.try_get("last_used_at")?,
    }))
}

/// A share link's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    pub id: String,
    pub preview_id: i64,
    pub created_by: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

impl Share {
    pub fn is_valid(&self, now: i64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at
    }
}

/// Shares made per preview and still valid, at most: each is a pass anyone holding it uses.
pub const MAX_SHARES: i64 = 20;

/// Records a share of preview `preview_id` by `by` until `expires_at`; `None` when the
/// preview already has [`MAX_SHARES`] valid ones.
pub async fn create_share(
    state: &State,
    preview_id: i64,
    by: &str,
    now: i64,
    expires_at: i64,
) -> anyhow::Result<Option<Share>> {
    if let Some(pg) = state.postgres() {
        return pg::login::create_share(pg, preview_id, by, now, expires_at).await;
    }
    let mut conn = state.pool().acquire().await?;
    insert_share(&mut conn, preview_id, by, now, expires_at).await
}

/// [`create_share`] in the caller's transaction (a command's, with its history row).
pub async fn create_share_in(
    tx: &mut Tx,
    preview_id: i64,
    by: &str,
    now: i64,
    expires_at: i64,
) -> anyhow::Result<Option<Share>> {
    match tx {
        Tx::Postgres(tx) => pg::login::create_share_in(tx, preview_id, by, now, expires_at).await,
        Tx::Sqlite(tx) => insert_share(tx, preview_id, by, now, expires_at).await,
    }
}

/// A share link's id: 128 random bits, hex.
pub(crate) fn new_share_id() -> anyhow::Result<String> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    Ok(hex::encode(id))
}

async fn insert_share(
    conn: &mut SqliteConnection,
    preview_id: i64,
    by: &str,
    now: i64,
    expires_at: i64,
) -> anyhow::Result<Option<Share>> {
    let id = new_share_id()?;
    let inserted = sqlx::query(
        "INSERT INTO shares (id, preview_id, created_by, created_at, expires_at) \
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE (SELECT count(*) FROM shares WHERE preview_id = ?2 \
         AND revoked_at IS NULL AND expires_at > ?4) < ?6",
    )
    .bind(&id)
    .bind(preview_id)
    .bind(by)
    .bind(now)
    .bind(expires_at)
    .bind(MAX_SHARES)
    .execute(&mut *conn)
    .await?;
    Ok((inserted.rows_affected() == 1).then(|| Share {
        id,
        preview_id,
        created_by: by.to_owned(),
        created_at: now,
        expires_at,
        revoked_at: None,
    }))
}

/// Revokes every valid share of the preview; how many there were.
pub async fn revoke_shares(state: &State, preview_id: i64, now: i64) -> anyhow::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::login::revoke_shares(pg, preview_id, now).await;
    }
    let mut conn = state.pool().acquire().await?;
    revoke(&mut conn, preview_id, now).await
}

/// [`revoke_shares`] in the caller's transaction.
pub async fn revoke_shares_in(tx: &mut Tx, preview_id: i64, now: i64) -> anyhow::Result<u64> {
    match tx {
        Tx::Postgres(tx) => pg::login::revoke_shares_in(tx, preview_id, now).await,
        Tx::Sqlite(tx) => revoke(tx, preview_id, now).await,
    }
}

async fn revoke(conn: &mut SqliteConnection, preview_id: i64, now: i64) -> anyhow::Result<u64> {
    let done = sqlx::query(
        "UPDATE shares SET revoked_at = ?2 WHERE preview_id = ?1 AND revoked_at IS NULL \
         AND expires_at > ?2",
    )
    .bind(preview_id)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// A PR's preview as sharing it needs: its row, whether it is live, when it expires and
/// the host a link opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shareable {
    pub id: i64,
    pub live: bool,
    pub expires_at: i64,
    /// The recorded host (none on a row recorded before names were).
    pub host: Option<String>,
}

/// The preview of `repo` (lower-case) `#number`, if previewd has its row.
pub async fn shareable(
    state: &State,
    repo: &str,
    number: u32,
) -> anyhow::Result<Option<Shareable>> {
    if let Some(pg) = state.postgres() {
        return pg::login::shareable(pg, repo, number).await;
    }
    let row = sqlx::query(
        "SELECT id, desired, expires_at, json_extract(names, '$.host') AS host FROM previews \
         WHERE repo = ?1 AND number = ?2",
    )
    .bind(repo)
    .bind(number)
    .fetch_optional(state.pool())
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let desired: String = row.try_get("desired")?;
    Ok(Some(Shareable {
        id: row.try_get("id")?,
        live: desired != "absent",
        expires_at: row.try_get("expires_at")?,
        host: row.try_get("host")?,
    }))
}

/// An operator's share through the API: the share (`None` past [`MAX_SHARES`]) and its
/// history row (`shared`, by `actor`, naming the expiry, never the link), in one
/// transaction.
pub async fn share_by(
    state: &State,
    key: &PreviewKey,
    preview_id: i64,
    actor: &str,
    now: i64,
    expires_at: i64,
    reason: &str,
) -> anyhow::Result<Option<Share>> {
    if let Some(pg) = state.postgres() {
        return pg::login::share_by(pg, key, preview_id, actor, now, expires_at, reason).await;
    }
    let mut tx = super::begin_write(state).await?;
    let Some(share) = insert_share(&mut tx, preview_id, actor, now, expires_at).await? else {
        return Ok(None);
    };
    let history = HistoryRow {
        actor,
        ..HistoryRow::by_previewd(
            key.repo.as_str(),
            key.number,
            HistoryKind::Shared,
            reason,
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    tx.commit().await?;
    Ok(Some(share))
}

/// An operator's revocation through the API, with its history row (`unshared`) when any
/// share was valid; how many were.
pub async fn unshare_by(
    state: &State,
    key: &PreviewKey,
    preview_id: i64,
    actor: &str,
    now: i64,
) -> anyhow::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::login::unshare_by(pg, key, preview_id, actor, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let revoked = revoke(&mut tx, preview_id, now).await?;
    if revoked > 0 {
        let reason = format!("{revoked} share link(s) revoked");
        let history = HistoryRow {
            actor,
            ..HistoryRow::by_previewd(
                key.repo.as_str(),
                key.number,
                HistoryKind::Unshared,
                &reason,
                now,
            )
        };
        super::history::add(&mut tx, &history).await?;
    }
    tx.commit().await?;
    Ok(revoked)
}

pub async fn share(state: &State, id: &str) -> anyhow::Result<Option<Share>> {
    if let Some(pg) = state.postgres() {
        return pg::login::share(pg, id).await;
    }
    let row = sqlx::query(
        "SELECT id, preview_id, created_by, created_at, expires_at, revoked_at FROM shares \
         WHERE id = ?1",
    )
    .bind(id)
    .fetch_optional(state.pool())
    .await?;
    row.map(|row| share_of(&row)).transpose()
}

/// The preview's shares still valid at `now`, newest first.
pub async fn valid_shares(state: &State, preview_id: i64, now: i64) -> anyhow::Result<Vec<Share>> {
    if let Some(pg) = state.postgres() {
        return pg::login::valid_shares(pg, preview_id, now).await;
    }
    let rows = sqlx::query(
        "SELECT id, preview_id, created_by, created_at, expires_at, revoked_at FROM shares \
         WHERE preview_id = ?1 AND revoked_at IS NULL AND expires_at > ?2 \
         ORDER BY created_at DESC, id",
    )
    .bind(preview_id)
    .bind(now)
    .fetch_all(state.pool())
    .await?;
    rows.iter().map(share_of).collect()
}

fn share_of(row: &sqlx::sqlite::SqliteRow) -> anyhow::Result<Share> {
    Ok(Share {
        id: row.try_get("id")?,
        preview_id: row.try_get("preview_id")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
        revoked_at: row.try_get("revoked_at")?,
    })
}
