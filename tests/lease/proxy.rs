//! A logging proxy between one previewd and the Kubernetes emulator: every request it
//! forwards is recorded with the test's monotonic time, so a test knows which process wrote
//! what and when (the emulator records no writer: no `managedFields`, no request log).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Request {
    pub at: Instant,
    pub method: String,
    pub path: String,
}

impl Request {
    /// A write to the cluster other than the Lease's own.
    pub fn is_cluster_write(&self) -> bool {
        self.method != "GET" && !self.path.contains("/leases")
    }
}

pub struct Proxy {
    pub port: u16,
    log: Arc<Mutex<Vec<Request>>>,
}

impl Proxy {
    /// Forwards every connection on a fresh port to `upstream` on loopback.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let recorded = log.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let log = recorded.clone();
                std::thread::spawn(move || forward(client, upstream, &log));
            }
        });
        Self { port, log }
    }

    /// The cluster writes sent through this proxy at or after `since`.
    pub fn writes_since(&self, since: Instant) -> Vec<Request> {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|r| r.at >= since && r.is_cluster_write())
            .cloned()
            .collect()
    }

    /// A kubeconfig that sends kube-rs through this proxy.
    pub fn kubeconfig(&self, path: &std::path::Path) {
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: emu\n  cluster:\n    server: \
             http://127.0.0.1:{}\ncontexts:\n- name: emu\n  context:\n    cluster: emu\n    \
             user: emu\n    namespace: default\ncurrent-context: emu\nusers:\n- name: emu\n  \
             user:\n    token: emulator\n",
            self.port
        );
        std::fs::write(path, text).unwrap();
    }
}

/// Copies answers back as they come; reads requests one by one (HTTP/1.1, bodies with a
/// `Content-Length`, as kube-rs sends them), recording each before it is forwarded.
fn forward(client: TcpStream, upstream: u16, log: &Mutex<Vec<Request>>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    let (mut answers, mut back) = (server.try_clone().unwrap(), client.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut answers, &mut back);
        let _ = back.shutdown(Shutdown::Both);
    });
    let mut requests = BufReader::new(client);
    let mut server = server;
    loop {
        let mut head = Vec::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            match requests.read_line(&mut line) {
                Ok(0) | Err(_) => {
                    let _ = server.shutdown(Shutdown::Write);
                    return;
                }
                Ok(_) => {}
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
            head.push(line.clone());
            if line == "\r\n" {
                break;
            }
        }
        let mut words = head[0].split_whitespace();
        let request = Request {
            at: Instant::now(),
            method: words.next().unwrap_or_default().to_owned(),
            path: words.next().unwrap_or_default().to_owned(),
        };
        log.lock().unwrap().push(request);
        let mut body = vec![0; length];
        if requests.read_exact(&mut body).is_err()
            || server.write_all(head.concat().as_bytes()).is_err()
            || server.write_all(&body).is_err()
        {
            return;
        }
    }
}
