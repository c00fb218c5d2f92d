//! Shared test fixtures: an in-process previewd, signed deliveries built from recorded
//! GitHub payloads, and row queries.
#![allow(dead_code)] // each test binary uses its own subset

pub mod github;
pub mod http;
pub mod nginx;
pub mod openapi;
pub mod pg;
pub mod process;
pub mod python;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use hmac::{Hmac, Mac};
use previewd::clock::ManualClock;
use previewd::config::Config;
use previewd::server::app::App;
use previewd::{serve, server};
use sha2::Sha256;
use sqlx::SqlitePool;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use tower::ServiceExt;

pub const SECRET: &str = "test-webhook-secret-0123456789";
/// 2026-11-29T00:00:00Z: the manual clock's start.
pub const NOW: i64 = 1_795_910_400;

pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/github/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The config text of `TestApp::start`'s previewd, with `toml` added after the webhook secret.
pub fn config(toml: &str) -> String {
    format!("[github]\nwebhook_secret = {SECRET:?}\n{toml}")
}

/// A previewd on a fresh state in a temporary directory, with a manual clock.
pub struct TestApp {
    pub router: Router,
    pub app: Arc<App>,
    /// The reconciler's end of `app.work`, for a test that runs the reconciler's loop.
    pub pending: std::sync::Mutex<Option<previewd::work::Pending>>,
    pub clock: ManualClock,
    pub dir: tempfile::TempDir,
}

impl TestApp {
    pub async fn start() -> Self {
        Self::with_config(&config("")).await
    }

    /// A previewd like `start`'s, its config `toml` added after the webhook secret (in the
    /// `[github]` table, until `toml` opens another).
    pub async fn start_with(toml: &str) -> Self {
        Self::with_config(&config(toml)).await
    }

    /// `toml` is the config file's text; `state` is always set to the temporary directory.
    pub async fn with_config(toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        Self::in_dir(dir, toml).await
    }

    pub async fn in_dir(dir: tempfile::TempDir, toml: &str) -> Self {
        let (toml, env) = store_for(dir.path(), toml);
        Self::with_env(dir, &toml, env).await
    }

    /// A previewd on an SQLite state in `dir`, whatever the run's store.
    pub async fn on_sqlite(dir: tempfile::TempDir, toml: &str) -> Self {
        let state = dir.path().join("previewd.db").display().to_string();
        Self::with_env(dir, toml, vec![("PREVIEWD_STATE".into(), state)]).await
    }

    async fn with_env(dir: tempfile::TempDir, toml: &str, env: Vec<(String, String)>) -> Self {
        let config = Config::from_toml(toml, env).unwrap();
        let clock = ManualClock::at(NOW);
        let started = serve::start(config, Arc::new(clock.clone())).await.unwrap();
        let app = started.app;
        Self {
            router: server::router(app.clone()),
            app,
            pending: std::sync::Mutex::new(Some(started.pending)),
            clock,
            dir,
        }
    }

    /// A share link followed as a browser follows it: its page on previewd's host posts
    /// the pass from the fragment back; previewd's answer, and where it sends the browser
    /// (the preview, with a one-time code) when it does.
    pub async fn open_share_link(&self, link: &str) -> (StatusCode, Option<String>) {
        let (_, after_host) = link.split_once("/auth/share").expect("a share link");
        let (query, pass) = after_host
            .split_once('#')
            .expect("the pass in the fragment");
        let rd = query
            .strip_prefix("?rd=")
            .map(|rd| rd.split('&').next().unwrap_or_default())
            .unwrap_or_default();
        let request = Request::post("/auth/share")
            .header("host", "127.0.0.1:8080")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(Body::from(format!("pass={pass}&rd={rd}")))
            .unwrap();
        let (status, headers, _) = self.answer(request).await;
        let location = headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        (status, location)
    }

    pub fn pool(&self) -> &SqlitePool {
        self.app.state.pool()
    }

    pub fn state(&self) -> &previewd::db::State {
        &self.app.state
    }

    /// `request` through the router: the answer's status, headers and body.
    pub async fn answer(&self, request: Request<Body>) -> (StatusCode, HeaderMap, Vec<u8>) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, body.to_vec())
    }

    pub async fn send(&self, delivery: &Delivery) -> (StatusCode, serde_json::Value) {
        let (status, _, body) = self.answer(delivery.request()).await;
        let json = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        (status, json)
    }

    /// A request with no body through the router; the answer's status and text.
    pub async fn call(&self, method: &str, path: &str, auth: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let (status, _, body) = self.answer(request.body(Body::empty()).unwrap()).await;
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    pub async fn get(&self, path: &str, auth: Option<&str>) -> (StatusCode, String) {
        self.call("GET", path, auth).await
    }

    pub async fn count(&self, table: &str) -> i64 {
        self.scalar(&format!("SELECT COUNT(*) FROM {table}")).await
    }

    /// The one row `sql` selects, e.g. as a tuple, from either store.
    pub async fn row<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        match self.app.state.postgres() {
            Some(pg) => sqlx::query_as(sql).fetch_one(pg).await.unwrap(),
            None => sqlx::query_as(sql).fetch_one(self.pool()).await.unwrap(),
        }
    }

    /// Every row `sql` selects.
    pub async fn rows<T>(&self, sql: &str) -> Vec<T>
    where
        T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        match self.app.state.postgres() {
            Some(pg) => sqlx::query_as(sql).fetch_all(pg).await.unwrap(),
            None => sqlx::query_as(sql).fetch_all(self.pool()).await.unwrap(),
        }
    }

    /// The one value of the one row `sql` selects.
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        (T,):
            for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        self.row::<(T,)>(sql).await.0
    }

    /// The first column of every row `sql` selects.
    pub async fn scalars<T>(&self, sql: &str) -> Vec<T>
    where
        (T,):
            for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        let rows: Vec<(T,)> = self.rows(sql).await;
        rows.into_iter().map(|(value,)| value).collect()
    }

    /// Runs `sql`, a statement that returns nothing.
    pub async fn execute(&self, sql: &str) {
        match self.app.state.postgres() {
            Some(pg) => drop(sqlx::query(sql).execute(pg).await.unwrap()),
            None => drop(sqlx::query(sql).execute(self.pool()).await.unwrap()),
        }
    }

    /// How many history rows record `what` (`opened`, `destroyed`, ...).
    pub async fn recorded(&self, what: &str) -> i64 {
        self.scalar(&format!(
            "SELECT COUNT(*) FROM history WHERE what = '{what}'"
        ))
        .await
    }

    /// The reason of the (first) history row recording `what`.
    pub async fn reason_recorded(&self, what: &str) -> String {
        self.scalar(&format!(
            "SELECT reason FROM history WHERE what = '{what}' ORDER BY id LIMIT 1"
        ))
        .await
    }

    /// Rows in every table previewd writes, but the migrations' own.
    pub async fn total_rows(&self) -> i64 {
        let mut total = 0;
        for table in [
            "previews",
            "ledger",
            "sealed_secrets",
            "commands",
            "installations",
            "installation_repositories",
            "deliveries",
            "history",
        ] {
            total += self.count(table).await;
        }
        total
    }

    pub async fn preview(&self, repo: &str, number: u32) -> Option<PreviewRow> {
        // The flags compared, so each store reads a boolean (PostgreSQL stores a BIGINT).
        self.rows(&format!(
            "SELECT desired, head_sha, fork != 0 AS fork, draft != 0 AS draft, end_reason, author,
                    title, expires_at, created_at, installation_id
             FROM previews WHERE repo = '{repo}' AND number = {number}"
        ))
        .await
        .pop()
    }

    /// `(what, actor, reason)` of a preview's history, oldest first.
    pub async fn history(&self, repo: &str, number: u32) -> Vec<(String, String, String)> {
        self.rows(&format!(
            "SELECT what, actor, reason FROM history WHERE repo = '{repo}' AND number = {number} ORDER BY id"
        ))
        .await
    }

    pub async fn delivery_outcome(&self, guid: &str) -> Option<String> {
        let outcomes: Vec<String> = self
            .scalars(&format!(
                "SELECT outcome FROM deliveries WHERE guid = '{guid}'"
            ))
            .await;
        outcomes.into_iter().next()
    }
}

#[derive(Debug, sqlx::FromRow)]
pub struct PreviewRow {
    pub desired: String,
    pub head_sha: String,
    pub fork: bool,
    pub draft: bool,
    pub end_reason: Option<String>,
    pub author: String,
    pub title: String,
    pub expires_at: i64,
    pub created_at: i64,
    pub installation_id: Option<i64>,
}

/// A webhook delivery as GitHub would send it; a builder over a recorded payload.
#[derive(Clone)]
pub struct Delivery {
    pub event: Option<String>,
    pub guid: Option<String>,
    pub hook_id: Option<String>,
    pub signature: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// Sign with this secret when no explicit signature is set.
    pub secret: String,
}

static NEXT_GUID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Delivery {
    /// The recorded payload `name` (e.g. `pull_request.opened`), byte for byte.
    pub fn fixture(name: &str) -> Self {
        let event = name.split('.').next().unwrap();
        Self::raw(event, fixture_bytes(name))
    }

    pub fn raw(event: &str, body: Vec<u8>) -> Self {
        let n = NEXT_GUID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            event: Some(event.into()),
            guid: Some(format!("00000000-0000-4000-8000-{n:012}")),
            hook_id: Some("12345".into()),
            signature: None,
            content_type: Some("application/json".into()),
            body,
            secret: SECRET.into(),
        }
    }

    /// Edits the payload (re-serialized, then signed as sent).
    pub fn edit(mut self, f: impl FnOnce(&mut serde_json::Value)) -> Self {
        let mut json: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        f(&mut json);
        self.body = serde_json::to_vec(&json).unwrap();
        self
    }

    pub fn number(self, number: u64) -> Self {
        self.edit(|j| {
            j["number"] = number.into();
            j["pull_request"]["number"] = number.into();
        })
    }

    /// The fixture PR's push (`pull_request.synchronize`) of `sha`, updated at `at`.
    pub fn push(sha: &str, at: &str) -> Self {
        Self::fixture("pull_request.synchronize")
            .at_sha(sha)
            .updated_at(at)
    }

    pub fn at_sha(self, sha: &str) -> Self {
        self.edit(|j| j["pull_request"]["head"]["sha"] = sha.into())
    }

    /// `pull_request.updated_at`, e.g. `2026-11-29T10:00:00Z`.
    pub fn updated_at(self, at: &str) -> Self {
        self.edit(|j| j["pull_request"]["updated_at"] = at.into())
    }

    pub fn guid(mut self, guid: &str) -> Self {
        self.guid = Some(guid.into());
        self
    }

    pub fn hook(mut self, hook_id: &str) -> Self {
        self.hook_id = Some(hook_id.into());
        self
    }

    pub fn signed_with(mut self, secret: &str) -> Self {
        self.secret = secret.into();
        self
    }

    pub fn signature(mut self, signature: &str) -> Self {
        self.signature = Some(signature.into());
        self
    }

    pub fn without(mut self, header: &str) -> Self {
        match header {
            "X-GitHub-Event" => self.event = None,
            "X-GitHub-Delivery" => self.guid = None,
            "X-GitHub-Hook-ID" => self.hook_id = None,
            "X-Hub-Signature-256" => self.signature = Some(String::new()),
            "Content-Type" => self.content_type = None,
            other => panic!("unknown header {other}"),
        }
        self
    }

    pub fn content_type(mut self, value: &str) -> Self {
        self.content_type = Some(value.into());
        self
    }

    pub fn guid_str(&self) -> &str {
        self.guid.as_deref().unwrap()
    }

    /// `(name, value)` pairs as sent.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let signature = match &self.signature {
            Some(s) if s.is_empty() => None,
            Some(s) => Some(s.clone()),
            None => Some(sign(&self.secret, &self.body)),
        };
        [
            ("X-GitHub-Event", self.event.clone()),
            ("X-GitHub-Delivery", self.guid.clone()),
            ("X-GitHub-Hook-ID", self.hook_id.clone()),
            ("X-Hub-Signature-256", signature),
            ("Content-Type", self.content_type.clone()),
            ("User-Agent", Some("GitHub-Hookshot/test".into())),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .collect()
    }

    pub fn request(&self) -> Request<Body> {
        let mut request = Request::post("/webhooks/github");
        for (name, value) in self.headers() {
            request = request.header(name, value);
        }
        request.body(Body::from(self.body.clone())).unwrap()
    }
}

/// A reconciler on `app`'s state: the directory sink in `<dir>/rendered`, and every cluster
/// sealed with the test certificate.
pub fn directory_reconciler(app: &TestApp) -> previewd::reconcile::Reconciler {
    let cert = previewd::seal::SealingCert::from_pem(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sealed/test-cert.pem"
        ))
        .unwrap(),
        NOW,
    )
    .unwrap();
    directory_reconciler_sealing_with(app, &cert)
}

/// The same, with every cluster sealed with `cert`.
pub fn directory_reconciler_sealing_with(
    app: &TestApp,
    cert: &previewd::seal::SealingCert,
) -> previewd::reconcile::Reconciler {
    let config = app.app.config.clone();
    let certs = config
        .clusters
        .iter()
        .map(|c| (c.name.clone(), cert.clone()))
        .collect();
    previewd::reconcile::Reconciler::new(
        app.state().clone(),
        config,
        previewd::sink::Sink::Directory(previewd::sink::DirectorySink::new(
            app.dir.path().join("rendered"),
        )),
        certs,
        None,
        Arc::new(app.clock.clone()),
    )
}

/// Polls `done` every 20 ms for up to `within`; whether it came true.
pub async fn eventually(within: std::time::Duration, done: impl Fn() -> bool) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if done() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    done()
}

/// The config text and environment for a previewd whose state is in `dir`: an SQLite file
/// there, or with `PREVIEWD_TEST_STORE=postgres` a fresh PostgreSQL database, with what a
/// shared state asks for (a session secret; without `[[clusters]]`, the implicit cluster
/// named with a certificate, as SQLite's previewd would make beside its state).
pub fn store_for(dir: &std::path::Path, toml: &str) -> (String, Vec<(String, String)>) {
    if !pg::on_postgres() {
        let state = dir.join("previewd.db");
        return (
            toml.to_owned(),
            vec![("PREVIEWD_STATE".into(), state.display().to_string())],
        );
    }
    // One database per directory: a previewd restarted in the same directory (`in_dir`)
    // finds the state it left, as it finds its SQLite file.
    let marker = dir.join("postgres-url");
    let url = match std::fs::read_to_string(&marker) {
        Ok(url) => url,
        Err(_) => {
            let url = pg::server().fresh_database();
            std::fs::write(&marker, &url).unwrap();
            url
        }
    };
    shared_store(dir, toml, &url)
}

/// The config text and environment for a previewd on the PostgreSQL state at `url` (one of
/// several replicas, perhaps), its files in `dir`.
pub fn shared_store(
    dir: &std::path::Path,
    toml: &str,
    url: &str,
) -> (String, Vec<(String, String)>) {
    let env = vec![
        ("PREVIEWD_STATE".into(), url.to_owned()),
        (
            "PREVIEWD_LOGIN_SESSION_SECRET".into(),
            "a-test-session-secret-of-32-bytes-or-more".into(),
        ),
    ];
    let mut toml = toml.to_owned();
    if !toml.contains("[[clusters]]") {
        let (key, cert) = local_key_pair();
        let (key_to, cert_to) = previewd::clusters::local_key_paths(&dir.join("previewd.db"));
        std::fs::copy(key, &key_to).unwrap();
        std::fs::copy(cert, &cert_to).unwrap();
        toml.push_str(&format!(
            "\n[[clusters]]\nname = \"in-cluster\"\nserver = \"https://kubernetes.default.svc\"\nsealing_cert = {:?}\n",
            cert_to.display().to_string()
        ));
    }
    (toml, env)
}

/// One local sealing key pair for the whole test binary (RSA-4096 takes a while), made as
/// `previewd serve` makes one beside an SQLite state.
fn local_key_pair() -> &'static (std::path::PathBuf, std::path::PathBuf) {
    static PAIR: std::sync::OnceLock<(
        tempfile::TempDir,
        (std::path::PathBuf, std::path::PathBuf),
    )> = std::sync::OnceLock::new();
    let (_, pair) = PAIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("previewd.db");
        let config = Config::from_toml(
            "",
            vec![("PREVIEWD_STATE".into(), state.display().to_string())],
        )
        .unwrap();
        for (_, cert) in
            previewd::clusters::sealing_certs(&config, NOW, previewd::clusters::LocalKeys::Create)
        {
            cert.unwrap();
        }
        let pair = previewd::clusters::local_key_paths(&state);
        (dir, pair)
    });
    pair
}
