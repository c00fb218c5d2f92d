//! GitHub's REST API: the one edge previewd reports and reads PRs through. octocrab brings
//! authentication (a token, or a GitHub App whose installation tokens it mints, caches and
//! refreshes); this module brings the rest: timeouts, retries that never resend a write
//! GitHub may have done, per-installation holds honouring `retry-after` and
//! `x-ratelimit-reset` (a held installation's calls fail at once, without a request; no call
//! ever sleeps out a rate limit), and GitHub's JSON converted to previewd's types at the edge.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use http::Method;
use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId};
use serde_json::{Value, json};

use crate::config::GithubCredentials;
use crate::preview::RepoName;

const TIMEOUT: Duration = Duration::from_secs(15);
const ATTEMPTS: u32 = 3;
const PAGE: usize = 100;
const MAX_PAGES: usize = 50;

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
}

/// How long a permission answer is trusted.
const PERMISSION_TTL: Duration = Duration::from_secs(60);
/// At most this many answers are kept (the oldest go first).
const PERMISSION_CACHE: usize = 1024;

impl GitHub {
    pub fn new(api_url: &str, credentials: &GithubCredentials) -> anyhow::Result<Self> {
        let builder = Octocrab::builder()
            .base_uri(api_url)?
            .set_connect_timeout(Some(TIMEOUT))
            .set_read_timeout(Some(TIMEOUT));
        let (client, app) = match credentials {
            GithubCredentials::Token(token) => (
                builder.personal_token(token.expose().to_owned()).build()?,
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
            holds: Holds::default(),
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

    /// previewd's own login: the token's user, or `<app-slug>[bot]`.
    pub async fn login(&self) -> Result<&str, GitHubError> {
        self.login
            .get_or_try_init(|| async {
                let me = Caller {
                    client: self.client.clone(),
                    hold: None,
                };
                if self.app {
                    let app = self.call(&me, Method::GET, "/app", None).await?;
                    Ok(format!("{}[bot]", text(&app, "slug", "/app")?))
                } else {
                    let user = self.call(&me, Method::GET, "/user", None).await?;
                    text(&user, "login", "/user")
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
                let found = self.call(&me, Method::GET, &path, None).await?;
                found["id"].as_u64().ok_or_else(|| shape(&path, "no id"))?
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

    pub async fn pull(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
    ) -> Result<PullInfo, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/pulls/{number}");
        let pull = self.call(&client, Method::GET, &path, None).await?;
        pull_info(&pull).ok_or_else(|| shape(&path, "not a pull request"))
    }

    /// Every open PR; any failed page fails the whole listing (a partial one must not be
    /// mistaken for "these are all").
    pub async fn open_pulls(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
    ) -> Result<Vec<PullInfo>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/pulls?state=open");
        let pulls = self.all_pages(&client, &path).await?;
        pulls
            .iter()
            .map(|p| pull_info(p).ok_or_else(|| shape(&path, "not a pull request")))
            .collect()
    }

    pub async fn comments(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
    ) -> Result<Vec<CommentInfo>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/{number}/comments");
        let comments = self.all_pages(&client, &path).await?;
        Ok(comments
            .iter()
            .filter_map(|c| {
                Some(CommentInfo {
                    id: c["id"].as_u64()?,
                    author: c["user"]["login"].as_str()?.to_owned(),
                    body: c["body"].as_str().unwrap_or_default().to_owned(),
                })
            })
            .collect())
    }

    /// Not retried on a 5xx or a dropped connection: GitHub may have created it. The caller
    /// looks before it posts again.
    pub async fn create_comment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        number: u32,
        body: &str,
    ) -> Result<u64, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/{number}/comments");
        let created = self
            .call(&client, Method::POST, &path, Some(&json!({"body": body})))
            .await?;
        created["id"].as_u64().ok_or_else(|| shape(&path, "no id"))
    }

    pub async fn update_comment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        id: u64,
        body: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/comments/{id}");
        self.call(&client, Method::PATCH, &path, Some(&json!({"body": body})))
            .await
            .map(drop)
    }

    /// `content`: `eyes`, `rocket`, `confused`, ... GitHub answers 200 for a reaction that
    /// exists, so this one is safe to resend.
    pub async fn react(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        comment_id: u64,
        content: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/issues/comments/{comment_id}/reactions");
        let body = json!({"content": content});
        self.call_idempotent(&client, Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }

    /// octocrab's typed call cannot read `write`/`read`/`none` (its enum lacks them), so
    /// the answer is read here. Cached for `PERMISSION_TTL`.
    pub async fn permission(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        login: &str,
    ) -> Result<Permission, GitHubError> {
        let key = (repo.to_string(), login.to_ascii_lowercase());
        let cached = self
            .permissions
            .lock()
            .expect("permissions")
            .get(&key)
            .copied();
        if let Some((at, permission)) = cached.filter(|(at, _)| at.elapsed() < PERMISSION_TTL) {
            tracing::debug!(?permission, age = ?at.elapsed(), "permission from the cache");
            return Ok(permission);
        }
        let permission = self.ask_permission(repo, installation, login).await?;
        let mut cache = self.permissions.lock().expect("permissions");
        if cache.len() >= PERMISSION_CACHE {
            cache.retain(|_, (at, _)| at.elapsed() < PERMISSION_TTL);
            if cache.len() >= PERMISSION_CACHE {
                let oldest = cache
                    .iter()
                    .min_by_key(|(_, (at, _))| *at)
                    .map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    cache.remove(&oldest);
                }
            }
        }
        cache.insert(key, (std::time::Instant::now(), permission));
        Ok(permission)
    }

    async fn ask_permission(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        login: &str,
    ) -> Result<Permission, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/collaborators/{login}/permission");
        let answer = match self.call(&client, Method::GET, &path, None).await {
            Err(e) if e.is_not_found() => return Ok(Permission::None),
            other => other?,
        };
        Ok(match answer["permission"].as_str() {
            Some("admin") => Permission::Admin,
            Some("write" | "maintain") => Permission::Write,
            Some("read" | "triage") => Permission::Read,
            _ => Permission::None,
        })
    }

    /// Deployments of `sha` to `environment`, newest first.
    pub async fn deployments(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        sha: &str,
        environment: &str,
    ) -> Result<Vec<u64>, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!(
            "/repos/{repo}/deployments?sha={sha}&environment={}",
            encode(environment)
        );
        let found = self.call(&client, Method::GET, &path, None).await?;
        Ok(found
            .as_array()
            .map(|all| all.iter().filter_map(|d| d["id"].as_u64()).collect())
            .unwrap_or_default())
    }

    /// A transient, non-production deployment of `sha` that never merges and waits for no
    /// status checks. Not retried blindly: the caller looks it up before creating again.
    pub async fn create_deployment(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        sha: &str,
        environment: &str,
        description: &str,
    ) -> Result<u64, GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/deployments");
        let body = json!({
            "ref": sha,
            "environment": environment,
            "description": description,
            "auto_merge": false,
            "required_contexts": [],
            "transient_environment": true,
            "production_environment": false,
            "payload": {"previewd": true},
        });
        let created = self.call(&client, Method::POST, &path, Some(&body)).await?;
        created["id"]
            .as_u64()
            .ok_or_else(|| shape(&path, "no deployment id (GitHub merged instead?)"))
    }

    /// `state`: `in_progress`, `success`, `failure`, `inactive`, ...; `log_url`: where the
    /// preview's details are (its dashboard page), GitHub's "View logs" link.
    #[allow(clippy::too_many_arguments)]
    pub async fn deployment_status(
        &self,
        repo: &RepoName,
        installation: Option<u64>,
        deployment: u64,
        state: &str,
        url: Option<&str>,
        log_url: Option<&str>,
        description: &str,
    ) -> Result<(), GitHubError> {
        let client = self.client_for(repo, installation).await?;
        let path = format!("/repos/{repo}/deployments/{deployment}/statuses");
        let description: String = description.chars().take(140).collect();
        let mut body = json!({"state": state, "description": description, "auto_inactive": false});
        if let Some(url) = url {
            body["environment_url"] = json!(url);
        }
        if let Some(log_url) = log_url {
            body["log_url"] = json!(log_url);
        }
        // A repeated status changes nothing GitHub shows, so it may be resent.
        self.call_idempotent(&client, Method::POST, &path, Some(&body))
            .await
            .map(drop)
    }

    async fn all_pages(&self, client: &Caller, path: &str) -> Result<Vec<Value>, GitHubError> {
        let mut all = Vec::new();
        let join = if path.contains('?') { '&' } else { '?' };
        for page in 1..=MAX_PAGES {
            let url = format!("{path}{join}per_page={PAGE}&page={page}");
            let items = self.call(client, Method::GET, &url, None).await?;
            let items = items
                .as_array()
                .ok_or_else(|| shape(path, "not a list"))?
                .clone();
            let last = items.len() < PAGE;
            all.extend(items);
            if last {
                return Ok(all);
            }
        }
        Ok(all)
    }

    /// One request. GETs and PATCHes are retried on 5xx and transport errors; other writes
    /// are not (GitHub may have done them).
    async fn call(
        &self,
        client: &Caller,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        let retry_safe = matches!(method, Method::GET | Method::PATCH);
        self.send(client, method, path, body, retry_safe).await
    }

    async fn call_idempotent(
        &self,
        client: &Caller,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        self.send(client, method, path, body, true).await
    }

    /// One call under its installation's hold: refused at once while held; a rate limit
    /// holds the installation for as long as GitHub asks, a 5xx or no answer (retries
    /// spent) for a doubling while; any other answer ends the hold.
    async fn send(
        &self,
        caller: &Caller,
        method: Method,
        path: &str,
        body: Option<&Value>,
        retry_safe: bool,
    ) -> Result<Value, GitHubError> {
        let Some(key) = &caller.hold else {
            return self
                .exchange(&caller.client, method, path, body, retry_safe)
                .await;
        };
        if let Some(wait) = self.holds.left(key) {
            return Err(GitHubError::Held {
                method,
                path: path.into(),
                wait,
            });
        }
        let result = self
            .exchange(&caller.client, method, path, body, retry_safe)
            .await;
        match &result {
            Err(GitHubError::RateLimited { wait, .. }) => self.holds.hold(key, Some(*wait)),
            Err(GitHubError::Transport { .. } | GitHubError::Status { status: 500.., .. }) => {
                self.holds.hold(key, None);
            }
            _ => self.holds.release(key),
        }
        result
    }

    /// The request, retried where that is safe; a rate limit is returned, never slept out.
    async fn exchange(
        &self,
        client: &Octocrab,
        method: Method,
        path: &str,
        body: Option<&Value>,
        retry_safe: bool,
    ) -> Result<Value, GitHubError> {
        let mut backoff = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            let sent = tokio::time::timeout(TIMEOUT, async {
                match method {
                    Method::GET => client._get(path).await,
                    Method::POST => client._post(path, body).await,
                    Method::PATCH => client._patch(path, body).await,
                    _ => client._delete(path, body).await,
                }
            })
            .await;
            let failure = match sent {
                Err(_) => format!("no answer within {TIMEOUT:?}"),
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    let headers = response.headers().clone();
                    if let Some(left) = header_number(&headers, "x-ratelimit-remaining") {
                        self.rate_remaining.store(left, Ordering::Relaxed);
                        crate::metrics::METRICS
                            .github_rate_remaining
                            .store(left, Ordering::Relaxed);
                    }
                    let text = client.body_to_string(response).await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        return if text.trim().is_empty() {
                            Ok(Value::Null)
                        } else {
                            serde_json::from_str(&text).map_err(|e| shape(path, &e.to_string()))
                        };
                    }
                    // Waiting here would hold up whatever else this task has to do: the
                    // caller's installation is held instead, and its work goes on later.
                    if let Some(wait) = rate_limit_wait(status, &headers, &text) {
                        return Err(GitHubError::RateLimited {
                            method,
                            path: path.into(),
                            wait,
                        });
                    }
                    let message = message_of(&text);
                    if status < 500 || !retry_safe || attempt >= ATTEMPTS {
                        return Err(GitHubError::Status {
                            status,
                            method,
                            path: path.into(),
                            message,
                        });
                    }
                    format!("{status}: {message}")
                }
            };
            if !retry_safe || attempt >= ATTEMPTS {
                return Err(GitHubError::Transport {
                    method,
                    path: path.into(),
                    message: failure,
                });
            }
            tokio::time::sleep(backoff).await;
            backoff *= 2;
            attempt += 1;
        }
    }
}

mod holds;
mod wire;

use holds::{HoldKey, Holds};
use wire::{encode, header_number, message_of, pull_info, rate_limit_wait, shape, text};
