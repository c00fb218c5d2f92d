//! `db::ledger` on PostgreSQL: what a preview provisioned, and each item's confirmed state.
//! The entries travel as one JSON array of `[kind, namespace, name]`, as on SQLite: one
//! statement for all of them.

use sqlx::PgPool;

use super::word_of;
use crate::db::LedgerRow;
use crate::db::NewSecrets;
use crate::db::previews::Noted;
use crate::plan::Observation;
use crate::preview::{HistoryKind, LedgerState};

/// `db::record_applied`, with `items` as `db::ledger::as_json` makes them.
pub async fn record_applied(
    pool: &PgPool,
    id: i64,
    items: &str,
    hash: Option<&str>,
    reason: &str,
    seen: Option<&Observation<'_>>,
    now: i64,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    // `$2::text::jsonb`: the entries arrive as text, parsed here (a bare `$2::jsonb` would
    // ask for a JSON value).
    sqlx::query!(
        "INSERT INTO ledger (preview_id, kind, namespace, name, state, created_at)
         SELECT $1, e.value ->> 0, e.value ->> 1, e.value ->> 2, 'applied', $3
         FROM jsonb_array_elements($2::text::jsonb) e
         ON CONFLICT (preview_id, kind, namespace, name) DO UPDATE SET state = 'applied', detail = NULL",
        id,
        items,
        now
    )
    .execute(&mut *tx)
    .await?;
    // The helper's rendering is what `applied_hash` tracks; the app's apply leaves it be.
    sqlx::query!(
        "UPDATE previews SET observed = 'applied', last_error = NULL,
                applied_hash = COALESCE($2, applied_hash), updated_at = $3 WHERE id = $1",
        id,
        hash,
        now
    )
    .execute(&mut *tx)
    .await?;
    super::history::add_of(&mut tx, id, HistoryKind::Applied, reason, now).await?;
    if let Some(seen) = seen {
        super::previews::write_noted(&mut tx, &Noted::from(seen), id, now).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// `db::record_intended`: new items `applying`, known ones kept; nothing written when every
/// item is known and there are no new secrets.
pub async fn record_intended(
    pool: &PgPool,
    id: i64,
    items: &str,
    secrets: Option<NewSecrets>,
    now: i64,
) -> anyhow::Result<()> {
    // NOT EXISTS is never NULL.
    let known = sqlx::query_scalar!(
        r#"SELECT NOT EXISTS (SELECT 1 FROM jsonb_array_elements($2::text::jsonb) e WHERE NOT EXISTS (
             SELECT 1 FROM ledger WHERE preview_id = $1
                AND kind = e.value ->> 0
                AND namespace IS NOT DISTINCT FROM e.value ->> 1
                AND name = e.value ->> 2)) AS "known!""#,
        id,
        items
    )
    .fetch_one(pool)
    .await?;
    if known && secrets.is_none() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "INSERT INTO ledger (preview_id, kind, namespace, name, state, created_at)
         SELECT $1, e.value ->> 0, e.value ->> 1, e.value ->> 2, 'applying', $3
         FROM jsonb_array_elements($2::text::jsonb) e
         ON CONFLICT (preview_id, kind, namespace, name) DO NOTHING",
        id,
        items,
        now
    )
    .execute(&mut *tx)
    .await?;
    // A first rendering's sealed values, in the same commit.
    if let Some(secrets) = secrets {
        super::secrets::write_new(&mut tx, &secrets, id, now).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// `db::record_ledger`: `gone` and `kept` are confirmations and stamp `confirmed_at`.
pub async fn record_ledger(
    pool: &PgPool,
    id: i64,
    entry: &crate::ledger::Entry,
    to: LedgerState,
    detail: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    let confirmed = to.is_final().then_some(now);
    sqlx::query!(
        "INSERT INTO ledger (preview_id, kind, namespace, name, state, detail, created_at, confirmed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (preview_id, kind, namespace, name)
         DO UPDATE SET state = $5, detail = $6, confirmed_at = COALESCE($8, ledger.confirmed_at)",
        id,
        entry.kind,
        entry.namespace,
        entry.name,
        to.as_str(),
        detail,
        now,
        confirmed
    )
    .execute(pool)
    .await
    .map(drop)
}

/// `db::ledger`: a preview's ledger, in the order it was written.
pub async fn ledger(pool: &PgPool, id: i64) -> sqlx::Result<Vec<LedgerRow>> {
    // COALESCE with '' is never NULL.
    let rows = sqlx::query!(
        r#"SELECT kind, COALESCE(namespace, '') AS "namespace!", name, state, detail
         FROM ledger WHERE preview_id = $1 ORDER BY id"#,
        id
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(LedgerRow {
                kind: r.kind,
                namespace: r.namespace,
                name: r.name,
                state: word_of(&r.state)?,
                detail: r.detail,
            })
        })
        .collect()
}
