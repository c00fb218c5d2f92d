//! Durable intake: a single writer records each delivery together with its intent in one
//! transaction, committing whatever has queued up at once (group commit), so every
//! delivery is on disk before GitHub hears back, at one fsync per batch, not per request.
//! The writer is one task that owns its connection. On SQLite it runs each batch
//! synchronously (`db::write`) on the runtime's thread: no thread hop at all while no other
//! writer holds the state, one a batch while one does. On PostgreSQL each batch is one
//! transaction on a pooled connection (`db::pg::write`), awaited; every replica's writer
//! commits into the same tables, and a delivery sent to two of them is one row (the
//! deliveries' primary key). The statements are one trait (`db::writer::Statements`), so
//! what a delivery writes is decided here once for both.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::db::writer::{self as db, Statements, Writer as Store};
use crate::db::{DeliveryRow, HistoryRow};
use crate::intent::{Change, Intent, Outcome};
use crate::preview::HistoryKind;
use crate::webhook::Delivery;
use crate::work::Work;

/// Most deliveries committed together; bounds the latency one commit adds.
const MAX_BATCH: usize = 256;
/// Deliveries waiting for the writer before senders wait too (backpressure).
const QUEUE: usize = 1024;
/// A commit on the runtime's thread slower than this (a disk whose fsync stalls) sends the
/// commits of the next [`SLOW_BACKOFF`] to a blocking thread: such a disk holds the
/// runtime for one commit a second, not for each.
const SLOW_COMMIT: Duration = Duration::from_millis(20);
const SLOW_BACKOFF: Duration = Duration::from_secs(1);

/// What became of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Written now, with the outcome and its detail; `moved`: whether what it wrote is news
    /// to the reconciler (false when only the event's times moved: a redelivered state).
    New {
        outcome: Outcome,
        detail: String,
        moved: bool,
    },
    /// Seen before and already handled: nothing was written.
    Duplicate { outcome: Outcome },
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("the state could not be written: {0}")]
    Write(String),
    #[error("previewd is shutting down")]
    Closed,
}

struct Job {
    delivery: Delivery,
    intent: Intent,
    reply: oneshot::Sender<Result<Recorded, IntakeError>>,
}

/// The handle the webhook handler records through; cheap to clone.
#[derive(Clone)]
pub struct Intake {
    jobs: mpsc::Sender<Job>,
}

impl Intake {
    /// Starts the writer on its own connection (`db::write::open`), as a task. It stops once
    /// every `Intake` is dropped, after writing what was queued.
    /// `work` is told of each preview whose intent a commit changed.
    pub fn start(store: Store, clock: Arc<dyn Clock>, work: Work) -> (Self, JoinHandle<()>) {
        let (jobs, queue) = mpsc::channel(QUEUE);
        let writer = match store {
            Store::Sqlite(conn) => tokio::spawn(sqlite::write_batches(conn, queue, clock, work)),
            Store::Postgres(pool) => {
                tokio::spawn(postgres::write_batches(pool, queue, clock, work))
            }
        };
        (Self { jobs }, writer)
    }

    /// Records `delivery` and `intent` durably; returns once they are committed.
    pub async fn record(
        &self,
        delivery: Delivery,
        intent: Intent,
    ) -> Result<Recorded, IntakeError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                delivery,
                intent,
                reply,
            })
            .await
            .map_err(|_| IntakeError::Closed)?;
        answer.await.map_err(|_| IntakeError::Closed)?
    }

    /// False once the writer has stopped (shutdown, or a crash): nothing can be recorded.
    pub fn is_running(&self) -> bool {
        !self.jobs.is_closed()
    }
}

/// Waits for a delivery, lets the handlers already woken join it, and takes every one
/// queued (up to [`MAX_BATCH`]); false once every sender is gone.
async fn next_batch(queue: &mut mpsc::Receiver<Job>, batch: &mut Vec<Job>) -> bool {
    let Some(first) = queue.recv().await else {
        return false;
    };
    batch.push(first);
    // Behind the handlers already woken: their deliveries ride on this commit.
    tokio::task::yield_now().await;
    while batch.len() < MAX_BATCH {
        match queue.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
    true
}

fn answer(batch: &mut Vec<Job>, results: Vec<Result<Recorded, IntakeError>>) {
    for (job, result) in batch.drain(..).zip(results) {
        // The handler may have gone (client hung up); the write stands regardless.
        let _ = job.reply.send(result);
    }
}

/// Tells the reconciler of the previews a committed batch moved (this process's reconciler;
/// another replica's finds them by their change version, `db::changes`).
async fn tell(
    conn: &mut impl Statements,
    work: &Work,
    batch: &[Job],
    results: &[Result<Recorded, IntakeError>],
) {
    for (job, result) in batch.iter().zip(results) {
        if let (
            Ok(Recorded::New {
                outcome: Outcome::Accepted,
                moved: true,
                ..
            }),
            Change::PullRequest(change),
        ) = (result, &job.intent.change)
        {
            work.notify(change.pr.key.clone());
        }
        // A CI report moves the previews at its head (the head's suite has them look).
        if let (
            Ok(Recorded::New {
                outcome: Outcome::Accepted,
                ..
            }),
            Change::Check(check),
        ) = (result, &job.intent.change)
        {
            match conn
                .previews_at(check.repo.as_str(), check.sha.as_str())
                .await
            {
                Ok(keys) => keys.into_iter().for_each(|key| work.notify(key)),
                Err(e) => {
                    tracing::warn!(error = %e, "finding the previews a check report moves failed")
                }
            }
        }
        // A command runs now, not at the next resync: what it acts on stays what was seen.
        if let (
            Ok(Recorded::New { .. }),
            Change::Command(command) | Change::FrozenCommand(command),
        ) = (result, &job.intent.change)
        {
            work.notify(command.key.clone());
        }
    }
}

fn delivery_row<'a>(
    d: &'a Delivery,
    outcome: Outcome,
    detail: &'a str,
    now: i64,
) -> DeliveryRow<'a> {
    DeliveryRow {
        hook_id: &d.hook_id,
        guid: &d.guid,
        event: &d.event,
        action: d.action.as_deref(),
        outcome,
        detail,
        received_at: now,
    }
}

async fn record_one(
    conn: &mut impl Statements,
    delivery: &Delivery,
    intent: &Intent,
    now: i64,
) -> db::Result<Recorded> {
    let claim = delivery_row(delivery, intent.outcome, &intent.detail, now);
    if !conn.claim_delivery(&claim).await? {
        let outcome = conn
            .delivery_outcome(&delivery.hook_id, &delivery.guid)
            .await?;
        return Ok(Recorded::Duplicate {
            outcome: outcome.unwrap_or(intent.outcome),
        });
    }
    let Applied {
        outcome,
        detail,
        moved,
    } = apply(conn, delivery, intent, now).await?;
    if (outcome, detail.as_str()) != (intent.outcome, intent.detail.as_str()) {
        conn.record_delivery(&delivery_row(delivery, outcome, &detail, now))
            .await?;
    }
    Ok(Recorded::New {
        outcome,
        detail,
        moved,
    })
}

/// What [`apply`] made of an intent, all of it in what it returns (no out-parameter): the
/// outcome to record and whether the reconciler has news.
struct Applied {
    /// The intent's outcome, or `Ignored`/`Refused` when the state already knew better.
    outcome: Outcome,
    detail: String,
    /// Whether what was written is news to the reconciler: false when a PR change moved
    /// only its times (a redelivered state).
    moved: bool,
}

impl Applied {
    /// `outcome` and its detail, news to the reconciler as all is but a PR change that
    /// moved only its times.
    fn outcome(outcome: Outcome, detail: impl Into<String>) -> Self {
        Self {
            outcome,
            detail: detail.into(),
            moved: true,
        }
    }
}

/// Writes the intent; the outcome can drop to `Ignored` when the state already knows better.
async fn apply(
    conn: &mut impl Statements,
    delivery: &Delivery,
    intent: &Intent,
    now: i64,
) -> db::Result<Applied> {
    let mut moved = true;
    let history = |repo, number, what, actor, reason, head_sha| HistoryRow {
        repo,
        number,
        what,
        actor,
        reason,
        head_sha,
        delivery: Some(&delivery.guid),
        at: now,
    };
    match &intent.change {
        Change::Nothing => {}
        Change::Refusal { key, actor } => {
            let row = history(
                key.repo.as_str(),
                key.number,
                HistoryKind::Refused,
                actor,
                &intent.detail,
                None,
            );
            conn.add_history(&row).await?;
        }
        Change::PullRequest(change) => {
            let Some(applied) = apply_pr(conn, change, &delivery.guid, now).await? else {
                let why = if change.create {
                    "a newer event for this PR is already recorded"
                } else {
                    "no preview for this PR, or a newer event is already recorded"
                };
                return Ok(Applied::outcome(Outcome::Ignored, why));
            };
            moved = applied.moved;
        }
        Change::FrozenCommand(command)
            if !conn
                .has_preview(command.key.repo.as_str(), command.key.number)
                .await? =>
        {
            let detail = format!("{} is not in the [[repos]] allow-list", command.key.repo);
            let row = history(
                command.key.repo.as_str(),
                command.key.number,
                HistoryKind::Refused,
                &command.actor,
                &detail,
                None,
            );
            conn.add_history(&row).await?;
            return Ok(Applied::outcome(Outcome::Refused, detail));
        }
        Change::Command(command) | Change::FrozenCommand(command) => {
            if !conn.queue_command(command, now).await? {
                return Ok(Applied::outcome(Outcome::Ignored, "command already queued"));
            }
            let row = history(
                command.key.repo.as_str(),
                command.key.number,
                HistoryKind::Command,
                &command.actor,
                &command.line,
                None,
            );
            conn.add_history(&row).await?;
        }
        Change::Installation(change) => conn.apply_installation(change, now).await?,
        Change::TemplateBase {
            repo,
            sha,
            pushed_at,
            by,
        } => {
            conn.note_template_base(repo.as_str(), sha.as_str(), *pushed_at, by, now)
                .await?;
        }
        // Matched by commit, never by the PR a payload may name (a status names none): a
        // report counts only for the previews at that very head.
        Change::Check(check) => {
            if let Some(ignored) = apply_check(conn, check).await? {
                return Ok(ignored);
            }
        }
    }
    Ok(Applied {
        outcome: intent.outcome,
        detail: intent.detail.clone(),
        moved,
    })
}

/// A PR change with its history row (none for a redelivery: a replay would add one without
/// end) and, for a PR that now gets a preview, its repository's first template base. `None`:
/// the state already knows better.
async fn apply_pr(
    conn: &mut impl Statements,
    change: &crate::intent::PrChange,
    delivery: &str,
    now: i64,
) -> db::Result<Option<db::Applied>> {
    let Some(applied) = conn.apply_pr_change(change, now).await? else {
        return Ok(None);
    };
    let now_wants = applied.desired;
    // Only a PR that gets a preview (not one opted out, a draft, an unapproved fork) starts
    // a template.
    let deployed = now_wants == crate::preview::Desired::Deployed;
    if let Some(base) = change.template_base.as_ref().filter(|_| deployed) {
        conn.first_template_base(change.pr.key.repo.as_str(), base.as_str(), now)
            .await?;
    }
    if change.desired.is_some() && !applied.again {
        let reason = crate::intent::history_reason(change, now_wants);
        let pr = &change.pr;
        let row = HistoryRow {
            repo: pr.key.repo.as_str(),
            number: pr.key.number,
            what: change.what,
            actor: &pr.sender,
            reason: &reason,
            head_sha: Some(pr.head_sha.as_str()),
            delivery: Some(delivery),
            at: now,
        };
        conn.add_history(&row).await?;
    }
    Ok(Some(applied))
}

/// A CI report, matched by commit, never by the PR a payload may name (a status names none):
/// it counts only for the previews at that very head. `Some`: ignored, and why.
async fn apply_check(
    conn: &mut impl Statements,
    check: &crate::webhook::CheckEvent,
) -> db::Result<Option<Applied>> {
    let (repo, sha) = (check.repo.as_str(), check.sha.as_str());
    if conn.previews_at(repo, sha).await?.is_empty() {
        return Ok(Some(Applied::outcome(
            Outcome::Ignored,
            "no preview waits on this commit",
        )));
    }
    match &check.report {
        Some(report) => {
            if conn.record_check(repo, sha, report).await?.is_empty() {
                return Ok(Some(Applied::outcome(
                    Outcome::Ignored,
                    "a report as new is already recorded",
                )));
            }
        }
        // A suite names no check: the previews at its head look theirs up.
        None => conn.look_again_at(repo, sha).await?,
    }
    Ok(None)
}

mod postgres;
mod sqlite;
#[cfg(test)]
mod tests;
