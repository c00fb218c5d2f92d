//! Who reads the dashboard and the API: the operator, by `api.token` (everything, as
//! before), or a person signed in with GitHub on previewd's host (the previews of the
//! repositories GitHub says they can read, asked as the login asks, cached alike).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Config;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::config::Access as Rule;
use crate::login::Person;
use crate::login::access::Answer;
use crate::login::check::cookies;
use crate::login::flow::{Flow, SIGNED_IN_COOKIE};
use crate::preview::RepoName;
use crate::server::app::App;
use crate::view::{self, Filters, Page};

use super::error::Error;

/// The reader of a request, set by [`require_reader`] for the handlers behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// The API token, or no token on a loopback `listen`: everything.
    Operator,
    /// A person signed in with GitHub: what they can read.
    Person(Person),
}

impl Viewer {
    /// Whether this reader may see `repo` (`owner/name`, as the state stores it).
    pub async fn may_read(&self, app: &App, repo: &str) -> bool {
        let Viewer::Person(person) = self else {
            return true;
        };
        let Ok(repo) = repo.parse::<RepoName>() else {
            return false;
        };
        app.login
            .access
            .may_read(person, &repo, None, Rule::Repo)
            .await
            == Answer::Allowed
    }

    /// `items` without those of repositories this reader may not see.
    pub async fn keep_readable<T>(
        &self,
        app: &App,
        items: Vec<T>,
        repo: impl Fn(&T) -> &str,
    ) -> Vec<T> {
        if *self == Viewer::Operator {
            return items;
        }
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            if self.may_read(app, repo(&item)).await {
                kept.push(item);
            }
        }
        kept
    }
}

/// Pages a person's reading walks through at most for one answer: a reader who can see
/// few of many previews gets a short page (and a cursor after the last one shown) rather
/// than a walk over the whole state.
const MAX_PAGES_WALKED: usize = 10;

impl Viewer {
    /// A page of previews this reader may see, `limit` at most, after `after`, and the
    /// cursor after the last one shown when more may follow. For a person, both are made of
    /// readable rows only: a cursor or a count computed before the filter named the
    /// repositories and numbers of previews they may not see.
    pub async fn page(
        &self,
        app: &App,
        filters: &Filters,
        limit: u32,
        after: Option<(&str, i64)>,
    ) -> anyhow::Result<Page> {
        let now = app.clock.now();
        if *self == Viewer::Operator {
            return view::page(&app.state, &app.config, now, filters, limit, after).await;
        }
        let mut shown = Vec::new();
        let mut cursor = after.map(|(repo, number)| (repo.to_owned(), number));
        let mut more = false;
        for _ in 0..MAX_PAGES_WALKED {
            let at = cursor
                .as_ref()
                .map(|(repo, number)| (repo.as_str(), *number));
            let page = view::page(&app.state, &app.config, now, filters, limit, at).await?;
            let next = page.next.as_deref().map(view::parse_cursor).transpose()?;
            shown.extend(
                self.keep_readable(app, page.previews, |p| p.repo.as_str())
                    .await,
            );
            more = next.is_some();
            if shown.len() >= limit as usize || next.is_none() {
                break;
            }
            cursor = next;
        }
        if shown.len() > limit as usize {
            shown.truncate(limit as usize);
            more = true;
        }
        let next = match shown.last() {
            Some(last) if more => Some(view::cursor_after(&last.repo, last.number)),
            _ => None,
        };
        Ok(Page {
            previews: shown,
            next,
        })
    }
}

/// Reads need the token when `api.token` is set (`Authorization: Bearer TOKEN`, or Basic
/// auth with the token as password), or a GitHub sign-in on this host; `/metrics` only the
/// token. A browser without either is sent to sign in.
pub async fn require_reader(
    State(app): State<Arc<App>>,
    mut request: Request,
    next: Next,
) -> Result<Response, Error> {
    if app.config.api_token.is_none()
        || authorized(&app.config, request.headers(), Credentials::BearerOrBasic)
    {
        request.extensions_mut().insert(Viewer::Operator);
        return Ok(next.run(request).await);
    }
    let path = request.uri().path().to_owned();
    if path != "/metrics" {
        let https = app.login.flow.https();
        let name = if https {
            SIGNED_IN_COOKIE
        } else {
            SIGNED_IN_COOKIE.trim_start_matches("__Host-")
        };
        let held: Vec<&str> = cookies(request.headers(), name).collect();
        if let Some(person) = Flow::who(&app.login.sealer, &held, app.clock.now()) {
            request.extensions_mut().insert(Viewer::Person(person));
            return Ok(next.run(request).await);
        }
        let page = path == "/" || path.starts_with("/previews/");
        if page && request.method() == Method::GET && app.login.flow.enabled() {
            let back = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            let location = format!(
                "/auth/signin?rd={}",
                percent_encoding::utf8_percent_encode(&back, percent_encoding::NON_ALPHANUMERIC)
            );
            return Ok((StatusCode::FOUND, [(header::LOCATION, location)]).into_response());
        }
    }
    Err(Error::Unauthorized)
}

/// How a request may offer the token. A named choice, not a bare `bool`, so that each route
/// says which it takes: a browser resends cached Basic credentials on its own, so only reads
/// (the dashboard) take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credentials {
    /// `Authorization: Bearer TOKEN` only.
    Bearer,
    /// That, or Basic auth with the token as password.
    BearerOrBasic,
}

pub fn authorized(config: &Config, headers: &HeaderMap, accepted: Credentials) -> bool {
    let Some(token) = &config.api_token else {
        return false;
    };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let takes_basic = accepted == Credentials::BearerOrBasic;
    let offered = if let Some(bearer) = value.strip_prefix("Bearer ") {
        bearer.trim().to_owned()
    } else if let Some(basic) = value.strip_prefix("Basic ").filter(|_| takes_basic) {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&decoded).into_owned();
        text.split_once(':')
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default()
    } else {
        return false;
    };
    is_token(offered.as_bytes(), token.expose_secret().as_bytes())
}

/// Whether `offered` is the token, in time that says nothing about how much of it matched.
/// Digests are compared, so not even the token's length shows.
fn is_token(offered: &[u8], token: &[u8]) -> bool {
    Sha256::digest(offered)
        .as_slice()
        .ct_eq(Sha256::digest(token).as_slice())
        .into()
}

#[cfg(test)]
mod tests {
    use super::is_token;

    #[test]
    fn only_the_whole_token_is_the_token() {
        assert!(is_token(b"s3cret-token", b"s3cret-token"));
        assert!(!is_token(b"s3cret-toke", b"s3cret-token"));
        assert!(!is_token(b"s3cret-tokem", b"s3cret-token"));
        assert!(!is_token(b"", b"s3cret-token"));
    }
}
