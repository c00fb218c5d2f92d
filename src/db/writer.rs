//! The intake writer's connection on either store, and the statements a delivery is recorded
//! with (`Statements`): run synchronously on SQLite (`db::write`, rusqlite, on the runtime's
//! thread), awaited on PostgreSQL (`db::pg::write`). The intake's logic is written once,
//! against the trait.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use sqlx::{PgConnection, PgPool};

use super::{DeliveryRow, HistoryRow, State};
use crate::checks::CheckReport;
use crate::intent::{Outcome, PrChange};
use crate::preview::PreviewKey;
use crate::webhook::{CommandComment, InstallationChange};

pub use super::write::Applied;

/// The intake's own connection: an SQLite connection it alone writes with, or the
/// PostgreSQL pool (each batch's transaction takes one connection from it).
pub enum Writer {
    Sqlite(rusqlite::Connection),
    Postgres(PgPool),
}

impl Writer {
    /// The writer for `state`: on SQLite, a connection of its own with the pool's settings.
    pub fn open(state: &State) -> anyhow::Result<Self> {
        match state.postgres() {
            Some(pool) => Ok(Writer::Postgres(pool.clone())),
            None => Ok(Writer::Sqlite(super::write::open(
                state.pool().connect_options().get_filename(),
            )?)),
        }
    }
}

/// A statement that failed, on either store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

impl Error {
    /// Busy: another writer holds the state (or no connection came free); try again.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Sqlite(e) => super::connection::is_busy_rusqlite(e),
            Error::Postgres(e) => super::connection::is_busy(e),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// What the intake writes a delivery with, in the writer's transaction.
#[allow(async_fn_in_trait)] // used only generically, never as `dyn`, never across threads
pub trait Statements {
    async fn delivery_outcome(&mut self, hook_id: &str, guid: &str) -> Result<Option<Outcome>>;
    /// Records a delivery seen for the first time (or last seen failing); false, and
    /// nothing written, when it was already handled.
    async fn claim_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<bool>;
    async fn record_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<()>;
    async fn add_history(&mut self, row: &HistoryRow<'_>) -> Result<()>;
    async fn apply_pr_change(&mut self, change: &PrChange, now: i64) -> Result<Option<Applied>>;
    async fn has_preview(&mut self, repo: &str, number: u32) -> Result<bool>;
    async fn queue_command(&mut self, command: &CommandComment, now: i64) -> Result<bool>;
    async fn apply_installation(&mut self, change: &InstallationChange, now: i64) -> Result<()>;
    async fn note_template_base(
        &mut self,
        repo: &str,
        sha: &str,
        pushed_at: i64,
        by: &str,
        now: i64,
    ) -> Result<()>;
    async fn first_template_base(&mut self, repo: &str, sha: &str, now: i64) -> Result<()>;
    async fn previews_at(&mut self, repo: &str, sha: &str) -> Result<Vec<PreviewKey>>;
    async fn record_check(
        &mut self,
        repo: &str,
        sha: &str,
        report: &CheckReport,
    ) -> Result<Vec<PreviewKey>>;
    async fn look_again_at(&mut self, repo: &str, sha: &str) -> Result<()>;
}

/// An SQLite connection (or transaction) as [`Statements`]: each runs synchronously, so
/// the futures are ready when first polled ([`now`]).
pub struct Lite<'a>(pub &'a rusqlite::Connection);

impl Statements for Lite<'_> {
    async fn delivery_outcome(&mut self, hook_id: &str, guid: &str) -> Result<Option<Outcome>> {
        Ok(super::write::delivery_outcome(self.0, hook_id, guid)?)
    }
    async fn claim_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<bool> {
        Ok(super::write::claim_delivery(self.0, row)?)
    }
    async fn record_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<()> {
        Ok(super::write::record_delivery(self.0, row)?)
    }
    async fn add_history(&mut self, row: &HistoryRow<'_>) -> Result<()> {
        Ok(super::write::add_history(self.0, row)?)
    }
    async fn apply_pr_change(&mut self, change: &PrChange, now: i64) -> Result<Option<Applied>> {
        Ok(super::write::apply_pr_change(self.0, change, now)?)
    }
    async fn has_preview(&mut self, repo: &str, number: u32) -> Result<bool> {
        Ok(super::write::has_preview(self.0, repo, number)?)
    }
    async fn queue_command(&mut self, command: &CommandComment, now: i64) -> Result<bool> {
        Ok(super::write::queue_command(self.0, command, now)?)
    }
    async fn apply_installation(&mut self, change: &InstallationChange, now: i64) -> Result<()> {
        Ok(super::write::apply_installation(self.0, change, now)?)
    }
    async fn note_template_base(
        &mut self,
        repo: &str,
        sha: &str,
        pushed_at: i64,
        by: &str,
        now: i64,
    ) -> Result<()> {
        Ok(super::write::note_template_base(
            self.0, repo, sha, pushed_at, by, now,
        )?)
    }
    async fn first_template_base(&mut self, repo: &str, sha: &str, now: i64) -> Result<()> {
        Ok(super::write::first_template_base(self.0, repo, sha, now)?)
    }
    async fn previews_at(&mut self, repo: &str, sha: &str) -> Result<Vec<PreviewKey>> {
        Ok(super::write::previews_at(self.0, repo, sha)?)
    }
    async fn record_check(
        &mut self,
        repo: &str,
        sha: &str,
        report: &CheckReport,
    ) -> Result<Vec<PreviewKey>> {
        Ok(super::write::record_check(self.0, repo, sha, report)?)
    }
    async fn look_again_at(&mut self, repo: &str, sha: &str) -> Result<()> {
        Ok(super::write::look_again_at(self.0, repo, sha)?)
    }
}

impl Statements for PgConnection {
    async fn delivery_outcome(&mut self, hook_id: &str, guid: &str) -> Result<Option<Outcome>> {
        Ok(super::pg::write::delivery_outcome(self, hook_id, guid).await?)
    }
    async fn claim_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<bool> {
        Ok(super::pg::write::claim_delivery(self, row).await?)
    }
    async fn record_delivery(&mut self, row: &DeliveryRow<'_>) -> Result<()> {
        Ok(super::pg::write::record_delivery(self, row).await?)
    }
    async fn add_history(&mut self, row: &HistoryRow<'_>) -> Result<()> {
        Ok(super::pg::history::add(self, row).await?)
    }
    async fn apply_pr_change(&mut self, change: &PrChange, now: i64) -> Result<Option<Applied>> {
        Ok(super::pg::write::apply_pr_change(self, change, now).await?)
    }
    async fn has_preview(&mut self, repo: &str, number: u32) -> Result<bool> {
        Ok(super::pg::write::has_preview(self, repo, number).await?)
    }
    async fn queue_command(&mut self, command: &CommandComment, now: i64) -> Result<bool> {
        Ok(super::pg::write::queue_command(self, command, now).await?)
    }
    async fn apply_installation(&mut self, change: &InstallationChange, now: i64) -> Result<()> {
        Ok(super::pg::write::apply_installation(self, change, now).await?)
    }
    async fn note_template_base(
        &mut self,
        repo: &str,
        sha: &str,
        pushed_at: i64,
        by: &str,
        now: i64,
    ) -> Result<()> {
        Ok(super::pg::write::note_template_base(self, repo, sha, pushed_at, by, now).await?)
    }
    async fn first_template_base(&mut self, repo: &str, sha: &str, now: i64) -> Result<()> {
        Ok(super::pg::write::first_template_base(self, repo, sha, now).await?)
    }
    async fn previews_at(&mut self, repo: &str, sha: &str) -> Result<Vec<PreviewKey>> {
        Ok(super::pg::write::previews_at(self, repo, sha).await?)
    }
    async fn record_check(
        &mut self,
        repo: &str,
        sha: &str,
        report: &CheckReport,
    ) -> Result<Vec<PreviewKey>> {
        Ok(super::pg::write::record_check(self, repo, sha, report).await?)
    }
    async fn look_again_at(&mut self, repo: &str, sha: &str) -> Result<()> {
        Ok(super::pg::write::look_again_at(self, repo, sha).await?)
    }
}

/// The output of a future that never waits: [`Lite`]'s statements, which run synchronously.
/// Polled once; one that is not ready is a bug (a `Lite` statement that awaited something).
pub fn now<T>(future: impl Future<Output = T>) -> T {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => unreachable!("an SQLite statement run inline waited"),
    }
}
