//! `previewd migrate-state --from FILE`: copies an SQLite state into the PostgreSQL state
//! the configuration names — previews, ledgers, sealed values, history, deliveries, closed
//! PRs, commands, threads, templates — in one transaction, refusing while a `serve` holds
//! the file or any previewd is connected to the target, or when the target holds anything.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, bail};
use rusqlite::types::Value;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection, Postgres, QueryBuilder};

use crate::config::Config;

/// Every table copied, parents before children (the foreign keys hold row by row).
const COPIED: &[&str] = &[
    "instance",
    "installations",
    "installation_repositories",
    "previews",
    "ledger",
    "sealed_secrets",
    "commands",
    "shares",
    "templates",
    "template_ledger",
    "template_secrets",
    "template_repos",
    "deliveries",
    "history",
    "closed_prs",
    "github_threads",
    "notices",
    "orphans",
    "checks",
    "cluster_certs",
];

/// Tables not copied row by row, and why: a table of neither list stops the copy before
/// it starts (a migration added it, and this command was not told).
const NOT_COPIED: &[(&str, &str)] = &[
    ("leases", "held by a running previewd, and none runs now"),
    (
        "history_retention",
        "set only inside retention's own transaction",
    ),
    (
        "cluster_live",
        "counted again by the target's triggers as previews are copied",
    ),
    ("change_counter", "its one row is carried over as a value"),
];

/// Bound parameters per INSERT (PostgreSQL takes at most 65,535).
const PARAMETERS: usize = 30_000;

/// What was copied, per table.
#[derive(Debug, PartialEq, Eq)]
pub struct Copied(pub Vec<(&'static str, u64)>);

pub async fn run(config: &Config, from: &Path) -> anyhow::Result<()> {
    let copied = migrate(config, from).await?;
    for (table, rows) in &copied.0 {
        println!("{table:<28} {rows:>10}");
    }
    println!("copied {} into {}", from.display(), config.state);
    Ok(())
}

/// The copy itself: returns the rows copied per table once committed.
pub async fn migrate(config: &Config, from: &Path) -> anyhow::Result<Copied> {
    let Some(url) = config.state.url() else {
        bail!("state is not a PostgreSQL URL: set state (PREVIEWD_STATE) to the target database");
    };
    if !from.exists() {
        bail!("no SQLite state at {}", from.display());
    }
    // Exclusive: refused while a serve runs on it, and no serve starts while this copies.
    let _alone = crate::db::hold_alone(from)?;
    // Brought to this release's schema first, as a serve would at start.
    crate::db::open(from).await?.close().await;
    let source =
        rusqlite::Connection::open_with_flags(from, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("opening {}", from.display()))?;
    every_table_known(&source)?;
    // Migrated (the same schema a serve would make), then connected as itself.
    crate::db::State::open(&config.state).await?.close().await;
    let options: PgConnectOptions = url.parse().context("reading state")?;
    let mut target = options
        .application_name("previewd-migrate-state")
        .connect()
        .await
        .with_context(|| format!("connecting to {}", config.state))?;
    refuse_a_live_target(&mut target).await?;
    // One snapshot of the source, one transaction on the target: all or nothing.
    source.execute_batch("BEGIN")?;
    let mut tx = target.begin().await?;
    let mut copied = Vec::new();
    for table in COPIED {
        let rows = copy_table(&source, &mut tx, table).await?;
        copied.push((*table, rows));
    }
    let version: i64 =
        source.query_row("SELECT version FROM change_counter WHERE id = 1", [], |r| {
            r.get(0)
        })?;
    sqlx::query("UPDATE change_counter SET version = $1 WHERE id = 1")
        .bind(version)
        .execute(&mut *tx)
        .await?;
    same_live_counts(&source, &mut tx).await?;
    tx.commit().await?;
    source.execute_batch("COMMIT")?;
    target.close().await?;
    Ok(Copied(copied))
}

/// Every table of the source is copied or named as not copied.
fn every_table_known(source: &rusqlite::Connection) -> anyhow::Result<()> {
    let mut statement = source.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table'
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%'",
    )?;
    let tables = statement
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let known: BTreeSet<&str> = COPIED
        .iter()
        .copied()
        .chain(NOT_COPIED.iter().map(|(t, _)| *t))
        .collect();
    let unknown: Vec<_> = tables
        .iter()
        .filter(|t| !known.contains(t.as_str()))
        .collect();
    if !unknown.is_empty() {
        bail!("the state has tables migrate-state does not know: {unknown:?}; nothing copied");
    }
    Ok(())
}

/// Another previewd connected to the target, or anything already in it, stops the copy.
async fn refuse_a_live_target(target: &mut PgConnection) -> anyhow::Result<()> {
    let others: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND application_name = 'previewd'",
    )
    .fetch_one(&mut *target)
    .await?;
    if others > 0 {
        bail!("{others} connection(s) of a running previewd are open on the target: stop it first");
    }
    for table in COPIED {
        let any: bool = sqlx::query_scalar(&format!("SELECT EXISTS (SELECT 1 FROM {table})"))
            .fetch_one(&mut *target)
            .await?;
        if any {
            bail!(
                "the target already holds rows in {table}: migrate-state copies into an empty state only"
            );
        }
    }
    Ok(())
}

/// The PostgreSQL type of each column of `table`, by name.
async fn column_types(
    tx: &mut PgConnection,
    table: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = $1",
    )
    .bind(table)
    .fetch_all(tx)
    .await?;
    Ok(rows.into_iter().collect())
}

async fn copy_table(
    source: &rusqlite::Connection,
    tx: &mut PgConnection,
    table: &'static str,
) -> anyhow::Result<u64> {
    let types = column_types(tx, table).await?;
    let mut statement = source.prepare(&format!("SELECT * FROM {table}"))?;
    let columns: Vec<String> = statement
        .column_names()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut kinds = Vec::with_capacity(columns.len());
    for column in &columns {
        let Some(kind) = types.get(column) else {
            bail!("{table}.{column} has no column in the PostgreSQL schema; nothing copied");
        };
        kinds.push(kind.clone());
    }
    let mut rows = statement.query([])?;
    let mut batch: Vec<Vec<Value>> = Vec::new();
    let per_insert = (PARAMETERS / columns.len().max(1)).max(1);
    let mut copied = 0u64;
    while let Some(row) = rows.next()? {
        let values = (0..columns.len())
            .map(|i| row.get::<_, Value>(i))
            .collect::<rusqlite::Result<Vec<_>>>()?;
        batch.push(values);
        if batch.len() == per_insert {
            copied += insert(tx, table, &columns, &kinds, &batch).await?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        copied += insert(tx, table, &columns, &kinds, &batch).await?;
    }
    if columns
        .iter()
        .zip(&kinds)
        .any(|(c, k)| c == "id" && k == "bigint")
    {
        // Identity columns hand out ids after the copied ones.
        sqlx::query(&format!(
            "SELECT setval(pg_get_serial_sequence('{table}', 'id'), GREATEST(MAX(id), 1), MAX(id) IS NOT NULL)
             FROM {table} WHERE pg_get_serial_sequence('{table}', 'id') IS NOT NULL"
        ))
        .execute(&mut *tx)
        .await?;
    }
    Ok(copied)
}

async fn insert(
    tx: &mut PgConnection,
    table: &str,
    columns: &[String],
    kinds: &[String],
    rows: &[Vec<Value>],
) -> anyhow::Result<u64> {
    let mut query: QueryBuilder<Postgres> =
        QueryBuilder::new(format!("INSERT INTO {table} ({}) ", columns.join(", ")));
    let mut bad = None;
    query.push_values(rows, |mut values, row| {
        for ((value, kind), column) in row.iter().zip(kinds).zip(columns) {
            if let Err(e) = bind(&mut values, value, kind) {
                bad.get_or_insert(format!("{table}.{column}: {e}"));
            }
        }
    });
    if let Some(bad) = bad {
        bail!("{bad}; nothing copied");
    }
    let done = query
        .build()
        .execute(tx)
        .await
        .with_context(|| format!("copying {table}"))?;
    Ok(done.rows_affected())
}

/// One SQLite value as the PostgreSQL column's type.
fn bind(
    values: &mut sqlx::query_builder::Separated<'_, '_, Postgres, &'static str>,
    value: &Value,
    kind: &str,
) -> Result<(), String> {
    match (kind, value) {
        ("bigint", Value::Integer(n)) => values.push_bind(*n),
        ("bigint", Value::Null) => values.push_bind(None::<i64>),
        ("text", Value::Text(text)) => values.push_bind(text.clone()),
        ("text", Value::Integer(n)) => values.push_bind(n.to_string()),
        ("text", Value::Null) => values.push_bind(None::<String>),
        ("bytea", Value::Blob(bytes)) => values.push_bind(bytes.clone()),
        ("bytea", Value::Null) => values.push_bind(None::<Vec<u8>>),
        ("boolean", Value::Integer(n)) => values.push_bind(*n != 0),
        (kind, value) => return Err(format!("{value:?} does not fit a {kind} column")),
    };
    Ok(())
}

/// The target's triggers counted each cluster's live previews as they were copied: the
/// counts must be the source's.
async fn same_live_counts(
    source: &rusqlite::Connection,
    tx: &mut PgConnection,
) -> anyhow::Result<()> {
    let mut statement =
        source.prepare("SELECT cluster, live FROM cluster_live WHERE live > 0 ORDER BY cluster")?;
    let source_counts = statement
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let target_counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT cluster, live FROM cluster_live WHERE live > 0 ORDER BY cluster")
            .fetch_all(tx)
            .await?;
    if source_counts != target_counts {
        bail!(
            "live previews per cluster differ after the copy ({source_counts:?} vs {target_counts:?}); nothing copied"
        );
    }
    Ok(())
}
