//! The chart's SQL against a real PostgreSQL server (started here with initdb + pg_ctl):
//! provisioning and seeding are idempotent, previews are isolated from each other and from
//! the server's own databases, no password reaches the server, and the drop works with
//! sessions open.

mod attacks;
mod attacks2;
mod cnpg;
mod hostile;
mod isolation;
#[path = "../common/output.rs"]
mod output;
mod provisioning;
mod seeding;
mod spares;
mod template;
mod tenancy;
pub(crate) use output::{failed, ok};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A throwaway PostgreSQL listening only on a Unix socket in its own directory.
pub(crate) struct Postgres {
    pub(crate) bin: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) as_root: bool,
    /// The role the chart's Jobs connect as: the superuser `postgres`, or `admin`, shaped
    /// as managed PostgreSQL's (`start_managed`).
    pub(crate) admin: &'static str,
}

/// The newest server installation's bin directory (initdb, pg_ctl and psql side by side).
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
    if let Some(newest) = versions.pop() {
        return newest;
    }
    let found = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    let initdb = found.expect("PostgreSQL server binaries (initdb, pg_ctl, psql) are needed: run scripts/test, which installs them");
    let path = std::fs::canonicalize(String::from_utf8_lossy(&initdb.stdout).trim()).unwrap();
    path.parent().unwrap().to_path_buf()
}

impl Postgres {
    pub(crate) fn start() -> Self {
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0\n"))
            .unwrap_or(false);
        let dir = tempfile::tempdir().unwrap();
        let pg = Self {
            bin: bin_dir(),
            dir,
            as_root,
            admin: "postgres",
        };
        if as_root {
            // initdb refuses to run as root.
            assert!(
                Command::new("chown")
                    .args(["-R", "postgres:"])
                    .arg(pg.dir.path())
                    .status()
                    .unwrap()
                    .success()
            );
        }
        let data = pg.data();
        pg.run_server_tool(
            "initdb",
            &[
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "-D",
                data.to_str().unwrap(),
            ],
        );
        pg.pg_ctl("start", "");
        pg
    }

    /// `pg_ctl start` or `restart` with the options every server here runs with, and
    /// `settings` (`-c name=value ...`) added.
    pub(crate) fn pg_ctl(&self, action: &str, settings: &str) {
        let data = self.data();
        // Every statement in the log: what an operator's `log_statement = all` would show.
        let options = format!(
            "-k {} -c listen_addresses='' -c log_statement=all {settings}",
            data.display()
        );
        self.run_server_tool(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "-l",
                data.join("log").to_str().unwrap(),
                action,
            ],
        );
    }

    /// A server whose admin is what managed PostgreSQL (RDS, Cloud SQL, Azure) hands out:
    /// no superuser, CREATEDB and CREATEROLE, owner of `postgres` and `template1` (as the
    /// README asks of it), and nothing else.
    pub(crate) fn start_managed() -> Self {
        let mut pg = Self::start();
        pg.query(
            "postgres",
            "CREATE ROLE admin LOGIN CREATEDB CREATEROLE; \
             ALTER DATABASE postgres OWNER TO admin; ALTER DATABASE template1 OWNER TO admin",
        );
        pg.admin = "admin";
        pg
    }

    pub(crate) fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn run_server_tool(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let output = if self.as_root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&program)
                .args(args)
                .output()
        } else {
            Command::new(&program).args(args).output()
        }
        .unwrap();
        assert!(
            output.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The connection as libpq reads it from the environment.
    pub(crate) fn env(&self, user: &str, database: &str) -> Vec<(String, String)> {
        [
            ("PGHOST", self.data().display().to_string()),
            ("PGUSER", user.into()),
            ("PGDATABASE", database.into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// psql connected as `user` to `database`, with `env` added.
    pub(crate) fn psql(&self, user: &str, database: &str, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(self.bin.join("psql"));
        command
            .env_clear()
            .envs(self.env(user, database))
            .envs(env.iter().copied())
            .args(["-X", "-q"]);
        command
    }

    pub(crate) fn query(&self, database: &str, sql: &str) -> String {
        let output = self
            .psql("postgres", database, &[])
            .args(["-tA", "-v", "ON_ERROR_STOP=1", "-c", sql])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The create or drop Job's command, as the chart runs it, with the role's verifier as
    /// previewd makes it for `password`.
    pub(crate) fn provision(&self, phase: &str, name: &str, password: &str) -> Output {
        let verifier = previewd::secrets::scram_verifier(password, b"0123456789abcdef");
        self.provision_with(phase, name, &[("PREVIEW_VERIFIER", &verifier)])
    }

    pub(crate) fn provision_with(&self, phase: &str, name: &str, env: &[(&str, &str)]) -> Output {
        self.psql(self.admin, "postgres", env)
            .args([
                "-v",
                &format!("role={name}"),
                "-v",
                &format!("db={name}"),
                "-f",
            ])
            .arg(chart_file(&format!("{phase}.sql")))
            .output()
            .unwrap()
    }

    /// The seed Job's script, as the chart runs it, as the preview's own role.
    pub(crate) fn seed(&self, name: &str, files: &Path, generation: u32) -> Output {
        let tmp = tempfile::tempdir().unwrap();
        Command::new("sh")
            .arg(chart_file("seed.sh"))
            .env_clear()
            .envs(self.env(name, name))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("PREVIEWD_SEED_GENERATION", generation.to_string())
            .env("TMPDIR", tmp.path())
            .env("SEED_DIR", files)
            .env("SEED_RUNNER", chart_file("seed.sql"))
            .output()
            .unwrap()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = std::panic::catch_unwind(|| {
            self.run_server_tool(
                "pg_ctl",
                &["-D", data.to_str().unwrap(), "-m", "immediate", "stop"],
            )
        });
    }
}

pub(crate) fn chart_file(name: &str) -> PathBuf {
    PathBuf::from(format!("{ROOT}/helpers-chart/files/{name}"))
}

pub(crate) const PASSWORD: &str = "correct-horse-battery-staple";

impl Postgres {
    /// The create Job run for `name` with `PASSWORD`, which must succeed.
    pub(crate) fn create(&self, name: &str, what: &str) -> String {
        ok(&self.provision("create", name, PASSWORD), what)
    }

    /// How many roles are called `name`: "0" or "1".
    pub(crate) fn roles_named(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT count(*) FROM pg_roles WHERE rolname = '{name}'"),
        )
    }

    /// How many databases are called `name`: "0" or "1".
    pub(crate) fn databases_named(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'"),
        )
    }

    /// What the server stores as role `name`'s password.
    pub(crate) fn stored_password(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{name}'"),
        )
    }

    /// Whether `role` (or `public`) holds CONNECT on `database`: "t" or "f".
    pub(crate) fn may_connect(&self, role: &str, database: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT has_database_privilege('{role}', '{database}', 'CONNECT')"),
        )
    }
}
