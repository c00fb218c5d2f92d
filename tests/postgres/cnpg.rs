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

impl Postgres {
    /// A cnpg-mode superuser Job of a template-building release or a clone:
    /// `files/superuser-psql.sh` run as the chart does (waiting for `role`), as the superuser.
    fn superuser_job(&self, role: &str, wait_seconds: u32, args: &[&str]) -> Output {
        Command::new("sh")
            .arg(chart_file("superuser-psql.sh"))
            .args(args)
            .env_clear()
            .envs(self.env("postgres", "postgres"))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("ROLE", role)
            .env("WAIT_SECONDS", wait_seconds.to_string())
            .output()
            .unwrap()
    }

    fn superuser_sql(&self, role: &str, file: &str, vars: &[(&str, &str)]) -> Output {
        let vars: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let path = chart_file(file);
        let mut args: Vec<&str> = Vec::new();
        for var in &vars {
            args.extend(["-v", var]);
        }
        args.extend(["-f", path.to_str().unwrap()]);
        self.superuser_job(role, 30, &args)
    }
}

/// The cnpg mode's Jobs, with what CloudNativePG makes from the chart's DatabaseRole and
/// Database objects made by hand here: a generation built in a database the superuser owns,
/// sealed, cloned (also over the empty database CloudNativePG may have made first), recloned
/// on a new clone generation, and dropped with its role while the clone lives.
#[test]
fn the_cnpg_jobs_build_seal_clone_and_drop_a_generation_cloudnative_pg_declared() {
    let pg = Postgres::start();
    let g = "pv_octo_app_4d960c3af87af320_tpl_3";
    // The generation's DatabaseRole and Database (owner: the superuser).
    pg.query("postgres", &format!("CREATE ROLE {g} LOGIN"));
    pg.query("postgres", &format!("CREATE DATABASE {g} OWNER postgres"));
    let build = [("role", g), ("db", g), ("managed_role", "1")];
    ok(
        &pg.superuser_sql(g, "template-create.sql", &build),
        "the create Job",
    );
    ok(
        &pg.superuser_sql(g, "template-create.sql", &build),
        "the create Job again",
    );
    assert_eq!(pg.may_connect("public", g), "f", "closed to other roles");
    // The migrations and the seed, as the generation's role.
    let migrate = pg
        .psql(g, g, &[])
        .args([
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            "CREATE TABLE items (id int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 25);",
        ])
        .output()
        .unwrap();
    ok(&migrate, "migrations and seed");
    ok(
        &pg.superuser_sql(g, "template-seal.sql", &[("role", g), ("db", g)]),
        "the seal Job",
    );
    assert_eq!(
        pg.query(
            "postgres",
            &format!("SELECT datistemplate, datallowconn FROM pg_database WHERE datname = '{g}'")
        ),
        "t|f"
    );
    // PR 7's DatabaseRole; CloudNativePG got to its Database before the clone Job did.
    pg.query("postgres", "CREATE ROLE octo_app_pr_7 LOGIN");
    pg.query(
        "postgres",
        "CREATE DATABASE octo_app_pr_7 OWNER octo_app_pr_7",
    );
    let clone = |n: &str| {
        pg.superuser_sql(
            "octo_app_pr_7",
            "template-clone.sql",
            &[
                ("role", "octo_app_pr_7"),
                ("db", "octo_app_pr_7"),
                ("template", g),
                ("template_role", g),
                ("clone", n),
            ],
        )
    };
    ok(&clone("1"), "the clone Job");
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*), pg_get_userbyid(relowner) FROM items, pg_class WHERE relname = 'items' GROUP BY 2"),
        "25|octo_app_pr_7"
    );
    assert_eq!(pg.may_connect("public", "octo_app_pr_7"), "f");
    pg.query("octo_app_pr_7", "DELETE FROM items WHERE id > 5");
    ok(&clone("1"), "the clone Job on the next sync");
    assert_eq!(pg.query("octo_app_pr_7", "SELECT count(*) FROM items"), "5");
    ok(&clone("2"), "a reseed");
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "25"
    );
    // Teardown of the build release: the drop Job, after CloudNativePG let go of both.
    let drop = pg
        .psql("postgres", "postgres", &[])
        .args(["-v", &format!("role={g}"), "-v", &format!("db={g}"), "-f"])
        .arg(chart_file("template-drop.sql"))
        .output()
        .unwrap();
    ok(&drop, "the drop Job");
    assert_eq!(pg.databases_named(g), "0");
    assert_eq!(pg.roles_named(g), "0");
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "25"
    );
}

/// The superuser Jobs wait for the role CloudNativePG makes, and fail saying so.
#[test]
fn the_cnpg_superuser_jobs_fail_clearly_when_the_role_never_comes() {
    let pg = Postgres::start();
    let text = failed(&pg.superuser_job("octo_app_pr_11", 2, &["-c", "SELECT 1"]));
    assert!(
        text.contains("role octo_app_pr_11 did not appear within 2 s"),
        "{text}"
    );
}
