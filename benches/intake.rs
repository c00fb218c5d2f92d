//! Intake benchmark: drives the real `previewd serve` over loopback with signed ~25 KB
//! `pull_request.synchronize` deliveries, each with its own GUID, on a durable state
//! (`synchronous=FULL`). Prints sustained deliveries/s at saturation, then p50/p99 latency
//! at an offered 500/s (open loop: latency counts from the scheduled send time).
//!
//! Run: `cargo bench --bench intake` (options: `-- --seconds 10 --connections 64 --rate 500`).

use std::io;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const SECRET: &str = "bench-webhook-secret-0123456789";
const DISTINCT_PRS: u64 = 1000;

struct Options {
    seconds: u64,
    connections: usize,
    rate: u64,
}

fn options() -> Options {
    let mut o = Options {
        seconds: 10,
        connections: 64,
        rate: 500,
    };
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--seconds" => o.seconds = pair[1].parse().expect("--seconds N"),
            "--connections" => o.connections = pair[1].parse().expect("--connections N"),
            "--rate" => o.rate = pair[1].parse().expect("--rate N"),
            _ => {}
        }
    }
    o
}

/// Pre-signed request bodies: the recorded synchronize payload, padded to ~25 KB with a
/// long PR description, one per PR number.
fn bodies() -> Vec<(Vec<u8>, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github/pull_request.synchronize.json"
    );
    let template: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    (1..=DISTINCT_PRS)
        .map(|n| {
            let mut json = template.clone();
            json["number"] = n.into();
            json["pull_request"]["number"] = n.into();
            let base = serde_json::to_vec(&json).unwrap().len();
            json["pull_request"]["body"] = "Lorem ipsum dolor sit amet. "
                .repeat((25_000 - base) / 28)
                .into();
            let body = serde_json::to_vec(&json).unwrap();
            let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
            mac.update(&body);
            let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
            (body, signature)
        })
        .collect()
}

struct Client {
    stream: BufReader<TcpStream>,
    addr: String,
}

static GUID: AtomicU64 = AtomicU64::new(0);

impl Client {
    async fn connect(addr: &str) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream: BufReader::new(stream),
            addr: addr.into(),
        })
    }

    /// One delivery on this keep-alive connection; returns the status code.
    async fn deliver(&mut self, body: &[u8], signature: &str) -> io::Result<u16> {
        let guid = GUID.fetch_add(1, Ordering::Relaxed);
        let head = format!(
            "POST /webhooks/github HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             X-GitHub-Event: pull_request\r\nX-GitHub-Delivery: bench-{guid:016x}\r\nX-GitHub-Hook-ID: 1\r\n\
             X-Hub-Signature-256: {signature}\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        let stream = self.stream.get_mut();
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        let mut line = String::new();
        self.stream.read_line(&mut line).await?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(line.clone()))?;
        let mut length = 0;
        loop {
            line.clear();
            self.stream.read_line(&mut line).await?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut rest = vec![0; length];
        self.stream.read_exact(&mut rest).await?;
        Ok(status)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn report(name: &str, mut latencies: Vec<Duration>, errors: u64, elapsed: Duration) {
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name}: {} deliveries in {:.1} s = {:.0} deliveries/s; latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {errors} errors",
        latencies.len(),
        elapsed.as_secs_f64(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.99)),
        ms(*latencies.last().unwrap()),
    );
}

/// Closed loop: every connection sends its next delivery as soon as the last is answered.
async fn saturate(addr: &str, bodies: Arc<Vec<(Vec<u8>, String)>>, o: &Options) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(o.seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..o.connections {
        let (addr, bodies) = (addr.to_owned(), bodies.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&addr).await.unwrap();
            let (mut latencies, mut errors, mut i) = (Vec::new(), 0, c);
            while Instant::now() < deadline {
                let (body, signature) = &bodies[i % bodies.len()];
                let sent = Instant::now();
                match client.deliver(body, signature).await {
                    Ok(202) => latencies.push(sent.elapsed()),
                    _ => errors += 1,
                }
                i += 7; // walk the PRs in a different order per connection
            }
            (latencies, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (latencies, e) = task.await.unwrap();
        all.extend(latencies);
        errors += e;
    }
    let sent = all.len() as u64 + errors;
    report("saturation", all, errors, start.elapsed());
    sent
}

/// Open loop at a fixed offered rate; latency counts from when the delivery was due, so a
/// stall is not hidden by sending less (no coordinated omission).
async fn offered(addr: &str, bodies: Arc<Vec<(Vec<u8>, String)>>, o: &Options) -> u64 {
    let total = o.rate * o.seconds;
    let (work, queue) = async_channel();
    let mut tasks = Vec::new();
    for _ in 0..o.connections {
        let (addr, bodies, queue) = (addr.to_owned(), bodies.clone(), queue.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(&addr).await.unwrap();
            let (mut latencies, mut errors) = (Vec::new(), 0);
            while let Some((i, due)) = next(&queue).await {
                let (body, signature) = &bodies[i as usize % bodies.len()];
                match client.deliver(body, signature).await {
                    Ok(202) => latencies.push(Instant::now().duration_since(due)),
                    _ => errors += 1,
                }
            }
            (latencies, errors)
        }));
    }
    let start = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / o.rate as f64);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due.into()).await;
        work.send((i, due)).await.unwrap();
    }
    drop(work);
    let (mut all, mut errors) = (Vec::new(), 0);
    for task in tasks {
        let (latencies, e) = task.await.unwrap();
        all.extend(latencies);
        errors += e;
    }
    report(
        &format!("offered {}/s", o.rate),
        all,
        errors,
        start.elapsed(),
    );
    total
}

type Work = (u64, Instant);

fn async_channel() -> (
    tokio::sync::mpsc::Sender<Work>,
    Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Work>>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(100_000);
    (tx, Arc::new(tokio::sync::Mutex::new(rx)))
}

async fn next(queue: &tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Work>>) -> Option<Work> {
    queue.lock().await.recv().await
}

fn start_server(dir: &std::path::Path, addr: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir)
        .env_clear()
        .env("PREVIEWD_LISTEN", addr)
        .env("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)
        .env("PREVIEWD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting previewd")
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
}

fn main() {
    let o = options();
    // On the project's disk (not a tmpfs), so fsync costs what it costs in production.
    let dir = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-intake"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut server = start_server(&dir, &addr);
    let bodies = Arc::new(bodies());
    println!(
        "previewd intake benchmark: {} cores, body {} bytes, {} connections, {} s per phase",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bodies[0].0.len(),
        o.connections,
        o.seconds
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let sent = runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).await.is_err() {
            assert!(Instant::now() < deadline, "previewd did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        saturate(&addr, bodies.clone(), &o).await + offered(&addr, bodies.clone(), &o).await
    });
    if let Some(kib) = peak_rss_kib(server.id()) {
        println!("server peak RSS: {:.1} MiB", kib as f64 / 1024.0);
    }
    let _ = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let _ = server.wait();
    let recorded = runtime.block_on(async {
        let pool = previewd::db::open(&dir.join("previewd.db")).await.unwrap();
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM deliveries")
            .fetch_one(&pool)
            .await
            .unwrap()
    });
    println!("deliveries sent: {sent}, delivery rows recorded: {recorded}");
    assert_eq!(
        sent as i64, recorded,
        "every delivery must be recorded exactly once"
    );
}
