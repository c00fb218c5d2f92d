//! The login in front of every preview (issue #39). previewd is the ingress controller's
//! forward-auth endpoint: `check` answers each request to a preview host from what the
//! browser holds (a session sealed for that host, a one-time hand-off code, a share pass)
//! and who may enter (`access`); sign-in is GitHub's OAuth web flow on previewd's own host
//! (`flow`), which hands the preview host a code that becomes a host-only session there, so
//! a session the preview's own code sees is worthless on any other host.
//!
//! Everything a browser holds is `sealed` (AES-256-GCM, purpose-bound); the server keeps
//! only the hand-off codes already used (`handoffs`), the access answers (`access`) and the
//! share rows (`db::login`).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use crate::config::Config;

pub mod access;
pub mod check;
pub mod flow;
pub mod handoffs;
pub mod inbox;
pub mod original;
pub mod sealed;
pub mod visit;

pub use sealed::{Purpose, Sealer};

/// A person GitHub signed in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    pub login: String,
    pub id: u64,
}

/// Who holds a preview host's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Who {
    Person(Person),
    /// A share link's holder: valid while the share is.
    Share {
        share: String,
    },
}

/// A session on one preview host (`Purpose::Session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub who: Who,
    pub host: String,
    pub exp: i64,
}

/// The one-time code from sign-in to the preview host (`Purpose::Handoff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    /// A person signed in at GitHub, or a share link's holder (its pass opened on
    /// previewd's host, so the pass itself never reaches the preview's host).
    pub who: Who,
    pub host: String,
    pub nonce: String,
    pub exp: i64,
}

/// A person signed in on previewd's own host (`Purpose::SignedIn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedIn {
    pub who: Person,
    pub exp: i64,
}

/// A sign-in under way: the OAuth `state` and where to return (`Purpose::Pending`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub state: String,
    pub rd: String,
    pub exp: i64,
}

/// A share link's pass (`Purpose::Share`): valid while its row is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharePass {
    pub share: String,
    pub host: String,
}

/// A hand-off code is good this long: the browser follows the redirect at once.
pub const HANDOFF_TTL: i64 = 60;
/// A sign-in must come back from GitHub within this.
pub const PENDING_TTL: i64 = 600;

/// The login's state, shared by the handlers.
pub struct Login {
    pub sealer: Sealer,
    pub access: access::Access,
    pub handoffs: handoffs::Handoffs,
    pub flow: flow::Flow,
    pub session_ttl: i64,
    pub uses: visit::Uses,
}

impl Login {
    pub fn new(
        config: &Config,
        github: Option<Arc<crate::github::GitHub>>,
    ) -> anyhow::Result<Self> {
        let secret = match &config.login.session_key {
            Some(key) => key.expose_secret().as_bytes().to_vec(),
            None => key_beside(config.state.file().ok_or_else(|| {
                anyhow::anyhow!(
                    "login.session_secret must be set: the state is PostgreSQL, shared by replicas"
                )
            })?)?,
        };
        Ok(Self {
            sealer: Sealer::new(&secret),
            access: access::Access::new(github, config.login.access_cache),
            handoffs: handoffs::Handoffs::default(),
            flow: flow::Flow::new(config)?,
            session_ttl: i64::try_from(config.login.session_ttl.as_secs()).unwrap_or(i64::MAX),
            uses: visit::Uses::default(),
        })
    }
}

/// The login key kept beside the state (`previewd.db` → `previewd.db.login-key`), made on
/// first start: 32 random bytes, readable by previewd only.
fn key_beside(state: &Path) -> anyhow::Result<Vec<u8>> {
    let mut name = state.as_os_str().to_owned();
    name.push(".login-key");
    let path = std::path::PathBuf::from(name);
    match std::fs::read(&path) {
        Ok(key) if key.len() >= 32 => return Ok(key),
        Ok(_) => anyhow::bail!("{} is shorter than 32 bytes", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| anyhow::anyhow!("random: {e}"))?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, &key)
        .and_then(|()| file.sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(key.to_vec())
}
