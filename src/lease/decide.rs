//! What to do with the Lease as last read (pure): client-go's `tryAcquireOrRenew`
//! (tools/leaderelection/leaderelection.go) without the I/O. Expiry is never read off the
//! record's `renewTime`, a wall clock of another machine: a contender takes a held Lease only
//! once it has itself seen the same record, unchanged, for the lease duration on its own
//! monotonic clock (client-go's `observedTime`).

use std::time::Duration;

use tokio::time::Instant;

/// The Lease's spec as the election reads it (client-go's `LeaderElectionRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Empty: released, or never held.
    pub holder: String,
    /// `leaseDurationSeconds` (zero when absent).
    pub duration: Duration,
    pub transitions: i32,
}

/// A record and when this replica first saw it in this version (its `resourceVersion`).
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub record: &'a Record,
    pub since: Instant,
}

/// The next step with the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// There is no Lease: create it, held.
    Create,
    /// It names this replica: renew it.
    Renew,
    /// Nobody holds it (released, as a rollout's old replica does on SIGTERM): take it now.
    Acquire,
    /// Another's, and seen unchanged for the whole duration: take it over.
    TakeOver,
    /// Another's, still valid as far as this replica has seen: read it again at the latest
    /// after `recheck_in` (when it would be due).
    Follow { recheck_in: Duration },
    /// This replica was leading and the record names someone else: stop at once.
    Lost { holder: String },
}

/// The verdict on `seen` (`None`: no Lease) for `me`, who was `leading` or not, at `now`.
/// `duration` is this replica's own lease duration: a record naming a longer one is waited
/// out for that longer one (client-go waits out its own only, which a rollout shortening the
/// duration would cut short).
pub fn decide(
    seen: Option<Seen<'_>>,
    me: &str,
    leading: bool,
    now: Instant,
    duration: Duration,
) -> Verdict {
    let Some(Seen { record, since }) = seen else {
        return Verdict::Create;
    };
    if record.holder == me {
        return Verdict::Renew;
    }
    if leading {
        return Verdict::Lost {
            holder: record.holder.clone(),
        };
    }
    if record.holder.is_empty() {
        return Verdict::Acquire;
    }
    let due = since + duration.max(record.duration);
    match due.checked_duration_since(now) {
        Some(left) if !left.is_zero() => Verdict::Follow { recheck_in: left },
        _ => Verdict::TakeOver,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATION: Duration = Duration::from_secs(12);

    fn held_by(holder: &str) -> Record {
        Record {
            holder: holder.into(),
            duration: DURATION,
            transitions: 3,
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_missing_lease_is_created() {
        let now = Instant::now();
        assert_eq!(decide(None, "a", false, now, DURATION), Verdict::Create);
    }

    #[test]
    fn a_lease_naming_me_is_renewed_whether_or_not_i_thought_i_led() {
        let (record, now) = (held_by("a"), Instant::now());
        let seen = Some(Seen {
            record: &record,
            since: now,
        });
        assert_eq!(decide(seen, "a", true, now, DURATION), Verdict::Renew);
        assert_eq!(decide(seen, "a", false, now, DURATION), Verdict::Renew);
    }

    #[test]
    fn a_leader_that_reads_another_holder_has_lost_at_once() {
        let (record, now) = (held_by("b"), Instant::now());
        let seen = Some(Seen {
            record: &record,
            since: now,
        });
        assert_eq!(
            decide(seen, "a", true, now, DURATION),
            Verdict::Lost { holder: "b".into() }
        );
    }

    #[test]
    fn a_released_lease_is_taken_without_waiting() {
        let record = Record {
            holder: String::new(),
            duration: secs(1),
            transitions: 3,
        };
        let now = Instant::now();
        let seen = Some(Seen {
            record: &record,
            since: now,
        });
        assert_eq!(decide(seen, "a", false, now, DURATION), Verdict::Acquire);
    }

    #[test]
    fn another_holder_is_followed_until_i_have_seen_the_record_unchanged_for_the_duration() {
        let (record, since) = (held_by("b"), Instant::now());
        let seen = Some(Seen {
            record: &record,
            since,
        });
        assert_eq!(
            decide(seen, "a", false, since + secs(4), DURATION),
            Verdict::Follow {
                recheck_in: secs(8)
            }
        );
        assert_eq!(
            decide(seen, "a", false, since + DURATION, DURATION),
            Verdict::TakeOver
        );
    }

    #[test]
    fn a_record_asking_for_a_longer_duration_than_mine_is_waited_out_for_its_own() {
        let record = Record {
            duration: secs(30),
            ..held_by("b")
        };
        let since = Instant::now();
        let seen = Some(Seen {
            record: &record,
            since,
        });
        assert_eq!(
            decide(seen, "a", false, since + DURATION, DURATION),
            Verdict::Follow {
                recheck_in: secs(18)
            }
        );
    }

    #[test]
    fn a_shorter_duration_in_the_record_does_not_shorten_my_wait() {
        let record = Record {
            duration: secs(1),
            ..held_by("b")
        };
        let since = Instant::now();
        let seen = Some(Seen {
            record: &record,
            since,
        });
        assert!(matches!(
            decide(seen, "a", false, since + secs(2), DURATION),
            Verdict::Follow { .. }
        ));
    }
}
