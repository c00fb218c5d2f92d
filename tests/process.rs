//! The real `previewd` binary: start on embedded defaults, survive a kill, stop gracefully.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Delivery;
use common::http::{Response, request};

struct Server {
    child: Child,
    addr: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// Starts `previewd serve` in `dir` with only `env` (and a free port) in its environment.
    fn start(dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_on("127.0.0.1", dir, env)
    }

    /// The same, listening on `ip` (reached through 127.0.0.1).
    fn start_on(ip: &str, dir: &Path, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .arg("serve")
            .current_dir(dir)
            .env_clear()
            .env("PREVIEWD_LISTEN", format!("{ip}:{port}"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Self { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while request(&server.addr, "GET", "/healthz", &[], b"").is_err() {
            assert!(Instant::now() < deadline, "previewd did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn deliver(&self, delivery: &Delivery) -> Response {
        let headers: Vec<(&str, String)> = delivery.headers();
        request(
            &self.addr,
            "POST",
            "/webhooks/github",
            &headers,
            &delivery.body,
        )
        .unwrap()
    }

    fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL: no chance to flush anything
        self.child.wait().unwrap();
    }

    fn sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.child.wait().unwrap()
    }
}

/// A test that fails mid-way must not leave its previewd running.
impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn count(state: &Path, sql: &str) -> i64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = previewd::db::open(state).await.unwrap();
        let n = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
        pool.close().await;
        n
    })
}

#[test]
fn serve_starts_on_embedded_defaults_without_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    assert_eq!(
        request(&server.addr, "GET", "/readyz", &[], b"")
            .unwrap()
            .status,
        200
    );
    assert!(
        dir.path().join("previewd.db").exists(),
        "state is created in the working directory"
    );
    // No webhook secret configured: deliveries are refused, and the answer says why.
    let refused = server.deliver(&Delivery::fixture("ping"));
    assert_eq!(refused.status, 401);
    assert!(
        refused.body.contains("github.webhook_secret"),
        "{}",
        refused.body
    );
    assert!(server.terminate().success(), "SIGTERM is a clean stop");
}

#[test]
fn an_accepted_delivery_survives_a_kill_and_its_redelivery_stays_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state/previewd.db");
    let env = [
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
        ("PREVIEWD_STATE", state.to_str().unwrap()),
    ];
    let delivery = Delivery::fixture("pull_request.opened");

    let server = Server::start(dir.path(), &env);
    assert_eq!(server.deliver(&delivery).status, 202);
    server.kill();
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM previews WHERE desired = 'deployed'"
        ),
        1
    );

    let server = Server::start(dir.path(), &env);
    let again = server.deliver(&delivery);
    assert_eq!(again.status, 200);
    assert!(again.body.contains("duplicate"), "{}", again.body);
    assert!(server.terminate().success());
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM history WHERE what = 'opened'"),
        1
    );
    assert_eq!(count(&state, "SELECT COUNT(*) FROM deliveries"), 1);
}

#[test]
fn an_invalid_value_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir.path())
        .env_clear()
        .env("PREVIEWD_DEFAULTS_TTL", "soon")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`defaults.ttl` (from PREVIEWD_DEFAULTS_TTL)")
            && stderr.contains("30s, 5m"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("previewd.db").exists(),
        "nothing is created on a bad config"
    );
}

#[test]
fn a_named_config_file_must_exist() {
    let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(["--config", "/nonexistent/previewd.toml", "serve"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/previewd.toml"));
}

/// Waits up to 20 s for `ready`, failing the test with `what` if it never is.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_pr_opened_pushed_and_closed_through_the_binary_leaves_only_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("previewd.db");
    let env = [
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
        ("PREVIEWD_STATE", state.to_str().unwrap()),
    ];
    let server = Server::start(dir.path(), &env);
    let file = dir
        .path()
        .join("rendered/pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml");
    let contains =
        |text: &str| std::fs::read_to_string(&file).is_ok_and(|yaml| yaml.contains(text));

    assert_eq!(
        server
            .deliver(&Delivery::fixture("pull_request.opened"))
            .status,
        202
    );
    wait_for("the Application file", || {
        contains("ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    });

    let new_head = "2222222222222222222222222222222222222222";
    let push = Delivery::push(new_head, "2019-05-15T16:00:00Z");
    assert_eq!(server.deliver(&push).status, 202);
    wait_for("the new head in the file", || contains(new_head));

    let close =
        Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z");
    assert_eq!(server.deliver(&close).status, 202);
    wait_for("the file to go", || !file.exists());
    wait_for("the preview row to be removed", || {
        count(&state, "SELECT COUNT(*) FROM previews") == 0
    });
    assert!(server.terminate().success());
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM ledger")
            + count(&state, "SELECT COUNT(*) FROM sealed_secrets"),
        0
    );
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM history WHERE what = 'destroyed'"
        ),
        1
    );
    assert!(count(&state, "SELECT COUNT(*) FROM history") >= 7);
}

/// A raw connection to `server`, for clients that misbehave on purpose.
fn connect(server: &Server) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// The status of the answer that arrives within `wait`, or `None`: the server is still
/// reading (or holding) the request. An answer-less close is `Some(0)`.
fn answer_within(stream: &mut std::net::TcpStream, wait: Duration) -> Option<u16> {
    use std::io::Read;
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 512];
    match stream.read(&mut buf) {
        Ok(0) => Some(0),
        Ok(n) => Some(
            String::from_utf8_lossy(&buf[..n])
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        ),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::ConnectionReset) => Some(0),
        Err(_) => None,
    }
}

/// A webhook request head declaring `length` body bytes, with every header previewd needs
/// (the signature need not match: it is checked once the body is in).
fn webhook_head(server: &Server, length: usize, signed: bool) -> String {
    let signature = if signed {
        "X-Hub-Signature-256: sha256=00\r\n"
    } else {
        ""
    };
    format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: {}\r\nX-GitHub-Event: ping\r\n\
         X-GitHub-Delivery: slow-{length}\r\n{signature}Content-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n",
        server.addr
    )
}

fn rss_kib(server: &Server) -> u64 {
    std::fs::read_to_string(format!("/proc/{}/status", server.child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn secret_env() -> [(&'static str, &'static str); 1] {
    [("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET)]
}

/// A previewd with a webhook secret, serving from a fresh directory (kept alive alongside).
fn serve_with_secret() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &secret_env());
    (dir, server)
}

/// A raw connection to `server` that has sent a webhook head declaring `length` body bytes.
fn connect_with_webhook_head(server: &Server, length: usize, signed: bool) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = connect(server);
    stream
        .write_all(webhook_head(server, length, signed).as_bytes())
        .unwrap();
    stream
}

/// A signed delivery declaring 1000 body bytes whose body stops after 100.
fn connect_with_a_stalled_body(server: &Server) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = connect_with_webhook_head(server, 1000, true);
    stream.write_all(&[b' '; 100]).unwrap();
    stream
}

#[test]
fn a_connection_that_never_finishes_its_headers_is_closed_after_ten_seconds() {
    use std::io::Write;
    let (_dir, server) = serve_with_secret();
    let started = Instant::now();
    let mut slow = connect(&server);
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .unwrap();
    let mut silent = connect(&server);
    // Slow-loris: a byte now and then never completes the head.
    for _ in 0..4 {
        std::thread::sleep(Duration::from_secs(2));
        let _ = slow.write_all(b"a");
    }
    assert!(
        answer_within(&mut slow, Duration::from_secs(5)).is_some(),
        "a head still unfinished after {:?} kept its connection",
        started.elapsed()
    );
    assert!(
        answer_within(&mut silent, Duration::from_secs(1)).is_some(),
        "a connection that never sent a byte was kept for {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "closed too early"
    );
    assert!(server.terminate().success());
}

#[test]
fn sigterm_ends_the_process_in_bounded_time_despite_a_held_request() {
    let (_dir, mut server) = serve_with_secret();
    let held = connect_with_a_stalled_body(&server);
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    server.sigterm();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(15) {
            server.child.kill().unwrap();
            panic!("a held request kept previewd from ending 15 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status}");
    drop(held);
}

#[test]
fn unfinished_large_bodies_are_bounded_in_bytes_not_in_memory() {
    use std::io::Write;
    let (_dir, server) = serve_with_secret();
    let length = previewd::server::MAX_BODY;
    let before = rss_kib(&server);
    let (mut reading, mut refused) = (Vec::new(), 0);
    for _ in 0..48 {
        let mut stream = connect_with_webhook_head(&server, length, true);
        match answer_within(&mut stream, Duration::from_millis(500)) {
            Some(status) => {
                assert_eq!(status, 503, "the answer to one body too many");
                refused += 1;
            }
            None => {
                // Admitted: most of the body, never the end of it.
                stream.write_all(&vec![b' '; length - 1024]).unwrap();
                reading.push(stream);
            }
        }
    }
    let admitted = previewd::server::MAX_BUFFERED / length;
    assert_eq!(reading.len(), admitted, "bodies being read at once");
    assert_eq!(refused, 48 - admitted);
    std::thread::sleep(Duration::from_millis(300));
    let grown = rss_kib(&server).saturating_sub(before) / 1024;
    assert!(
        grown < 100,
        "48 unfinished bodies grew previewd by {grown} MiB"
    );
    drop(reading);
    assert!(server.terminate().success());
}

#[test]
fn a_delivery_without_a_signature_or_over_the_limit_is_answered_before_its_body() {
    let (_dir, server) = serve_with_secret();
    let mut unsigned = connect_with_webhook_head(&server, 1000, false);
    assert_eq!(
        answer_within(&mut unsigned, Duration::from_secs(3)),
        Some(401),
        "an unsigned delivery waited for its body"
    );
    let mut large = connect_with_webhook_head(&server, previewd::server::MAX_BODY + 1, true);
    assert_eq!(
        answer_within(&mut large, Duration::from_secs(3)),
        Some(413),
        "an oversize Content-Length waited for its body"
    );
    assert!(server.terminate().success());
}

/// `GET path` with this `Host` (and `Authorization`, when given): the status and the head.
fn get_as(addr: &str, path: &str, host: &str, auth: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or("").to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase())
}

#[test]
fn serving_beyond_loopback_without_an_api_token_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir.path())
        .env_clear()
        .env("PREVIEWD_LISTEN", format!("0.0.0.0:{}", free_port()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("previewd serves all interfaces, dashboard open, without api.token");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`api.token`"), "{stderr}");
    assert!(!dir.path().join("previewd.db").exists());
}

#[test]
fn a_page_on_another_site_cannot_read_the_dashboard_through_a_rebound_name() {
    let (_dir, server) = serve_with_secret();
    // DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its own name.
    for path in ["/", "/api/previews", "/metrics"] {
        let (status, _) = get_as(&server.addr, path, "evil.example", None);
        assert!(status == 421 || status == 403, "{path} answered {status}");
    }
    let port = server.addr.rsplit(':').next().unwrap();
    for host in [
        server.addr.clone(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "localhost".into(),
    ] {
        assert_eq!(
            get_as(&server.addr, "/api/previews", &host, None).0,
            200,
            "{host}"
        );
    }
    assert!(server.terminate().success());
}

#[test]
fn html_answers_forbid_sniffing_and_framing() {
    let (_dir, server) = serve_with_secret();
    for path in ["/", "/previews/octo/app/1"] {
        let (_, head) = get_as(&server.addr, path, &server.addr, None);
        assert!(head.contains("content-type: text/html"), "{head}");
        assert!(head.contains("x-content-type-options: nosniff"), "{head}");
        let csp = head
            .lines()
            .find_map(|l| l.strip_prefix("content-security-policy: "))
            .unwrap_or_else(|| panic!("{path}: no CSP in {head}"));
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    }
    assert!(server.terminate().success());
}

#[test]
fn off_loopback_metrics_need_the_token_or_their_own_listener() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut env = secret_env().to_vec();
    env.push(("PREVIEWD_API_TOKEN", "a-long-random-api-token"));
    env.push(("PREVIEWD_METRICS_LISTEN", &metrics));
    let server = Server::start_on("0.0.0.0", dir.path(), &env);
    let host = server.addr.clone();
    assert_eq!(get_as(&server.addr, "/metrics", &host, None).0, 401);
    let bearer = Some("Bearer a-long-random-api-token");
    assert_eq!(get_as(&server.addr, "/metrics", &host, bearer).0, 200);
    assert_eq!(get_as(&server.addr, "/api/previews", &host, None).0, 401);
    assert_eq!(get_as(&server.addr, "/healthz", &host, None).0, 200);
    // Prometheus' own port: metrics only, without the token.
    assert_eq!(get_as(&metrics, "/metrics", &metrics, None).0, 200);
    assert_eq!(get_as(&metrics, "/api/previews", &metrics, None).0, 404);
    assert!(server.terminate().success());
}

#[test]
fn a_body_that_stops_arriving_is_answered_408_after_thirty_seconds() {
    let (_dir, server) = serve_with_secret();
    let mut stalled = connect_with_a_stalled_body(&server);
    assert_eq!(answer_within(&mut stalled, Duration::from_secs(25)), None);
    assert_eq!(
        answer_within(&mut stalled, Duration::from_secs(10)),
        Some(408),
        "a body still unfinished after 35 s"
    );
    assert!(server.terminate().success());
}

#[test]
fn connections_beyond_the_bound_are_closed_at_once() {
    let (_dir, server) = serve_with_secret();
    let mut held: Vec<_> = (0..256).map(|_| connect(&server)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut one_more = connect(&server);
    assert_eq!(
        answer_within(&mut one_more, Duration::from_secs(2)),
        Some(0),
        "the 257th connection was kept"
    );
    assert_eq!(
        answer_within(&mut held[0], Duration::from_millis(100)),
        None,
        "a connection within the bound was closed"
    );
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        request(&server.addr, "GET", "/healthz", &[], b"")
            .unwrap()
            .status,
        200,
        "freed slots serve again"
    );
    assert!(server.terminate().success());
}
