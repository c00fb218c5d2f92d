//! How one request to GitHub goes: a timeout, retries only where a resend cannot repeat a
//! write, the installation's hold, rate limits returned (never slept out), and pages.

use std::sync::atomic::Ordering;
use std::time::Duration;

use http::Method;
use octocrab::Octocrab;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::wire::{header_number, message_of, rate_limit_wait, read, shape};
use super::{Caller, GitHub, GitHubError, TIMEOUT};

const ATTEMPTS: u32 = 3;
/// Items asked for per page: GitHub's most (`per_page` is at most 100).
pub(super) const PAGE: usize = 100;
pub(super) const MAX_PAGES: usize = 50;

/// An answer: GitHub's JSON and its `ETag`, or, for a GET sent with `If-None-Match`, word
/// that nothing changed since that tag (a 304, which GitHub does not count against the
/// rate limit: docs "Use conditional requests if appropriate").
#[derive(Debug)]
pub(super) enum Fetched {
    Fresh { value: Value, etag: Option<String> },
    NotModified,
}

impl Fetched {
    fn into_value(self) -> Value {
        match self {
            Self::Fresh { value, .. } => value,
            Self::NotModified => Value::Null,
        }
    }
}

/// Whether a request may be sent again after a 5xx or no answer: only where a resend cannot
/// repeat a write GitHub may already have done (a GET, a PATCH, an idempotent write). A named
/// mode, not a bare `bool`, so that `send(.., Resend::Safe, etag)` says what it allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resend {
    /// Retried on a 5xx or a transport error, up to [`ATTEMPTS`] in all.
    Safe,
    /// Sent once: GitHub may have done it even when no answer came back.
    Never,
}

/// Where a listing's items are on each of its pages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Items {
    /// The page is the list (pulls, comments, a PR's files).
    Page,
    /// The list is this field of the page's object (`check_runs`, `statuses`,
    /// `workflow_runs`); the object's other fields (`total_count`, a combined `state`) are
    /// not needed.
    Under(&'static str),
}

impl GitHub {
    /// A GET, its answer read as `T`.
    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        client: &Caller,
        path: &str,
    ) -> Result<T, GitHubError> {
        let answer = self.call(client, Method::GET, path, None).await?;
        read(path, answer)
    }

    /// Every item of a listing whose pages are lists (pulls, comments), up to `MAX_PAGES`.
    pub(super) async fn all_pages(
        &self,
        client: &Caller,
        path: &str,
    ) -> Result<Vec<Value>, GitHubError> {
        self.pages(client, path, Items::Page, MAX_PAGES).await
    }

    /// Pages 1.. of `path`, `PAGE` items each, until a short page or `max_pages` of them (a
    /// listing longer than that is cut there). Any failed page fails the whole listing: a
    /// partial one must not be taken for "these are all".
    pub(super) async fn pages(
        &self,
        client: &Caller,
        path: &str,
        items: Items,
        max_pages: usize,
    ) -> Result<Vec<Value>, GitHubError> {
        let mut all = Vec::new();
        let join = if path.contains('?') { '&' } else { '?' };
        for page in 1..=max_pages {
            let url = format!("{path}{join}per_page={PAGE}&page={page}");
            let answer = self.call(client, Method::GET, &url, None).await?;
            let found = match (items, answer) {
                (Items::Page, Value::Array(found)) => found,
                (Items::Page, _) => return Err(shape(path, "not a list")),
                (Items::Under(key), Value::Object(mut object)) => match object.remove(key) {
                    Some(Value::Array(found)) => found,
                    _ => return Err(shape(path, &format!("no `{key}` list"))),
                },
                (Items::Under(key), _) => {
                    return Err(shape(path, &format!("not an object with a `{key}` list")));
                }
            };
            let last = found.len() < PAGE;
            all.extend(found);
            if last {
                return Ok(all);
            }
        }
        Ok(all)
    }

    /// One request. GETs and PATCHes are retried on 5xx and transport errors; other writes
    /// are not (GitHub may have done them).
    pub(super) async fn call(
        &self,
        client: &Caller,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        let resend = match method {
            Method::GET | Method::PATCH => Resend::Safe,
            _ => Resend::Never,
        };
        self.send(client, method, path, body, resend, None)
            .await
            .map(Fetched::into_value)
    }

    /// A GET sent with `If-None-Match: etag` when there is one.
    pub(super) async fn get_conditional(
        &self,
        client: &Caller,
        path: &str,
        etag: Option<&str>,
    ) -> Result<Fetched, GitHubError> {
        self.send(client, Method::GET, path, None, Resend::Safe, etag)
            .await
    }

    pub(super) async fn call_idempotent(
        &self,
        client: &Caller,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, GitHubError> {
        self.send(client, method, path, body, Resend::Safe, None)
            .await
            .map(Fetched::into_value)
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
        resend: Resend,
        etag: Option<&str>,
    ) -> Result<Fetched, GitHubError> {
        let Some(key) = &caller.hold else {
            return self
                .exchange(&caller.client, method, path, body, resend, etag)
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
            .exchange(&caller.client, method, path, body, resend, etag)
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
        resend: Resend,
        etag: Option<&str>,
    ) -> Result<Fetched, GitHubError> {
        let conditional = etag.and_then(|tag| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::IF_NONE_MATCH, tag.parse().ok()?);
            Some(headers)
        });
        let mut backoff = Duration::from_millis(200);
        let mut attempt = 1;
        loop {
            // Each try asks again: a retry after a backoff may come after the Lease is lost.
            if let Some(fence) = self.fence.get().filter(|_| method != Method::GET) {
                fence.check(|| format!("{method} {path} to GitHub"))?;
            }
            let sent = tokio::time::timeout(TIMEOUT, async {
                match method {
                    Method::GET => client._get_with_headers(path, conditional.clone()).await,
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
                        self.metrics.github_rate_remaining(left);
                    }
                    if status == 304 && conditional.is_some() {
                        return Ok(Fetched::NotModified);
                    }
                    let text = client.body_to_string(response).await.unwrap_or_default();
                    if (200..300).contains(&status) {
                        let etag = headers
                            .get(http::header::ETAG)
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        let value = if text.trim().is_empty() {
                            Value::Null
                        } else {
                            serde_json::from_str(&text).map_err(|e| shape(path, &e.to_string()))?
                        };
                        return Ok(Fetched::Fresh { value, etag });
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
                    if status < 500 || resend == Resend::Never || attempt >= ATTEMPTS {
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
            if resend == Resend::Never || attempt >= ATTEMPTS {
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
