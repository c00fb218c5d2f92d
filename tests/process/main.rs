//! The real `previewd` binary: start on embedded defaults, survive a kill, stop gracefully.

#[path = "../common/mod.rs"]
mod common;

mod config_check;
mod connections;
mod exposure;
mod gates;
mod lifecycle;
mod walk;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Delivery;
use common::http::request;

pub(crate) use common::process::{Server, free_port};

pub(crate) fn secret_env() -> [(&'static str, &'static str); 1] {
    [("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET)]
}

/// Waits up to 30 s for `ready`, failing the test with `what` if it never is.
pub(crate) fn eventually(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A previewd with a webhook secret, serving from a fresh directory (kept alive alongside).
pub(crate) fn serve_with_secret() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &secret_env());
    (dir, server)
}
