//! The real `previewd` binary as a test's server: `serve` on a free port with only the
//! environment a test gives it, waited for until `/healthz` answers, killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Delivery;
use super::http::{Response, request};

pub struct Server {
    pub child: Child,
    pub addr: String,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// Starts `previewd serve` in `dir` with only `env` (and a free port) in its environment.
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_on("127.0.0.1", dir, env)
    }

    /// The same, listening on `ip` (reached through 127.0.0.1).
    pub fn start_on(ip: &str, dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::spawn(ip, dir, env, Stdio::null())
    }

    /// The same on 127.0.0.1, its log (stderr) written to `log`, as a log collector would see it.
    pub fn start_logging(dir: &Path, env: &[(&str, &str)], log: std::fs::File) -> Self {
        Self::spawn("127.0.0.1", dir, env, log.into())
    }

    fn spawn(ip: &str, dir: &Path, env: &[(&str, &str)], stderr: Stdio) -> Self {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .arg("serve")
            .current_dir(dir)
            .env_clear()
            .env("PREVIEWD_LISTEN", format!("{ip}:{port}"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
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

    pub fn deliver(&self, delivery: &Delivery) -> Response {
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

    pub fn kill(mut self) {
        self.child.kill().unwrap(); // SIGKILL: no chance to flush anything
        self.child.wait().unwrap();
    }

    pub fn sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
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
