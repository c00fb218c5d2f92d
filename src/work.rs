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
/// each time it is asked for again (up to `most`), forgotten once settled. A preview waiting
/// on Applications (`follow`) is due at once when one of them is seen to change (`hurry`):
/// polling alone saw Argo CD's progress up to a delay late, twice a preview.
pub struct Later {
    first: Duration,
    most: Duration,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    due: DelayQueue<i64>,
    /// Each waiting preview: kept after it came due, so that asking again doubles the delay.
    waiting: HashMap<i64, Waiting>,
    /// Which waiting preview each followed Application is for (bounded by `waiting`).
    followed: HashMap<String, i64>,
}

#[derive(Default)]
struct Waiting {
    /// Its key in `due` while it waits there.
    key: Option<delay_queue::Key>,
    delay: Duration,
    /// The Applications it waits on.
    names: Vec<String>,
    /// One of them changed while it was being looked at: the next `again` is due at once.
    hurried: bool,
}

impl Later {
    pub fn new(first: Duration, most: Duration) -> Self {
        Self {
            first,
            most,
            queue: Mutex::new(Queue::default()),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Nothing that can panic runs under this lock; a poisoned queue is still a queue.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Looks at `id` again after its next delay (from now), or at once if an Application it
    /// follows changed since it was last due.
    pub fn again(&self, id: i64) {
        let mut queue = self.queue();
        let Queue { due, waiting, .. } = &mut *queue;
        let entry = waiting.entry(id).or_default();
        entry.delay = if entry.delay.is_zero() {
            self.first
        } else {
            (entry.delay * 2).min(self.most)
        };
        let wait = if std::mem::take(&mut entry.hurried) {
            Duration::ZERO
        } else {
            entry.delay
        };
        match &entry.key {
            Some(key) => due.reset(key, wait),
            None => entry.key = Some(due.insert(id, wait)),
        }
    }

    /// While `id` waits (until `settled`), a change seen on any of `names` makes it due at
    /// once. Only a waiting preview is followed.
    pub fn follow(&self, id: i64, names: &[&str]) {
        let mut queue = self.queue();
        let Queue {
            waiting, followed, ..
        } = &mut *queue;
        let Some(entry) = waiting.get_mut(&id) else {
            return;
        };
        if entry
            .names
            .iter()
            .map(String::as_str)
            .eq(names.iter().copied())
        {
            return;
        }
        for name in entry.names.drain(..) {
            if followed.get(&name) == Some(&id) {
                followed.remove(&name);
            }
        }
        for name in names {
            followed.insert((*name).to_owned(), id);
            entry.names.push((*name).to_owned());
        }
    }

    /// The Application `name` changed: the preview waiting on it is due now. False when no
    /// waiting preview follows it.
    pub fn hurry(&self, name: &str) -> bool {
        let mut queue = self.queue();
        let Queue {
            due,
            waiting,
            followed,
        } = &mut *queue;
        let Some(entry) = followed.get(name).and_then(|id| waiting.get_mut(id)) else {
            return false;
        };
        if let Some(key) = &entry.key {
            due.reset(key, Duration::ZERO);
        }
        // It may be being looked at right now (taken from here, or by a pass or a word),
        // already past its read of `name`: the `again` that ends that look is due at once.
        entry.hurried = true;
        true
    }

    /// `id` converged: no early look, no Application followed, and the next `again` starts
    /// from `first`.
    pub fn settled(&self, id: i64) {
        let mut queue = self.queue();
        let Some(entry) = queue.waiting.remove(&id) else {
            return;
        };
        if let Some(key) = entry.key {
            queue.due.remove(&key);
        }
        for name in entry.names {
            if queue.followed.get(&name) == Some(&id) {
                queue.followed.remove(&name);
            }
        }
    }

    /// Whether `id` waits for another look (asked `again`, not `settled` since).
    pub fn is_waiting(&self, id: i64) -> bool {
        self.queue().waiting.contains_key(&id)
    }

    /// Waits until some are due, then takes every one due. Cancel-safe: dropped before it
    /// returns, it has taken nothing.
    pub async fn due(&self) -> Vec<i64> {
        std::future::poll_fn(|cx| {
            let mut queue = self.queue();
            let mut ready = Vec::new();
            // An empty queue answers `None` but keeps the waker: an `again` wakes this.
            while let Poll::Ready(Some(expired)) = queue.due.poll_expired(cx) {
                let id = expired.into_inner();
                if let Some(entry) = queue.waiting.get_mut(&id) {
                    // The look it is taken for starts now, after the change.
                    entry.key = None;
                    entry.hurried = false;
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
        self.queue().waiting.get(&id).map(|entry| entry.delay)
    }

    #[cfg(test)]
    fn followed(&self) -> usize {
        self.queue().followed.len()
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

    #[tokio::test]
    async fn a_change_to_a_followed_application_makes_its_preview_due_at_once() {
        let later = Later::new(10_000 * MS, 30_000 * MS);
        later.again(7);
        later.follow(7, &["pv-a-1-helpers", "pv-a-1-app"]);
        assert!(later.hurry("pv-a-1-app"));
        let due = tokio::time::timeout(1000 * MS, later.due()).await;
        assert_eq!(due.ok(), Some(vec![7]), "due now, not after 10 s");
        assert!(!later.hurry("pv-b-2-app"), "nobody follows that one");
    }

    /// The change can land while the preview is being looked at, after its read: the look
    /// ends with `again`, which must not then wait out the delay.
    #[tokio::test]
    async fn a_change_seen_during_a_look_makes_the_next_look_immediate() {
        let later = Later::new(2000 * MS, 30_000 * MS);
        later.again(7);
        later.follow(7, &["pv-a-1-helpers"]);
        later.hurry("pv-a-1-helpers");
        assert_eq!(later.due().await, vec![7]);
        assert!(
            later.hurry("pv-a-1-helpers"),
            "still followed while looked at"
        );
        later.again(7);
        let due = tokio::time::timeout(1000 * MS, later.due()).await;
        assert_eq!(
            due.ok(),
            Some(vec![7]),
            "at once, not after the doubled 4 s"
        );
        later.again(7);
        assert_eq!(later.delay_of(7), Some(8000 * MS), "the hurry was used up");
    }

    /// A preview waiting in the queue can be looked at by a full pass or a word; a change
    /// seen during that look reset its timer, and the `again` ending the look must not set
    /// it back to the doubled delay (a ready preview reported up to 30 s late).
    #[tokio::test]
    async fn a_change_seen_during_a_look_not_taken_from_the_queue_is_not_lost() {
        let later = Later::new(2000 * MS, 30_000 * MS);
        later.again(7);
        later.follow(7, &["pv-a-1-helpers"]);
        // A full pass looks at 7 (not through `due`); Argo CD changes it meanwhile.
        assert!(later.hurry("pv-a-1-helpers"));
        later.again(7);
        let due = tokio::time::timeout(1000 * MS, later.due()).await;
        assert_eq!(
            due.ok(),
            Some(vec![7]),
            "at once, not after the doubled 4 s"
        );
        later.again(7);
        let nothing = tokio::time::timeout(200 * MS, later.due()).await;
        assert!(nothing.is_err(), "taken after the change: no hurry left");
    }

    #[tokio::test]
    async fn settling_stops_following_and_only_waiting_previews_are_followed() {
        let later = Later::new(10 * MS, 30 * MS);
        later.follow(9, &["pv-c-3-helpers"]);
        assert_eq!(later.followed(), 0, "9 is not waiting");
        later.again(7);
        later.follow(7, &["pv-a-1-helpers", "pv-a-1-app"]);
        later.follow(7, &["pv-a-1-helpers", "pv-a-1-app"]);
        assert_eq!(later.followed(), 2);
        later.settled(7);
        assert_eq!(later.followed(), 0);
        assert!(!later.hurry("pv-a-1-app"));
        let nothing = tokio::time::timeout(50 * MS, later.due()).await;
        assert!(nothing.is_err(), "settled: {nothing:?}");
    }
}
