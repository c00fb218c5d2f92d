//! Template databases (#16) as the chart's SQL makes them, on the real server: a generation
//! built by its migrations and seed as its own role and then sealed, previews cloned from it
//! and owned by their own roles, the PR's own migration applied on top of the history the
//! clone brought, the clone generation recorded so that the create Job's reruns leave the
//! data alone and a reseed reclones (while the app holds a connection), generations side by
//! side and dropped, role and all, while their clones live, and teardown.

use super::*;
use std::process::{Child, Stdio};

/// Generation `n`'s database, and its role: one role per generation, named as its database
/// (as previewd names both `pv_<repo>_<hash>_tpl_<n>`).
pub(crate) fn generation(n: u32) -> String {
    format!("pv_octo_app_4d960c3af87af320_tpl_{n}")
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
    pub(crate) fn run_as(&self, role: &str, db: &str, sql: &str) -> Output {
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
    pub(crate) fn chart_sql(&self, file: &str, vars: &[(&str, &str)]) -> Output {
        let verifier = previewd::secrets::scram_verifier(PASSWORD, b"0123456789abcdef");
        let mut command = self.psql(self.admin, "postgres", &[("PREVIEW_VERIFIER", &verifier)]);
        for (name, value) in vars {
            command.args(["-v", &format!("{name}={value}")]);
        }
        command.arg("-f").arg(chart_file(file)).output().unwrap()
    }

    /// Generation `n` of the template: created, migrated and seeded as its role, sealed.
    pub(crate) fn build_template(&self, n: u32, rows: u32) {
        self.build_template_with(n, rows, "");
    }

    /// As `build_template`, with `extra` SQL run by the migrations after theirs.
    pub(crate) fn build_template_with(&self, n: u32, rows: u32, extra: &str) {
        let db = generation(n);
        let vars = [("role", db.as_str()), ("db", db.as_str())];
        ok(
            &self.chart_sql("template-create.sql", &vars),
            "template create",
        );
        ok(
            &self.run_as(&db, &db, &format!("{MIGRATE}{extra}")),
            "template migrations",
        );
        let seed = format!(
            "INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, {rows}) g ON CONFLICT DO NOTHING;"
        );
        ok(&self.run_as(&db, &db, &seed), "template seed");
        ok(&self.chart_sql("template-seal.sql", &vars), "template seal");
    }

    /// The preview's create Job in template mode, as the chart runs it: its role, and its
    /// database cloned from generation `n` unless it records clone generation `clone`.
    pub(crate) fn clone_preview(&self, name: &str, n: u32, clone: u32) -> Output {
        let template = generation(n);
        let clone = clone.to_string();
        self.chart_sql(
            "create.sql",
            &[
                ("role", name),
                ("db", name),
                ("template", &template),
                ("template_role", &template),
                ("clone", &clone),
            ],
        )
    }

    /// Generation `n` retired as the build release's teardown does: database and role.
    pub(crate) fn drop_generation(&self, n: u32) -> Output {
        let db = generation(n);
        self.chart_sql("template-drop.sql", &[("role", &db), ("db", &db)])
    }

    /// The app's session in `db` as `role`, held open until killed; returns once connected.
    pub(crate) fn hold_connection(&self, role: &str, db: &str) -> Child {
        let app = self
            .psql(role, db, &[])
            .args(["-c", "SELECT pg_sleep(120)"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.query(
            "postgres",
            &format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND usename = '{role}'"),
        ) != "1"
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the app did not connect"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        app
    }

    /// The clone generation `db` records ("" for none).
    pub(crate) fn recorded_clone(&self, db: &str) -> String {
        self.query(
            "postgres",
            &format!("SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = '{db}'"),
        )
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
        pg.may_connect(&db, &db),
        "f",
        "not even its own role, once sealed"
    );
    // Building again changes nothing.
    ok(
        &pg.chart_sql("template-create.sql", &[("role", &db), ("db", &db)]),
        "create again",
    );
    assert_eq!(pg.may_connect(&db, &db), "f");
}

#[test]
fn a_clone_is_owned_by_its_preview_and_runs_only_the_migration_the_pr_adds() {
    let pg = Postgres::start();
    pg.build_template(1, 1000);
    ok(&pg.clone_preview("octo_app_pr_7", 1, 1), "clone");
    assert_eq!(pg.recorded_clone("octo_app_pr_7"), "previewd clone 1");
    ok(
        &pg.clone_preview("octo_app_pr_7", 1, 1),
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
    // Other previews' roles cannot reach it, nor the generation's role.
    pg.create("octo_app_pr_8", "another preview");
    assert_eq!(pg.may_connect("octo_app_pr_8", "octo_app_pr_7"), "f");
    assert_eq!(pg.may_connect(&generation(1), "octo_app_pr_7"), "f");
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
fn a_previews_role_cannot_connect_to_the_template_it_was_cloned_from() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_9", 1, 1), "clone");
    let g1 = generation(1);
    assert_eq!(pg.may_connect("octo_app_pr_9", &g1), "f");
    let refused = failed(&pg.run_as("octo_app_pr_9", &g1, "SELECT 1"));
    assert!(
        refused.contains("not currently accepting connections"),
        "{refused}"
    );
    // Nor to a generation still being built, which its own role may reach.
    let g2 = generation(2);
    ok(
        &pg.chart_sql("template-create.sql", &[("role", &g2), ("db", &g2)]),
        "a generation being built",
    );
    let refused = failed(&pg.run_as("octo_app_pr_9", &g2, "SELECT 1"));
    assert!(refused.contains("permission denied"), "{refused}");
    ok(&pg.run_as(&g2, &g2, "SELECT 1"), "its own role connects");
}

#[test]
fn a_rerun_at_the_same_clone_generation_after_the_generation_was_dropped_leaves_the_data() {
    let pg = Postgres::start();
    pg.build_template(1, 30);
    ok(&pg.clone_preview("octo_app_pr_6", 1, 1), "clone");
    pg.query("octo_app_pr_6", "DELETE FROM items WHERE id > 3");
    ok(&pg.drop_generation(1), "generation 1 retired");
    assert_eq!(pg.databases_named(&generation(1)), "0");
    // The create Job runs on every sync (a push), naming the generation it was cloned from.
    let rerun = ok(
        &pg.clone_preview("octo_app_pr_6", 1, 1),
        "the create Job again",
    );
    assert!(
        rerun.contains("already records clone generation 1"),
        "{rerun}"
    );
    assert_eq!(
        pg.query("octo_app_pr_6", "SELECT count(*) FROM items"),
        "3",
        "what the preview did to its data stays"
    );
    // A reseed from the missing generation fails, saying why, and leaves the data too.
    let refused = failed(&pg.clone_preview("octo_app_pr_6", 1, 2));
    assert!(
        refused.contains("does not exist or is not sealed"),
        "{refused}"
    );
    assert_eq!(pg.query("octo_app_pr_6", "SELECT count(*) FROM items"), "3");
    assert_eq!(pg.recorded_clone("octo_app_pr_6"), "previewd clone 1");
}

#[test]
fn a_bumped_clone_generation_reclones_while_the_app_holds_a_connection() {
    let pg = Postgres::start();
    pg.build_template(1, 50);
    ok(&pg.clone_preview("octo_app_pr_5", 1, 1), "clone");
    pg.query("octo_app_pr_5", "DELETE FROM items WHERE id > 10");
    let mut app = pg.hold_connection("octo_app_pr_5", "octo_app_pr_5");
    ok(&pg.clone_preview("octo_app_pr_5", 1, 1), "same generation");
    assert_eq!(
        pg.query("octo_app_pr_5", "SELECT count(*) FROM items"),
        "10",
        "the same clone generation leaves the data"
    );
    // A reseed bumps it: from the newest generation, with the app still connected.
    pg.build_template(2, 70);
    ok(&pg.clone_preview("octo_app_pr_5", 2, 2), "reclone");
    assert_eq!(
        pg.query("octo_app_pr_5", "SELECT count(*) FROM items"),
        "70"
    );
    assert_eq!(pg.recorded_clone("octo_app_pr_5"), "previewd clone 2");
    assert!(
        !app.wait().unwrap().success(),
        "the app's session was closed"
    );
    assert_eq!(pg.may_connect("octo_app_pr_5", "octo_app_pr_5"), "t");
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT datconnlimit FROM pg_database WHERE datname = 'octo_app_pr_5'"
        ),
        "-1",
        "open again"
    );
}

#[test]
fn a_generation_whose_migrations_altered_default_privileges_is_dropped_while_its_clone_lives() {
    let pg = Postgres::start();
    // What Rails or Django migrations may do: grant future tables to a reporting role.
    pg.query("postgres", "CREATE ROLE reporting NOLOGIN");
    pg.build_template_with(
        1,
        10,
        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO reporting;\n\
         ALTER DEFAULT PRIVILEGES GRANT USAGE ON SEQUENCES TO PUBLIC;\n",
    );
    ok(&pg.clone_preview("octo_app_pr_2", 1, 1), "clone");
    ok(&pg.drop_generation(1), "generation 1 retired, its role too");
    assert_eq!(pg.databases_named(&generation(1)), "0");
    assert_eq!(pg.roles_named(&generation(1)), "0");
    assert_eq!(
        pg.query("octo_app_pr_2", "SELECT count(*) FROM items"),
        "10",
        "the clone lives on"
    );
    // The preview's own teardown still works.
    ok(&pg.provision("drop", "octo_app_pr_2", PASSWORD), "teardown");
    assert_eq!(pg.roles_named("octo_app_pr_2"), "0");
}

#[test]
fn a_new_generation_is_built_beside_the_old_while_its_clones_live() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(
        &pg.clone_preview("octo_app_pr_1", 1, 1),
        "clone of generation 1",
    );
    pg.build_template(2, 20);
    ok(
        &pg.clone_preview("octo_app_pr_2", 2, 1),
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
    // Generation 1 goes, with its role, once no new preview needs it; its clone lives on.
    ok(&pg.drop_generation(1), "drop generation 1");
    ok(&pg.drop_generation(1), "dropping it again is a no-op");
    assert_eq!(pg.databases_named(&generation(1)), "0");
    assert_eq!(pg.roles_named(&generation(1)), "0");
    assert_eq!(
        pg.query("octo_app_pr_1", "SELECT count(*) FROM items"),
        "10"
    );
    assert_eq!(
        pg.roles_named(&generation(2)),
        "1",
        "generation 2's own role"
    );
    ok(
        &pg.clone_preview("octo_app_pr_3", 2, 1),
        "generation 2 still clones",
    );
}

#[test]
fn a_previews_teardown_drops_its_clone_and_not_the_template() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_4", 1, 1), "clone");
    ok(&pg.provision("drop", "octo_app_pr_4", PASSWORD), "teardown");
    assert_eq!(pg.databases_named("octo_app_pr_4"), "0");
    assert_eq!(
        pg.roles_named("octo_app_pr_4"),
        "0",
        "its role owned nothing else"
    );
    assert_eq!(pg.databases_named(&generation(1)), "1");
    assert_eq!(pg.roles_named(&generation(1)), "1");
    assert_eq!(
        pg.query(
            "postgres",
            &format!(
                "SELECT datistemplate, datallowconn FROM pg_database WHERE datname = '{}'",
                generation(1)
            )
        ),
        "t|f",
        "still sealed"
    );
    ok(
        &pg.clone_preview("octo_app_pr_6", 1, 1),
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
    // The generation's role plants it in a generation still being built, which is built again.
    let g1 = generation(1);
    let vars = [("role", g1.as_str()), ("db", g1.as_str())];
    ok(
        &pg.chart_sql("template-create.sql", &vars),
        "template create",
    );
    ok(&pg.run_as(&g1, &g1, MIGRATE), "template migrations");
    ok(
        &pg.run_as(&g1, &g1, HIJACK),
        "the template's code plants it",
    );
    ok(
        &pg.chart_sql("template-create.sql", &vars),
        "template create again",
    );
    ok(&pg.chart_sql("template-seal.sql", &vars), "template seal");
    ok(&pg.clone_preview("octo_app_pr_2", 1, 1), "clone");
    // The clone brought them along, now the preview's own. It may not put them first for
    // every session in its database (the admin owns it), only for its own.
    let refused = failed(&pg.run_as(
        "octo_app_pr_2",
        "octo_app_pr_2",
        "ALTER DATABASE octo_app_pr_2 SET search_path = public, pg_catalog;",
    ));
    assert!(refused.contains("must be owner of database"), "{refused}");
    ok(
        &pg.run_as(
            "octo_app_pr_2",
            "octo_app_pr_2",
            "ALTER ROLE octo_app_pr_2 SET search_path = public, pg_catalog;",
        ),
        "the preview's code puts them first for itself",
    );
    ok(
        &pg.clone_preview("octo_app_pr_2", 1, 1),
        "the create Job again",
    );
    ok(&pg.clone_preview("octo_app_pr_2", 1, 2), "a reclone");
    ok(&pg.drop_generation(1), "the generation retired");
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
    ok(&pg.clone_preview("octo_app_pr_3", 1, 1), "clone");
    let refused = failed(&pg.clone_preview("octo_app_pr_3", 99, 2));
    assert!(refused.contains("is not sealed"), "{refused}");
    assert_eq!(
        pg.query("octo_app_pr_3", "SELECT count(*) FROM items"),
        "10"
    );
    assert_eq!(pg.recorded_clone("octo_app_pr_3"), "previewd clone 1");
    // Nor is a generation still being built cloned.
    let g2 = generation(2);
    ok(
        &pg.chart_sql("template-create.sql", &[("role", &g2), ("db", &g2)]),
        "a generation being built",
    );
    let unsealed = failed(&pg.clone_preview("octo_app_pr_4", 2, 1));
    assert!(unsealed.contains("is not sealed"), "{unsealed}");
    assert_eq!(pg.databases_named("octo_app_pr_4"), "0");
}

#[test]
fn a_preview_cannot_make_its_database_a_template_and_is_recloned_and_torn_down() {
    let pg = Postgres::start();
    pg.build_template(1, 10);
    ok(&pg.clone_preview("octo_app_pr_5", 1, 1), "clone");
    let refused = failed(&pg.run_as(
        "octo_app_pr_5",
        "octo_app_pr_5",
        "ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
    ));
    assert!(refused.contains("must be owner of database"), "{refused}");
    // One an older previewd gave the role, and its code marked: taken over, unmarked.
    pg.query(
        "postgres",
        "ALTER DATABASE octo_app_pr_5 OWNER TO octo_app_pr_5; ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
    );
    ok(&pg.clone_preview("octo_app_pr_5", 1, 2), "reclone");
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT pg_get_userbyid(datdba), datistemplate FROM pg_database WHERE datname = 'octo_app_pr_5'"
        ),
        "postgres|f"
    );
    pg.query(
        "postgres",
        "ALTER DATABASE octo_app_pr_5 OWNER TO octo_app_pr_5; ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
    );
    ok(&pg.provision("drop", "octo_app_pr_5", PASSWORD), "teardown");
    assert_eq!(pg.databases_named("octo_app_pr_5"), "0");
    assert_eq!(pg.roles_named("octo_app_pr_5"), "0");
}

/// A stand-in for previewd's report endpoint on loopback: answers `status` to one request
/// and hands back the request as received (headers and body). A receiver, not a join
/// handle: a script that never calls (busybox missing, say) fails the test on a timeout
/// instead of leaving it waiting in `accept` for ever.
fn one_request(status: &'static str) -> (String, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, served) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let (mut head, mut length) = (String::new(), 0);
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(n) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = n.trim().parse().unwrap();
            }
            head += &line;
            if line == "\r\n" || line.is_empty() {
                break;
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let _ = sender.send(head + &String::from_utf8(body).unwrap());
    });
    (url, served)
}

impl Postgres {
    /// The chart's size Job script (files/template-size.sh) as the provisioner `user`, with
    /// busybox's wget (as in postgres:*-alpine) behind a wrapper that logs its arguments.
    fn report_size(
        &self,
        user: &str,
        db: &str,
        url: &str,
        token: Option<&str>,
    ) -> (Output, String) {
        let dir = tempfile::tempdir().unwrap();
        let wrapper = dir.path().join("wget");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$@\" >> {}/argv\nexec busybox wget \"$@\"\n",
                dir.path().display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut command = Command::new("sh");
        command
            .arg(chart_file("template-size.sh"))
            .env_clear()
            .envs(self.env(user, "postgres"))
            .env(
                "PATH",
                format!(
                    "{}:{}:/usr/bin:/bin",
                    dir.path().display(),
                    self.bin.display()
                ),
            )
            .env("TMPDIR", dir.path())
            .env("DB", db)
            .env("URL", url);
        if let Some(token) = token {
            command.env("TOKEN", token);
        }
        let output = command.output().unwrap();
        let argv = std::fs::read_to_string(dir.path().join("argv")).unwrap_or_default();
        (output, argv)
    }
}

#[test]
fn a_sealed_generations_size_is_measured_by_its_owner_and_posted_with_the_token_off_the_command_line()
 {
    let pg = Postgres::start();
    pg.build_template(3, 5000);
    let db = generation(3);
    // A provisioner as least privilege leaves it (CREATEDB, CREATEROLE, no superuser) owns the
    // generation, which takes no connection: pg_database_size needs none (dbsize.c
    // calculate_database_size checks CONNECT privilege, which the owner holds).
    ok(
        &pg.run_as(
            "postgres",
            "postgres",
            &format!("CREATE ROLE provisioner LOGIN CREATEDB CREATEROLE; ALTER DATABASE {db} OWNER TO provisioner;"),
        ),
        "provisioner",
    );
    let expected = pg.query("postgres", &format!("SELECT pg_database_size('{db}')"));
    let token = "hJ0_tNbXv3kq-8ZsY1n0a7c2d9e4f5g6h7i8j9k0l1m";
    let (url, served) = one_request("204 No Content");
    let url = format!("{url}/api/templates/octo/app/3/size");
    let (output, argv) = pg.report_size("provisioner", &db, &url, Some(token));
    assert!(output.status.success(), "{output:?}");
    // The script has finished: its request, if it sent one, has been read or is being.
    let request = served
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap_or_else(|_| panic!("the script sent no request: {output:?} {argv}"));
    assert!(
        request.starts_with("POST /api/templates/octo/app/3/size HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{request}"
    );
    let body: serde_json::Value =
        serde_json::from_str(request.rsplit("\r\n\r\n").next().unwrap()).unwrap();
    assert_eq!(body["token"], token);
    assert_eq!(body["bytes"].to_string(), expected, "{request}");
    assert!(expected.parse::<i64>().unwrap() > 1_000_000, "{expected}");
    assert!(argv.contains(&url), "the wrapper saw the call: {argv}");
    assert!(
        !argv.contains(token),
        "the token was on wget's command line: {argv}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains(&format!("{expected} bytes")),
        "{output:?}"
    );
}

#[test]
fn a_size_that_cannot_be_measured_or_has_no_token_never_fails_the_build() {
    let pg = Postgres::start();
    let (url, _never) = one_request("204 No Content");
    // No token (an older generation's Secret): said, exit 0, nothing sent.
    let (output, argv) = pg.report_size("postgres", "postgres", &url, None);
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no TOKEN"));
    assert!(argv.is_empty(), "{argv}");
    // A database that is gone: said, exit 0, nothing sent.
    let (output, argv) = pg.report_size("postgres", "no_such_database", &url, Some("t"));
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("could not measure database no_such_database"),
        "{output:?}"
    );
    assert!(argv.is_empty(), "{argv}");
}
