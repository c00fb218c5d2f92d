//! Scale benchmark (issue #17): the real `previewd serve` (directory sink, its defaults) over
//! a state of thousands of live previews across 100 repositories.
//! 1. Fill: `--previews` `pull_request.opened` deliveries, then the time until every
//!    Application file is written.
//! 2. Restart: from the process's start to its first full reconcile pass over them all done
//!    (a cold start), then the next resync pass, with nothing to do (issue #42: it looks
//!    only at what changed and the slow sweep's slice), timed from the metrics.
//! 3. Latency: `--latency` more PRs one at a time, from the 202 to the Application file.
//! 4. Reads: the dashboard's first page and `GET /api/previews`, 20 times each.
//! 5. The server's peak RSS.
//!
//! Run: `cargo bench --bench scale` (options: `-- --previews 5000 --latency 200`; `--postgres`
//! puts the state in a throwaway PostgreSQL server's database instead of SQLite).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

#[allow(dead_code)]
#[path = "../tests/common/pg.rs"]
mod pg;

const SECRET: &str = "bench-webhook-secret-0123456789";
const REPOS: usize = 100;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

fn repo_of(n: u64) -> String {
    format!("scale/repo-{:03}", n as usize % REPOS)
}

/// The recorded `pull_request.opened`, as PR `n` of repository `repo_of(n)`.
fn opened(template: &serde_json::Value, n: u64) -> Vec<u8> {
    let mut json = template.clone();
    let repo = repo_of(n);
    json["number"] = n.into();
    json["pull_request"]["number"] = n.into();
    json["repository"]["full_name"] = repo.clone().into();
    json["pull_request"]["base"]["repo"]["full_name"] = repo.into();
    serde_json::to_vec(&json).unwrap()
}

fn request(addr: &str, head: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, response)
}

fn deliver(addr: &str, body: &[u8], guid: &str) -> u16 {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    let signature = hex::encode(mac.finalize().into_bytes());
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: pull_request\r\nX-GitHub-Delivery: {guid}\r\nX-Hub-Signature-256: sha256={signature}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    request(addr, &head, body).0
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    request(addr, &head, b"")
}

fn file_of(dir: &Path, n: u64) -> PathBuf {
    let key = format!("{}#{n}", repo_of(n)).parse().unwrap();
    let name = previewd::naming::Names::of(&key, "preview.localhost").application;
    dir.join(format!("rendered/{name}.yaml"))
}

/// With `--postgres`: the state's database and what a shared state needs (a session secret;
/// the one cluster named with a certificate, made here with openssl).
fn postgres_store(dir: &Path) -> Vec<(String, String)> {
    if !std::env::args().any(|a| a == "--postgres") {
        return Vec::new();
    }
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        ])
        .args(["-subj", "/CN=sealed-secrets", "-keyout"])
        .arg(dir.join("sealing.key"))
        .arg("-out")
        .arg(dir.join("sealing.crt"))
        .output()
        .unwrap();
    assert!(made.status.success(), "openssl: {made:?}");
    std::fs::write(
        dir.join("previewd.toml"),
        format!(
            "[[clusters]]\nname = \"in-cluster\"\nserver = \"https://kubernetes.default.svc\"\nsealing_cert = {:?}\n",
            dir.join("sealing.crt").display().to_string()
        ),
    )
    .unwrap();
    vec![
        ("PREVIEWD_STATE".into(), pg::server().fresh_database()),
        (
            "PREVIEWD_LOGIN_SESSION_SECRET".into(),
            "bench-session-secret-of-32-bytes-or-more".into(),
        ),
    ]
}

fn start(dir: &Path, addr: &str, store: &[(String, String)]) -> Child {
    let server = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir)
        .env_clear()
        .env("PREVIEWD_LISTEN", addr)
        .env("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)
        .env("PREVIEWD_LOG", "warn")
        .envs(store.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "previewd did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
    server
}

fn stop(mut server: Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
}

/// Previews reconciled since the process started (`previewd_reconcile_seconds` count).
fn reconciled(addr: &str) -> u64 {
    let (_, metrics) = get(addr, "/metrics");
    metrics
        .lines()
        .filter(|l| l.starts_with("previewd_reconcile_seconds_count"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The samples named `names` (with their labels, as the exposition writes them), from one
/// scrape, so that they agree; 0 for one absent.
fn metrics(addr: &str, names: &[&str]) -> Vec<f64> {
    let (_, text) = get(addr, "/metrics");
    names
        .iter()
        .map(|name| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or(0.0)
        })
        .collect()
}

const RESYNCS: &str = "previewd_reconcile_pass_seconds_count{kind=\"resync\"}";
const RESYNC_SECONDS: &str = "previewd_reconcile_pass_seconds_sum{kind=\"resync\"}";
const FULL_SECONDS: &str = "previewd_reconcile_pass_seconds_sum{kind=\"full\"}";
const LOOKS: &str = "previewd_reconcile_seconds_count{sink=\"directory\"}";

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

fn peak_rss_kb(server: &Child) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", server.id()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    ms(sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1])
}

fn timed_gets(addr: &str, path: &str) -> (f64, f64) {
    let mut samples: Vec<Duration> = (0..20)
        .map(|_| {
            let start = Instant::now();
            let (status, _) = get(addr, path);
            assert_eq!(status, 200, "GET {path}");
            start.elapsed()
        })
        .collect();
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

fn main() {
    let previews = arg("--previews", 5000) as u64;
    let count = arg("--latency", 200) as u64;
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-scale"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = postgres_store(&dir);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let template: serde_json::Value = serde_json::from_slice(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/pull_request.opened.json"
        ))
        .unwrap(),
    )
    .unwrap();
    println!(
        "previewd scale benchmark: {previews} previews over {REPOS} repositories (directory sink, state on {}), {} cores",
        if store.is_empty() {
            "SQLite"
        } else {
            "PostgreSQL"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // 1. Fill.
    let server = start(&dir, &addr, &store);
    let started = Instant::now();
    for n in 1..=previews {
        assert_eq!(
            deliver(&addr, &opened(&template, n), &format!("fill-{n}")),
            202
        );
    }
    let recorded = started.elapsed();
    let rendered = dir.join("rendered");
    wait_for("the fill's files", Duration::from_secs(600), || {
        std::thread::sleep(Duration::from_millis(50));
        let files = std::fs::read_dir(&rendered).map_or(0, |d| d.count() as u64);
        files >= previews
    });
    let applied = started.elapsed();
    assert!((1..=previews).all(|n| file_of(&dir, n).exists()));
    println!(
        "fill: {previews} deliveries recorded in {:.1} s, every Application written {:.1} s after the first",
        recorded.as_secs_f64(),
        applied.as_secs_f64()
    );
    stop(server);

    // 2. Restart: cold start, then a pass with nothing to do.
    let spawned = Instant::now();
    let server = start(&dir, &addr, &store);
    wait_for("the first pass", Duration::from_secs(600), || {
        reconciled(&addr) >= previews
    });
    let cold = spawned.elapsed();
    wait_for("the first pass's end", Duration::from_secs(600), || {
        metrics(&addr, &[FULL_SECONDS])[0] > 0.0
    });
    let full = metrics(&addr, &[FULL_SECONDS])[0];
    // Then three resyncs (one each `reconcile::RESYNC`, 30 s), each timed on its own from
    // the metrics: what it costs and how many previews it looked at.
    let mut idle = Vec::new();
    let mut last = metrics(&addr, &[RESYNCS, RESYNC_SECONDS, LOOKS]);
    while idle.len() < 3 {
        wait_for("a resync pass", Duration::from_secs(120), || {
            metrics(&addr, &[RESYNCS])[0] > last[0]
        });
        let now = metrics(&addr, &[RESYNCS, RESYNC_SECONDS, LOOKS]);
        if now[0] == last[0] + 1.0 {
            idle.push(((now[1] - last[1]) * 1e3, now[2] - last[2]));
        }
        last = now;
    }
    let mut sorted: Vec<f64> = idle.iter().map(|(ms, _)| *ms).collect();
    sorted.sort_by(f64::total_cmp);
    println!(
        "restart: first full pass over {previews} done {:.2} s after the process started \
         (the pass itself {full:.2} s); a resync pass with nothing to do took {:.0} ms \
         (median of {}: {})",
        cold.as_secs_f64(),
        sorted[sorted.len() / 2],
        idle.len(),
        idle.iter()
            .map(|(ms, looked)| format!("{ms:.0} ms looking at {looked} previews"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 3. Latency on top of them.
    let mut samples = Vec::new();
    for n in previews + 1..=previews + count {
        let file = file_of(&dir, n);
        assert_eq!(
            deliver(&addr, &opened(&template, n), &format!("late-{n}")),
            202
        );
        let accepted = Instant::now();
        wait_for("a late PR's file", Duration::from_secs(30), || {
            file.exists()
        });
        samples.push(accepted.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    samples.sort();
    println!(
        "latency: {count} PRs over {previews} live, accepted delivery -> Application file: \
         p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        ms(*samples.last().unwrap())
    );

    // 4. Reads.
    let (api50, api99) = timed_gets(&addr, "/api/previews");
    let (page50, page99) = timed_gets(&addr, "/");
    println!(
        "reads over {} previews: GET /api/previews p50 {api50:.1} ms, p99 {api99:.1} ms; \
         dashboard first page p50 {page50:.1} ms, p99 {page99:.1} ms",
        previews + count
    );

    // 5. Memory.
    println!("server peak RSS: {} MiB", peak_rss_kb(&server) / 1024);
    stop(server);
}
