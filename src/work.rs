//! The seam between the drivers and the reconciler: every producer (the intake writer, the
//! sweeper, the API's destroy, the feedback worker's commands) says "this preview has work"
//! through a [`Work`]; the reconciler alone holds the [`Pending`] end and acts on it. A
//! lost word costs only time: the reconciler's full pass finds the same work. What the
//! reconciler must look at again itself (a sync under way, a retry) waits in [`Later`].

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::time::{DelayQueue, delay_queue};

use crate::preview::PreviewKey;

/// What the producers told and the reconciler has not taken yet: a set, so a burst of
/// deliveries for one PR (or a reconciler stalled behind a slow sink) holds each preview
/// once — bounded by the previews, not by how often they were told.
#[derive(Debug, Default)]
struct Told {
    keys: Mutex<BTreeSet<PreviewKey>>,
    wake: Notify,
    /// Live `Work` handles; at zero, `Pending::next` ends once the set is empty.
    producers: AtomicUsize,
}

impl Told {
    fn keys(&self) -> std::sync::MutexGuard<'_, BTreeSet<PreviewKey>> {
        // Nothing that can panic runs under this lock; a poisoned set is still a set.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The producers' end: tells the reconciler a preview has work. Cheap to clone.
#[derive(Debug)]
pub struct Work {
    told: Arc<Told>,
}

/// The reconciler's end: the previews said to have work, in batches.
#[derive(Debug)]
pub struct Pending {
    told: Arc<Told>,
}

/// A connected pair: what is told through the `Work` (and its clones) arrives at the `Pending`.
pub fn channel() -> (Work, Pending) {
    let told = Arc::new(Told::default());
    told.producers.store(1, Ordering::SeqCst);
    (Work { told: told.clone() }, Pending { told })
}

impl Clone for Work {
    fn clone(&self) -> Self {
        self.told.producers.fetch_add(1, Ordering::SeqCst);
        Self {
            told: self.told.clone(),
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if self.told.producers.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.told.wake.notify_one();
        }
    }
}

impl Work {
    /// `key` has work. Never waits; without a reconciler (a one-shot command, a test that
    /// runs passes itself) it waits in the set, which is fine: the state holds the work.
    pub fn notify(&self, key: PreviewKey) {
        self.told.keys().insert(key);
        // Stores a permit when the reconciler is not waiting yet: no word is lost.
        self.told.wake.notify_one();
    }
}

impl Pending {
    /// Waits for a preview with work, then takes every one told, each once; `None` once
    /// every `Work` is gone and nothing is left.
    pub async fn next(&mut self) -> Option<BTreeSet<PreviewKey>> {
        loop {
            {
                let mut keys = self.told.keys();
                if !keys.is_empty() {
                    return Some(std::mem::take(&mut *keys));
                }
                if self.told.producers.load(Ordering::SeqCst) == 0 {
                    return None;
                }
            }
            self.told.wake.notified().await;
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.told.keys().len()
    }
}

/// Previews to look at again, each once its own delay has passed: `first` at first, doubled
/// each time it is asked for again (up to `most`), forgotten once settled.
pub struct Later {
    first: Duration,
    most: Duration,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    due: DelayQueue<i64>,
    /// Each preview's delay, and its key in `due` while it waits: kept after it came due, so
    /// that asking again doubles the delay.
    delays: HashMap<i64, (Option<delay_queue::Key>, Duration)>,
}

impl Later {
    pub fn new(first: Duration, most: Duration) -> Self {
        Self {
            first,
            most,
            queue: Mutex::new(Queue::default()),
        }
    }

    /// Looks at `id` again after its next delay (from now).
    pub fn again(&self, id: i64) {
        let mut queue = self.queue.lock().expect("requeue");
        let Queue { due, delays } = &mut *queue;
        let (key, delay) = delays.entry(id).or_insert((None, Duration::ZERO));
        *delay = if delay.is_zero() {
            self.first
        } else {
            (*delay * 2).min(self.most)
        };
        match key {
            Some(key) => due.reset(key, *delay),
            None => *key = Some(due.insert(id, *delay)),
        }
    }

    /// `id` converged: no early look, and the next `again` starts from `first`.
    pub fn settled(&self, id: i64) {
        let mut queue = self.queue.lock().expect("requeue");
        if let Some((Some(key), _)) = queue.delays.remove(&id) {
            queue.due.remove(&key);
        }
    }

    /// Waits until some are due, then takes every one due. Cancel-safe: dropped before it
    /// returns, it has taken nothing.
    pub async fn due(&self) -> Vec<i64> {
        std::future::poll_fn(|cx| {
            let mut queue = self.queue.lock().expect("requeue");
            let mut ready = Vec::new();
            // An empty queue answers `None` but keeps the waker: an `again` wakes this.
            while let Poll::Ready(Some(expired)) = queue.due.poll_expired(cx) {
                let id = expired.into_inner();
                if let Some((key, _)) = queue.delays.get_mut(&id) {
                    *key = None;
                }
                ready.push(id);
            }
            if ready.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(ready)
            }
        })
        .await
    }

    #[cfg(test)]
    fn delay_of(&self, id: i64) -> Option<Duration> {
        let queue = self.queue.lock().expect("requeue");
        queue.delays.get(&id).map(|(_, delay)| *delay)
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

    /// Before, every word was a message in an unbounded channel: a reconciler stalled
    /// behind a slow sink while one PR's pushes kept coming held one entry per delivery.
    #[tokio::test]
    async fn a_burst_for_one_preview_waits_as_one_entry() {
        let (work, mut pending) = channel();
        for _ in 0..100_000 {
            work.notify(key(2));
        }
        work.notify(key(3));
        assert_eq!(pending.waiting(), 2);
        assert_eq!(pending.next().await, Some(BTreeSet::from([key(2), key(3)])));
        assert_eq!(pending.waiting(), 0);
    }

    #[tokio::test]
    async fn a_word_told_while_the_reconciler_waits_wakes_it() {
        let (work, mut pending) = channel();
        let waiting = tokio::spawn(async move { pending.next().await });
        tokio::task::yield_now().await;
        work.notify(key(4));
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(got.unwrap().unwrap(), Some(BTreeSet::from([key(4)])));
    }

    #[test]
    fn telling_without_a_reconciler_is_not_an_error() {
        let (work, pending) = channel();
        drop(pending);
        work.notify(key(2));
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn a_requeued_preview_is_due_after_its_delay_not_before() {
        let later = Later::new(60 * MS, 1000 * MS);
        let asked = tokio::time::Instant::now();
        later.again(7);
        assert_eq!(later.due().await, vec![7]);
        assert!(asked.elapsed() >= 60 * MS, "{:?}", asked.elapsed());
    }

    #[tokio::test]
    async fn asking_again_doubles_the_delay_up_to_the_bound_and_settling_resets_it() {
        let later = Later::new(10 * MS, 30 * MS);
        later.again(7);
        assert_eq!(later.due().await, vec![7]);
        later.again(7);
        assert_eq!(later.delay_of(7), Some(20 * MS));
        later.again(7);
        assert_eq!(
            later.delay_of(7),
            Some(30 * MS),
            "doubled, but no further than the bound"
        );
        later.settled(7);
        assert_eq!(later.delay_of(7), None);
        later.again(7);
        assert_eq!(
            later.delay_of(7),
            Some(10 * MS),
            "settled: from the start again"
        );
    }

    #[tokio::test]
    async fn a_settled_preview_is_not_looked_at_early() {
        let later = Later::new(10 * MS, 30 * MS);
        later.again(7);
        later.again(8);
        later.settled(7);
        assert_eq!(later.due().await, vec![8]);
        let nothing = tokio::time::timeout(50 * MS, later.due()).await;
        assert!(nothing.is_err(), "7 was settled: {nothing:?}");
    }
}
