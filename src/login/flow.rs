//! Signing in, on previewd's own host: GitHub's OAuth web flow (authorize → callback →
//! token → the user), then a one-time hand-off code to the preview host named in `rd`.
//! The `state` is bound to the browser by a sealed cookie (CSRF on sign-in); `rd` must be a
//! live preview's address; GitHub's answers are bounded in number and time.

use std::time::Duration;

use anyhow::Context;
use octocrab::Octocrab;
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::json;
use subtle::ConstantTimeEq;

use crate::config::{Config, OAuthClient};

use super::original::Original;
use super::{Pending, Person, Purpose, Sealer, SignedIn};

/// Code exchanges with GitHub at once; more wait their turn, at most `EXCHANGES_WAITING`
/// of them for at most `EXCHANGE_WAIT`, so a flood slows sign-ins down rather than locking
/// everyone out, and is answered 429 beyond that. Each exchange also needs a pending
/// sign-in of its own (a `state` is used once).
const EXCHANGES_AT_ONCE: usize = 8;
const EXCHANGES_WAITING: usize = 64;
const EXCHANGE_WAIT: Duration = Duration::from_secs(5);
const GITHUB_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read from GitHub's token or user endpoint.
const MAX_ANSWER: usize = 64 * 1024;

/// The sign-in cookies on previewd's host (`__Host-`: https only).
pub const SIGNED_IN_COOKIE: &str = "__Host-previewd-login";
pub const PENDING_COOKIE: &str = "__Host-previewd-oauth";

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("sign-in is not configured on this previewd (login.client_id)")]
    Off,
    #[error("{0} is not the address of a preview")]
    BadReturn(String),
    #[error("this sign-in expired or was started in another browser; start again from the preview")]
    BadState,
    #[error("too many sign-ins at once; try again in a minute")]
    Busy,
    #[error("GitHub refused the sign-in: {0}")]
    Refused(String),
    #[error("GitHub could not be asked: {0}")]
    GitHub(String),
}

/// A validated return address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Return {
    /// A preview host under a preview domain: reached with a hand-off code.
    Preview(Original),
    /// A page of previewd's own (the dashboard): a path on this host.
    Here(String),
}

impl Return {
    /// The address to seal into the pending sign-in, as `return_to` reads it back.
    pub fn url(&self) -> String {
        match self {
            Return::Preview(original) => {
                format!("{}{}", original.origin(), original.path_and_query)
            }
            Return::Here(path) => path.clone(),
        }
    }
}

pub struct Flow {
    client: Option<OAuthClient>,
    web: Option<Octocrab>,
    api: Option<Octocrab>,
    web_url: String,
    public_url: Option<String>,
    /// Every preview domain: `[defaults]`' and each repository's.
    domains: Vec<String>,
    exchanges: tokio::sync::Semaphore,
    waiting: std::sync::atomic::AtomicUsize,
    /// The `state` of each sign-in already resumed: one exchange per pending sign-in.
    states: super::handoffs::Handoffs,
}

impl Flow {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let client = config.login.client.clone();
        let build = |base: &str| -> anyhow::Result<Octocrab> {
            Octocrab::builder()
                .base_uri(base)
                .with_context(|| format!("{base} as GitHub's address"))?
                .set_connect_timeout(Some(GITHUB_TIMEOUT))
                .set_read_timeout(Some(GITHUB_TIMEOUT))
                .build()
                .context("a client for GitHub's OAuth endpoints")
        };
        let (web, api) = match &client {
            Some(_) => (
                Some(build(&config.github.web_url)?),
                Some(build(&config.github.api_url)?),
            ),
            None => (None, None),
        };
        let mut domains: Vec<String> = std::iter::once(config.defaults.domain.clone())
            .chain(config.repos.iter().map(|r| r.policy.domain.clone()))
            .collect();
        domains.sort();
        domains.dedup();
        Ok(Self {
            client,
            web,
            api,
            web_url: config.github.web_url.clone(),
            public_url: config.public_url.clone(),
            domains,
            exchanges: tokio::sync::Semaphore::new(EXCHANGES_AT_ONCE),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            states: super::handoffs::Handoffs::default(),
        })
    }

    /// The preview hosts as CSP sources (`https://*.<domain>`, any port on plain-http
    /// trials): a form posted to previewd that is answered with a redirect to a preview
    /// must name them in `form-action`, which browsers apply to the redirect too.
    pub fn preview_sources(&self) -> String {
        let (scheme, port) = if self.https() {
            ("https", "")
        } else {
            ("http", ":*")
        };
        self.domains
            .iter()
            .map(|domain| format!("{scheme}://*.{domain}{port}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Whether sign-in is configured (`login.client_id`).
    pub fn enabled(&self) -> bool {
        self.client.is_some()
    }

    /// Whether previewd's own host is served over https (its cookies are `Secure` then).
    pub fn https(&self) -> bool {
        self.public_url
            .as_deref()
            .is_none_or(|url| url.starts_with("https://"))
    }

    /// `rd` when it is an address under a preview domain (`https`, or `http` only while
    /// previewd itself is plain http on loopback; the host is looked up by the caller), or a
    /// path of previewd's own dashboard.
    pub fn return_to(&self, rd: &str) -> Result<Return, FlowError> {
        let bad =
            || FlowError::BadReturn(format!("{:?}", rd.chars().take(200).collect::<String>()));
        if is_dashboard_path(rd) {
            return Ok(Return::Here(rd.to_owned()));
        }
        let original = Original::from_url(rd).map_err(|_| bad())?;
        // Over https a code goes only to the preview's own listener (no other port of the
        // ingress's address); plain http is a loopback trial on ports of its own.
        if self.https() && !(original.https && original.port().is_none_or(|p| p == "443")) {
            return Err(bad());
        }
        let under = self.domains.iter().any(|domain| {
            original
                .host
                .strip_suffix(domain.as_str())
                .is_some_and(|label| label.ends_with('.') && label.len() > 1)
        });
        if !under {
            return Err(bad());
        }
        Ok(Return::Preview(original))
    }

    /// Where to send the browser to sign in at GitHub, and the pending cookie's value.
    pub fn start(
        &self,
        sealer: &Sealer,
        back: &Return,
        now: i64,
    ) -> Result<(String, String), FlowError> {
        let (Some(client), Some(public_url)) = (&self.client, &self.public_url) else {
            return Err(FlowError::Off);
        };
        let mut state = [0u8; 24];
        getrandom::fill(&mut state).map_err(|e| FlowError::GitHub(e.to_string()))?;
        let state = hex::encode(state);
        let pending = sealer.seal(
            Purpose::Pending,
            &Pending {
                state: state.clone(),
                rd: back.url(),
                exp: now + super::PENDING_TTL,
            },
        );
        let authorize = format!(
            "{}/login/oauth/authorize?client_id={}&redirect_uri={}&state={state}&allow_signup=false",
            self.web_url,
            encode(&client.id),
            encode(&format!("{public_url}/auth/callback")),
        );
        Ok((authorize, pending))
    }

    /// The pending sign-in the browser holds, when `state` is its own (used up by
    /// `exchange`).
    pub fn resume(
        &self,
        sealer: &Sealer,
        held: &[&str],
        state: &str,
        now: i64,
    ) -> Result<Pending, FlowError> {
        held.iter()
            .filter_map(|value| sealer.open::<Pending>(Purpose::Pending, value))
            .find(|pending| {
                now < pending.exp && bool::from(pending.state.as_bytes().ct_eq(state.as_bytes()))
            })
            .ok_or(FlowError::BadState)
    }

    /// GitHub's code → a user token → who signed in (the token is dropped). `pending`'s
    /// state is used up once the exchange has its turn (not before: a flood answered 429
    /// uses up no one's sign-in, and fills nothing).
    pub async fn exchange(
        &self,
        state: &crate::db::State,
        code: &str,
        pending: &Pending,
        now: i64,
    ) -> Result<Person, FlowError> {
        let (Some(client), Some(web), Some(api), Some(public_url)) =
            (&self.client, &self.web, &self.api, &self.public_url)
        else {
            return Err(FlowError::Off);
        };
        let _permit = self.turn().await?;
        if !self
            .states
            .take_in(state, &pending.state, pending.exp, now)
            .await
        {
            return Err(FlowError::BadState);
        }
        let token: TokenAnswer = ask(
            web,
            http::Request::builder()
                .method(http::Method::POST)
                .uri("/login/oauth/access_token")
                .header(http::header::ACCEPT, "application/json"),
            Some(&json!({
                "client_id": client.id,
                "client_secret": client.secret.expose_secret(),
                "code": code,
                "redirect_uri": format!("{public_url}/auth/callback"),
            })),
        )
        .await?;
        let token = match token {
            TokenAnswer {
                access_token: Some(token),
                ..
            } => token,
            TokenAnswer { error, .. } => {
                return Err(FlowError::Refused(
                    error.unwrap_or_else(|| "no token".into()),
                ));
            }
        };
        let user: UserAnswer = ask(
            api,
            http::Request::builder()
                .method(http::Method::GET)
                .uri("/user")
                .header(http::header::ACCEPT, "application/vnd.github+json")
                .header(http::header::AUTHORIZATION, format!("Bearer {token}")),
            None::<&()>,
        )
        .await?;
        match user {
            UserAnswer {
                login: Some(login),
                id: Some(id),
            } => Ok(Person { login, id }),
            _ => Err(FlowError::Refused(
                "GitHub did not say who signed in".into(),
            )),
        }
    }

    /// A turn to ask GitHub: at once, or after a bounded wait behind a bounded queue.
    async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, FlowError> {
        use std::sync::atomic::Ordering;
        if let Ok(permit) = self.exchanges.try_acquire() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= EXCHANGES_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(FlowError::Busy);
        }
        let permit = tokio::time::timeout(EXCHANGE_WAIT, self.exchanges.acquire()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match permit {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(FlowError::Busy),
        }
    }

    /// The signed-in cookie's value for `who`, until `exp`.
    pub fn signed_in(sealer: &Sealer, who: Person, exp: i64) -> String {
        sealer.seal(Purpose::SignedIn, &SignedIn { who, exp })
    }

    /// Who is signed in on previewd's host, from its cookies.
    pub fn who(sealer: &Sealer, held: &[&str], now: i64) -> Option<Person> {
        held.iter()
            .filter_map(|value| sealer.open::<SignedIn>(Purpose::SignedIn, value))
            .find(|signed| now < signed.exp)
            .map(|signed| signed.who)
    }
}

/// A path of the dashboard or the API on this host: `/`, `/previews/…`, `/api/…` (never
/// `//host` or `/\\host`, which browsers read as another host), of printable ASCII.
fn is_dashboard_path(rd: &str) -> bool {
    let path = rd.split('?').next().unwrap_or("");
    rd.len() <= 2048
        && rd.bytes().all(|b| b.is_ascii_graphic())
        && !rd.contains('\\')
        && (path == "/" || path.starts_with("/previews/") || path.starts_with("/api/"))
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    error: Option<String>,
}

#[derive(Deserialize)]
struct UserAnswer {
    login: Option<String>,
    id: Option<u64>,
}

async fn ask<T: serde::de::DeserializeOwned, B: serde::Serialize + ?Sized>(
    client: &Octocrab,
    request: http::request::Builder,
    body: Option<&B>,
) -> Result<T, FlowError> {
    let request = client
        .build_request(request, body)
        .map_err(|e| FlowError::GitHub(e.to_string()))?;
    let answer = tokio::time::timeout(GITHUB_TIMEOUT, async {
        let response = client.execute(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), MAX_ANSWER)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    })
    .await
    .map_err(|_| FlowError::GitHub("no answer in time".into()))?
    .map_err(FlowError::GitHub)?;
    let (status, body) = answer;
    if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
        return Err(FlowError::Refused(format!("GitHub answered {status}")));
    }
    if !status.is_success() {
        return Err(FlowError::GitHub(format!("GitHub answered {status}")));
    }
    serde_json::from_slice(&body)
        .map_err(|e| FlowError::GitHub(format!("an unreadable answer: {e}")))
}

fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(public_url: &str) -> Flow {
        let toml = format!(
            "public_url = {public_url:?}\n[defaults]\ndomain = \"preview.example.com\"\n\
             [login]\nclient_id = \"Iv1.test\"\nclient_secret = \"secret\"\n"
        );
        Flow::new(&Config::from_toml(&toml, vec![]).unwrap()).unwrap()
    }

    // Octocrab's client is built inside a runtime.
    #[tokio::test]
    async fn over_https_a_code_goes_only_to_the_previews_own_listener() {
        let flow = flow("https://previewd.example.com");
        for rd in [
            "https://pv-a.preview.example.com/x",
            "https://pv-a.preview.example.com:443/x",
        ] {
            assert!(flow.return_to(rd).is_ok(), "{rd}");
        }
        for rd in [
            "https://pv-a.preview.example.com:4444/x",
            "http://pv-a.preview.example.com/x",
            "https://preview.example.com/",
            "https://pv-a.preview.example.com.evil.example/",
            "//evil.example/",
            "/\\evil.example/",
            "/admin",
        ] {
            assert!(flow.return_to(rd).is_err(), "{rd}");
        }
    }

    #[tokio::test]
    async fn the_dashboard_is_a_return_address_of_this_host() {
        let flow = flow("https://previewd.example.com");
        assert_eq!(
            flow.return_to("/previews/o/r/1?x=1").unwrap(),
            Return::Here("/previews/o/r/1?x=1".into())
        );
        assert_eq!(flow.return_to("/").unwrap(), Return::Here("/".into()));
    }
}
