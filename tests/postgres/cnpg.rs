//! The cnpg mode's wait hook: it closes the database CloudNativePG made to other roles, and
//! fails clearly when the database never comes.

use super::*;

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
