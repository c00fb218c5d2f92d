//! Values used once (hand-off codes, sign-in states): each opens once. Kept until the value
//! would have expired anyway, and bounded: when full of unexpired values it refuses new
//! ones rather than forgetting used ones; minting is limited per person
//! (`MINTED_PER_MINUTE`), so one account cannot fill it. On a shared (PostgreSQL) state the
//! used values are in the state (`db::pg::once`), so a code used on one replica does not
//! open again on another; SQLite's one process keeps them here.

use std::collections::HashMap;
use std::sync::Mutex;

/// Codes remembered at once: far above any sign-in rate `flow` lets through in a minute.
const MAX_USED: usize = 100_000;

/// Hand-off codes one person may be given a minute (a person signs in to a few previews).
const MINTED_PER_MINUTE: u32 = 30;
/// People whose minting is counted at once.
const MAX_MINTERS: usize = 100_000;

#[derive(Default)]
pub struct Handoffs {
    used: Mutex<HashMap<String, i64>>,
    /// Codes minted per person in the current minute: (minute, count).
    minted: Mutex<HashMap<String, (i64, u32)>>,
}

impl Handoffs {
    /// Whether `login` may be given another code now.
    pub fn may_mint(&self, login: &str, now: i64) -> bool {
        let minute = now / 60;
        let mut minted = self.minted.lock().expect("minted");
        if minted.len() >= MAX_MINTERS {
            minted.retain(|_, (at, _)| *at == minute);
            if minted.len() >= MAX_MINTERS {
                return false;
            }
        }
        let count = minted
            .entry(login.to_ascii_lowercase())
            .or_insert((minute, 0));
        if count.0 != minute {
            *count = (minute, 0);
        }
        count.1 += 1;
        count.1 <= MINTED_PER_MINUTE
    }

    /// Marks `nonce` (good until `exp`) used, in the state when replicas share it; false
    /// when it was already (or the state could not say: a use refused, never allowed twice).
    pub async fn take_in(&self, state: &crate::db::State, nonce: &str, exp: i64, now: i64) -> bool {
        match state.postgres() {
            Some(pg) => match crate::db::pg::once::take(pg, nonce, exp, now).await {
                Ok(taken) => taken,
                Err(e) => {
                    tracing::warn!(error = %e, "a use-once value could not be recorded: refused");
                    false
                }
            },
            None => self.take(nonce, exp, now),
        }
    }

    /// Marks `nonce` (good until `exp`) used in this process; false when it was already, or
    /// when the set is full of unexpired codes.
    pub fn take(&self, nonce: &str, exp: i64, now: i64) -> bool {
        let mut used = self.used.lock().expect("handoffs");
        if used.len() >= MAX_USED {
            used.retain(|_, until| *until > now);
            if used.len() >= MAX_USED {
                return false;
            }
        }
        used.insert(nonce.to_owned(), exp).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_person_is_given_a_bounded_number_of_codes_a_minute() {
        let handoffs = Handoffs::default();
        for _ in 0..MINTED_PER_MINUTE {
            assert!(handoffs.may_mint("alice", 120));
        }
        assert!(!handoffs.may_mint("Alice", 150));
        assert!(handoffs.may_mint("bob", 150));
        assert!(handoffs.may_mint("alice", 180), "a new minute");
    }

    #[test]
    fn a_code_is_taken_once() {
        let handoffs = Handoffs::default();
        assert!(handoffs.take("n1", 100, 50));
        assert!(!handoffs.take("n1", 100, 51));
        assert!(handoffs.take("n2", 100, 51));
    }
}
