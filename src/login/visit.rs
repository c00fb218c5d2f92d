//! What a request let through says of its preview: it was used (recorded at most once a
//! minute), and, for a sleeping preview, that it must wake. The decision is pure
//! (`wakefulness`, `Visit`); the route records it (`server::auth`), so a check never waits
//! on more than the one read it already made.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::db::login::HostPreview;
use crate::db::sleep::USE_EVERY;
use crate::preview::{ObservedState, PreviewKey};

/// The waking page is shown this long after a wake at most: a wake that never gets ready
/// (an image gone from the registry) ends in the app's own answer, not a page forever.
pub const WAKE_SHOWN: i64 = 600;

/// Whether a preview can serve a request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakefulness {
    Awake,
    /// Asleep: this request wakes it.
    Asleep,
    /// Woken, not ready yet.
    Waking,
}

pub fn wakefulness(preview: &HostPreview, now: i64) -> Wakefulness {
    if preview.sleeping_since.is_some() {
        return Wakefulness::Asleep;
    }
    match preview.woke_at {
        Some(at)
            if now - at < WAKE_SHOWN
                && !matches!(
                    preview.observed,
                    // Not `Applied`: each apply records it on the way (the helpers' before
                    // the app's); a directory sink's settled wake clears `woke_at` instead.
                    ObservedState::Ready | ObservedState::Failed | ObservedState::CiFailed
                ) =>
        {
            Wakefulness::Waking
        }
        _ => Wakefulness::Awake,
    }
}

/// What the route records of a request the check let in (or would have, but for the sleep).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Visit {
    pub id: i64,
    pub key: PreviewKey,
    pub host: String,
    /// The preview sleeps: record the wake and tell the reconciler.
    pub wake: bool,
    /// No use recorded within [`USE_EVERY`]: record this one.
    pub used: bool,
}

impl Visit {
    pub fn of(preview: &HostPreview, host: &str, now: i64) -> Self {
        Self {
            id: preview.id,
            key: preview.key.clone(),
            host: host.to_owned(),
            wake: wakefulness(preview, now) == Wakefulness::Asleep,
            used: preview.last_used_at.is_none_or(|at| now - at >= USE_EVERY),
        }
    }
}

/// The uses on their way to the state: a burst of requests to one preview before the first
/// write lands makes one write, not one each. Bounded: entries older than a minute go once
/// there are many.
#[derive(Default)]
pub struct Uses {
    written: Mutex<HashMap<i64, i64>>,
}

/// Entries kept before the old ones are dropped.
const USES_KEPT: usize = 10_000;

impl Uses {
    /// Whether this use of `id` at `now` is the one to write.
    pub fn take(&self, id: i64, now: i64) -> bool {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if written.get(&id).is_some_and(|at| now - at < USE_EVERY) {
            return false;
        }
        if written.len() >= USES_KEPT {
            written.retain(|_, at| now - *at < USE_EVERY);
        }
        written.insert(id, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preview() -> HostPreview {
        HostPreview {
            id: 1,
            key: "octo/app#7".parse().unwrap(),
            installation: None,
            live: true,
            observed: ObservedState::Ready,
            sleeping_since: None,
            woke_at: None,
            last_used_at: None,
        }
    }

    #[test]
    fn a_sleeping_preview_is_woken_and_shows_the_waking_page_until_ready() {
        let mut p = preview();
        p.sleeping_since = Some(100);
        assert_eq!(wakefulness(&p, 1000), Wakefulness::Asleep);
        assert!(Visit::of(&p, "h", 1000).wake);
        p.sleeping_since = None;
        p.woke_at = Some(1000);
        p.observed = ObservedState::Syncing;
        assert_eq!(wakefulness(&p, 1005), Wakefulness::Waking);
        assert!(!Visit::of(&p, "h", 1005).wake, "woken once");
        p.observed = ObservedState::Ready;
        assert_eq!(wakefulness(&p, 1010), Wakefulness::Awake);
    }

    /// Found by the faithful walk: the helpers' apply records `applied` before the app's
    /// apply records `syncing`, and the check let requests in between.
    #[test]
    fn a_wake_half_written_is_still_waking() {
        let mut p = preview();
        p.woke_at = Some(1000);
        p.observed = ObservedState::Applied;
        assert_eq!(wakefulness(&p, 1001), Wakefulness::Waking);
    }

    #[test]
    fn a_wake_that_fails_or_takes_too_long_lets_requests_through_to_the_app() {
        let mut p = preview();
        p.woke_at = Some(1000);
        p.observed = ObservedState::Failed;
        assert_eq!(wakefulness(&p, 1005), Wakefulness::Awake);
        p.observed = ObservedState::Syncing;
        assert_eq!(wakefulness(&p, 1000 + WAKE_SHOWN), Wakefulness::Awake);
    }

    #[test]
    fn a_use_is_recorded_at_most_once_a_minute_per_preview() {
        let mut p = preview();
        assert!(Visit::of(&p, "h", 1000).used, "never used");
        p.last_used_at = Some(1000);
        assert!(!Visit::of(&p, "h", 1059).used);
        assert!(Visit::of(&p, "h", 1060).used);
        let uses = Uses::default();
        assert!(uses.take(1, 1000));
        assert!(!uses.take(1, 1030), "a burst writes once");
        assert!(uses.take(2, 1030), "another preview's own");
        assert!(uses.take(1, 1060));
    }
}
