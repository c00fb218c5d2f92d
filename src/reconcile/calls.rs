//! The reconciler's calls to the sink: each with a timeout and a bounded retry, and the
//! reads a look makes where the watch's copy cannot answer.

use std::time::Duration;

use super::{ATTEMPTS, CALL_TIMEOUT, Reconciler};
use crate::naming::Names;
use crate::plan::Observed;
use crate::sink::{Owner, Stale};

impl Reconciler {
    /// Asks Argo CD for the sync of `name`'s current rendering (the step found that its
    /// verdict needs one: `Health::NeedsSync`).
    pub(super) async fn request_sync(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        if self
            .retry("sync", || self.sink.request_sync(name, owner))
            .await?
        {
            tracing::debug!(application = name, "asked Argo CD to sync this rendering");
        }
        Ok(())
    }

    /// The preview's Applications as the sink's watch last saw them (`Sink::observe_watched`).
    pub(super) fn seen_by_watch(
        &self,
        names: &Names,
        owner: &Owner,
        with_app: bool,
    ) -> Option<(Observed, Option<Observed>)> {
        let helper = self.sink.observe_watched(&names.application, owner)?;
        let app = match with_app {
            true => Some(self.sink.observe_watched(&names.app_application, owner)?),
            false => None,
        };
        Some((helper, app))
    }

    pub(super) async fn observe(&self, name: &str, owner: &Owner) -> anyhow::Result<Observed> {
        self.retry("observe", || self.sink.observe(name, owner))
            .await
    }

    /// A sink call with a timeout and a bounded retry with doubling backoff.
    pub(super) async fn retry<T, F, Fut>(&self, what: &str, call: F) -> anyhow::Result<T>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let mut backoff = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            let result = match tokio::time::timeout(CALL_TIMEOUT, call()).await {
                Ok(result) => result,
                Err(_) => Err(anyhow::anyhow!("{what} timed out after {CALL_TIMEOUT:?}")),
            };
            match result {
                Ok(value) => return Ok(value),
                // Decided on a copy the server has moved past: the caller decides again.
                Err(e) if e.is::<Stale>() => return Err(e),
                // Not sent for want of the Lease: trying again cannot help.
                Err(e) if e.is::<crate::fence::Fenced>() => return Err(e),
                Err(e) if attempt >= ATTEMPTS => {
                    return Err(e.context(format!("{what} failed {ATTEMPTS} times")));
                }
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
            }
        }
    }

    /// What the watch saw under `name`, unless it saw none: then the Application is read, as
    /// the watch sees only this instance's, and another's under the name is a conflict to
    /// report, not to apply over.
    pub(super) async fn observe_unless_seen(
        &self,
        seen: Option<Observed>,
        name: &str,
        owner: &Owner,
    ) -> anyhow::Result<Observed> {
        match seen {
            Some(seen) if seen != Observed::Missing => Ok(seen),
            _ => self.observe(name, owner).await,
        }
    }
}

/// Whether an apply was refused as `Stale`: the preview is looked at again soon, and that
/// look decides on a read (the watch answers for the name only once it has caught up).
pub(super) fn stale(applied: anyhow::Result<()>) -> anyhow::Result<bool> {
    match applied {
        Ok(()) => Ok(false),
        Err(e) if e.is::<Stale>() => {
            tracing::debug!(error = %e, "deciding again on the Application read afresh");
            Ok(true)
        }
        Err(e) => Err(e),
    }
}
