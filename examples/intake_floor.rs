//! The floor under the intake benchmark (issue #17): previewd's own runtime and accept loop
//! (tokio's current-thread runtime, `server::edge`) around a handler that reads a delivery
//! whole and answers 202, verifying, parsing and recording nothing. With `--fsync FILE` it
//! also writes 12 KB to FILE and fsyncs it before answering, as one commit of one
//! delivery does (three WAL frames). What previewd spends above this floor is its own; the
//! floor is what loopback TCP, wake-ups and the disk's flush cost on the machine.
//!
//!   cargo build --release --example intake_floor
//!   target/release/examples/intake_floor 127.0.0.1:18091 [--fsync /var/tmp/floor.bin]
//!
//! `scripts/bench-floor` runs it against previewd in `../shared/bench`'s harness.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::routing::post;

/// One delivery's share of a commit: three 4 KB pages, at a rolling offset in a file of
/// 4 MB (SQLite's WAL restarts from its start after a checkpoint).
const COMMIT: usize = 3 * 4096;
const WRAP: u64 = 4 << 20;

struct Disk {
    file: File,
    offset: u64,
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .map_or("127.0.0.1:18091", String::as_str)
        .to_owned();
    let disk = match args.get(1).map(String::as_str) {
        Some("--fsync") => {
            let path = args.get(2).expect("--fsync FILE");
            let file = File::options()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)?;
            file.set_len(WRAP)?;
            file.sync_all()?;
            Some(Arc::new(Mutex::new(Disk { file, offset: 0 })))
        }
        Some(other) => panic!("unknown argument {other}"),
        None => None,
    };
    let router = Router::new().route(
        "/webhooks/github",
        post(move |body: Bytes| {
            let disk = disk.clone();
            async move { accept(disk.as_deref(), &body) }
        }),
    );
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            previewd::server::edge::serve(
                listener,
                router,
                previewd::server::edge::LIMITS,
                std::future::pending(),
            )
            .await;
            Ok(())
        })
}

/// Writes and flushes on the runtime's thread, as previewd's intake does when no other
/// writer holds the state.
fn accept(disk: Option<&Mutex<Disk>>, body: &[u8]) -> StatusCode {
    if let Some(disk) = disk {
        let mut disk = disk.lock().expect("disk");
        let mut page = [0u8; COMMIT];
        let n = body.len().min(COMMIT);
        page[..n].copy_from_slice(&body[..n]);
        let offset = disk.offset;
        if disk.file.write_all_at(&page, offset).is_err() || disk.file.sync_all().is_err() {
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
        disk.offset = (offset + COMMIT as u64) % WRAP;
    }
    StatusCode::ACCEPTED
}
