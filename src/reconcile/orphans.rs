//! Orphan removal, as the sweeper recorded it: each orphan looked at once more (a preview
//! created since may own the name now), then deleted through the reconciler's sink like any
//! teardown (this instance's object only, under its uid), and its record dropped.

use super::Reconciler;
use crate::db;
use crate::sink::{Conflict, Owner};

impl Reconciler {
    /// Removes the recorded orphans; returns how many were deleted. One that fails stays
    /// recorded for the next pass.
    pub(super) async fn remove_orphans(&self) -> anyhow::Result<usize> {
        let recorded = db::recorded_orphans(&self.state).await?;
        if recorded.is_empty() {
            return Ok(0);
        }
        // Recorded by a process whose configuration allowed removal; this one's does not
        // (the operator turned it off, perhaps because of what it was about to delete).
        if !self.config.remove_orphans {
            for name in recorded {
                tracing::warn!(
                    application = name,
                    "sweep.remove_orphans is off: orphan left alone"
                );
                db::forget_orphan(&self.state, &name).await?;
            }
            return Ok(0);
        }
        let owned = crate::sweep::owned_names(&self.state, &self.config).await?;
        let owner = Owner::instance(self.instance().await?);
        let mut removed = 0;
        for name in recorded {
            if owned.contains(&name) {
                tracing::info!(application = name, "a preview owns this orphan now: spared");
            } else {
                match self
                    .retry("delete", || self.sink.delete(&name, &owner))
                    .await
                {
                    Ok(()) => {
                        tracing::warn!(application = name, "orphaned Application removed");
                        removed += 1;
                    }
                    // Relabelled since it was listed: not this state's to delete.
                    Err(e) if e.downcast_ref::<Conflict>().is_some() => {
                        tracing::warn!(application = name, error = %format!("{e:#}"), "orphan left alone");
                    }
                    Err(e) => {
                        tracing::warn!(application = name, error = %format!("{e:#}"), "removing an orphan failed; retrying on the next pass");
                        continue;
                    }
                }
            }
            db::forget_orphan(&self.state, &name).await?;
        }
        Ok(removed)
    }
}
