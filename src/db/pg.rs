//! The state on PostgreSQL: the twin of each SQLite statement in `db`, in PostgreSQL's
//! dialect, compile-checked against a real server (`scripts/sqlx-prepare` records both
//! stores' queries in `.sqlx/`). Each function of `db` asks `State::postgres` first and
//! hands a PostgreSQL state here; what they return is the same.

use anyhow::Context;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::config::Store;

pub mod certs;
pub mod changes;
pub mod effects;
pub mod gates;
pub mod github;
pub mod history;
pub mod ledger;
pub mod login;
pub mod once;
pub mod placement;
pub mod previews;
pub mod secrets;
pub mod sleep;
pub mod sweep;
pub mod templates;
pub mod views;
pub mod write;

/// A 0/1 flag as the state stores it (an integer on both stores, so rows read the same).
pub(crate) fn flag(value: bool) -> i64 {
    i64::from(value)
}

/// A stored word (an enum's serde name), as written.
pub(crate) fn word<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A stored word read back; text no variant names is a decode error that names it.
pub(crate) fn word_of<T: serde::de::DeserializeOwned>(text: &str) -> sqlx::Result<T> {
    use serde::de::IntoDeserializer;
    T::deserialize(text.into_deserializer())
        .map_err(|e: serde::de::value::Error| sqlx::Error::Decode(Box::new(e)))
}

/// The state's instance id, read without migrating or writing anything (`previewd render`).
pub async fn read_instance_id(store: &Store) -> anyhow::Result<Option<String>> {
    let url = store.url().context("not a PostgreSQL state")?;
    let options: PgConnectOptions = url.parse().with_context(|| format!("reading {store}"))?;
    let mut conn = options
        .connect()
        .await
        .with_context(|| format!("connecting to state {store}"))?;
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('instance') IS NOT NULL")
        .fetch_one(&mut conn)
        .await?;
    let id = match has_table {
        false => None,
        true => sqlx::query_scalar("SELECT id FROM instance")
            .fetch_optional(&mut conn)
            .await
            .with_context(|| format!("reading the instance id of {store}"))?,
    };
    conn.close().await?;
    Ok(id)
}
