//! The seam between the drivers and the reconciler: every producer (the intake writer, the
//! sweeper, the API's destroy, the feedback worker's commands) says "this preview has work"
//! through a [`Work`]; the reconciler alone holds the [`Pending`] end and acts on it. A
//! lost word costs only time: the reconciler's full pass finds the same work.

use std::collections::BTreeSet;

use tokio::sync::mpsc;

use crate::preview::PreviewKey;

/// The producers' end: tells the reconciler a preview has work. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Work {
    previews: mpsc::UnboundedSender<PreviewKey>,
}

/// The reconciler's end: the previews said to have work, in batches.
#[derive(Debug)]
pub struct Pending {
    previews: mpsc::UnboundedReceiver<PreviewKey>,
}

/// A connected pair: what is told through the `Work` (and its clones) arrives at the `Pending`.
pub fn channel() -> (Work, Pending) {
    let (previews, pending) = mpsc::unbounded_channel();
    (Work { previews }, Pending { previews: pending })
}

impl Work {
    /// `key` has work. Never waits; without a reconciler (a one-shot command, a test that
    /// runs passes itself) it goes nowhere, which is fine: the state holds the work.
    pub fn notify(&self, key: PreviewKey) {
        let _ = self.previews.send(key);
    }
}

impl Pending {
    /// Waits for a preview with work, then takes every other one already told, each once;
    /// `None` once every `Work` is gone.
    pub async fn next(&mut self) -> Option<BTreeSet<PreviewKey>> {
        let first = self.previews.recv().await?;
        let mut keys = BTreeSet::from([first]);
        while let Ok(key) = self.previews.try_recv() {
            keys.insert(key);
        }
        Some(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(number: u32) -> PreviewKey {
        PreviewKey::new("acme/api".parse().unwrap(), number)
    }

    #[tokio::test]
    async fn what_every_producer_told_arrives_as_one_batch_each_preview_once() {
        let (work, mut pending) = channel();
        let sweeper = work.clone();
        work.notify(key(2));
        sweeper.notify(key(3));
        work.notify(key(2));
        assert_eq!(pending.next().await, Some(BTreeSet::from([key(2), key(3)])));
        drop((work, sweeper));
        assert_eq!(pending.next().await, None, "no producer left");
    }

    #[test]
    fn telling_without_a_reconciler_is_not_an_error() {
        let (work, pending) = channel();
        drop(pending);
        work.notify(key(2));
    }
}
