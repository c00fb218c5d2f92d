//! Per-installation holds: after a rate limit (as long as GitHub asks) or an outage (a
//! doubling backoff), one installation's calls wait and fail fast, and no other's do.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// After a 5xx or no answer (retries spent), an installation is held this long, doubled
/// for each failure in a row up to `MAX_HOLD`: an outage costs one slow call per hold, not
/// one per queued comment.
const FIRST_HOLD: Duration = Duration::from_secs(2);
const MAX_HOLD: Duration = Duration::from_secs(300);

/// Whose calls a rate limit or an outage holds: an App installation's (GitHub limits each
/// installation on its own), or, with a token or an installation not yet known, the
/// repository owner's.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum HoldKey {
    Installation(u64),
    Owner(String),
}

/// An installation's calls wait until `until`; `strikes` failures in a row so far.
#[derive(Debug, Clone, Copy)]
struct Hold {
    until: Instant,
    strikes: u32,
}

/// The installations held by a rate limit or an outage.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<HashMap<HoldKey, Hold>>);

impl Holds {
    /// How long `key` is still held, if it is.
    pub(super) fn left(&self, key: &HoldKey) -> Option<Duration> {
        let holds = self.0.lock().expect("holds");
        let left = holds
            .get(key)?
            .until
            .checked_duration_since(Instant::now())?;
        (!left.is_zero()).then_some(left)
    }

    /// The end of the earliest hold still running.
    pub(super) fn next_release(&self) -> Option<Duration> {
        let now = Instant::now();
        self.0
            .lock()
            .expect("holds")
            .values()
            .filter_map(|hold| hold.until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
            .min()
    }

    /// Holds `key` for `wait` (GitHub's word), or for the next step of the backoff.
    pub(super) fn hold(&self, key: &HoldKey, wait: Option<Duration>) {
        let mut holds = self.0.lock().expect("holds");
        let strikes = holds.get(key).map_or(0, |h| h.strikes) + 1;
        let wait = wait.unwrap_or_else(|| {
            FIRST_HOLD
                .saturating_mul(1 << (strikes - 1).min(16))
                .min(MAX_HOLD)
        });
        tracing::warn!(?key, ?wait, "holding this installation's GitHub calls");
        let until = Instant::now() + wait;
        holds.insert(key.clone(), Hold { until, strikes });
    }

    /// An answer came: the backoff starts again from the first step.
    pub(super) fn release(&self, key: &HoldKey) {
        self.0.lock().expect("holds").remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_doubles_the_hold_up_to_its_bound_and_an_answer_resets_it() {
        let holds = Holds::default();
        let key = HoldKey::Owner("octo".into());
        let other = HoldKey::Installation(7);
        let mut last = Duration::ZERO;
        for _ in 0..12 {
            holds.hold(&key, None);
            let left = holds.left(&key).unwrap();
            assert!(left >= last.min(MAX_HOLD - Duration::from_secs(1)) && left <= MAX_HOLD);
            last = left;
        }
        assert!(
            last > MAX_HOLD - Duration::from_secs(2),
            "bounded at {MAX_HOLD:?}: {last:?}"
        );
        assert_eq!(holds.left(&other), None, "only that installation waits");
        holds.release(&key);
        assert_eq!(holds.left(&key), None);
        holds.hold(&key, None);
        assert!(
            holds.left(&key).unwrap() <= FIRST_HOLD,
            "back to the first step"
        );
        holds.hold(&other, Some(Duration::from_secs(50)));
        assert!(holds.next_release().unwrap() <= FIRST_HOLD);
    }
}
