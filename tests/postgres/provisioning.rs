//! The create and drop Jobs' SQL: idempotent, a role only with a well-formed SCRAM
//! verifier, no password sent to the server, a clear refusal from an old psql, and the drop
//! with sessions open.

use super::*;
use std::process::{Child, Stdio};

/// Waits up to 20 s for `ready`, failing the test with `what` if it never is.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
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
        pg.admin,
        "the admin's, never the role's (access.sql)"
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
