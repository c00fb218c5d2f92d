//! What the login hands to browsers, sealed: AES-256-GCM under the login key, the purpose
//! as associated data, so a value minted for one use (a hand-off code) never opens as
//! another (a session). Nothing a browser holds is looked up on the server: a session is
//! its own proof, and a value planted in a browser before sign-in proves nothing.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

/// Longest sealed text opened: a session is ~200 characters; anything far longer is not ours.
const MAX_SEALED: usize = 2048;

/// What a sealed value is for; each opens only as itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A sign-in in progress on previewd's host: the OAuth `state` and the return URL.
    Pending,
    /// A person signed in on previewd's host (the dashboard, and the next preview's sign-in).
    SignedIn,
    /// The one-time code that becomes a session on one preview host.
    Handoff,
    /// A session on one preview host.
    Session,
    /// A writer's share link to one preview.
    Share,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::Pending => b"previewd/login/pending/v1",
            Purpose::SignedIn => b"previewd/login/signed-in/v1",
            Purpose::Handoff => b"previewd/login/handoff/v1",
            Purpose::Session => b"previewd/login/session/v1",
            Purpose::Share => b"previewd/login/share/v1",
        }
    }
}

/// The login key, ready to seal and open.
pub struct Sealer {
    cipher: Aes256Gcm,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// From the configured `login.session_secret` (or the key file's bytes): the AES key is a
    /// SHA-256 of it under a label, so a key of any length (hex, base64) serves.
    pub fn new(secret: &[u8]) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"previewd login key v1\0");
        hash.update(secret);
        let key = hash.finalize();
        Self {
            cipher: Aes256Gcm::new_from_slice(&key).expect("a 32-byte key"),
        }
    }

    pub fn seal<T: Serialize>(&self, purpose: Purpose, value: &T) -> String {
        let plain = serde_json::to_vec(value).expect("login values serialize");
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).expect("the system's random source");
        let sealed = self
            .cipher
            .encrypt(
                Nonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: purpose.label(),
                },
            )
            .expect("AES-GCM seals any length we use");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The value, when `text` was sealed by this key for `purpose` and is intact.
    pub fn open<T: DeserializeOwned>(&self, purpose: Purpose, text: &str) -> Option<T> {
        if text.len() > MAX_SEALED {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        if bytes.len() < 12 + 16 {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(12);
        let plain = self
            .cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: purpose.label(),
                },
            )
            .ok()?;
        serde_json::from_slice(&plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
    struct Value {
        login: String,
    }

    fn alice() -> Value {
        Value {
            login: "alice".into(),
        }
    }

    #[test]
    fn a_sealed_value_opens_for_its_purpose_only() {
        let sealer = Sealer::new(b"0123456789abcdef0123456789abcdef");
        let text = sealer.seal(Purpose::Handoff, &alice());
        assert_eq!(sealer.open::<Value>(Purpose::Handoff, &text), Some(alice()));
        assert_eq!(sealer.open::<Value>(Purpose::Session, &text), None);
    }

    #[test]
    fn a_changed_byte_or_another_key_opens_nothing() {
        let sealer = Sealer::new(b"0123456789abcdef0123456789abcdef");
        let text = sealer.seal(Purpose::Session, &alice());
        let mut bytes = URL_SAFE_NO_PAD.decode(&text).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = URL_SAFE_NO_PAD.encode(bytes);
        assert_eq!(sealer.open::<Value>(Purpose::Session, &tampered), None);
        let other = Sealer::new(b"another key, as long as the first");
        assert_eq!(other.open::<Value>(Purpose::Session, &text), None);
        assert_eq!(sealer.open::<Value>(Purpose::Session, "not base64 !"), None);
        assert_eq!(
            sealer.open::<Value>(Purpose::Session, &"A".repeat(5000)),
            None
        );
    }

    #[test]
    fn the_same_value_seals_differently_each_time() {
        let sealer = Sealer::new(b"0123456789abcdef0123456789abcdef");
        assert_ne!(
            sealer.seal(Purpose::Session, &alice()),
            sealer.seal(Purpose::Session, &alice())
        );
    }
}
