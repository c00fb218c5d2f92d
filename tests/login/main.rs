//! The login in front of every preview, through the real router with a stand-in GitHub:
//! the forward-auth check as ingress-nginx, Traefik and Envoy ask it, GitHub's OAuth web
//! flow and the hand-off to the preview host, share links, and the attacks of issue #39.
//! `nginx.rs` puts Debian's real nginx (`auth_request`) in front.

#[path = "../common/mod.rs"]
mod common;

mod attacks;
mod check;
mod dashboard;
mod flow;
mod nginx;
mod shares;
mod sleep;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use common::github::FakeGitHub;
use common::{Delivery, TestApp};

pub const DOMAIN: &str = "preview.example.com";
pub const CLIENT_ID: &str = "Iv1.previewdtest";
pub const CLIENT_SECRET: &str = "oauth-client-secret-for-tests";

/// A previewd with one live preview (Codertocat/Hello-World#2), asking `github` who may
/// enter under `access`, and signing in through `github`'s OAuth endpoints.
pub struct World {
    pub app: TestApp,
    pub github: FakeGitHub,
    /// The preview's host.
    pub host: String,
}

impl World {
    pub async fn new(access: &str) -> Self {
        Self::with(access, "").await
    }

    pub async fn with(access: &str, extra: &str) -> Self {
        let github = FakeGitHub::start().await;
        let toml = format!(
            "api_url = {url:?}\nweb_url = {url:?}\ntoken = \"ghp_test\"\n\
             [defaults]\ndomain = {DOMAIN:?}\naccess = {access:?}\n\
             [login]\nclient_id = {CLIENT_ID:?}\nclient_secret = {CLIENT_SECRET:?}\n\
             access_cache = \"1s\"\n{extra}",
            url = github.url,
        );
        let app = TestApp::start_with(&toml).await;
        let mut world = Self {
            app,
            github,
            host: String::new(),
        };
        world.host = world.open(Delivery::fixture("pull_request.opened")).await;
        world
    }

    /// The preview `delivery` opens, applied by the directory reconciler; its host.
    pub async fn open(&self, delivery: Delivery) -> String {
        self.app.send(&delivery).await;
        std::sync::Arc::new(common::directory_reconciler(&self.app))
            .pass()
            .await
            .unwrap();
        let host = match self.app.state().is_shared() {
            true => "names::jsonb ->> 'host'",
            false => "json_extract(names, '$.host')",
        };
        self.app
            .scalar(&format!(
                "SELECT {host} FROM previews ORDER BY id DESC LIMIT 1"
            ))
            .await
    }

    /// A check as ingress-nginx sends it for `url`, with `cookie`.
    pub async fn check(&self, url: &str, cookie: Option<&str>) -> (StatusCode, HeaderMap) {
        let mut request = Request::get("/auth/check")
            .header("host", "127.0.0.1:8080")
            .header("x-original-url", url)
            .header("x-original-method", "GET")
            .header("x-sent-from", "nginx-ingress-controller");
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie);
        }
        let (status, headers, _) = self.app.answer(request.body(Body::empty()).unwrap()).await;
        (status, headers)
    }

    /// `https://<host><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.host)
    }

    pub async fn preview_id(&self) -> i64 {
        self.app.scalar("SELECT id FROM previews").await
    }

    /// A request through the router; status, headers and body text.
    pub async fn get(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::get(path).header("host", "127.0.0.1:8080");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (status, headers, body) = self.app.answer(request.body(Body::empty()).unwrap()).await;
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }
}

/// The `name=value` of a `Set-Cookie` answer named `name`.
pub fn set_cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
        .map(|v| v.split(';').next().unwrap().to_owned())
}

pub fn location(headers: &HeaderMap) -> String {
    headers
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

pub fn user(headers: &HeaderMap) -> Option<String> {
    headers
        .get("x-auth-request-user")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `text` percent-encoded for a query value.
pub fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One GET to the GitHub stand-in (a browser following a redirect): status and `Location`.
pub async fn follow(url: &str) -> (u16, String) {
    let rest = url
        .strip_prefix("http://")
        .expect("the stand-in is plain http");
    let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (addr, path) = (addr.to_owned(), path.to_owned());
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let status = raw.split(' ').nth(1).unwrap().parse().unwrap();
        let location = raw
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("location")
                    .then(|| value.trim().to_owned())
            })
            .unwrap_or_default();
        (status, location)
    })
    .await
    .unwrap()
}

/// What a completed sign-in leaves: where previewd sends the browser (the preview, with a
/// hand-off code) and the signed-in cookie on previewd's host.
pub struct SignedIn {
    pub back: String,
    pub signed_in: Option<String>,
    pub status: StatusCode,
    pub page: String,
}

impl World {
    /// Registers the OAuth app on the stand-in (its callback is previewd's loopback
    /// `public_url`) and signs in there as `login`.
    pub fn github_user(&self, login: &str, id: u64) {
        self.github.register_oauth_app(
            CLIENT_ID,
            CLIENT_SECRET,
            "http://127.0.0.1:8080/auth/callback",
        );
        self.github.sign_in_as(login, id);
    }

    /// A sign-in started for `rd` and left at GitHub's door: the pending cookie and the
    /// OAuth `state` it holds.
    pub async fn start_sign_in(&self, rd: &str) -> (String, String) {
        let (_, headers, _) = self.get(&format!("/auth/signin?rd={}", enc(rd)), &[]).await;
        let pending = set_cookie(&headers, "previewd-oauth").expect("a pending cookie");
        let to = location(&headers);
        let state = to
            .split("state=")
            .nth(1)
            .expect("a state")
            .split('&')
            .next();
        (pending, state.unwrap_or_default().to_owned())
    }

    /// The browser's way: the preview's sign-in link, GitHub's authorize, the callback.
    pub async fn sign_in(&self, rd: &str) -> SignedIn {
        let (status, headers, _) = self.get(&format!("/auth/signin?rd={}", enc(rd)), &[]).await;
        assert_eq!(status, StatusCode::FOUND, "sign-in starts with GitHub");
        let authorize = location(&headers);
        assert!(
            authorize.starts_with(&format!("{}/login/oauth/authorize?", self.github.url)),
            "{authorize}"
        );
        let pending = set_cookie(&headers, "previewd-oauth").expect("a pending cookie");
        let (status, callback) = follow(&authorize).await;
        assert_eq!(status, 302, "the stand-in approves");
        let path = callback
            .strip_prefix("http://127.0.0.1:8080")
            .expect("back to previewd")
            .to_owned();
        let (status, headers, page) = self.get(&path, &[("cookie", &pending)]).await;
        assert!(
            !page.contains(CLIENT_SECRET) && !format!("{headers:?}").contains(CLIENT_SECRET),
            "the client secret never reaches the browser"
        );
        SignedIn {
            back: location(&headers),
            signed_in: set_cookie(&headers, "previewd-login"),
            status,
            page,
        }
    }
}
