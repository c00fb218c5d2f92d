//! The suites on a PostgreSQL state (`PREVIEWD_TEST_STORE=postgres`, as `scripts/test` runs
//! them a second time): one throwaway server per test binary, started here with initdb and
//! postgres (as the `postgres` user when the tests run as root: initdb refuses root), a
//! fresh database for each previewd. A watchdog stops the server when the test process ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Whether this run puts previewd's state on PostgreSQL.
pub fn on_postgres() -> bool {
    std::env::var("PREVIEWD_TEST_STORE").is_ok_and(|store| store == "postgres")
}

pub struct Server {
    /// Holds the data directory and the socket; never dropped (a static).
    _dir: tempfile::TempDir,
    socket: PathBuf,
    bin: PathBuf,
    databases: AtomicU32,
}

static SERVER: OnceLock<Server> = OnceLock::new();

/// This test binary's server, started on first use.
pub fn server() -> &'static Server {
    SERVER.get_or_init(Server::start)
}

/// The newest server installation's bin directory.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.flatten()
                .map(|d| d.path().join("bin"))
                .filter(|b| b.join("initdb").exists())
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    versions
        .pop()
        .expect("PostgreSQL server binaries are needed: run scripts/test, which installs them")
}

fn as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// `program args...`, as the postgres user when we are root.
fn command(program: &Path) -> Command {
    if as_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

impl Server {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let bin = bin_dir();
        if as_root() {
            let chown = Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status();
            assert!(chown.unwrap().success());
        }
        let data = dir.path().join("data");
        let init = command(&bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        // The server runs as long as this process: the shell watches for its end, then
        // removes the directory (the static holding it is never dropped; each fresh database
        // is a copy of the template, so a suite's server leaves hundreds of MB behind).
        let watch = format!(
            "{postgres} -D {data} -k {socket} -c listen_addresses='' -c max_connections=400 \
             -c fsync=on -c synchronous_commit=on >{log} 2>&1 & pg=$!; \
             while [ -d /proc/{me} ]; do sleep 1; done; kill -INT $pg; wait $pg; rm -rf {socket}",
            postgres = bin.join("postgres").display(),
            data = data.display(),
            socket = dir.path().display(),
            log = dir.path().join("log").display(),
            me = std::process::id(),
        );
        // Never waited for: the watchdog outlives this process by design, to stop the server.
        #[allow(clippy::zombie_processes)]
        let _watchdog = command(Path::new("/bin/sh"))
            .args(["-c", &watch])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = Self {
            socket: dir.path().to_owned(),
            _dir: dir,
            bin,
            databases: AtomicU32::new(0),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !server.psql("postgres", "SELECT 1").status.success() {
            assert!(Instant::now() < deadline, "PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn psql(&self, database: &str, sql: &str) -> std::process::Output {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-U", "postgres", "-h"])
            .arg(&self.socket)
            .args(["-d", database, "-c", sql])
            .output()
            .unwrap()
    }

    /// A URL to a database of its own, created now.
    pub fn fresh_database(&self) -> String {
        self.fresh_database_with("")
    }

    /// As `fresh_database`, created with `options` (`CREATE DATABASE name options`).
    pub fn fresh_database_with(&self, options: &str) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            self.databases.fetch_add(1, Ordering::Relaxed)
        );
        let made = self.psql("postgres", &format!("CREATE DATABASE {name} {options}"));
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
        self.url(&name)
    }

    pub fn url(&self, database: &str) -> String {
        format!(
            "postgresql://postgres@localhost/{database}?host={}",
            self.socket.display()
        )
    }
}
