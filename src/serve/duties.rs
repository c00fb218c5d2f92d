//! The work that runs only where the Lease is held: the reconciler, the sweeper, resync and
//! the feedback worker. Started once this replica's fence opens, stopped the moment it closes
//! (lost, lapsed or released), started again if the Lease is won again. Without leases the
//! fence never closes: they run from start to shutdown, as before.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::task::JoinHandle;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use crate::feedback::Feedback;
use crate::fence::{Fence, Now};
use crate::reconcile::Reconciler;
use crate::resync::Resync;
use crate::sweep::Sweeper;
use crate::work::Pending;

/// A call to a slow GitHub is not waited out longer than this when the worker stops.
const FEEDBACK_GRACE: Duration = Duration::from_secs(10);

pub(super) struct Duties {
    pub(super) reconciler: Arc<Reconciler>,
    /// The reconciler's end of the notifier, between two runs.
    pub(super) pending: Option<Pending>,
    pub(super) feedback: Arc<Feedback>,
    /// A sweeper for each run (a run consumes it).
    pub(super) sweeper: Box<dyn Fn() -> Sweeper + Send + Sync>,
    pub(super) resync: Option<Arc<Resync>>,
}

/// One run of the loops, under one token.
struct Running {
    term: CancellationToken,
    reconciling: JoinHandle<Pending>,
    feeding_back: JoinHandle<()>,
    sweeping: JoinHandle<()>,
    resyncing: Option<JoinHandle<()>>,
}

impl Duties {
    /// Runs the loops whenever `fence` is open, until `stop`; returns once they have stopped.
    pub(super) async fn run(
        mut self,
        mut fence: Fence,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        loop {
            while !fence.is_open() {
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = fence.changed() => {}
                }
            }
            let running = self.start();
            loop {
                let until = match fence.now() {
                    Now::Closed => break,
                    Now::Unleased => None,
                    Now::Until(until) => Some(until),
                };
                // The fence closes by itself at `until` (a renew that never came), and when
                // the Lease's task says so (lost, released): both are waited for.
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = fence.changed() => {}
                    () = sleep_until(until.unwrap_or_else(far)), if until.is_some() => {}
                }
            }
            if !stop.is_cancelled() {
                tracing::warn!(
                    "stopping the reconciler, sweeper, resync and feedback worker: this replica no longer holds the Lease"
                );
            }
            self.stop(running).await?;
            if stop.is_cancelled() {
                return Ok(());
            }
        }
    }

    fn start(&mut self) -> Running {
        let term = CancellationToken::new();
        let pending = self
            .pending
            .take()
            .expect("the reconciler's pending between runs");
        let reconciling = tokio::spawn(self.reconciler.clone().run(pending, term.child_token()));
        let feeding_back = tokio::spawn(self.feedback.clone().run(term.child_token()));
        let sweeping = tokio::spawn((self.sweeper)().run(term.child_token()));
        let resyncing = self
            .resync
            .clone()
            .map(|resync| tokio::spawn(resync.run(term.child_token())));
        Running {
            term,
            reconciling,
            feeding_back,
            sweeping,
            resyncing,
        }
    }

    /// Stops a run and waits for its loops. Whatever they were doing is refused by the fence
    /// if the Lease is gone, so waiting is only for their state writes to settle.
    async fn stop(&mut self, running: Running) -> anyhow::Result<()> {
        running.term.cancel();
        let mut feeding_back = running.feeding_back;
        // What the worker owed stays owed (in the state) for the next run or the next leader.
        match tokio::time::timeout(FEEDBACK_GRACE, &mut feeding_back).await {
            Ok(done) => done.context("waiting for the feedback worker to finish")?,
            Err(_) => {
                // Aborted, not left behind: a next run must not have two workers posting.
                tracing::warn!(
                    "the feedback worker did not stop within {FEEDBACK_GRACE:?}; aborted"
                );
                feeding_back.abort();
            }
        }
        running
            .sweeping
            .await
            .context("waiting for the sweeper to finish")?;
        if let Some(resyncing) = running.resyncing {
            resyncing.await.context("waiting for resync to finish")?;
        }
        let pending = running
            .reconciling
            .await
            .context("waiting for the reconciler to finish")?;
        self.pending = Some(pending);
        Ok(())
    }
}

/// An instant no timer reaches (the branch using it is disabled anyway).
fn far() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}
