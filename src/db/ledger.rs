//! The ledger's queries: what a preview provisioned, and each item's confirmed state.

use rusqlite::params;

use super::previews::Noted;
use super::secrets::NewSecrets;
use crate::plan::Observation;
use crate::preview::{HistoryKind, LedgerState};

use super::State;
use crate::ledger::Entry;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub state: LedgerState,
    pub detail: Option<String>,
}

/// After a successful apply: the Application and what it provisions (`entries`) in the
/// ledger, the observed state and the history row, and what the look that applied it found
/// (`seen`, as `record_state` writes it), in one transaction: one commit, one fsync, where
/// a push made two (issue #17).
pub async fn record_applied(
    state: &State,
    id: i64,
    entries: &[Entry],
    hash: Option<&str>,
    reason: &str,
    seen: Option<&Observation<'_>>,
    now: i64,
) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        let items = as_json(entries);
        return super::pg::ledger::record_applied(pg, id, &items, hash, reason, seen, now).await;
    }
    let db = state.inline();
    let (items, hash, reason) = (as_json(entries), hash.map(str::to_owned), reason.to_owned());
    let noted = seen.map(Noted::from);
    db.write(move |tx| {
        tx.prepare_cached(
            "INSERT INTO ledger (preview_id, kind, namespace, name, state, created_at)
             SELECT ?1, json_extract(e.value, '$[0]'), json_extract(e.value, '$[1]'),
                    json_extract(e.value, '$[2]'), 'applied', ?3
             FROM json_each(?2) e WHERE true
             ON CONFLICT (preview_id, kind, namespace, name) DO UPDATE SET state = 'applied', detail = NULL",
        )?
        .execute(params![id, items, now])?;
        // The helper's rendering is what `applied_hash` tracks; the app's apply leaves it be.
        tx.prepare_cached(
            "UPDATE previews SET observed = 'applied', last_error = NULL,
                    applied_hash = COALESCE(?2, applied_hash), updated_at = ?3 WHERE id = ?1",
        )?
        .execute(params![id, hash, now])?;
        super::history::write_of(tx, id, HistoryKind::Applied, &reason, now)?;
        noted.map_or(Ok(()), |noted| noted.write(tx, id, now))
    })
    .await
}

/// Writes what an apply is about to provision, before the apply: a crash (or a timeout the
/// server acted on) between the apply and `record_applied` must not leave teardown unaware
/// of what may exist. New items are `applying`; items already known keep their state.
/// When every item is known already (every push after the first) nothing is written: a
/// write transaction that changes nothing still costs a hop to a blocking thread and the
/// write lock. Only the preview's own look changes its ledger's items before its end.
/// `secrets`: a first rendering's sealed values, stored in the same commit.
pub async fn record_intended(
    state: &State,
    id: i64,
    entries: &[Entry],
    secrets: Option<NewSecrets>,
    now: i64,
) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::ledger::record_intended(pg, id, &as_json(entries), secrets, now).await;
    }
    let db = state.inline();
    let items = as_json(entries);
    let known = db.read(|conn| {
        conn.prepare_cached(
            "SELECT NOT EXISTS (SELECT 1 FROM json_each(?2) e WHERE NOT EXISTS (
                 SELECT 1 FROM ledger WHERE preview_id = ?1
                    AND kind = json_extract(e.value, '$[0]')
                    AND namespace IS json_extract(e.value, '$[1]')
                    AND name = json_extract(e.value, '$[2]')))",
        )?
        .query_row(params![id, items], |row| row.get::<_, bool>(0))
    })?;
    if known && secrets.is_none() {
        return Ok(());
    }
    db.write(move |tx| {
        tx.prepare_cached(
            "INSERT INTO ledger (preview_id, kind, namespace, name, state, created_at)
             SELECT ?1, json_extract(e.value, '$[0]'), json_extract(e.value, '$[1]'),
                    json_extract(e.value, '$[2]'), 'applying', ?3
             FROM json_each(?2) e WHERE true
             ON CONFLICT (preview_id, kind, namespace, name) DO NOTHING",
        )?
        .execute(params![id, items, now])?;
        // A first rendering's sealed values, in the same commit: stored before any apply
        // carries them, without a commit of their own.
        secrets.map_or(Ok(()), |secrets| secrets.write(tx, id, now))
    })
    .await
}

/// Entries as one JSON array of `[kind, namespace, name]`, for `json_each`: a statement for
/// all of them, not one each (a push wrote 5 twice, each a round trip to sqlx's thread).
fn as_json(entries: &[Entry]) -> String {
    let items: Vec<[&str; 3]> = entries
        .iter()
        .map(|e| [e.kind.as_str(), e.namespace.as_str(), e.name.as_str()])
        .collect();
    serde_json::to_string(&items).unwrap_or_else(|_| "[]".into())
}

/// Sets one item's state; `gone` and `kept` are confirmations and stamp `confirmed_at`.
pub async fn record_ledger(
    state: &State,
    id: i64,
    entry: &Entry,
    to: LedgerState,
    detail: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::ledger::record_ledger(pg, id, entry, to, detail, now).await;
    }
    let pool = state.pool();
    let confirmed = to.is_final().then_some(now);
    sqlx::query!(
        "INSERT INTO ledger (preview_id, kind, namespace, name, state, detail, created_at, confirmed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (preview_id, kind, namespace, name)
         DO UPDATE SET state = ?5, detail = ?6, confirmed_at = COALESCE(?8, confirmed_at)",
        id,
        entry.kind,
        entry.namespace,
        entry.name,
        to,
        detail,
        now,
        confirmed,
    )
    .execute(pool)
    .await
    .map(drop)
}

/// A preview's ledger, in the order it was written.
pub async fn ledger(state: &State, id: i64) -> sqlx::Result<Vec<LedgerRow>> {
    if let Some(pg) = state.postgres() {
        return super::pg::ledger::ledger(pg, id).await;
    }
    let pool = state.pool();
    let rows = sqlx::query!(
        r#"SELECT kind, COALESCE(namespace, '') AS "namespace!: String", name,
                  state AS "state: LedgerState", detail
           FROM ledger WHERE preview_id = ?1 ORDER BY id"#,
        id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LedgerRow {
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
            state: r.state,
            detail: r.detail,
        })
        .collect())
}

impl LedgerRow {
    pub fn entry(&self) -> Entry {
        Entry {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}
