//! previewd's files beside the state: private to their owner, and a crash while writing a
//! key pair never keeps previewd from starting.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::http::request;
use previewd::clusters::LocalKeys;
use previewd::config::Config;

const NOW: i64 = 1_795_910_400; // 2026-11-29T00:00:00Z

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn sealed_config(dir: &Path) -> Config {
    let toml = format!(
        "state = {:?}\n[tls]\nmode = \"sealed\"\n",
        dir.join("previewd.db")
    );
    Config::from_toml(&toml, Vec::new()).unwrap()
}

#[test]
fn state_files_and_keys_are_readable_by_their_owner_only_after_start() {
    let dir = tempfile::tempdir().unwrap();
    let listen = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap().to_string()
    };
    // umask 022, the common default, under which new files are world-readable.
    let mut child = Command::new("sh")
        .args(["-c", "umask 022 && exec \"$0\" serve"])
        .arg(env!("CARGO_BIN_EXE_previewd"))
        .current_dir(dir.path())
        .env_clear()
        .env("PREVIEWD_LISTEN", &listen)
        .env("PREVIEWD_TLS_MODE", "sealed")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while request(&listen, "GET", "/healthz", &[], b"").is_err() {
        assert!(Instant::now() < deadline, "previewd did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let modes: Vec<(&str, u32)> = [
        "previewd.db",
        "previewd.db-wal",
        "previewd.db-shm",
        "previewd-ca.key",
        "previewd-sealing.key",
    ]
    .into_iter()
    .map(|name| (name, mode(&dir.path().join(name))))
    .collect();
    child.kill().unwrap();
    child.wait().unwrap();
    for (name, mode) in modes {
        assert_eq!(mode, 0o600, "{name} is {mode:o}");
    }
}

#[test]
fn state_files_left_world_readable_by_an_older_version_are_made_private() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("previewd.db");
    for name in ["previewd.db", "previewd.db-wal", "previewd.db-shm"] {
        let path = dir.path().join(name);
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Held open while looking: SQLite removes -wal and -shm when the last connection closes.
    let pool = runtime.block_on(previewd::db::open(&state)).unwrap();
    for name in ["previewd.db", "previewd.db-wal", "previewd.db-shm"] {
        assert_eq!(mode(&dir.path().join(name)), 0o600, "{name}");
    }
    runtime.block_on(pool.close());
}

/// What a crash between the two writes of an older previewd left: a key (here cut short)
/// and no certificate. The next start makes a new pair instead of failing on the key.
#[test]
fn a_key_left_without_its_certificate_no_longer_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let config = sealed_config(dir.path());
    let (sealing_key, _) = previewd::clusters::local_key_paths(config.state.file().unwrap());
    let ca_key = dir.path().join("previewd-ca.key");
    for key in [&sealing_key, &ca_key] {
        std::fs::write(key, "-----BEGIN PRIVATE KEY-----\nMIIE").unwrap();
    }
    let certs = previewd::clusters::sealing_certs(&config, NOW, LocalKeys::Create);
    assert!(certs["in-cluster"].is_ok(), "{:?}", certs["in-cluster"]);
    let ca = match previewd::ca::from_config(&config, NOW, LocalKeys::Create) {
        Ok(Some(ca)) => ca,
        other => panic!("no CA: {:?}", other.err()),
    };

    // And the pair made is the one loaded on the next start.
    let again = previewd::clusters::sealing_certs(&config, NOW, LocalKeys::Existing);
    assert_eq!(
        again["in-cluster"].as_ref().unwrap().fingerprint,
        certs["in-cluster"].as_ref().unwrap().fingerprint
    );
    assert_eq!(
        previewd::ca::from_config(&config, NOW, LocalKeys::Existing)
            .unwrap()
            .unwrap()
            .cert_pem(),
        ca.cert_pem()
    );
}
