//! Serving beyond loopback: refused without an API token, no DNS rebinding onto the
//! dashboard, HTML answers that forbid sniffing and framing, and metrics behind the token
//! or their own listener.

use super::*;

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
