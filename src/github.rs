//! GitHub's REST API: the one edge previewd reports and reads PRs through. octocrab brings
//! authentication (a token, or a GitHub App whose installation tokens it mints, caches and
//! refreshes); this module brings the rest: timeouts, retries that never resend a write
//! GitHub may have done, per-installation holds honouring `retry-after` and
//! `x-ratelimit-reset` (a held installation's calls fail at once, without a request; no call
//! ever sleeps out a rate limit), and GitHub's JSON converted to previewd's types at the edge.
//! Here: the client, its credentials and installations; `endpoints` holds what previewd asks
//! GitHub, `lookups` what it reads to decide whether a preview may run, `transport` how one
//! request goes, `wire` how answers are read.

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use http::Method;
use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId};
use secrecy::ExposeSecret;

use crate::config::GithubCredentials;
use crate::preview::RepoName;

const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    #[error("GitHub answered {status} to {method} {path}: {message}")]
    Status {
        status: u16,
        method: Method,
        path: String,
        message: String,
    },
    #[error("GitHub's rate limit holds {method} {path} for {wait:?}; trying later")]
    RateLimited {
        method: Method,
        path: String,
        wait: Duration,
    },
    #[error(
        "GitHub calls for this installation are held for {wait:?} (a rate limit or an outage); {method} {path} waits"
    )]
    Held {
        method: Method,
        path: String,
        wait: Duration,
    },
    #[error("talking to GitHub ({method} {path}): {message}")]
    Transport {
        method: Method,
        path: String,
        message: String,
    },
    #[error("GitHub sent an unexpected answer to {path}: {message}")]
    Shape { path: String, message: String },
    /// A write this replica may not make: it does not hold the Lease. Nothing was sent; the
    /// replica that holds it makes it.
    #[error(transparent)]
    Fenced(#[from] crate::fence::Fenced),
}

impl GitHubError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Status { status: 404, .. })
    }

    /// An answer that trying again will not change: the PR or comment is gone (404, 410),
    /// the conversation is locked or the write invalid (422), or the installation may not
    /// do this (403 that is not a rate limit: those are `RateLimited`). 401 is left out: bad
    /// credentials are the operator's to fix, and every report waits for them.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::Status {
                status: 403 | 404 | 410 | 422,
                ..
            }
        )
    }
}

/// A client and the hold its calls are under (none for the App's own calls).
struct Caller {
    client: Arc<Octocrab>,
    hold: Option<HoldKey>,
}

/// A pull request as previewd needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullInfo {
    pub number: u32,
    pub open: bool,
    pub title: String,
    pub author: String,
    pub head_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    pub fork: bool,
    pub draft: bool,
    pub merged: bool,
    pub labels: Vec<String>,
    pub updated_at: Option<i64>,
    pub repo_id: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentInfo {
    pub id: u64,
    pub author: String,
    pub body: String,
}

/// A user's access to a repository (`permission` of the collaborator-permission endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Admin,
    Write,
    Read,
    None,
}

impl Permission {
    pub fn can_write(self) -> bool {
        matches!(self, Self::Admin | Self::Write)
    }
}

pub struct GitHub {
    client: Arc<Octocrab>,
    app: bool,
    /// Shared, never cloned: a cloned `Octocrab` copies its token cache, and each copy
    /// would mint its own installation token.
    installations: Mutex<HashMap<u64, Arc<Octocrab>>>,
    login: tokio::sync::OnceCell<String>,
    /// `x-ratelimit-remaining` of the last answer (-1 before any).
    pub rate_remaining: AtomicI64,
    /// Recent permission answers, by (repository, lower-cased login): a burst of commands
    /// costs one look-up, and a revoked permission counts within `PERMISSION_TTL`.
    permissions: Mutex<HashMap<(String, String), (std::time::Instant, Permission)>>,
    /// Installations held by a rate limit or an outage.
    holds: Holds,
    /// The last answer to each page of each open-PR listing, by URL, with its `ETag`: the
    /// resync asks again with `If-None-Match`, and an unchanged page (a 304) costs no rate
    /// limit (issue #17: 100 repositories' listings every 10 minutes were 600 calls an hour).
    /// At most [`endpoints::LISTINGS`] pages; when full it starts again empty.
    listings: Mutex<HashMap<String, (String, Vec<PullInfo>)>>,
    /// Where GitHub's rate limit is reported (the process's registry, from `with_metrics`).
    metrics: Arc<crate::metrics::Metrics>,
    /// Asked immediately before every write (anything but a GET): only the replica holding
    /// the Lease writes to GitHub. Set once, after the client is shared (`fence`); unset, open.
    fence: std::sync::OnceLock<crate::fence::Fence>,
}

impl GitHub {
    /// Reports GitHub's rate limit to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Refuses every write (`GitHubError::Fenced`) while `fence` is closed. Once: a second
    /// fence is ignored.
    pub fn fence(&self, fence: crate::fence::Fence) {
        let _ = self.fence.set(fence);
    }

    pub fn new(api_url: &str, credentials: &GithubCredentials) -> anyhow::Result<Self> {
        let builder = Octocrab::builder()
            .base_uri(api_url)?
            .set_connect_timeout(Some(TIMEOUT))
            .set_read_timeout(Some(TIMEOUT));
        let (client, app) = match credentials {
            GithubCredentials::Token(token) => (
                builder
                    .personal_token(token.expose_secret().to_owned())
                    .build()?,
                false,
            ),
            GithubCredentials::App {
                app_id,
                private_key_path,
            } => {
                let pem = std::fs::read(private_key_path).with_context(|| {
                    format!(
                        "reading the App's private key {}",
                        private_key_path.display()
                    )
                })?;
                (
                    builder.app_from_rsa_pem(AppId(*app_id), pem)?.build()?,
                    true,
                )
            }
        };
        Ok(Self {
            client: Arc::new(client),
            app,
            installations: Mutex::new(HashMap::new()),
            login: tokio::sync::OnceCell::new(),
            rate_remaining: AtomicI64::new(-1),
            permissions: Mutex::new(HashMap::new()),
            metrics: Arc::default(),
            holds: Holds::default(),
            listings: Mutex::new(HashMap::new()),
            fence: std::sync::OnceLock::new(),
        })
    }

    /// How long `repo`'s installation is still held (a rate limit, an outage), if it is.
    pub fn held(&self, repo: &RepoName, installation: Option<u64>) -> Option<Duration> {
        self.holds.left(&self.hold_key(repo, installation))
    }

    fn hold_key(&self, repo: &RepoName, installation: Option<u64>) -> HoldKey {
        match installation.filter(|_| self.app) {
            Some(id) => HoldKey::Installation(id),
            None => HoldKey::Owner(repo.owner().to_ascii_lowercase()),
        }
    }

    /// The end of the earliest hold still running: when held work can go again.
    pub fn next_release(&self) -> Option<Duration> {
        self.holds.next_release()
    }

    /// Whether GitHub's API at `api_url` answers, without credentials: `GET /meta`, which
    /// github.com and GHES both serve (`previewd config check --reach`). Proves the name
    /// resolves, TLS holds with the roots this process trusts, and the API answers JSON.
    pub async fn reach(api_url: &str) -> anyhow::Result<()> {
        let client = Octocrab::builder()
            .base_uri(api_url)?
            .set_connect_timeout(Some(TIMEOUT))
            .set_read_timeout(Some(TIMEOUT))
            .build()?;
        let answer = client
            ._get("/meta")
            .await
            .with_context(|| format!("GET {api_url}/meta"))?;
        let status = answer.status();
        let body = client
            .body_to_string(answer)
            .await
            .with_context(|| format!("reading {api_url}/meta"))?;
        anyhow::ensure!(status.is_success(), "GET {api_url}/meta answered {status}");
        serde_json::from_str::<serde_json::Value>(&body)
            .with_context(|| format!("GET {api_url}/meta answered {status} but not JSON"))?;
        Ok(())
    }

    /// previewd's own login: the token's user, or `<app-slug>[bot]`.
    pub async fn login(&self) -> Result<&str, GitHubError> {
        self.login
            .get_or_try_init(|| async {
                let me = Caller {
                    client: self.client.clone(),
                    hold: None,
                };
                if self.app {
                    let app: App = self.get(&me, "/app").await?;
                    Ok(format!("{}[bot]", app.slug))
                } else {
                    let user: User = self.get(&me, "/user").await?;
                    Ok(user.login)
                }
            })
            .await
            .map(String::as_str)
    }

    /// The client acting for `repo`: the token's, or the App installation's (looked up
    /// once when the webhook did not name it), under that installation's hold.
    async fn client_for(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
    ) -> Result<Caller, GitHubError> {
        let hold = Some(self.hold_key(repo, installation));
        if !self.app {
            return Ok(Caller {
                client: self.client.clone(),
                hold,
            });
        }
        let id = match installation {
            Some(id) => id,
            None => {
                let path = format!("/repos/{repo}/installation");
                let me = Caller {
                    client: self.client.clone(),
                    hold: hold.clone(),
                };
                self.get::<Id>(&me, &path).await?.id
            }
        };
        let hold = Some(HoldKey::Installation(id));
        let mut cache = self.installations.lock().expect("installation cache");
        if let Some(client) = cache.get(&id) {
            return Ok(Caller {
                client: client.clone(),
                hold,
            });
        }
        let client = Arc::new(self.client.installation(InstallationId(id)).map_err(|e| {
            GitHubError::Transport {
                method: Method::POST,
                path: format!("/app/installations/{id}/access_tokens"),
                message: e.to_string(),
            }
        })?);
        cache.insert(id, client.clone());
        Ok(Caller { client, hold })
    }
}

mod endpoints;
mod holds;
mod lookups;
mod transport;
mod wire;

use holds::{HoldKey, Holds};
use wire::{App, Id, User};
