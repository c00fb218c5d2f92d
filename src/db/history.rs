//! The history: a row for each thing that happened to a preview, which outlives it. Every
//! statement that writes one is here, one per driver and shape: a row as given (`add`,
//! `write`), or about the preview with a row id, by previewd (`add_of`, `write_of`).

use rusqlite::params;
use sqlx::SqliteConnection;

use crate::preview::HistoryKind;

/// The actor of what previewd does on its own.
pub const PREVIEWD: &str = "previewd";

pub struct HistoryRow<'a> {
    pub repo: &'a str,
    pub number: u32,
    pub what: HistoryKind,
    pub actor: &'a str,
    pub reason: &'a str,
    pub head_sha: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub at: i64,
}

impl<'a> HistoryRow<'a> {
    /// A row by previewd about `repo#number`, with no head or delivery.
    pub fn by_previewd(
        repo: &'a str,
        number: u32,
        what: HistoryKind,
        reason: &'a str,
        at: i64,
    ) -> Self {
        Self {
            repo,
            number,
            what,
            actor: PREVIEWD,
            reason,
            head_sha: None,
            delivery: None,
            at,
        }
    }
}

const INSERT: &str =
    "INSERT INTO history (repo, number, what, actor, reason, head_sha, delivery, at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// About the preview with row `id` (its repository and number).
const INSERT_OF: &str = "INSERT INTO history (repo, number, what, actor, reason, at)
     SELECT repo, number, ?2, ?3, ?4, ?5 FROM previews WHERE id = ?1";

/// `row`, through sqlx, in the caller's transaction.
pub async fn add(conn: &mut SqliteConnection, row: &HistoryRow<'_>) -> sqlx::Result<()> {
    sqlx::query(INSERT)
        .bind(row.repo)
        .bind(row.number)
        .bind(row.what)
        .bind(row.actor)
        .bind(row.reason)
        .bind(row.head_sha)
        .bind(row.delivery)
        .bind(row.at)
        .execute(conn)
        .await
        .map(drop)
}

/// `row`, through rusqlite (the intake writer's connection, or an inline write).
pub fn write(conn: &rusqlite::Connection, row: &HistoryRow<'_>) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT)?
        .execute(params![
            row.repo,
            row.number,
            row.what,
            row.actor,
            row.reason,
            row.head_sha,
            row.delivery,
            row.at
        ])
        .map(drop)
}

/// A row by previewd about the preview with row `id`, through sqlx, in the caller's
/// transaction (nothing if the row is gone).
pub async fn add_of(
    conn: &mut SqliteConnection,
    id: i64,
    what: HistoryKind,
    reason: &str,
    at: i64,
) -> sqlx::Result<()> {
    sqlx::query(INSERT_OF)
        .bind(id)
        .bind(what)
        .bind(PREVIEWD)
        .bind(reason)
        .bind(at)
        .execute(conn)
        .await
        .map(drop)
}

/// [`add_of`], through rusqlite.
pub fn write_of(
    conn: &rusqlite::Connection,
    id: i64,
    what: HistoryKind,
    reason: &str,
    at: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(INSERT_OF)?
        .execute(params![id, what, PREVIEWD, reason, at])
        .map(drop)
}

/// A row by previewd for each live preview on `cluster` that holds sealed values, in the
/// caller's transaction; returns how many.
pub(super) async fn add_for_sealed_on(
    conn: &mut SqliteConnection,
    cluster: &str,
    what: HistoryKind,
    reason: &str,
    at: i64,
) -> sqlx::Result<u64> {
    sqlx::query(
        "INSERT INTO history (repo, number, what, actor, reason, at)
         SELECT p.repo, p.number, ?2, ?3, ?4, ?5 FROM previews p
         WHERE p.cluster = ?1 AND p.desired != 'absent'
           AND EXISTS (SELECT 1 FROM sealed_secrets s WHERE s.preview_id = p.id)",
    )
    .bind(cluster)
    .bind(what)
    .bind(PREVIEWD)
    .bind(reason)
    .bind(at)
    .execute(conn)
    .await
    .map(|done| done.rows_affected())
}
