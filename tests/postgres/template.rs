//! Template databases (#16) as the chart's SQL makes them, on the real server: a template
//! built by its migrations and seed and then sealed, previews cloned from it and owned by
//! their own roles, the PR's own migration applied on top of the history the clone brought,
//! a reclone while the app holds a connection, generations side by side, and teardown.

use super::*;
use std::process::{Child, Stdio};

const TEMPLATE_ROLE: &str = "pvt_octo_app_4d960c3af87af320";

fn generation(n: u32) -> String {
    format!("{TEMPLATE_ROLE}_g{n}")
}

/// A migration tool keeping its history in the database, as Rails, Flyway or sqlx do: each
/// numbered step runs once.
const MIGRATE: &str = r#"
CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY);
SELECT NOT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1) AS run1 \gset
\if :run1
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO schema_migrations VALUES (1);
\endif
"#;

/// What the PR adds: step 2.
const PR_MIGRATION: &str = r#"
SELECT NOT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 2) AS run2 \gset
\if :run2
ALTER TABLE items ADD COLUMN price int NOT NULL DEFAULT 0;
INSERT INTO schema_migrations VALUES (2);
\endif
"#;

impl Postgres {
    /// `sql` (psql script) run as `role` in `db`.
    fn run_as(&self, role: &str, db: &str, sql: &str) -> Output {
        let mut child = self
            .psql(role, db, &[])
            .args(["-v", "ON_ERROR_STOP=1", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(sql.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// A chart file run as the admin with `vars`, the role's verifier in the environment.
    fn chart_sql(&self, file: &str, vars: &[(&str, &str)]) -> Output {
        let verifier = previewd::secrets::scram_verifier(PASSWORD, b"0123456789abcdef");
        let mut command = self.psql("postgres", "postgres", &[("PREVIEW_VERIFIER", &verifier)]);
        for (name, value) in vars {
            command.args(["-v", &format!("{name}={value}")]);
        }
        command.arg("-f").arg(chart_file(file)).output().unwrap()
    }

    /// Generation `n` of the template: created, migrated and seeded as its role, sealed.
    fn build_template(&self, n: u32, rows: u32) {
        let db = generation(n);
        let vars = [("role", TEMPLATE_ROLE), ("db", db.as_str())];
        ok(
            &self.chart_sql("template-create.sql", &vars),
            "template create",
        );
        ok(
            &self.run_as(TEMPLATE_ROLE, &db, MIGRATE),
            "template migrations",
        );
        let seed = format!(
            "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, {rows}) g ON CONFLICT DO NOTHING;"
        );
        ok(&self.run_as(TEMPLATE_ROLE, &db, &seed), "template seed");
        ok(&self.chart_sql("template-seal.sql", &vars), "template seal");
    }

    /// The preview's create Job in template mode: its role, and its database cloned from
    /// generation `n`.
    fn clone_preview(&self, name: &str, n: u32, extra: &[(&str, &str)]) -> Output {
        let template = generation(n);
        let mut vars = vec![
            ("role", name),
            ("db", name),
            ("template", template.as_str()),
            ("template_role", TEMPLATE_ROLE),
        ];
        vars.extend_from_slice(extra);
        self.chart_sql("create.sql", &vars)
    }
}

#[test]
fn a_sealed_template_is_closed_to_every_role_and_marked_a_template() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    let db = generation(1);
    assert_eq!(
        pg.query(
            "postgres",
            &format!("SELECT datistemplate, datallowconn, pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{db}'")
        ),
        "t|f|postgres",
        "owned by the admin, never by the role REASSIGN OWNED moves from"
    );
    pg.create("octo_app_pr_3", "a preview made the usual way");
    let refused = failed(&pg.run_as("octo_app_pr_3", &db, "SELECT 1"));
    assert!(
        refused.contains("not currently accepting connections"),
        "{refused}"
    );
    assert_eq!(pg.may_connect("octo_app_pr_3", &db), "f");
    assert_eq!(
        pg.may_connect(TEMPLATE_ROLE, &db),
        "f",
        "not even its own role, once sealed"
    );
    // Building again changes nothing.
    ok(
        &pg.chart_sql(
            "template-create.sql",
            &[("role", TEMPLATE_ROLE), ("db", &db)],
        ),
        "create again",
    );
    assert_eq!(pg.may_connect(TEMPLATE_ROLE, &db), "f");
}

#[test]
fn a_clone_is_owned_by_its_preview_and_runs_only_the_migration_the_pr_adds() {
    let pg = Postgres::start();
    pg.build_template(1, 1000);
    ok(&pg.clone_preview("octo_app_pr_7", 1, &[]), "clone");
    ok(
        &pg.clone_preview("octo_app_pr_7", 1, &[]),
        "clone again is a no-op",
    );
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "1000",
        "the seed came with the clone"
    );
    assert_eq!(
        pg.query(
            "octo_app_pr_7",
            "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relname IN ('items', 'schema_migrations')"
        ),
        "octo_app_pr_7"
    );
    // The app's migrations, as the preview's role: step 1 is in the history, only 2 runs.
    let migrated = ok(
        &pg.run_as(
            "octo_app_pr_7",
            "octo_app_pr_7",
            &format!("{MIGRATE}{PR_MIGRATION}"),
        ),
        "the PR's migrations",
    );
    assert!(!migrated.contains("ERROR"), "{migrated}");
    assert_eq!(
        pg.query(
            "octo_app_pr_7",
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations"
        ),
        "1,2"
    );
    assert_eq!(
        pg.query(
            "octo_app_pr_7",
            "SELECT count(*) FROM items WHERE price = 0"
        ),
        "1000"
    );
    // Other previews' roles cannot reach it, nor the template's role.
    pg.create("octo_app_pr_8", "another preview");
    assert_eq!(pg.may_connect("octo_app_pr_8", "octo_app_pr_7"), "f");
    assert_eq!(pg.may_connect(TEMPLATE_ROLE, "octo_app_pr_7"), "f");
    // The template is untouched by what the clone did.
    assert_eq!(
        pg.query(
            "postgres",
            &format!(
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = '{}'",
                generation(1)
            )
        ),
        "postgres"
    );
}

#[test]
fn a_reclone_restores_the_data_while_the_app_holds_a_connection() {
    let pg = Postgres::start();
    pg.build_template(1, 50);
    ok(&pg.clone_preview("octo_app_pr_5", 1, &[]), "clone");
    pg.query("octo_app_pr_5", "DELETE FROM items WHERE id > 10");
    let mut app: Child = pg
        .psql("octo_app_pr_5", "octo_app_pr_5", &[])
        .args(["-c", "SELECT pg_sleep(120)"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pg.query(
        "postgres",
        "SELECT count(*) FROM pg_stat_activity WHERE datname = 'octo_app_pr_5'",
    ) != "1"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the app did not connect"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    ok(
        &pg.clone_preview("octo_app_pr_5", 1, &[("reclone", "1")]),
        "reclone",
    );
    assert_eq!(
        pg.query("octo_app_pr_5", "SELECT count(*) FROM items"),
        "50"
    );
    assert!(
        !app.wait().unwrap().success(),
        "the app's session was closed"
    );
}

#[test]
fn a_new_generation_is_built_beside_the_old_while_its_clones_live() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(
        &pg.clone_preview("octo_app_pr_1", 1, &[]),
        "clone of generation 1",
    );
    pg.build_template(2, 20);
    ok(
        &pg.clone_preview("octo_app_pr_2", 2, &[]),
        "clone of generation 2",
    );
    assert_eq!(
        pg.query("octo_app_pr_1", "SELECT count(*) FROM items"),
        "10"
    );
    assert_eq!(
        pg.query("octo_app_pr_2", "SELECT count(*) FROM items"),
        "20"
    );
    // Generation 1 goes once no preview needs it; its clone lives on.
    let g1 = generation(1);
    ok(
        &pg.chart_sql("template-drop.sql", &[("role", TEMPLATE_ROLE), ("db", &g1)]),
        "drop generation 1",
    );
    assert_eq!(pg.databases_named(&g1), "0");
    assert_eq!(
        pg.query("octo_app_pr_1", "SELECT count(*) FROM items"),
        "10"
    );
    assert_eq!(
        pg.roles_named(TEMPLATE_ROLE),
        "1",
        "generation 2 still needs its role"
    );
    let g2 = generation(2);
    ok(
        &pg.chart_sql(
            "template-drop.sql",
            &[("role", TEMPLATE_ROLE), ("db", &g2), ("drop_role", "1")],
        ),
        "drop the last generation",
    );
    assert_eq!(pg.roles_named(TEMPLATE_ROLE), "0");
}

#[test]
fn a_previews_teardown_drops_its_clone_and_not_the_template() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_4", 1, &[]), "clone");
    ok(&pg.provision("drop", "octo_app_pr_4", PASSWORD), "teardown");
    assert_eq!(pg.databases_named("octo_app_pr_4"), "0");
    assert_eq!(
        pg.roles_named("octo_app_pr_4"),
        "0",
        "its role owned nothing else"
    );
    assert_eq!(pg.databases_named(&generation(1)), "1");
    ok(
        &pg.clone_preview("octo_app_pr_6", 1, &[]),
        "the next preview still clones it",
    );
}

/// The preview's code owns its clone: a function it plants there, shadowing one the
/// scripts call, must never run as the admin when the create Job runs again.
const HIJACK: &str = r#"
CREATE FUNCTION public.format(text, text, text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    EXECUTE 'ALTER ROLE ' || quote_ident(session_user) || ' SUPERUSER';
    EXECUTE 'CREATE ROLE hijacked SUPERUSER';
  END IF;
  RETURN pg_catalog.format($1, $2, $3);
END $f$;
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE sql
  AS $f$ SELECT public.format($1, $2, '') $f$;
"#;

#[test]
fn a_function_the_preview_or_the_template_planted_never_runs_as_the_admin() {
    let pg = Postgres::start();
    // The template's role plants it in a generation still being built, which is built again.
    let g1 = generation(1);
    let vars = [("role", TEMPLATE_ROLE), ("db", g1.as_str())];
    ok(
        &pg.chart_sql("template-create.sql", &vars),
        "template create",
    );
    ok(
        &pg.run_as(TEMPLATE_ROLE, &g1, MIGRATE),
        "template migrations",
    );
    ok(
        &pg.run_as(TEMPLATE_ROLE, &g1, HIJACK),
        "the template's code plants it",
    );
    ok(
        &pg.chart_sql("template-create.sql", &vars),
        "template create again",
    );
    ok(&pg.chart_sql("template-seal.sql", &vars), "template seal");
    ok(&pg.clone_preview("octo_app_pr_2", 1, &[]), "clone");
    // The clone brought them along, now the preview's own; it puts them first for anyone.
    ok(
        &pg.run_as(
            "octo_app_pr_2",
            "octo_app_pr_2",
            "ALTER DATABASE octo_app_pr_2 SET search_path = public, pg_catalog;",
        ),
        "the preview's code puts them first",
    );
    ok(
        &pg.clone_preview("octo_app_pr_2", 1, &[]),
        "the create Job again",
    );
    ok(
        &pg.clone_preview("octo_app_pr_2", 1, &[("reclone", "1")]),
        "a reclone",
    );
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolsuper"
        ),
        "postgres",
        "no planted function ran as the admin"
    );
}

#[test]
fn a_reclone_from_a_template_that_is_not_sealed_leaves_the_database_as_it_is() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_3", 1, &[]), "clone");
    let refused = failed(&pg.clone_preview("octo_app_pr_3", 99, &[("reclone", "1")]));
    assert!(refused.contains("is not sealed"), "{refused}");
    assert_eq!(
        pg.query("octo_app_pr_3", "SELECT count(*) FROM items"),
        "10"
    );
    // Nor is a generation still being built cloned.
    let g2 = generation(2);
    ok(
        &pg.chart_sql(
            "template-create.sql",
            &[("role", TEMPLATE_ROLE), ("db", &g2)],
        ),
        "a generation being built",
    );
    let unsealed = failed(&pg.clone_preview("octo_app_pr_4", 2, &[]));
    assert!(unsealed.contains("is not sealed"), "{unsealed}");
    assert_eq!(pg.databases_named("octo_app_pr_4"), "0");
}

#[test]
fn a_preview_that_made_its_database_a_template_is_still_recloned_and_torn_down() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_5", 1, &[]), "clone");
    ok(
        &pg.run_as(
            "octo_app_pr_5",
            "octo_app_pr_5",
            "ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
        ),
        "the preview's code marks its database",
    );
    ok(
        &pg.clone_preview("octo_app_pr_5", 1, &[("reclone", "1")]),
        "reclone",
    );
    ok(
        &pg.run_as(
            "octo_app_pr_5",
            "octo_app_pr_5",
            "ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
        ),
        "marked again",
    );
    ok(&pg.provision("drop", "octo_app_pr_5", PASSWORD), "teardown");
    assert_eq!(pg.databases_named("octo_app_pr_5"), "0");
    assert_eq!(pg.roles_named("octo_app_pr_5"), "0");
}
