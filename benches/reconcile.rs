//! Reconciler benchmark with the directory sink.
//! 1. Latency: the real `previewd serve`; per PR, the time from the 202 for its
//!    `pull_request.opened` delivery to its Application file on disk (p50/p99).
//! 2. Throughput: 1,000 previews recorded, then one reconcile pass from cold (seal their
//!    secrets, write 1,000 files), then a pass after a restart with everything applied.
//!
//! Run: `cargo bench --bench reconcile` (option: `-- --previews 1000 --latency 200`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

const SECRET: &str = "bench-webhook-secret-0123456789";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

fn opened(number: u64) -> (Vec<u8>, String) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github/pull_request.opened.json"
    );
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    json["number"] = number.into();
    json["pull_request"]["number"] = number.into();
    let body = serde_json::to_vec(&json).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(&body);
    (
        body,
        format!("sha256={}", hex::encode(mac.finalize().into_bytes())),
    )
}

fn deliver(addr: &str, number: u64) -> u16 {
    let (body, signature) = opened(number);
    let mut stream = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         X-GitHub-Event: pull_request\r\nX-GitHub-Delivery: bench-{number}\r\nX-Hub-Signature-256: {signature}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1].as_secs_f64()
        * 1e3
}

fn latency(dir: &Path, count: usize) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir)
        .env_clear()
        .env("PREVIEWD_LISTEN", &addr)
        .env("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)
        .env("PREVIEWD_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(&addr).is_err() {
        assert!(Instant::now() < deadline, "previewd did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut samples = Vec::with_capacity(count);
    for number in 1..=count as u64 {
        assert_eq!(deliver(&addr, number), 202);
        let accepted = Instant::now();
        let key = format!("codertocat/hello-world#{number}").parse().unwrap();
        let name = previewd::naming::Names::of(&key, "preview.localhost").application;
        let file = dir.join(format!("rendered/{name}.yaml"));
        while !file.exists() {
            assert!(
                accepted.elapsed() < Duration::from_secs(30),
                "no file for PR {number}"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        samples.push(accepted.elapsed());
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    samples.sort();
    println!(
        "latency: {count} PRs, accepted delivery -> Application file: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().unwrap().as_secs_f64() * 1e3
    );
}

async fn throughput(dir: &Path, previews: usize) {
    use previewd::clock::{Clock, SystemClock};
    let state = dir.join("previewd.db");
    let config = previewd::config::Config::from_toml(
        "",
        vec![("PREVIEWD_STATE".into(), state.display().to_string())],
    )
    .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let app = previewd::serve::start(config.clone(), clock.clone())
        .await
        .unwrap()
        .app;
    for number in 1..=previews as u64 {
        let (body, _) = opened(number);
        let (action, payload) = previewd::webhook::parse("pull_request", &body).unwrap();
        let delivery = previewd::webhook::Delivery {
            hook_id: "1".into(),
            guid: format!("t-{number}"),
            event: "pull_request".into(),
            action,
            payload,
        };
        let intent = previewd::intent::decide(&delivery, &config, clock.now());
        app.intake.record(delivery, intent).await.unwrap();
    }
    let pem = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sealed/test-cert.pem"
    ))
    .unwrap();
    let cert = previewd::seal::SealingCert::from_pem(&pem, 0).unwrap();
    let make = || {
        let certs = [("in-cluster".to_string(), cert.clone())].into();
        let sink = previewd::sink::Sink::Directory(previewd::sink::DirectorySink::new(
            dir.join("throughput"),
        ));
        Arc::new(previewd::reconcile::Reconciler::new(
            app.state.clone(),
            config.clone(),
            sink,
            certs,
            None,
            clock.clone(),
        ))
    };
    let start = Instant::now();
    make().pass().await.unwrap();
    let cold = start.elapsed();
    let files = std::fs::read_dir(dir.join("throughput")).unwrap().count();
    assert_eq!(files, previews);
    let start = Instant::now();
    make().pass().await.unwrap();
    let warm = start.elapsed();
    println!(
        "throughput: {previews} previews from cold (seal 7 values each, write {files} files) in {:.2} s; \
         after a restart with all applied, one pass in {:.2} s",
        cold.as_secs_f64(),
        warm.as_secs_f64()
    );
}

fn main() {
    let base = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/target/bench-reconcile"
    ));
    let _ = std::fs::remove_dir_all(&base);
    for sub in ["latency", "throughput"] {
        std::fs::create_dir_all(base.join(sub)).unwrap();
    }
    println!(
        "previewd reconcile benchmark (directory sink, durable writes), {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    latency(&base.join("latency"), arg("--latency", 200));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(throughput(
        &base.join("throughput"),
        arg("--previews", 1000),
    ));
}
