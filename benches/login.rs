//! The login's check in front of every request (issue #39): what `GET /auth/check` adds to a
//! request with a warm session, measured through a real nginx configured as ingress-nginx
//! configures an Ingress with `auth-url` / `auth-signin` / `auth-response-headers`
//! (tests/common/nginx.rs), against the same nginx without the annotations, in one run.
//!
//! In this process: previewd (`serve::start` and `server::router` on previewd's own accept
//! loop, on a current-thread runtime of its own, as `previewd serve` runs), with one live
//! preview (a signed `pull_request.opened`, then a directory reconciler's pass, which
//! records its host) and `access = "repo"`; a GitHub stand-in that answers the collaborator
//! permission look-up with `read` and counts every call; the preview's app (200 `ok`, and a
//! count of the requests that arrived naming the user). Outside it: two nginx, one
//! `auth_request`ing previewd for every request and one without, both in front of the same
//! app. The session is minted with the login's own sealer, as the hand-off would set it.
//!
//! For each number of connections (`--connections`), `--rounds` rounds of `--requests`
//! requests through each nginx on keep-alive connections (closed loop: each request timed
//! from its first byte sent to its answer's last byte read), the order alternating between
//! rounds, then as many checks sent to previewd directly, each on a connection of its own
//! as nginx's `auth_request` opens one; then an open loop at `--rate` requests/s over the
//! most connections, `--open-seconds` each way a round. Printed per variant: p50 / p99 /
//! p99.9 and requests/s, medians of the rounds; what the check adds at each quantile (with
//! − without) and the p99 ratio, each taken within a round, then the median; CPU a request
//! of nginx's worker and of previewd's threads. The GitHub stand-in must be asked once for
//! the whole run (no call on the request path), and every request must reach the app.
//!
//! Run: `cargo bench --bench login` (options: `-- --requests 4000 --rounds 5 --warmup 500
//! --connections 1,16 --rate 1000 --open-seconds 2`). Needs Debian's nginx and set-misc
//! (`apt-get install nginx-light libnginx-mod-http-set-misc`; `scripts/test` installs them).

#[path = "../tests/common/nginx.rs"]
mod nginx;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode, Uri};
use hmac::{Hmac, Mac};
use previewd::login::{Person, Purpose, Session, Who};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use nginx::Nginx;

const DOMAIN: &str = "preview.example.com";
const WEBHOOK_SECRET: &str = "bench-webhook-secret-0123456789";
const CLIENT_ID: &str = "Iv1.previewdbench";
const CLIENT_SECRET: &str = "oauth-client-secret-for-the-bench";
/// The configured `login.access_cache` (previewd's default): GitHub may be asked once a
/// period, so a run longer than this may see one more look-up a period.
const ACCESS_CACHE: Duration = Duration::from_secs(300);
const LOGIN: &str = "alice";
/// The path every request asks for (a query, as an app's requests have).
const PATH: &str = "/cart?item=3";

struct Options {
    requests: usize,
    rounds: usize,
    warmup: usize,
    connections: Vec<usize>,
    /// The open loop's offered requests a second (0: none) and its length each way.
    rate: f64,
    open_seconds: f64,
}

fn options() -> Options {
    let mut o = Options {
        requests: 4000,
        rounds: 5,
        warmup: 500,
        connections: vec![1, 16],
        rate: 1000.0,
        open_seconds: 2.0,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--requests" => o.requests = pair[1].parse().expect("--requests N"),
            "--rounds" => o.rounds = pair[1].parse().expect("--rounds N"),
            "--warmup" => o.warmup = pair[1].parse().expect("--warmup N"),
            "--rate" => o.rate = pair[1].parse().expect("--rate N"),
            "--open-seconds" => o.open_seconds = pair[1].parse().expect("--open-seconds S"),
            "--connections" => {
                o.connections = pair[1]
                    .split(',')
                    .map(|n| n.trim().parse().expect("--connections 1,16"))
                    .collect();
            }
            _ => {}
        }
    }
    o
}

/// What the GitHub stand-in and the app count.
#[derive(Default)]
struct Counts {
    /// `GET /repos/{o}/{r}/collaborators/{u}/permission`.
    permission: AtomicU64,
    /// Anything else asked of the GitHub stand-in.
    other_github: AtomicU64,
    /// Requests the app received, and those naming the user (`X-Auth-Request-User`, which
    /// only the check's answer gives).
    app: AtomicU64,
    app_named: AtomicU64,
}

/// The GitHub stand-in and the app, on a current-thread runtime of their own.
fn services(counts: Arc<Counts>) -> (SocketAddr, SocketAddr) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("services".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("services")
                .build()
                .unwrap();
            runtime.block_on(async move {
                let github = Router::new()
                    .route(
                        "/repos/{owner}/{repo}/collaborators/{user}/permission",
                        axum::routing::get(|State(counts): State<Arc<Counts>>| async move {
                            counts.permission.fetch_add(1, Ordering::SeqCst);
                            axum::Json(serde_json::json!({
                                "permission": "read",
                                "role_name": "read",
                                "user": {"login": LOGIN, "id": 1001},
                            }))
                        }),
                    )
                    .fallback(|State(counts): State<Arc<Counts>>, uri: Uri| async move {
                        counts.other_github.fetch_add(1, Ordering::SeqCst);
                        eprintln!("GitHub stand-in: unexpected {uri}");
                        (StatusCode::NOT_FOUND, "{\"message\":\"Not Found\"}")
                    })
                    .with_state(counts.clone());
                let app = Router::new()
                    .fallback(
                        |State(counts): State<Arc<Counts>>, headers: HeaderMap| async move {
                            counts.app.fetch_add(1, Ordering::Relaxed);
                            if headers
                                .get("x-auth-request-user")
                                .is_some_and(|v| v.as_bytes() == LOGIN.as_bytes())
                            {
                                counts.app_named.fetch_add(1, Ordering::Relaxed);
                            }
                            "ok"
                        },
                    )
                    .with_state(counts);
                let github_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let app_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send((
                    github_listener.local_addr().unwrap(),
                    app_listener.local_addr().unwrap(),
                ))
                .unwrap();
                let github = axum::serve(github_listener, github);
                let app = axum::serve(app_listener, app);
                let _ = tokio::join!(github, app);
            });
        })
        .unwrap();
    rx.recv().unwrap()
}

/// previewd with one live preview, on `previewd`'s own thread.
struct Previewd {
    /// `127.0.0.1:port`.
    addr: String,
    host: String,
    /// The session cookie (`name=value`) for the preview's host over https.
    cookie: String,
    /// Its state (`login.access.lookups` counts what it asked GitHub).
    app: Arc<previewd::server::app::App>,
}

fn previewd(github: SocketAddr) -> Previewd {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("previewd".into())
        .spawn(move || {
            // As `previewd serve` runs (src/cli.rs `runtime`): one thread for every task;
            // its blocking pool named alike, to count its CPU.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("previewd")
                .build()
                .unwrap();
            runtime.block_on(async move {
                let dir = tempfile::tempdir().unwrap();
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                let toml = format!(
                    "listen = \"{addr}\"\npublic_url = \"http://{addr}\"\n\
                     [github]\nwebhook_secret = {WEBHOOK_SECRET:?}\n\
                     api_url = \"http://{github}\"\nweb_url = \"http://{github}\"\n\
                     token = \"ghp_bench\"\n\
                     [defaults]\ndomain = {DOMAIN:?}\naccess = \"repo\"\n\
                     [login]\nclient_id = {CLIENT_ID:?}\nclient_secret = {CLIENT_SECRET:?}\n\
                     access_cache = \"{}s\"\n",
                    ACCESS_CACHE.as_secs()
                );
                let state = dir.path().join("previewd.db");
                let config = previewd::config::Config::from_toml(
                    &toml,
                    vec![("PREVIEWD_STATE".into(), state.display().to_string())],
                )
                .unwrap();
                let clock: Arc<dyn previewd::clock::Clock> = Arc::new(previewd::clock::SystemClock);
                let started = previewd::serve::start(config, clock.clone()).await.unwrap();
                let app = started.app.clone();
                let router = previewd::server::router(app.clone());
                let host = live_preview(&app, &router, dir.path(), clock.clone()).await;
                let session = Session {
                    who: Who::Person(Person {
                        login: LOGIN.into(),
                        id: 1001,
                    }),
                    host: host.clone(),
                    exp: clock.now() + app.login.session_ttl,
                };
                let sealed = app.login.sealer.seal(Purpose::Session, &session);
                let cookie = format!("{}={sealed}", previewd::login::check::SESSION_COOKIE);
                tx.send(Previewd {
                    addr: addr.to_string(),
                    host,
                    cookie,
                    app: app.clone(),
                })
                .unwrap();
                // Held until the process ends: the reconciler's end of the notifier, the
                // writer, the state's directory.
                let _keep = (started.pending, started.writer, dir);
                previewd::server::edge::serve(
                    listener,
                    router,
                    previewd::server::edge::LIMITS,
                    std::future::pending(),
                )
                .await;
            });
        })
        .unwrap();
    rx.recv().unwrap()
}

/// Sends the recorded `pull_request.opened`, signed, and runs a directory reconciler's
/// pass; the preview's host, as recorded.
async fn live_preview(
    app: &Arc<previewd::server::app::App>,
    router: &Router,
    dir: &std::path::Path,
    clock: Arc<dyn previewd::clock::Clock>,
) -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let body = std::fs::read(format!(
        "{root}/tests/fixtures/github/pull_request.opened.json"
    ))
    .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(WEBHOOK_SECRET.as_bytes()).unwrap();
    mac.update(&body);
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    let request = Request::post("/webhooks/github")
        .header("X-GitHub-Event", "pull_request")
        .header("X-GitHub-Delivery", "00000000-0000-4000-8000-000000000001")
        .header("X-GitHub-Hook-ID", "12345")
        .header("X-Hub-Signature-256", signature)
        .header("Content-Type", "application/json")
        .header("User-Agent", "GitHub-Hookshot/bench")
        .body(Body::from(body))
        .unwrap();
    let answer = router.clone().oneshot(request).await.unwrap();
    assert!(
        answer.status().is_success(),
        "the delivery: {}",
        answer.status()
    );
    let cert = previewd::seal::SealingCert::from_pem(
        &std::fs::read_to_string(format!("{root}/tests/fixtures/sealed/test-cert.pem")).unwrap(),
        clock.now(),
    )
    .unwrap();
    let certs = app
        .config
        .clusters
        .iter()
        .map(|c| (c.name.clone(), cert.clone()))
        .collect();
    let reconciler = Arc::new(previewd::reconcile::Reconciler::new(
        app.state.pool().clone(),
        app.config.clone(),
        previewd::sink::Sink::Directory(previewd::sink::DirectorySink::new(dir.join("rendered"))),
        certs,
        None,
        clock,
    ));
    reconciler.pass().await.unwrap();
    sqlx::query_scalar("SELECT json_extract(names, '$.host') FROM previews")
        .fetch_one(app.state.pool())
        .await
        .unwrap()
}

/// One answer as read: its status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
    close: bool,
}

/// Reads one answer (`Content-Length` bodies only: nginx and previewd send one here).
async fn read_answer(stream: &mut BufReader<TcpStream>, line: &mut String) -> io::Result<Answer> {
    line.clear();
    if stream.read_line(line).await? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed"));
    }
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no status line: {line:?}")))?;
    let (mut length, mut close) = (None, false);
    loop {
        line.clear();
        if stream.read_line(line).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "in the headers",
            ));
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().ok();
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(io::Error::other(format!("a {value} body")));
            }
        }
    }
    let length = length.ok_or_else(|| io::Error::other("no Content-Length"))?;
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await?;
    Ok(Answer {
        status,
        body,
        close,
    })
}

async fn connect(addr: &str) -> io::Result<BufReader<TcpStream>> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(BufReader::new(stream))
}

/// One variant's round.
struct Round {
    /// Each request's time, in nanoseconds, sorted.
    latencies: Vec<u64>,
    wall: Duration,
    /// nginx's worker and previewd's threads, CPU nanoseconds over the round.
    nginx_cpu: u64,
    previewd_cpu: u64,
}

impl Round {
    /// Milliseconds (nearest rank).
    fn quantile(&self, q: f64) -> f64 {
        let n = self.latencies.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.latencies[rank - 1] as f64 / 1e6
    }

    fn per_second(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64()
    }

    /// Microseconds a request.
    fn cpu_us(&self, ns: u64) -> f64 {
        ns as f64 / 1e3 / self.latencies.len() as f64
    }
}

/// How a round's requests are sent.
#[derive(Clone, Copy)]
enum Load {
    /// Each connection sends its next request once the answer to its last is read.
    Closed,
    /// This many requests a second over the connections, each due at its time. A request
    /// counts from when it was due if its connection was still busy then (no coordinated
    /// omission), else from when it was sent (tokio's timer wakes up to 1 ms late).
    Open(f64),
}

/// Where a variant's requests go.
struct Target<'a> {
    addr: &'a str,
    request: Arc<Vec<u8>>,
    /// Every answer must be 200 with this body.
    body: &'static [u8],
    /// Each request on a connection of its own, timed from the connect (as nginx's
    /// `auth_request` asks previewd); else keep-alive connections, a new one (untimed) when
    /// the server closes one.
    fresh: bool,
    cpu: &'a Cpu,
}

/// `total` requests to `target` over `connections` connections.
async fn drive(target: &Target<'_>, connections: usize, total: usize, load: Load) -> Round {
    let before = target.cpu.sample();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..connections {
        let n = total / connections + usize::from(c < total % connections);
        let addr = target.addr.to_owned();
        let (request, body, fresh) = (target.request.clone(), target.body, target.fresh);
        tasks.spawn(async move {
            let mut times = Vec::with_capacity(n);
            let mut line = String::new();
            let mut stream = None;
            for k in 0..n {
                let mut due = None;
                if let Load::Open(rate) = load {
                    let at = start + Duration::from_secs_f64((c + k * connections) as f64 / rate);
                    if Instant::now() < at {
                        tokio::time::sleep_until(at.into()).await;
                    } else {
                        due = Some(at);
                    }
                }
                if stream.is_none() && !fresh {
                    stream = Some(connect(&addr).await.expect("connecting"));
                }
                let sent = due.unwrap_or_else(Instant::now);
                let mut s = match stream.take() {
                    Some(s) => s,
                    None => connect(&addr).await.expect("connecting"),
                };
                s.get_mut().write_all(&request).await.expect("sending");
                let answer = read_answer(&mut s, &mut line)
                    .await
                    .unwrap_or_else(|e| panic!("{addr}: {e}"));
                times.push(sent.elapsed().as_nanos() as u64);
                assert_eq!(
                    (answer.status, answer.body.as_slice()),
                    (200, body),
                    "{addr}: {}",
                    String::from_utf8_lossy(&answer.body)
                );
                if !(fresh || answer.close) {
                    stream = Some(s);
                }
            }
            times
        });
    }
    let mut latencies = Vec::with_capacity(total);
    while let Some(times) = tasks.join_next().await {
        latencies.extend(times.unwrap());
    }
    let wall = start.elapsed();
    let after = target.cpu.sample();
    latencies.sort_unstable();
    Round {
        latencies,
        wall,
        nginx_cpu: after.0.saturating_sub(before.0),
        previewd_cpu: after.1.saturating_sub(before.1),
    }
}

/// On-CPU nanoseconds (the scheduler's count) of a thread's `schedstat`.
fn schedstat(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Where to read the CPU of one nginx's workers and of previewd's threads.
struct Cpu {
    /// `/proc/<pid>` of the nginx workers whose CPU a round counts.
    workers: Vec<String>,
}

impl Cpu {
    fn of(nginx: &Nginx) -> Self {
        let pid = std::fs::read_to_string(nginx.dir.path().join("nginx.pid")).unwrap();
        let pid = pid.trim();
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
        let workers: Vec<String> = children
            .split_whitespace()
            .map(|child| format!("/proc/{child}"))
            .collect();
        assert!(!workers.is_empty(), "nginx {pid} has no worker");
        Self { workers }
    }

    fn none() -> Self {
        Self { workers: vec![] }
    }

    /// (nginx's workers, previewd's threads): the runtime's thread and blocking pool
    /// (`previewd`) and SQLite's connection threads (`sqlx-sqlite-worker-N`).
    fn sample(&self) -> (u64, u64) {
        let nginx = self.workers.iter().map(|w| tasks_cpu(w, |_| true)).sum();
        let previewd = tasks_cpu("/proc/self", |name| {
            name == "previewd" || name.starts_with("sqlx-sqlite")
        });
        (nginx, previewd)
    }
}

/// The CPU of the threads of process `proc` whose name `pick` picks.
fn tasks_cpu(proc: &str, pick: impl Fn(&str) -> bool) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("{proc}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| pick(name.trim()))
        })
        .map(|task| schedstat(&task.path().join("schedstat").display().to_string()))
        .sum()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn main() {
    let o = options();
    let counts = Arc::new(Counts::default());
    let (github, upstream) = services(counts.clone());
    let previewd = previewd(github);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&o, &counts, &previewd, upstream));
}

async fn run(o: &Options, counts: &Counts, previewd: &Previewd, upstream: SocketAddr) {
    let started = Instant::now();
    let upstream = upstream.to_string();
    let host = previewd.host.as_str();
    // The preview's host is longer than nginx's default `server_names_hash_bucket_size`
    // holds (64: names up to about 46 characters), which ingress-nginx sizes from the
    // longest host and tests/common/nginx.rs does not: the Ingress names the preview
    // domain's wildcard instead, matched from its own hash, as ingress-nginx serves a
    // wildcard host. Requests still name the preview's host, and so does the check.
    let wildcard = format!("*.{DOMAIN}");
    let ingress = Nginx::ingress(&[wildcard.as_str()], &upstream)
        .https()
        .auth_url(&format!("http://{}/auth/check", previewd.addr))
        .auth_signin(&format!("http://{}/auth/signin", previewd.addr))
        .auth_response_headers(&["X-Auth-Request-User"]);
    let with = ingress.clone().start().await;
    let without = ingress.without_auth().start().await;

    // The check is in the way: no session, sent to sign in; a session, let in and named.
    let reply = with.get(host, PATH, &[]).await;
    assert_eq!(reply.status, 302, "without a session: {}", reply.text());
    assert!(
        reply
            .header("location")
            .is_some_and(|l| l.contains(&format!("/auth/signin?rd=https://{host}"))),
        "{:?}",
        reply.headers
    );
    let cookie = [("Cookie", previewd.cookie.as_str())];
    let reply = with.get(host, PATH, &cookie).await;
    assert_eq!((reply.status, reply.text().as_str()), (200, "ok"));
    assert_eq!(
        counts.app_named.load(Ordering::SeqCst),
        1,
        "the app got the user"
    );
    let reply = without.get(host, PATH, &cookie).await;
    assert_eq!((reply.status, reply.text().as_str()), (200, "ok"));
    assert_eq!(counts.permission.load(Ordering::SeqCst), 1, "asked once");
    let (mut sent_with, mut sent_without) = (1, 1);

    let request = Arc::new(
        format!(
            "GET {PATH} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: previewd-bench\r\n\
             Accept: */*\r\nCookie: {}\r\n\r\n",
            previewd.cookie
        )
        .into_bytes(),
    );
    // As ingress-nginx's auth location sends it (tests/common/nginx.rs).
    let check = Arc::new(
        format!(
            "GET /auth/check HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: 0\r\n\
             X-Original-URL: https://{host}{PATH}\r\nX-Original-Method: GET\r\n\
             X-Sent-From: nginx-ingress-controller\r\nX-Real-IP: 127.0.0.1\r\n\
             X-Forwarded-For: 127.0.0.1\r\nX-Auth-Request-Redirect: {PATH}\r\n\
             Connection: close\r\nUser-Agent: previewd-bench\r\nAccept: */*\r\n\
             Cookie: {}\r\n\r\n",
            previewd.cookie
        )
        .into_bytes(),
    );
    let (cpu_with, cpu_without, cpu_direct) = (Cpu::of(&with), Cpu::of(&without), Cpu::none());
    let targets = [
        Target {
            addr: &with.addr,
            request: request.clone(),
            body: b"ok",
            fresh: false,
            cpu: &cpu_with,
        },
        Target {
            addr: &without.addr,
            request,
            body: b"ok",
            fresh: false,
            cpu: &cpu_without,
        },
        Target {
            addr: &previewd.addr,
            request: check,
            body: b"",
            fresh: true,
            cpu: &cpu_direct,
        },
    ];

    println!(
        "the login's check through nginx (auth_request, as ingress-nginx) against nginx \
         without it: {} rounds, each way in turn, the order alternating; medians of the \
         rounds (lowest–highest)",
        o.rounds
    );
    let mut loads: Vec<(String, usize, usize, Load, usize)> = o
        .connections
        .iter()
        .map(|&c| {
            let title = format!(
                "closed loop, {c} connection(s), {} requests each way a round",
                o.requests
            );
            (title, c, o.requests, Load::Closed, 3)
        })
        .collect();
    if o.rate > 0.0 && o.open_seconds > 0.0 {
        let c = o.connections.iter().copied().max().unwrap_or(16);
        let n = (o.rate * o.open_seconds) as usize;
        let title = format!(
            "open loop, {:.0} requests/s offered over {c} connections, {n} requests each way a round",
            o.rate
        );
        loads.push((title, c, n, Load::Open(o.rate), 2));
    }
    for (title, connections, n, load, variants) in loads {
        // Warm: nginx's connections to the app, previewd's pool, caches.
        for target in &targets[..variants] {
            drive(target, connections, o.warmup, Load::Closed).await;
        }
        let mut rounds: Vec<Vec<Round>> = Vec::new();
        for r in 0..o.rounds {
            // with, without (or the other way round), then the check alone.
            let order: &[usize] = match (r % 2, variants) {
                (0, 2) => &[0, 1],
                (_, 2) => &[1, 0],
                (0, _) => &[0, 1, 2],
                _ => &[1, 0, 2],
            };
            let mut round: Vec<Option<Round>> = (0..variants).map(|_| None).collect();
            for &v in order {
                round[v] = Some(drive(&targets[v], connections, n, load).await);
            }
            rounds.push(round.into_iter().map(Option::unwrap).collect());
        }
        sent_with += (o.warmup + o.rounds * n) as u64;
        sent_without += (o.warmup + o.rounds * n) as u64;
        report(&title, &rounds);
    }

    let asked = counts.permission.load(Ordering::SeqCst);
    let other = counts.other_github.load(Ordering::SeqCst);
    let lookups = previewd.app.login.access.lookups.load(Ordering::SeqCst);
    let (named, reached) = (
        counts.app_named.load(Ordering::SeqCst),
        counts.app.load(Ordering::SeqCst),
    );
    let elapsed = started.elapsed();
    let periods = 1 + elapsed.as_secs() / ACCESS_CACHE.as_secs();
    println!();
    println!(
        "GitHub: {asked} permission look-up(s) in {:.0} s (previewd counted {lookups}), {other} \
         other call(s); the app got {named} of {sent_with} requests through the check naming \
         {LOGIN}, and {} of {sent_without} through nginx without it",
        elapsed.as_secs_f64(),
        reached - named,
    );
    assert_eq!(other, 0, "no other GitHub call");
    assert!(
        (1..=periods).contains(&asked),
        "at most one look-up per person, repository and cache period: {asked} in {periods}"
    );
    assert_eq!(
        named, sent_with,
        "every request through the check reached the app, named"
    );
    assert_eq!(
        reached - named,
        sent_without,
        "and every one without it, unnamed"
    );
}

/// One load's figures: each variant's, then what the check adds (variant 0 against 1,
/// within each round, then the median).
fn report(title: &str, rounds: &[Vec<Round>]) {
    type Of<'a> = &'a dyn Fn(&[Round]) -> f64;
    // The median over the rounds (lowest–highest), with `d` decimals.
    let of = |f: Of, d: usize| -> String {
        let values: Vec<f64> = rounds.iter().map(|r| f(r)).collect();
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let m = median(values);
        format!("{m:.d$} ({lo:.d$}–{hi:.d$})")
    };
    println!();
    println!("{title}");
    println!(
        "{:<26} {:>24} {:>24} {:>24} {:>20}",
        "", "p50 ms", "p99 ms", "p99.9 ms", "requests/s"
    );
    let names = ["nginx, with the check", "nginx, without", "the check alone"];
    for (v, name) in names.iter().enumerate().take(rounds[0].len()) {
        println!(
            "{:<26} {:>24} {:>24} {:>24} {:>20}",
            name,
            of(&|r| r[v].quantile(0.50), 3),
            of(&|r| r[v].quantile(0.99), 3),
            of(&|r| r[v].quantile(0.999), 3),
            of(&|r| r[v].per_second(), 0),
        );
    }
    println!(
        "added by the check, ms: p50 {}, p99 {}, p99.9 {}; p99 with / without {}",
        of(&|r| r[0].quantile(0.50) - r[1].quantile(0.50), 3),
        of(&|r| r[0].quantile(0.99) - r[1].quantile(0.99), 3),
        of(&|r| r[0].quantile(0.999) - r[1].quantile(0.999), 3),
        of(&|r| r[0].quantile(0.99) / r[1].quantile(0.99), 2),
    );
    let direct = match rounds[0].len() {
        3 => format!(
            ", {} asked directly",
            of(&|r| r[2].cpu_us(r[2].previewd_cpu), 1)
        ),
        _ => String::new(),
    };
    println!(
        "CPU a request, µs: nginx's worker {} with the check, {} without; previewd {} through \
         nginx{direct}",
        of(&|r| r[0].cpu_us(r[0].nginx_cpu), 1),
        of(&|r| r[1].cpu_us(r[1].nginx_cpu), 1),
        of(&|r| r[0].cpu_us(r[0].previewd_cpu), 1),
    );
}
