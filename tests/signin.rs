//! Signing in to a preview in a real browser, through real components (issue #39): the
//! `previewd` binary (`serve`, directory sink) as the forward-auth endpoint; Debian's nginx
//! configured as ingress-nginx configures the preview's Ingress as the helper chart renders
//! it (`auth-url` pinned to the preview's host, `auth-signin`, `auth-response-headers`;
//! tests/common/nginx.rs); an in-test app behind it that echoes the `X-Auth-Request-User`
//! it received; the GitHub stand-in's OAuth web flow (tests/common/github/oauth.rs); and
//! headless Chromium (`/usr/bin/chromium`) driven over the DevTools protocol
//! (`--remote-debugging-pipe`), which records every hop of each navigation. Everything is
//! plain http on loopback: the preview is `http://<host>.preview.localhost:<nginx port>`
//! (Chromium resolves `*.localhost` to loopback), previewd's `public_url` is
//! `http://127.0.0.1:<port>`, so previewd sets the plain `previewd` cookie (no `Secure`).
//! The browser sends a forged `X-Auth-Request-User` with every request; the app must only
//! ever see the one nginx took from previewd's answer. Screenshots go to
//! target/ci-artifacts/ (`signin-*.png`).

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Html;
use base64::Engine;
use common::Delivery;
use common::github::FakeGitHub;
use common::http::request;
use common::nginx::Nginx;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const DOMAIN: &str = "preview.localhost";
const CLIENT_ID: &str = "Iv1.signintest";
const CLIENT_SECRET: &str = "oauth-client-secret-for-the-signin-test";
const API_TOKEN: &str = "api-token-for-the-signin-test-0123456789";
/// What the browser claims to be in `X-Auth-Request-User` on every request it sends.
const FORGED: &str = "forged-by-the-browser";
/// Longest wait for a page to load (every hop included).
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// A request the app behind nginx received: its path and every `X-Auth-Request-User`.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    users: Vec<String>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// The app of the preview: a page naming the user nginx passed on.
async fn app(State(log): State<Log>, uri: Uri, headers: HeaderMap) -> Html<String> {
    let users: Vec<String> = headers
        .get_all("x-auth-request-user")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let shown = users.join(", ");
    log.lock().unwrap().push(Seen {
        uri: uri.to_string(),
        users,
    });
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>The preview</title>\
         <link rel=\"icon\" href=\"data:,\"></head>\
         <body style=\"font-family:sans-serif;margin:3em\"><h1>The preview's app</h1>\
         <p>X-Auth-Request-User: <b id=\"user\">{}</b></p><p>path: <code>{}</code></p>\
         </body></html>",
        escape(&shown),
        escape(uri.path()),
    ))
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// previewd, the GitHub stand-in, one live preview, nginx in front of the preview's app.
struct Edge {
    nginx: Nginx,
    previewd: common::process::Server,
    /// `http://127.0.0.1:<port>`: previewd's `public_url`.
    public: String,
    github: FakeGitHub,
    /// The preview's host (as recorded in the state).
    host: String,
    /// What the app received.
    seen: Log,
    dir: tempfile::TempDir,
    /// Runs the stand-in and the app; dropped last.
    _runtime: tokio::runtime::Runtime,
}

impl Edge {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let github = runtime.block_on(FakeGitHub::start());
        let dir = tempfile::tempdir().unwrap();
        let port = common::process::free_port();
        let public = format!("http://127.0.0.1:{port}");
        let config = format!(
            "public_url = {public:?}\n\
             [github]\nwebhook_secret = {secret:?}\napi_url = {gh:?}\nweb_url = {gh:?}\n\
             token = \"ghp_signintest\"\n\
             [defaults]\ndomain = {DOMAIN:?}\n\
             [login]\nclient_id = {CLIENT_ID:?}\nclient_secret = {CLIENT_SECRET:?}\n\
             [api]\ntoken = {API_TOKEN:?}\n",
            secret = common::SECRET,
            gh = github.url,
        );
        std::fs::write(dir.path().join("previewd.toml"), &config).unwrap();
        github.register_oauth_app(CLIENT_ID, CLIENT_SECRET, &format!("{public}/auth/callback"));
        // Started here rather than by `process::Server::start`, which picks the port itself:
        // `public_url` names it, so it is picked first.
        let log = File::create(dir.path().join("previewd.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("PREVIEWD_LISTEN", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let previewd = common::process::Server {
            child,
            addr: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while request(&previewd.addr, "GET", "/healthz", &[], b"").is_err() {
            assert!(
                Instant::now() < deadline,
                "previewd did not start:\n{}",
                std::fs::read_to_string(dir.path().join("previewd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let answer = previewd.deliver(&Delivery::fixture("pull_request.opened"));
        assert_eq!(answer.status, 202, "{}", answer.body);

        // The reconciler (directory sink) applies the preview and records its names.
        let url = loop {
            let body = request(
                &previewd.addr,
                "GET",
                "/api/previews/codertocat/hello-world/2",
                &[("Authorization", format!("Bearer {API_TOKEN}"))],
                b"",
            )
            .unwrap()
            .body;
            let shown: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let preview = &shown["preview"];
            if preview["observed"] == "applied" {
                break preview["url"].as_str().unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "the preview was not applied: {body}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        let recorded: Option<String> = runtime.block_on(async {
            let state = format!(
                "sqlite://{}?mode=ro",
                dir.path().join("previewd.db").display()
            );
            let pool = sqlx::SqlitePool::connect(&state).await.unwrap();
            let host = sqlx::query_scalar(
                "SELECT json_extract(names, '$.host') FROM previews \
                 WHERE repo = 'codertocat/hello-world' AND number = 2",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            pool.close().await;
            host
        });
        let host = recorded.expect("the reconciler recorded the preview's host");
        assert_eq!(
            url,
            format!("https://{host}"),
            "the API names the recorded host"
        );
        assert!(host.ends_with(&format!(".{DOMAIN}")), "{host}");

        let seen: Log = Arc::default();
        let app_addr = runtime.block_on(async {
            let router = Router::new().fallback(app).with_state(seen.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
            addr
        });
        // The preview's Ingress as the helper chart renders it (helpers-chart's ingress.yaml:
        // `auth-url` pinned to the preview's host), previewd reached at its `public_url`.
        let nginx = runtime.block_on(
            Nginx::ingress(&[host.as_str()], &app_addr)
                .auth_url(&format!("{public}/auth/check?host={host}"))
                .auth_signin(&format!("{public}/auth/signin"))
                .auth_response_headers(&["X-Auth-Request-User"])
                .start(),
        );
        Self {
            nginx,
            previewd,
            public,
            github,
            host,
            seen,
            dir,
            _runtime: runtime,
        }
    }

    /// `http://<preview host>:<nginx port><path>`: the preview's address through nginx.
    fn url(&self, path: &str) -> String {
        let port = self.nginx.addr.rsplit(':').next().unwrap();
        format!("http://{}:{port}{path}", self.host)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The app received the user nginx took from previewd's answer, once per request, and
    /// never the browser's own.
    fn assert_app_saw_only(&self, user: impl Fn(&str) -> bool) {
        let seen = self.seen();
        assert!(!seen.is_empty(), "the app received nothing");
        for request in &seen {
            assert_eq!(request.users.len(), 1, "one user header: {request:?}");
            assert_ne!(request.users[0], FORGED, "the browser's own header passed");
            assert!(user(&request.users[0]), "{request:?}");
        }
    }

    /// The statuses nginx logged for `request` (`GET /again`), in order.
    fn nginx_statuses(&self, request_starts: &str) -> Vec<u16> {
        self.nginx
            .access_log()
            .lines()
            .filter_map(|line| {
                let (_, rest) = line.split_once(" \"")?;
                let (request, rest) = rest.split_once("\" ")?;
                request.starts_with(request_starts).then(|| {
                    rest.split(' ')
                        .next()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0)
                })
            })
            .collect()
    }

    /// Everything worth reading when a step fails.
    fn diagnostics(&self) -> String {
        format!(
            "--- previewd log\n{}\n--- nginx error log\n{}\n--- nginx access log\n{}\n\
             --- the stand-in's requests\n{}\n--- the app's requests\n{:#?}",
            std::fs::read_to_string(self.dir.path().join("previewd.log")).unwrap_or_default(),
            self.nginx.error_log(),
            self.nginx.access_log(),
            self.github.hub().log.join("\n"),
            self.seen(),
        )
    }
}

/// One response of a navigation: a redirect, or the page it ended on.
#[derive(Clone, Debug, PartialEq)]
struct Hop {
    status: u16,
    url: String,
}

/// A navigation: every hop, where it ended, and the page's DOM.
#[derive(Debug)]
struct Visit {
    hops: Vec<Hop>,
    dom: String,
    /// How many of the navigation's requests (one per hop) went out with
    /// `X-Auth-Request-User: FORGED`, as Chromium reports what it sent.
    forged: usize,
}

impl Visit {
    /// `(status, url starts with)` for each hop, in order; and each hop's request carried
    /// the browser's own `X-Auth-Request-User`.
    fn assert_hops(&self, expected: &[(u16, &str)], edge: &Edge) {
        let matches = self.hops.len() == expected.len()
            && self
                .hops
                .iter()
                .zip(expected)
                .all(|(hop, (status, prefix))| {
                    hop.status == *status && hop.url.starts_with(prefix)
                });
        assert!(
            matches,
            "hops\n{:#?}\nexpected (status, prefix)\n{expected:#?}\n{}",
            self.hops,
            edge.diagnostics()
        );
        self.assert_forged_everywhere();
    }

    /// Every hop's request carried the browser's own `X-Auth-Request-User`.
    fn assert_forged_everywhere(&self) {
        assert_eq!(
            self.forged,
            self.hops.len(),
            "each request sent X-Auth-Request-User: {FORGED}: {:#?}",
            self.hops
        );
    }

    fn last(&self) -> &Hop {
        self.hops.last().expect("the navigation had a response")
    }
}

/// Headless Chromium, a fresh profile, driven over `--remote-debugging-pipe` (messages are
/// JSON, each ended by a NUL byte: commands on fd 3, answers and events on fd 4).
struct Browser {
    child: Child,
    commands: File,
    messages: Receiver<Value>,
    /// Every event received, in order.
    events: Vec<Value>,
    next_id: u64,
    session: String,
    profile: tempfile::TempDir,
}

impl Browser {
    /// A browser whose every request carries `X-Auth-Request-User: FORGED`.
    fn launch() -> Self {
        assert!(
            Path::new(CHROMIUM).exists(),
            "{CHROMIUM} is missing: scripts/test installs Debian's chromium package"
        );
        let profile = tempfile::tempdir().unwrap();
        let (to, from) = (
            profile.path().join("cdp-in"),
            profile.path().join("cdp-out"),
        );
        for fifo in [&to, &from] {
            let made = Command::new("mkfifo").arg(fifo).status().unwrap();
            assert!(made.success(), "mkfifo {}", fifo.display());
        }
        let stderr = File::create(profile.path().join("chromium.log")).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(r#"exec 3<"$CDP_IN" 4>"$CDP_OUT"; exec "$@""#)
            .arg("sh")
            .arg(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1280,800",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .env("CDP_IN", &to)
            .env("CDP_OUT", &from)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        // Read and write: opening never waits for the other end (Linux).
        let commands = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&to)
            .unwrap();
        let (send, messages) = mpsc::channel();
        std::thread::spawn(move || {
            let mut out = File::open(&from).unwrap();
            let (mut buffer, mut chunk) = (Vec::new(), [0u8; 65536]);
            loop {
                let n = match out.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                buffer.extend_from_slice(&chunk[..n]);
                while let Some(end) = buffer.iter().position(|b| *b == 0) {
                    let message: Vec<u8> = buffer.drain(..=end).collect();
                    let value = serde_json::from_slice(&message[..end]).unwrap();
                    if send.send(value).is_err() {
                        return;
                    }
                }
            }
        });
        let mut browser = Self {
            child,
            commands,
            messages,
            events: Vec::new(),
            next_id: 0,
            session: String::new(),
            profile,
        };
        let target = browser.send(None, "Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_owned();
        let attached = browser.send(
            None,
            "Target.attachToTarget",
            json!({"targetId": target, "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.call("Page.enable", json!({}));
        browser.call("Network.enable", json!({}));
        browser.call(
            "Network.setExtraHTTPHeaders",
            json!({"headers": {"X-Auth-Request-User": FORGED}}),
        );
        browser
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.profile.path().join("chromium.log")).unwrap_or_default()
    }

    /// One command (to the page when `session` is set); its result.
    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        let deadline = Instant::now() + PAGE_TIMEOUT;
        loop {
            let message = self.next_message(deadline, method);
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method}: {error}");
                }
                return message["result"].clone();
            }
            self.events.push(message);
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        self.send(Some(&session), method, params)
    }

    fn next_message(&mut self, deadline: Instant, waiting_for: &str) -> Value {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.messages.recv_timeout(left) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => {
                panic!("chromium: no {waiting_for} in time\n{}", self.log())
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!(
                    "chromium exited: {:?}\n{}",
                    self.child.try_wait(),
                    self.log()
                )
            }
        }
    }

    /// Opens `url` as if typed in, follows every redirect, and waits for the page's load.
    fn open(&mut self, url: &str) -> Visit {
        let start = self.events.len();
        let navigated = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = navigated.get("errorText") {
            panic!("{url}: {error}\n{}", self.log());
        }
        let deadline = Instant::now() + PAGE_TIMEOUT;
        let loaded = |events: &[Value], session: &str| {
            events
                .iter()
                .any(|e| e["method"] == "Page.loadEventFired" && e["sessionId"] == session)
        };
        while !loaded(&self.events[start..], &self.session) {
            let message = self.next_message(deadline, "Page.loadEventFired");
            self.events.push(message);
        }
        let mut hops = Vec::new();
        let events = &self.events[start..];
        let ours = |e: &&Value| e["sessionId"] == self.session.as_str();
        // The navigation's requests (one id across its redirects), and what each hop sent.
        let documents: Vec<&Value> = events
            .iter()
            .filter(ours)
            .filter(|e| e["method"] == "Network.requestWillBeSent")
            .filter(|e| e["params"]["type"] == "Document")
            .map(|e| &e["params"]["requestId"])
            .collect();
        let forged = events
            .iter()
            .filter(ours)
            .filter(|e| e["method"] == "Network.requestWillBeSentExtraInfo")
            .filter(|e| documents.contains(&&e["params"]["requestId"]))
            .filter(|e| {
                e["params"]["headers"].as_object().is_some_and(|headers| {
                    headers.iter().any(|(name, value)| {
                        name.eq_ignore_ascii_case("x-auth-request-user") && value == FORGED
                    })
                })
            })
            .count();
        for event in events {
            let params = &event["params"];
            if event["sessionId"] != self.session.as_str() || params["type"] != "Document" {
                continue;
            }
            let response = match event["method"].as_str() {
                Some("Network.requestWillBeSent") => &params["redirectResponse"],
                Some("Network.responseReceived") => &params["response"],
                _ => continue,
            };
            if let (Some(status), Some(url)) =
                (response["status"].as_u64(), response["url"].as_str())
            {
                hops.push(Hop {
                    status: u16::try_from(status).unwrap(),
                    url: url.to_owned(),
                });
            }
        }
        let dom = self.call(
            "Runtime.evaluate",
            json!({"expression": "document.documentElement.outerHTML", "returnByValue": true}),
        )["result"]["value"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        Visit { hops, dom, forged }
    }

    /// A PNG of the page in target/ci-artifacts/`name`.
    fn screenshot(&mut self, name: &str) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 3_000,
            "{name} is a real screenshot"
        );
        std::fs::write(artifacts().join(name), png).unwrap();
    }

    /// The cookies the browser would send to `url`.
    fn cookies(&mut self, url: &str) -> Vec<Value> {
        self.call("Network.getCookies", json!({"urls": [url]}))["cookies"]
            .as_array()
            .unwrap()
            .clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn named<'a>(cookies: &'a [Value], name: &str) -> Option<&'a Value> {
    cookies.iter().find(|c| c["name"] == name)
}

fn print_hops(what: &str, visit: &Visit) {
    eprintln!("{what} ({} requests sent the forged header):", visit.forged);
    for hop in &visit.hops {
        let url: String = hop.url.chars().take(140).collect();
        eprintln!("  {} {url}", hop.status);
    }
}

#[test]
fn a_reader_signs_in_at_github_through_nginx_and_the_app_sees_who() {
    let edge = Edge::start();
    edge.github.sign_in_as("alice", 1001);
    edge.github.grant("alice", "read");
    let mut browser = Browser::launch();

    let first = browser.open(&edge.url("/hello"));
    print_hops("a stranger opens the preview", &first);
    let public = &edge.public;
    let github = &edge.github.url;
    let back = format!("{}?__previewd=", edge.url("/hello"));
    let fail = || edge.diagnostics();
    first.assert_hops(
        &[
            (302, &edge.url("/hello")),
            (
                302,
                &format!("{public}/auth/signin?rd={}%2Fhello", edge.url("")),
            ),
            (302, &format!("{github}/login/oauth/authorize?client_id=")),
            (302, &format!("{public}/auth/callback?code=")),
            (200, &back),
        ],
        &edge,
    );
    assert!(
        first.dom.contains("<b id=\"user\">alice</b>"),
        "{}",
        first.dom
    );
    browser.screenshot("signin-reader.png");

    // nginx's own account: 302 to the sign-in (its 401 page), then the app's 200 with the code.
    assert_eq!(
        edge.nginx_statuses("GET /hello HTTP/1.1"),
        [302],
        "{}",
        fail()
    );
    assert_eq!(
        edge.nginx_statuses("GET /hello?__previewd="),
        [200],
        "{}",
        fail()
    );
    assert_eq!(edge.github.count("GET", "/login/oauth/authorize"), 1);
    assert_eq!(edge.github.count("POST", "/login/oauth/access_token"), 1);
    assert_eq!(
        edge.github.count("GET", "/collaborators/alice/permission"),
        1,
        "asked GitHub whether alice may read the repository"
    );

    // The session is a host-only, plain (loopback http) cookie on the preview host.
    let cookies = browser.cookies(&edge.url("/"));
    let session = named(&cookies, "previewd").unwrap_or_else(|| panic!("{cookies:#?}"));
    assert_eq!(
        session["domain"],
        edge.host.as_str(),
        "host-only: {session}"
    );
    assert_eq!(session["secure"], false, "{session}");
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Lax", "{session}");
    assert_eq!(cookies.len(), 1, "{cookies:#?}");
    let own = browser.cookies(&format!("{public}/"));
    assert!(
        named(&own, "previewd-login").is_some(),
        "signed in on previewd: {own:#?}"
    );
    assert!(
        named(&own, "previewd-oauth").is_none(),
        "the pending sign-in is cleared: {own:#?}"
    );

    // A plain address, typed in: let in on the cookie alone, no sign-in, no GitHub.
    let again = browser.open(&edge.url("/again"));
    print_hops("the same browser opens a plain address", &again);
    again.assert_hops(&[(200, &edge.url("/again"))], &edge);
    assert!(
        again.dom.contains("<b id=\"user\">alice</b>"),
        "{}",
        again.dom
    );
    assert_eq!(edge.nginx_statuses("GET /again "), [200]);
    assert_eq!(edge.github.count("GET", "/login/oauth/authorize"), 1);

    let seen = edge.seen();
    let uris: Vec<&str> = seen.iter().map(|s| s.uri.as_str()).collect();
    assert_eq!(uris.len(), 2, "{seen:#?}");
    assert!(uris[0].starts_with("/hello?__previewd="), "{uris:?}");
    assert_eq!(uris[1], "/again");
    edge.assert_app_saw_only(|user| user == "alice");
}

#[test]
fn a_non_reader_ends_on_previewds_page_saying_why() {
    let edge = Edge::start();
    edge.github.sign_in_as("mallory", 666);
    let mut browser = Browser::launch();

    let visit = browser.open(&edge.url("/hello"));
    print_hops(
        "someone who cannot read the repository opens the preview",
        &visit,
    );
    let public = &edge.public;
    visit.assert_hops(
        &[
            (302, &edge.url("/hello")),
            (302, &format!("{public}/auth/signin?rd=")),
            (302, &format!("{}/login/oauth/authorize?", edge.github.url)),
            (403, &format!("{public}/auth/callback?code=")),
        ],
        &edge,
    );
    for said in [
        "mallory",
        "cannot read",
        "codertocat/hello-world",
        "/preview share 24h",
    ] {
        assert!(visit.dom.contains(said), "{said} in {}", visit.dom);
    }
    browser.screenshot("signin-refused.png");
    assert!(
        edge.seen().is_empty(),
        "the app was never reached: {:#?}",
        edge.seen()
    );
    assert!(
        browser.cookies(&edge.url("/")).is_empty(),
        "no session on the preview host"
    );
    assert_eq!(
        edge.github
            .count("GET", "/collaborators/mallory/permission"),
        1
    );

    // Opening it again changes nothing: GitHub still says no.
    let again = browser.open(&edge.url("/hello"));
    assert_eq!(again.last().status, 403, "{:#?}", again.hops);
    assert!(edge.seen().is_empty());
}

#[test]
fn a_share_link_opens_the_preview_without_a_github_account() {
    let edge = Edge::start();
    let mut browser = Browser::launch();

    // Nobody is signed in to GitHub in this browser: without the link, GitHub asks them to.
    let refused = browser.open(&edge.url("/hello"));
    print_hops(
        "a reviewer without a GitHub account opens the preview",
        &refused,
    );
    refused.assert_hops(
        &[
            (302, &edge.url("/hello")),
            (302, &format!("{}/auth/signin?rd=", edge.public)),
            (200, &format!("{}/login/oauth/authorize?", edge.github.url)),
        ],
        &edge,
    );
    assert!(refused.dom.contains("Sign in to GitHub"), "{}", refused.dom);
    assert!(edge.seen().is_empty());

    // A writer makes a share link through the API (as `/preview share 24h` does).
    let answer = request(
        &edge.previewd.addr,
        "POST",
        "/api/previews/codertocat/hello-world/2/share?for=24h",
        &[("Authorization", format!("Bearer {API_TOKEN}"))],
        b"",
    )
    .unwrap();
    assert_eq!(answer.status, 201, "{}", answer.body);
    let link = serde_json::from_str::<Value>(&answer.body).unwrap()["link"]
        .as_str()
        .unwrap()
        .to_owned();
    // The link is previewd's share page with the pass in the fragment (never sent to a
    // server); its `rd` names the preview's address, here nginx's plain http port on loopback
    // (the pass inside is bound to the host, not the scheme or port).
    let (page, pass) = link
        .split_once('#')
        .unwrap_or_else(|| panic!("the pass in the fragment: {link}"));
    assert!(
        page.starts_with(&format!("{}/auth/share?rd=", edge.public)),
        "{link}"
    );
    let rd: String = edge
        .url("/")
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let authorizes = edge.github.count("GET", "/login/oauth/authorize");

    // The share page reads the fragment and posts it; previewd answers with a one-time code
    // to the preview, which nginx's check turns into the session cookie.
    let shared = browser.open(&format!("{}/auth/share?rd={rd}#{pass}", edge.public));
    print_hops("the same reviewer opens the share link", &shared);
    let deadline = Instant::now() + Duration::from_secs(20);
    while named(&browser.cookies(&edge.url("/")), "previewd").is_none() {
        assert!(
            Instant::now() < deadline,
            "the share page never reached the preview"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    browser.screenshot("signin-share.png");
    let cookies = browser.cookies(&edge.url("/"));
    let session = named(&cookies, "previewd").unwrap_or_else(|| panic!("{cookies:#?}"));
    assert_eq!(session["secure"], false, "{session}");
    assert_eq!(session["domain"], edge.host.as_str(), "{session}");
    assert!(
        edge.seen().iter().all(|seen| !seen.uri.contains(pass)),
        "the pass never reached the preview: {:#?}",
        edge.seen()
    );

    let again = browser.open(&edge.url("/hello"));
    print_hops("the reviewer opens a plain address", &again);
    again.assert_hops(&[(200, &edge.url("/hello"))], &edge);
    assert!(again.dom.contains("<b id=\"user\">share:"), "{}", again.dom);
    assert_eq!(
        edge.github.count("GET", "/login/oauth/authorize"),
        authorizes,
        "GitHub was not asked"
    );
    let share_user = edge.seen()[0].users[0].clone();
    edge.assert_app_saw_only(|user| user == share_user && user.starts_with("share:"));
}
