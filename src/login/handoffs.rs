//! Hand-off codes already used: a code opens a session once. Kept until the code would
//! have expired anyway, and bounded: a flood of codes (each needs a completed sign-in)
//! refuses new ones rather than forgetting used ones.

use std::collections::HashMap;
use std::sync::Mutex;

/// Codes remembered at once: far above any sign-in rate `flow` lets through in a minute.
const MAX_USED: usize = 100_000;

#[derive(Default)]
pub struct Handoffs {
    used: Mutex<HashMap<String, i64>>,
}

impl Handoffs {
    /// Marks `nonce` (good until `exp`) used; false when it was already, or when the set is
    /// full of unexpired codes.
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
    fn a_code_is_taken_once() {
        let handoffs = Handoffs::default();
        assert!(handoffs.take("n1", 100, 50));
        assert!(!handoffs.take("n1", 100, 51));
        assert!(handoffs.take("n2", 100, 51));
    }
}
