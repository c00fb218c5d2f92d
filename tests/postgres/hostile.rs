//! What the attack tests share (tenancy.rs, attacks.rs, attacks2.rs): both kinds of admin,
//! a hostile preview's background session, chart Jobs that must end within a bound (as a
//! Job's activeDeadlineSeconds ends them), and the report of what failed.

use super::*;
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Both kinds of admin the README allows, each on a server of its own.
pub(crate) fn both_admins() -> [Postgres; 2] {
    [Postgres::start(), Postgres::start_managed()]
}

pub(crate) const ATTACKER: &str = "octo_app_pr_1";
pub(crate) const VICTIM: &str = "octo_app_pr_2";

/// The server restarted with `settings` added to the options the harness starts it with.
pub(crate) fn restart_with(pg: &Postgres, settings: &str) {
    pg.pg_ctl("restart", settings);
}

/// `sql` (a psql script) run as `role` in `db` in the background: the hostile app's session.
/// Its output goes to `log`.
pub(crate) fn spawn_as(pg: &Postgres, role: &str, db: &str, sql: &str, log: &Path) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let err = out.try_clone().unwrap();
    let mut child = pg
        .psql(role, db, &[])
        .args(["-v", "ON_ERROR_STOP=1", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    child
}

pub(crate) fn wait_until(pg: &Postgres, condition: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while pg.query("postgres", &format!("SELECT ({condition})::text")) != "true" {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn wait_for_session(pg: &Postgres, role: &str, text: &str) {
    wait_until(
        pg,
        &format!(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE usename = '{role}' AND state = 'active' AND query LIKE '%{text}%'"
        ),
        &format!("{role}'s session running {text}"),
    );
}

/// A chart Job that must succeed within `limit` (else it is killed, as activeDeadlineSeconds
/// would).
pub(crate) fn job_within(
    pg: &Postgres,
    file: &str,
    vars: &[(&str, &str)],
    limit: Duration,
) -> Result<String, String> {
    let verifier = previewd::secrets::scram_verifier(PASSWORD, b"0123456789abcdef");
    let mut command = pg.psql(pg.admin, "postgres", &[("PREVIEW_VERIFIER", &verifier)]);
    for (name, value) in vars {
        command.args(["-v", &format!("{name}={value}")]);
    }
    let mut child = command
        .arg("-f")
        .arg(chart_file(file))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            let output = child.wait_with_output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            return if output.status.success() {
                Ok(text)
            } else {
                Err(format!(
                    "{file} failed after {:?} (admin {}): {}",
                    started.elapsed(),
                    pg.admin,
                    last_error(&text)
                ))
            };
        }
        if started.elapsed() > limit {
            let waiting = pg.query(
                "postgres",
                &format!(
                    "SELECT coalesce(string_agg(a.wait_event || ': ' || left(regexp_replace(a.query, '\\s+', ' ', 'g'), 200), '; '), 'nothing') FROM pg_stat_activity a \
                     WHERE a.usename = '{}' AND a.wait_event_type = 'Lock' AND a.pid <> pg_backend_pid()",
                    pg.admin
                ),
            );
            let _ = child.kill();
            let _ = child.wait_with_output();
            return Err(format!(
                "{file} still running after {limit:?} (admin {}), killed; waiting on a lock: {waiting}",
                pg.admin
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn drop_within(pg: &Postgres, name: &str, limit: Duration) -> Result<String, String> {
    job_within(pg, "drop.sql", &[("role", name), ("db", name)], limit)
}

pub(crate) fn attacker(pg: &Postgres) {
    pg.create(ATTACKER, "the attacker's preview");
    ok(
        &pg.run_as(ATTACKER, ATTACKER, "CREATE TABLE bait (x int);"),
        "the attacker's migrations",
    );
}

pub(crate) fn last_error(why: &str) -> String {
    why.lines()
        .filter(|l| {
            l.contains("ERROR")
                || l.contains("FATAL")
                || l.contains("error:")
                || l.contains("DETAIL")
                || l.contains("failed after")
                || l.contains("still running")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Ends every other client session on the test server (the attacker's, and the backends of
/// Jobs killed while they waited), so the next step starts clean.
pub(crate) fn end_sessions(pg: &Postgres) {
    pg.query(
        "postgres",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
    );
    std::thread::sleep(Duration::from_millis(200));
}

pub(crate) fn none(failures: Vec<String>) {
    assert!(failures.is_empty(), "\n{}", failures.join("\n---\n"));
}
