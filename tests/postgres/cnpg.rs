//! The cnpg mode's superuser Jobs, with what CloudNativePG makes from the chart's
//! DatabaseRole and Database made by hand here: they wait for both, set the database's
//! privileges (owned by the superuser, as the Database says), build, seal, clone and drop
//! generations, and tear a preview down with its app connected, where CloudNativePG's own
//! DROP DATABASE would fail.

use super::*;

impl Postgres {
    /// A cnpg-mode superuser Job of a template-building release or a clone:
    /// `files/superuser-psql.sh` run as the chart does (waiting for `role`), as the superuser.
    fn superuser_job(&self, role: &str, wait_seconds: u32, args: &[&str]) -> Output {
        self.superuser_job_for(role, None, wait_seconds, args)
    }

    /// As `superuser_job`, also waiting for `database` when given (the access Job).
    fn superuser_job_for(
        &self,
        role: &str,
        database: Option<&str>,
        wait_seconds: u32,
        args: &[&str],
    ) -> Output {
        let mut command = Command::new("sh");
        command
            .arg(chart_file("superuser-psql.sh"))
            .args(args)
            .env_clear()
            .envs(self.env("postgres", "postgres"))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("ROLE", role)
            .env("WAIT_SECONDS", wait_seconds.to_string());
        if let Some(database) = database {
            command.env("DATABASE", database);
        }
        command.output().unwrap()
    }

    /// A plain preview's access Job, as the chart runs it.
    fn access_job(&self, name: &str, wait_seconds: u32) -> Output {
        let (role, db, file) = (
            format!("role={name}"),
            format!("db={name}"),
            chart_file("access.sql"),
        );
        self.superuser_job_for(
            name,
            Some(name),
            wait_seconds,
            &["-v", &role, "-v", &db, "-f", file.to_str().unwrap()],
        )
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
    pg.query("postgres", "CREATE DATABASE octo_app_pr_7 OWNER postgres");
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

/// CloudNativePG's `Database` leaves CONNECT to PUBLIC and grants the role nothing
/// (cloudnative-pg grants or revokes nothing on the database itself): the access Job closes
/// it to every other role and opens it to the preview's, whose migrations then make tables.
#[test]
fn the_cnpg_access_job_closes_the_database_to_other_roles_and_opens_it_to_the_preview() {
    let pg = Postgres::start();
    // What CloudNativePG makes: a login role, and the database the superuser owns.
    pg.query("postgres", "CREATE ROLE octo_app_pr_9 LOGIN");
    pg.query("postgres", "CREATE DATABASE octo_app_pr_9 OWNER postgres");
    assert_eq!(
        pg.may_connect("public", "octo_app_pr_9"),
        "t",
        "PostgreSQL's default, which CloudNativePG keeps"
    );
    ok(&pg.access_job("octo_app_pr_9", 30), "the access Job");
    ok(&pg.access_job("octo_app_pr_9", 30), "the access Job, again");
    assert_eq!(pg.may_connect("public", "octo_app_pr_9"), "f");
    ok(
        &pg.run_as(
            "octo_app_pr_9",
            "octo_app_pr_9",
            "CREATE TABLE items (id int); CREATE SCHEMA app;",
        ),
        "the migrations",
    );
}

/// A preview an older previewd made in cnpg mode: its Database named the role as owner, and
/// its code may have opened it to every role and marked it a template. The next sync's
/// access Job takes it over (the Database now names the superuser), and the drop Job drops
/// it with the app connected.
#[test]
fn the_cnpg_access_job_takes_over_a_database_an_older_previewd_gave_the_role() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE ROLE octo_app_pr_12 LOGIN");
    pg.query(
        "postgres",
        "CREATE DATABASE octo_app_pr_12 OWNER octo_app_pr_12",
    );
    ok(
        &pg.run_as(
            "octo_app_pr_12",
            "octo_app_pr_12",
            "GRANT ALL ON DATABASE octo_app_pr_12 TO PUBLIC; ALTER DATABASE octo_app_pr_12 IS_TEMPLATE true;",
        ),
        "the old layout's owner opens and marks it",
    );
    ok(&pg.access_job("octo_app_pr_12", 30), "the access Job");
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT pg_get_userbyid(datdba), datistemplate FROM pg_database WHERE datname = 'octo_app_pr_12'"
        ),
        "postgres|f"
    );
    assert_eq!(pg.may_connect("public", "octo_app_pr_12"), "f");
    let refused = failed(&pg.run_as(
        "octo_app_pr_12",
        "octo_app_pr_12",
        "ALTER DATABASE octo_app_pr_12 IS_TEMPLATE true",
    ));
    assert!(refused.contains("must be owner of database"), "{refused}");
}

/// CloudNativePG's reclaim is a plain `DROP DATABASE IF EXISTS` (database_controller_sql.go
/// dropDatabase), which fails while the app is connected, retried for ever; the chart
/// retains the Database and its drop Job (drop.sql, as the superuser) ends the sessions.
#[test]
fn the_cnpg_drop_job_tears_a_preview_down_with_its_app_connected() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE ROLE octo_app_pr_13 LOGIN");
    pg.query("postgres", "CREATE DATABASE octo_app_pr_13 OWNER postgres");
    ok(&pg.access_job("octo_app_pr_13", 30), "the access Job");
    let mut app = pg.hold_connection("octo_app_pr_13", "octo_app_pr_13");
    let cnpg = pg
        .psql("postgres", "postgres", &[])
        .args(["-c", "DROP DATABASE IF EXISTS octo_app_pr_13"])
        .output()
        .unwrap();
    assert!(
        failed(&cnpg).contains("is being accessed by other users"),
        "CloudNativePG's own drop"
    );
    ok(
        &pg.provision("drop", "octo_app_pr_13", PASSWORD),
        "the drop Job",
    );
    let _ = app.kill();
    let _ = app.wait();
    assert_eq!(pg.databases_named("octo_app_pr_13"), "0");
    assert_eq!(pg.roles_named("octo_app_pr_13"), "0");
}

/// The access Job waits for the database CloudNativePG makes, and fails saying so.
#[test]
fn the_cnpg_access_job_fails_clearly_when_the_database_never_comes() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE ROLE octo_app_pr_10 LOGIN");
    let started = std::time::Instant::now();
    let text = failed(&pg.access_job("octo_app_pr_10", 2));
    assert!(
        text.contains("database octo_app_pr_10 did not appear within 2 s"),
        "{text}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
}
