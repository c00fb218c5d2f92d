//! Clients that misbehave on purpose: slow heads and bodies are cut off in bounded time,
//! unfinished bodies are bounded in bytes, connections beyond the bound are closed, and
//! SIGTERM ends the process despite a held request.

use super::*;

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
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("previewd.log");
    let server = Server::start_logging(
        dir.path(),
        &secret_env(),
        std::fs::File::create(&log).unwrap(),
    );
    let mut held: Vec<_> = (0..256).map(|_| connect(&server)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut one_more = connect(&server);
    assert_eq!(
        answer_within(&mut one_more, Duration::from_secs(2)),
        Some(0),
        "the 257th connection was kept"
    );
    // Anyone can do that, over and over: the log says so once, then sums up at the stop.
    for _ in 0..200 {
        let mut again = connect(&server);
        assert_eq!(answer_within(&mut again, Duration::from_secs(2)), Some(0));
    }
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
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("too many connections"))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[1].contains("200 more"), "{text}");
}

/// Reads one whole answer (head and `Content-Length` body) from `stream`; `None` when the
/// connection broke instead.
fn read_answer(stream: &mut std::io::BufReader<std::net::TcpStream>) -> Option<(u16, bool)> {
    use std::io::{BufRead, Read};
    let mut status = String::new();
    if stream.read_line(&mut status).ok()? == 0 {
        return None;
    }
    let (mut length, mut close) = (0usize, false);
    loop {
        let mut line = String::new();
        if stream.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end().to_ascii_lowercase();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        close |= line == "connection: close";
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).ok()?;
    Some((status.split(' ').nth(1)?.parse().ok()?, close))
}

#[test]
fn a_connection_left_open_after_a_refused_delivery_takes_the_next_one() {
    // A refusal decided on the headers is answered before the body is read; the server
    // must then either read past that body or say `Connection: close`. A proxy keeping
    // upstream connections alive sends the next delivery down one it was not told is
    // closing, and GitHub gets a 502 for it.
    use std::io::Write;
    let (_dir, server) = serve_with_secret();
    let body = "{\"zen\":\"x\"}".repeat(20_000);
    let unsigned = format!("{}{body}", webhook_head(&server, body.len(), false));
    let mut stream = std::io::BufReader::new(connect(&server));
    let (mut reused, mut reopened) = (0, 0);
    for i in 0..300 {
        stream
            .get_mut()
            .write_all(unsigned.as_bytes())
            .unwrap_or_else(|e| panic!("request {i} could not be sent on a connection the server had not said it would close: {e}"));
        let (status, close) = read_answer(&mut stream).unwrap_or_else(|| {
            panic!("request {i} met a broken connection the server had not said it would close")
        });
        assert_eq!(status, 401);
        if close {
            reopened += 1;
            stream = std::io::BufReader::new(connect(&server));
        } else {
            reused += 1;
        }
    }
    assert_eq!(reused + reopened, 300);
}

#[test]
fn any_answer_left_with_an_unread_body_says_the_connection_closes() {
    // Not only deliveries: a wrong method, a path that does not parse, a refused destroy.
    use std::io::Write;
    let (_dir, server) = serve_with_secret();
    let body = "x".repeat(40_000);
    for (method, path, status) in [
        ("GET", "/webhooks/github", 405),
        ("PUT", "/webhooks/github", 405),
        ("POST", "/api/templates/a/b/notanumber/size", 400),
        ("POST", "/api/previews/a/b/1/destroy", 403),
    ] {
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n{body}",
            server.addr,
            body.len()
        );
        let mut stream = std::io::BufReader::new(connect(&server));
        for i in 0..20 {
            stream
                .get_mut()
                .write_all(request.as_bytes())
                .unwrap_or_else(|e| panic!("{method} {path}, request {i}: {e}"));
            let (got, close) = read_answer(&mut stream)
                .unwrap_or_else(|| panic!("{method} {path}, request {i}: a broken connection"));
            assert_eq!(got, status, "{method} {path}");
            if close {
                stream = std::io::BufReader::new(connect(&server));
            }
        }
    }
    assert!(server.terminate().success());
}

#[test]
fn the_metrics_listener_and_http_1_0_clients_are_told_too() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let env = [
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
        ("PREVIEWD_METRICS_LISTEN", metrics.as_str()),
    ];
    let server = Server::start(dir.path(), &env);
    let body = "x".repeat(40_000);
    // Up to 5 s for the second listener to come up.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut stream = loop {
        match std::net::TcpStream::connect(&metrics) {
            Ok(stream) => break std::io::BufReader::new(stream),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{metrics}: {e}"),
        }
    };
    let request = format!(
        "POST /metrics HTTP/1.1\r\nHost: {metrics}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.get_mut().write_all(request.as_bytes()).unwrap();
    let (status, close) = read_answer(&mut stream).expect("an answer");
    assert_eq!(
        (status, close),
        (405, true),
        "POST /metrics on metrics.listen"
    );

    // HTTP/1.0 asking for keep-alive: the answer must not say keep-alive as well.
    let mut raw = connect(&server);
    write!(
        raw,
        "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let connection: Vec<&str> = answer
        .lines()
        .filter(|l| l.starts_with("connection:"))
        .collect();
    assert_eq!(connection, ["connection: close"], "{answer}");
    assert!(server.terminate().success());
}
