//! The chart's SQL against a real PostgreSQL server (started here with initdb + pg_ctl):
//! provisioning and seeding are idempotent, previews are isolated from each other and from
//! the server's own databases, no password reaches the server, and the drop works with
//! sessions open.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A throwaway PostgreSQL listening only on a Unix socket in its own directory.
struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    as_root: bool,
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
    fn start() -> Self {
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
        // Every statement in the log: what an operator's `log_statement = all` would show.
        let options = format!(
            "-k {} -c listen_addresses='' -c log_statement=all",
            data.display()
        );
        pg.run_server_tool(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-o",
                &options,
                "-w",
                "-l",
                data.join("log").to_str().unwrap(),
                "start",
            ],
        );
        pg
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn run_server_tool(&self, tool: &str, args: &[&str]) {
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
    fn env(&self, user: &str, database: &str) -> Vec<(String, String)> {
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
    fn psql(&self, user: &str, database: &str, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(self.bin.join("psql"));
        command
            .env_clear()
            .envs(self.env(user, database))
            .envs(env.iter().copied())
            .args(["-X", "-q"]);
        command
    }

    fn query(&self, database: &str, sql: &str) -> String {
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
    fn provision(&self, phase: &str, name: &str, password: &str) -> Output {
        let verifier = previewd::secrets::scram_verifier(password, b"0123456789abcdef");
        self.provision_with(phase, name, &[("PREVIEW_VERIFIER", &verifier)])
    }

    fn provision_with(&self, phase: &str, name: &str, env: &[(&str, &str)]) -> Output {
        self.psql("postgres", "postgres", env)
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
    fn seed(&self, name: &str, files: &Path, generation: u32) -> Output {
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

fn chart_file(name: &str) -> PathBuf {
    PathBuf::from(format!("{ROOT}/helpers-chart/files/{name}"))
}

fn ok(output: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{what} failed: {text}");
    text
}

/// `output`'s stderr, which a failure must have been.
fn failed(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "succeeded: {text}");
    text
}

/// Waits up to 20 s for `ready`, failing the test with `what` if it never is.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

const PASSWORD: &str = "correct-horse-battery-staple";

impl Postgres {
    /// The create Job run for `name` with `PASSWORD`, which must succeed.
    fn create(&self, name: &str, what: &str) -> String {
        ok(&self.provision("create", name, PASSWORD), what)
    }

    /// How many roles are called `name`: "0" or "1".
    fn roles_named(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT count(*) FROM pg_roles WHERE rolname = '{name}'"),
        )
    }

    /// How many databases are called `name`: "0" or "1".
    fn databases_named(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'"),
        )
    }

    /// What the server stores as role `name`'s password.
    fn stored_password(&self, name: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{name}'"),
        )
    }

    /// Whether `role` (or `public`) holds CONNECT on `database`: "t" or "f".
    fn may_connect(&self, role: &str, database: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT has_database_privilege('{role}', '{database}', 'CONNECT')"),
        )
    }
}

#[test]
fn provisioning_twice_creates_the_role_and_database_once() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_7", "first create");
    pg.create("octo_app_pr_7", "second create");
    assert_eq!(pg.roles_named("octo_app_pr_7"), "1");
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'octo_app_pr_7'"
        ),
        "octo_app_pr_7"
    );
    assert_eq!(pg.query("postgres", "SELECT rolcanlogin AND rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'octo_app_pr_7'"), "t");
    // Other roles may not connect: PUBLIC's CONNECT is revoked.
    assert_eq!(pg.may_connect("public", "octo_app_pr_7"), "f");
}

#[test]
fn provisioning_refuses_a_new_role_without_a_well_formed_verifier_and_creates_nothing() {
    let pg = Postgres::start();
    // A password where the verifier belongs would be hashed and stored as the password.
    let password = pg.provision_with("create", "octo_app_pr_8", &[("PREVIEW_VERIFIER", PASSWORD)]);
    assert!(!password.status.success());
    let missing = failed(&pg.provision_with("create", "octo_app_pr_8", &[]));
    assert!(
        missing.contains("no PREVIEW_VERIFIER for the new role octo_app_pr_8"),
        "{missing}"
    );
    assert_eq!(pg.roles_named("octo_app_pr_8"), "0");
}

/// A Secret sealed by an older previewd holds only PASSWORD, which the Job no longer reads:
/// the role made then keeps the password it has, and the sync goes on.
#[test]
fn a_role_provisioned_before_verifiers_keeps_its_password() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_13", "first create");
    let before = pg.stored_password("octo_app_pr_13");
    ok(
        &pg.provision_with("create", "octo_app_pr_13", &[]),
        "create without a verifier",
    );
    assert_eq!(pg.stored_password("octo_app_pr_13"), before);
}

/// The Job sends only the verifier, which PostgreSQL stores as it is; the role then logs
/// in with the password through SCRAM, and the server's log, every statement in it, never
/// shows the password.
#[test]
fn the_password_never_reaches_the_server_yet_the_role_logs_in_with_it() {
    let pg = Postgres::start();
    let verifier = previewd::secrets::scram_verifier(PASSWORD, b"0123456789abcdef");
    pg.create("octo_app_pr_14", "create");
    pg.create("octo_app_pr_14", "create again");
    assert_eq!(pg.stored_password("octo_app_pr_14"), verifier);

    // This role, and only it, must prove its password (the suite trusts everyone else).
    let hba = pg.data().join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(
        &hba,
        format!("local all octo_app_pr_14 scram-sha-256\n{rules}"),
    )
    .unwrap();
    pg.query("postgres", "SELECT pg_reload_conf()");
    let login = |password: &str| {
        pg.psql(
            "octo_app_pr_14",
            "octo_app_pr_14",
            &[("PGPASSWORD", password)],
        )
        .args(["-w", "-c", "SELECT 1"])
        .output()
        .unwrap()
    };
    wait_for("pg_hba.conf was not reloaded", || {
        !login("not-the-password").status.success()
    });
    ok(&login(PASSWORD), "login with the password");

    let log = std::fs::read_to_string(pg.data().join("log")).unwrap();
    assert!(log.contains("CREATE ROLE"), "statements are logged: {log}");
    assert!(!log.contains(PASSWORD), "{log}");
}

fn connects(pg: &Postgres, role: &str, database: &str) -> Result<(), String> {
    let output = pg
        .psql(role, database, &[])
        .args(["-c", "SELECT 1"])
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn a_preview_role_connects_to_its_own_database_and_no_other() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_15", "create");
    ok(
        &pg.provision("create", "octo_app_pr_16", "another-long-password"),
        "create",
    );
    pg.create("octo_app_pr_15", "create again");
    assert_eq!(connects(&pg, "octo_app_pr_15", "octo_app_pr_15"), Ok(()));
    for database in ["postgres", "template1", "octo_app_pr_16"] {
        let refused = connects(&pg, "octo_app_pr_15", database).unwrap_err();
        assert!(
            refused.contains(&format!("permission denied for database \"{database}\"")),
            "{database}: {refused}"
        );
    }
    // The admin, a superuser here, still connects everywhere.
    assert_eq!(connects(&pg, "postgres", "template1"), Ok(()));
}

/// Another database left open to every role would be open to every preview: provisioning
/// stops, saying which one, before it creates anything.
#[test]
fn provisioning_is_refused_while_another_database_is_open_to_every_role() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE DATABASE billing");
    let text = failed(&pg.provision("create", "octo_app_pr_17", PASSWORD));
    assert!(
        text.contains("every role may connect to database(s) billing"),
        "{text}"
    );
    assert_eq!(pg.roles_named("octo_app_pr_17"), "0");
    pg.query("postgres", "REVOKE CONNECT ON DATABASE billing FROM PUBLIC");
    pg.create("octo_app_pr_17", "create");
}

/// What is in template1 (an extension, a table someone added) stays out of previews.
#[test]
fn preview_databases_are_created_from_template0() {
    let pg = Postgres::start();
    pg.query("template1", "CREATE TABLE planted (secret text)");
    pg.create("octo_app_pr_18", "create");
    assert_eq!(
        pg.query(
            "octo_app_pr_18",
            "SELECT count(*) FROM pg_tables WHERE tablename = 'planted'"
        ),
        "0"
    );
}

#[test]
fn seeding_twice_adds_no_rows_and_a_reseed_restores_them() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_9", "create");
    let files = PathBuf::from(format!("{ROOT}/seeds/example"));
    let first = ok(&pg.seed("octo_app_pr_9", &files, 1), "first seed");
    assert!(first.contains("seeded generation 1"), "{first}");
    let second = ok(&pg.seed("octo_app_pr_9", &files, 1), "second seed");
    assert!(second.contains("already seeded"), "{second}");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "3"
    );
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM previewd_seed"),
        "1"
    );

    // A reviewer deletes a row; the next sync does not bring it back, a reseed does.
    pg.query("octo_app_pr_9", "DELETE FROM example_users WHERE id = 2");
    ok(&pg.seed("octo_app_pr_9", &files, 1), "seed after delete");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "2"
    );
    ok(&pg.seed("octo_app_pr_9", &files, 2), "reseed");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "3"
    );
    assert_eq!(
        pg.query(
            "octo_app_pr_9",
            "SELECT string_agg(generation::text, ',' ORDER BY generation) FROM previewd_seed"
        ),
        "1,2"
    );
}

#[test]
fn a_failed_seed_leaves_nothing_behind_and_is_retried() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_10", "create");
    let files = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path().join("001-table.sql"),
        "CREATE TABLE t (id int PRIMARY KEY);\nINSERT INTO t VALUES (1);\n",
    )
    .unwrap();
    std::fs::write(
        files.path().join("002-broken.sql"),
        "INSERT INTO missing_table VALUES (1);\n",
    )
    .unwrap();
    assert!(!pg.seed("octo_app_pr_10", files.path(), 1).status.success());
    assert_eq!(
        pg.query(
            "octo_app_pr_10",
            "SELECT count(*) FROM pg_tables WHERE tablename = 't'"
        ),
        "0"
    );
    assert_eq!(
        pg.query("octo_app_pr_10", "SELECT count(*) FROM previewd_seed"),
        "0"
    );
    std::fs::write(
        files.path().join("002-broken.sql"),
        "INSERT INTO t VALUES (2) ON CONFLICT DO NOTHING;\n",
    )
    .unwrap();
    ok(&pg.seed("octo_app_pr_10", files.path(), 1), "fixed seed");
    assert_eq!(pg.query("octo_app_pr_10", "SELECT count(*) FROM t"), "2");
}

#[test]
fn dropping_with_sessions_open_removes_the_database_and_the_role() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_11", "create");
    let mut sessions: Vec<Child> = (0..2)
        .map(|_| {
            pg.psql("octo_app_pr_11", "octo_app_pr_11", &[])
                .args(["-c", "SELECT pg_sleep(120)"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    wait_for("sessions did not connect", || {
        pg.query(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE datname = 'octo_app_pr_11'",
        ) == "2"
    });
    ok(&pg.provision("drop", "octo_app_pr_11", PASSWORD), "drop");
    assert_eq!(pg.databases_named("octo_app_pr_11"), "0");
    assert_eq!(pg.roles_named("octo_app_pr_11"), "0");
    for session in &mut sessions {
        assert!(
            !session.wait().unwrap().success(),
            "open sessions are terminated"
        );
    }
    ok(
        &pg.provision("drop", "octo_app_pr_11", PASSWORD),
        "dropping again is a no-op",
    );
}

impl Postgres {
    /// The cnpg mode's wait hook (`files/database-ready.sh`, run by `sh -c` as the chart
    /// does), as the preview's own role.
    fn database_ready(&self, name: &str, wait_seconds: u32) -> Output {
        let script = std::fs::read_to_string(chart_file("database-ready.sh")).unwrap();
        Command::new("sh")
            .args(["-c", &script])
            .env_clear()
            .envs(self.env(name, name))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("WAIT_SECONDS", wait_seconds.to_string())
            .output()
            .unwrap()
    }
}

/// CloudNativePG's `Database` leaves CONNECT to PUBLIC (cloudnative-pg grants or revokes
/// nothing on the database itself); the chart's wait hook, as the owning role, revokes it.
#[test]
fn the_cnpg_wait_hook_closes_the_database_to_other_roles() {
    let pg = Postgres::start();
    // What CloudNativePG makes: a login role, and a database it owns.
    pg.query("postgres", "CREATE ROLE octo_app_pr_9 LOGIN");
    pg.query(
        "postgres",
        "CREATE DATABASE octo_app_pr_9 OWNER octo_app_pr_9",
    );
    assert_eq!(
        pg.may_connect("public", "octo_app_pr_9"),
        "t",
        "PostgreSQL's default, which CloudNativePG keeps"
    );
    ok(&pg.database_ready("octo_app_pr_9", 30), "the wait hook");
    ok(
        &pg.database_ready("octo_app_pr_9", 30),
        "the wait hook, again",
    );
    assert_eq!(pg.may_connect("public", "octo_app_pr_9"), "f");
    assert_eq!(
        pg.may_connect("octo_app_pr_9", "octo_app_pr_9"),
        "t",
        "the owner keeps its own"
    );
}

/// Until CloudNativePG has made the database the hook waits; past its bound it fails,
/// saying why, so the sync fails visibly instead of the migration exhausting its tries.
#[test]
fn the_cnpg_wait_hook_fails_clearly_when_the_database_never_comes() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE ROLE octo_app_pr_10 LOGIN");
    let started = std::time::Instant::now();
    let text = failed(&pg.database_ready("octo_app_pr_10", 2));
    assert!(
        text.contains("did not accept the preview's role within 2 s"),
        "{text}"
    );
    assert!(
        text.contains("octo_app_pr_10"),
        "psql's own reason follows: {text}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
}

/// psql older than 15 has no `\getenv`; the create script says so before anything else
/// (here an older psql is played by overriding its VERSION_NUM variable).
#[test]
fn provisioning_with_an_old_psql_is_refused_saying_why() {
    let pg = Postgres::start();
    let output = pg
        .psql(
            "postgres",
            "postgres",
            &[("PREVIEW_VERIFIER", "SCRAM-SHA-256$4096:c2FsdA==$a2V5:a2V5")],
        )
        .args([
            "-v",
            "VERSION_NUM=140011",
            "-v",
            "role=octo_app_pr_12",
            "-v",
            "db=octo_app_pr_12",
            "-f",
        ])
        .arg(chart_file("create.sql"))
        .output()
        .unwrap();
    let text = failed(&output);
    assert!(text.contains("previewd needs psql 15 or newer"), "{text}");
    assert_eq!(pg.roles_named("octo_app_pr_12"), "0");
}
