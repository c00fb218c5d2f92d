//! The fence: whether this replica may write to the cluster and to GitHub right now. Every
//! write of the kubernetes sink and of the GitHub client asks it immediately before the
//! request; the Lease (`lease`) moves it. One replica without a Lease (SQLite) has an open
//! fence.
//!
//! The holder counts itself leader only until the time it *sent* its last successful renew
//! plus the renew deadline, on its own monotonic clock (`tokio::time::Instant`, which keeps
//! running while the process is stopped). Another replica takes the Lease over only after it
//! has seen the record unchanged for the whole lease duration on *its* monotonic clock, and
//! it cannot have seen the renew before it was sent: so the holder's fence closes at least
//! `duration - renew_deadline` before anyone else may write.
//!
//! The one window no fence closes: a check that passes, then a pause (the process stopped, a
//! VM paused, a starved thread, a request queued in the kernel or a proxy) longer than that
//! margin before the request reaches the API server or GitHub. The Lease shrinks it to the
//! time between one check and its send; only a token the server itself checks would close it,
//! and neither the Kubernetes API (for Applications) nor GitHub takes one.

use tokio::sync::watch;
use tokio::time::Instant;

/// A write refused because this replica does not hold the Lease: nothing was sent.
#[derive(Debug, Clone, thiserror::Error)]
#[error("this replica does not hold the Lease: {what} not sent")]
pub struct Fenced {
    pub what: String,
}

/// Asked before every write; cheap to clone (a watch receiver).
#[derive(Debug, Clone)]
pub struct Fence(Option<watch::Receiver<Option<Instant>>>);

/// What the fence says now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Now {
    /// No Lease: always open.
    Unleased,
    /// Open until then.
    Until(Instant),
    Closed,
}

/// The Lease's end of the fence: how long this replica may write.
#[derive(Debug)]
pub struct Tenure(watch::Sender<Option<Instant>>);

impl Default for Fence {
    fn default() -> Self {
        Self::open()
    }
}

impl Fence {
    /// Always open: the one replica of a state no other process shares.
    pub fn open() -> Self {
        Self(None)
    }

    /// A closed fence and the tenure that opens it.
    pub fn closed() -> (Tenure, Self) {
        let (tenure, fence) = watch::channel(None);
        (Tenure(tenure), Self(Some(fence)))
    }

    /// Whether, and until when, writes may go now.
    pub fn now(&self) -> Now {
        match &self.0 {
            None => Now::Unleased,
            Some(fence) => match *fence.borrow() {
                Some(until) if Instant::now() < until => Now::Until(until),
                _ => Now::Closed,
            },
        }
    }

    /// Whether a write may go now.
    pub fn is_open(&self) -> bool {
        self.now() != Now::Closed
    }

    /// Called immediately before a write (`what` names it for the error): refused, not sent,
    /// once the tenure has lapsed, even if the Lease's own task has not noticed yet (a
    /// process resumed after a stop runs whichever task first).
    pub fn check(&self, what: impl FnOnce() -> String) -> Result<(), Fenced> {
        match self.now() {
            Now::Closed => Err(Fenced { what: what() }),
            Now::Unleased | Now::Until(_) => Ok(()),
        }
    }

    /// Waits until the tenure changes (won, renewed, lost); never returns on an open fence.
    pub async fn changed(&mut self) {
        let Some(fence) = &mut self.0 else {
            return std::future::pending().await;
        };
        if fence.changed().await.is_err() {
            // The Lease's task is gone: nothing will open or close this fence again.
            std::future::pending::<()>().await;
        }
    }

    /// Whether this fence ever closes (a Lease moves it).
    pub fn is_leased(&self) -> bool {
        self.0.is_some()
    }
}

impl Tenure {
    /// Writes may go until `until` (a renew's send time plus the renew deadline).
    pub fn hold_until(&self, until: Instant) {
        self.0.send_replace(Some(until));
    }

    /// Writes stop now: the Lease lost, lapsed or released.
    pub fn lapse(&self) {
        self.0.send_replace(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_open_fence_lets_every_write_through() {
        assert!(Fence::open().check(|| "apply".into()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenure_lets_writes_through_until_it_ends_and_not_a_moment_after() {
        let (tenure, fence) = Fence::closed();
        assert!(fence.check(|| "apply".into()).is_err(), "closed until won");
        tenure.hold_until(Instant::now() + Duration::from_secs(10));
        assert!(fence.is_open());
        tokio::time::advance(Duration::from_secs(10)).await;
        let refused = fence.check(|| "apply of pv-1".into()).unwrap_err();
        assert_eq!(refused.what, "apply of pv-1");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lapsed_tenure_closes_the_fence_at_once() {
        let (tenure, fence) = Fence::closed();
        tenure.hold_until(Instant::now() + Duration::from_secs(10));
        tenure.lapse();
        assert!(!fence.is_open());
    }
}
