//! A preview's role is hostile (its migrations, seed and app are the PR author's code) and
//! shares the server with every other preview: whatever it does to what it can reach, no
//! other preview's create, reseed or teardown fails, with a superuser admin and with one
//! shaped like managed PostgreSQL's (CREATEDB + CREATEROLE, no superuser), which runs the
//! whole lifecycle too.

use super::hostile::both_admins;
use super::template::generation;
use super::*;

/// Every other preview's or generation's role, granted `privilege` on `table` by the
/// preview's code (pg_roles is readable by every role).
fn grant_to_every_other_role(privilege: &str, table: &str) -> String {
    format!(
        "DO $$ DECLARE r name; BEGIN
           FOR r IN SELECT rolname FROM pg_roles
                     WHERE (rolname LIKE 'octo%' OR rolname LIKE 'pv%') AND rolname <> current_user LOOP
             EXECUTE format('GRANT {privilege} ON {table} TO %I', r);
           END LOOP;
         END $$;"
    )
}

#[test]
fn a_preview_opening_its_database_to_every_role_stops_no_other_preview() {
    for pg in both_admins() {
        pg.create("octo_app_pr_1", "the attacker's preview");
        // PostgreSQL only warns when the grantor holds nothing to grant.
        let _ = pg.run_as(
            "octo_app_pr_1",
            "octo_app_pr_1",
            "GRANT CONNECT, TEMPORARY ON DATABASE octo_app_pr_1 TO PUBLIC;",
        );
        assert_eq!(
            pg.may_connect("public", "octo_app_pr_1"),
            "f",
            "{}",
            pg.admin
        );
        pg.create("octo_app_pr_2", "another preview, after it");
        assert_eq!(pg.may_connect("octo_app_pr_2", "octo_app_pr_1"), "f");
    }
}

#[test]
fn grants_another_preview_made_to_a_role_never_hold_up_its_teardown() {
    for pg in both_admins() {
        pg.build_template(1, 10);
        pg.create("octo_app_pr_2", "the victim");
        pg.create("octo_app_pr_1", "the attacker");
        ok(
            &pg.run_as(
                "octo_app_pr_1",
                "octo_app_pr_1",
                &format!(
                    "CREATE TABLE bait (x int); {}",
                    grant_to_every_other_role("SELECT", "bait")
                ),
            ),
            "the attacker grants every other role",
        );
        let mut app = pg.hold_connection("octo_app_pr_2", "octo_app_pr_2");
        ok(
            &pg.provision("drop", "octo_app_pr_2", PASSWORD),
            "the victim's teardown, its app connected",
        );
        let _ = app.kill();
        let _ = app.wait();
        assert_eq!(pg.databases_named("octo_app_pr_2"), "0", "{}", pg.admin);
        assert_eq!(pg.roles_named("octo_app_pr_2"), "0");
        ok(&pg.drop_generation(1), "the generation's teardown");
        assert_eq!(pg.roles_named(&generation(1)), "0");
        // The attacker's own table and preview are left as they are.
        assert_eq!(pg.query("octo_app_pr_1", "SELECT count(*) FROM bait"), "0");
    }
}

/// The generation's code (the repository's default branch) grants a preview's role in the
/// template: every spare and clone would carry it into a database no one may connect to.
#[test]
fn grants_a_generations_code_made_never_outlive_its_seal() {
    for pg in both_admins() {
        pg.create("octo_app_pr_2", "the victim");
        pg.build_template_with(1, 10, &grant_to_every_other_role("SELECT", "items"));
        ok(&pg.top_up(1, 1), "a spare");
        ok(
            &pg.clone_preview("octo_app_pr_3", 1, 1),
            "a clone (the spare)",
        );
        ok(&pg.clone_preview("octo_app_pr_4", 1, 1), "a clone (a copy)");
        ok(&pg.top_up(1, 1), "another spare");
        ok(
            &pg.provision("drop", "octo_app_pr_2", PASSWORD),
            "the victim's teardown",
        );
        assert_eq!(pg.roles_named("octo_app_pr_2"), "0", "{}", pg.admin);
        ok(&pg.drop_generation(1), "the generation's teardown");
        for preview in ["octo_app_pr_3", "octo_app_pr_4"] {
            ok(
                &pg.provision("drop", preview, PASSWORD),
                "a clone's teardown",
            );
            assert_eq!(pg.roles_named(preview), "0");
        }
    }
}

#[test]
fn a_previews_code_can_neither_mark_its_database_a_template_nor_forge_its_clone_marker() {
    for pg in both_admins() {
        pg.build_template(1, 10);
        ok(&pg.clone_preview("octo_app_pr_5", 1, 1), "clone");
        for attack in [
            "ALTER DATABASE octo_app_pr_5 IS_TEMPLATE true",
            "COMMENT ON DATABASE octo_app_pr_5 IS 'previewd clone 2'",
        ] {
            let refused = failed(&pg.run_as("octo_app_pr_5", "octo_app_pr_5", attack));
            assert!(refused.contains("must be owner of database"), "{refused}");
        }
        // The PR's code changes its data; /preview reseed (clone generation 2) restores it.
        ok(
            &pg.run_as("octo_app_pr_5", "octo_app_pr_5", "DELETE FROM items"),
            "the PR's code",
        );
        ok(&pg.clone_preview("octo_app_pr_5", 1, 2), "reseed");
        assert_eq!(
            pg.query("octo_app_pr_5", "SELECT count(*) FROM items"),
            "10",
            "{}",
            pg.admin
        );
        ok(&pg.provision("drop", "octo_app_pr_5", PASSWORD), "teardown");
        assert_eq!(pg.databases_named("octo_app_pr_5"), "0");
    }
}

/// What a preview's migrations need keeps working: schemas, trusted extensions, tables in
/// `public`, and owning all of it.
#[test]
fn a_previews_migrations_make_schemas_extensions_and_tables_of_their_own() {
    for pg in both_admins() {
        pg.create("octo_app_pr_6", "create");
        ok(
            &pg.run_as(
                "octo_app_pr_6",
                "octo_app_pr_6",
                "CREATE SCHEMA app; CREATE TABLE app.t (x int); CREATE TABLE public.u (x int); \
                 CREATE EXTENSION pgcrypto; SELECT gen_random_uuid();",
            ),
            "migrations",
        );
        assert_eq!(
            pg.query(
                "octo_app_pr_6",
                "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relname IN ('t', 'u')"
            ),
            "octo_app_pr_6"
        );
    }
}

#[test]
fn the_whole_lifecycle_runs_with_an_admin_shaped_like_managed_postgresql() {
    let pg = Postgres::start_managed();
    pg.create("octo_app_pr_1", "a preview from template0");
    pg.create("octo_app_pr_1", "its create Job again");
    pg.build_template(1, 100);
    ok(&pg.top_up(1, 1), "a spare");
    assert_eq!(pg.spares(1).len(), 1);
    let claimed = ok(&pg.clone_preview("octo_app_pr_2", 1, 1), "a clone");
    assert!(claimed.contains("claimed spare clone"), "{claimed}");
    ok(&pg.clone_preview("octo_app_pr_3", 1, 1), "a clone, copied");
    ok(
        &pg.run_as("octo_app_pr_2", "octo_app_pr_2", "DELETE FROM items"),
        "the PR's code",
    );
    let mut app = pg.hold_connection("octo_app_pr_2", "octo_app_pr_2");
    ok(
        &pg.clone_preview("octo_app_pr_2", 1, 2),
        "a reseed, its app connected",
    );
    let _ = app.kill();
    let _ = app.wait();
    assert_eq!(
        pg.query("octo_app_pr_2", "SELECT count(*) FROM items"),
        "100"
    );
    pg.build_template(2, 50);
    ok(&pg.drop_generation(1), "the old generation retired");
    let mut app = pg.hold_connection("octo_app_pr_3", "octo_app_pr_3");
    for preview in ["octo_app_pr_1", "octo_app_pr_2", "octo_app_pr_3"] {
        ok(&pg.provision("drop", preview, PASSWORD), "a teardown");
    }
    let _ = app.kill();
    let _ = app.wait();
    ok(&pg.drop_generation(2), "the last generation retired");
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'octo%' OR datname LIKE 'pv%'"
        ),
        "0",
        "no database left"
    );
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles WHERE rolname NOT LIKE 'pg\\_%'"
        ),
        "admin,postgres",
        "no role left, and the admin still no superuser"
    );
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT rolsuper FROM pg_roles WHERE rolname = 'admin'"
        ),
        "f"
    );
}

impl Postgres {
    /// The guard CronJob's run for `name` (files/guard.sql), as the chart runs it.
    fn guard(&self, name: &str, max_bytes: u64) -> Output {
        self.chart_sql(
            "guard.sql",
            &[
                ("role", name),
                ("db", name),
                ("max_bytes", &max_bytes.to_string()),
            ],
        )
    }

    /// The create Job of `name`, cloned from generation 1 at clone generation `clone`, with
    /// the bound the chart passes.
    fn clone_within(&self, name: &str, clone: u32, max_bytes: u64) -> Output {
        self.chart_sql(
            "create.sql",
            &[
                ("role", name),
                ("db", name),
                ("template", &generation(1)),
                ("template_role", &generation(1)),
                ("clone", &clone.to_string()),
                ("max_bytes", &max_bytes.to_string()),
            ],
        )
    }

    /// The size of database `name`, in bytes.
    fn size_of(&self, name: &str) -> u64 {
        self.query("postgres", &format!("SELECT pg_database_size('{name}')"))
            .parse()
            .unwrap()
    }
}

/// A preview's code can fill the shared server's disk for every preview on it: past
/// `database.max_size` its database takes no more connections, its sessions end, and the
/// guard fails saying so; the create Job keeps it closed; a reseed (a new clone) reopens it.
#[test]
fn a_database_past_its_bound_is_closed_until_a_reseed_replaces_it() {
    for pg in both_admins() {
        pg.build_template(1, 10);
        ok(&pg.clone_preview("octo_app_pr_8", 1, 1), "clone");
        let bound = pg.size_of("octo_app_pr_8") + (4 << 20);
        ok(
            &pg.guard("octo_app_pr_8", bound),
            "the guard, within the bound",
        );
        ok(
            &pg.run_as(
                "octo_app_pr_8",
                "octo_app_pr_8",
                "CREATE TABLE filler AS SELECT repeat('x', 2000) AS x FROM generate_series(1, 4000);",
            ),
            "the PR's code fills its database",
        );
        let mut app = pg.hold_connection("octo_app_pr_8", "octo_app_pr_8");
        let text = failed(&pg.guard("octo_app_pr_8", bound));
        assert!(
            text.contains("over database.max_size") && text.contains("takes no more connections"),
            "{text}"
        );
        assert!(app.wait().is_ok(), "the app's session was ended");
        let refused = failed(&pg.run_as("octo_app_pr_8", "octo_app_pr_8", "SELECT 1"));
        assert!(
            refused.contains("permission denied for database"),
            "{refused}"
        );
        let lift = failed(&pg.run_as(
            "octo_app_pr_8",
            "postgres",
            "ALTER DATABASE octo_app_pr_8 WITH CONNECTION LIMIT -1",
        ));
        assert!(lift.contains("permission denied"), "{lift}");
        // The next sync's create Job (at the same clone generation) keeps it closed.
        let create = pg.clone_within("octo_app_pr_8", 1, bound);
        assert!(failed(&create).contains("it stays closed"), "{}", pg.admin);
        assert!(
            failed(&pg.run_as("octo_app_pr_8", "octo_app_pr_8", "SELECT 1"))
                .contains("permission denied for database")
        );
        // /preview reseed: clone generation 2, a fresh copy within the bound.
        let reseed = pg.clone_within("octo_app_pr_8", 2, bound);
        ok(&reseed, "reseed");
        ok(
            &pg.guard("octo_app_pr_8", bound),
            "the guard after the reseed",
        );
        ok(
            &pg.run_as(
                "octo_app_pr_8",
                "octo_app_pr_8",
                "SELECT count(*) FROM items",
            ),
            "the app connects again",
        );
        ok(&pg.provision("drop", "octo_app_pr_8", PASSWORD), "teardown");
    }
}

/// The layout an older previewd made: the role owned its database (and the admin was no
/// member of it), so its code could open it to every role and to other previews, with grant
/// options down a chain. The next sync's create Job takes it over and leaves exactly what
/// previewd grants.
#[test]
fn a_database_an_older_previewd_gave_its_role_is_taken_over_on_the_next_sync() {
    for pg in both_admins() {
        pg.create("octo_app_pr_20", "the old preview");
        pg.create("octo_app_pr_21", "another");
        pg.create("octo_app_pr_22", "a third");
        pg.query(
            "postgres",
            &format!(
                "ALTER DATABASE octo_app_pr_20 OWNER TO octo_app_pr_20; \
                 REVOKE octo_app_pr_20 FROM {admin}",
                admin = pg.admin
            ),
        );
        ok(
            &pg.run_as(
                "octo_app_pr_20",
                "octo_app_pr_20",
                "GRANT ALL ON DATABASE octo_app_pr_20 TO PUBLIC; \
                 GRANT CONNECT ON DATABASE octo_app_pr_20 TO octo_app_pr_21 WITH GRANT OPTION;",
            ),
            "the old owner's code",
        );
        ok(
            &pg.run_as(
                "octo_app_pr_21",
                "octo_app_pr_21",
                "GRANT CONNECT ON DATABASE octo_app_pr_20 TO octo_app_pr_22;",
            ),
            "down the chain",
        );
        pg.create("octo_app_pr_20", "the next sync");
        assert_eq!(
            pg.query(
                "postgres",
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'octo_app_pr_20'"
            ),
            pg.admin
        );
        for (role, may) in [
            ("public", "f"),
            ("octo_app_pr_21", "f"),
            ("octo_app_pr_22", "f"),
            ("octo_app_pr_20", "t"),
        ] {
            assert_eq!(
                pg.may_connect(role, "octo_app_pr_20"),
                may,
                "{role} ({})",
                pg.admin
            );
        }
        ok(
            &pg.provision("drop", "octo_app_pr_20", PASSWORD),
            "teardown",
        );
        assert_eq!(pg.roles_named("octo_app_pr_20"), "0");
    }
}

/// Run by a non-superuser, a REVOKE removes only the grantor's own entries, and the grantor
/// it picks is itself when it holds the grant options (acl.c select_best_grantor): an owner
/// that first gives the admin every grant option keeps its entry for another preview's role.
/// The drop revokes as the owner, so the role is dropped outright, not set aside.
#[test]
fn grant_options_given_to_the_admin_never_keep_a_grant_from_being_revoked() {
    for pg in both_admins() {
        pg.create("octo_app_pr_2", "the victim");
        pg.create("octo_app_pr_1", "the attacker");
        ok(
            &pg.run_as(
                "octo_app_pr_1",
                "octo_app_pr_1",
                &format!(
                    "CREATE TABLE bait (x int); GRANT ALL ON bait TO {} WITH GRANT OPTION; \
                     GRANT SELECT ON bait TO octo_app_pr_2;",
                    pg.admin
                ),
            ),
            "the attacker's grants",
        );
        ok(
            &pg.provision("drop", "octo_app_pr_2", PASSWORD),
            "the victim's teardown",
        );
        assert_eq!(
            pg.query(
                "postgres",
                "SELECT count(*) FROM pg_roles WHERE rolname = 'octo_app_pr_2' OR rolname LIKE 'pvgone%'"
            ),
            "0",
            "{}: dropped, not set aside",
            pg.admin
        );
        assert!(
            !pg.query(
                "octo_app_pr_1",
                "SELECT relacl::text FROM pg_class WHERE relname = 'bait'"
            )
            .contains("octo_app_pr_2"),
        );
    }
}

/// A grant made again between the revoke and DROP ROLE (a race the granting code may win)
/// never fails the teardown: the role, already unable to log in, is set aside under another
/// name, and a later teardown drops it once nothing grants it any more.
#[test]
fn a_role_granted_again_after_the_revoke_is_set_aside_and_dropped_later() {
    for pg in both_admins() {
        pg.create("octo_app_pr_2", "the victim");
        pg.create("octo_app_pr_1", "the attacker");
        ok(
            &pg.run_as(
                "octo_app_pr_1",
                "octo_app_pr_1",
                "CREATE TABLE bait (x int); GRANT SELECT ON bait TO octo_app_pr_2;",
            ),
            "the attacker's grant",
        );
        // What the race leaves: the database dropped and the revoke done, then a new grant.
        pg.query("postgres", "DROP DATABASE octo_app_pr_2 WITH (FORCE)");
        ok(
            &pg.chart_sql("drop-role.sql", &[("role", "octo_app_pr_2")]),
            "drop-role.sql",
        );
        let gone = pg.query(
            "postgres",
            "SELECT rolname || ' ' || rolcanlogin FROM pg_roles WHERE rolname LIKE 'pvgone%'",
        );
        assert!(
            gone.starts_with("pvgone_") && gone.ends_with(" false"),
            "{gone}"
        );
        assert_eq!(pg.roles_named("octo_app_pr_2"), "0", "the name is free");
        ok(
            &pg.provision("drop", "octo_app_pr_1", PASSWORD),
            "the attacker's teardown",
        );
        pg.create("octo_app_pr_3", "another preview");
        ok(
            &pg.provision("drop", "octo_app_pr_3", PASSWORD),
            "a later teardown",
        );
        assert_eq!(
            pg.query(
                "postgres",
                "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'pvgone%'"
            ),
            "0",
            "{}",
            pg.admin
        );
    }
}

/// The same grant options, given by a generation's code before its seal: the seal revokes
/// as the generation's role, so nothing it granted is sealed into the template, its spares
/// or its clones.
#[test]
fn grant_options_a_generation_gives_the_admin_are_not_sealed_into_its_template() {
    for pg in both_admins() {
        pg.create("octo_app_pr_2", "the victim");
        pg.build_template_with(
            1,
            10,
            &format!(
                "GRANT ALL ON items TO {} WITH GRANT OPTION; GRANT SELECT ON items TO octo_app_pr_2;",
                pg.admin
            ),
        );
        assert_eq!(
            pg.query(
                "postgres",
                &format!(
                    "SELECT count(*) FROM pg_shdepend WHERE refobjid = (SELECT oid FROM pg_roles WHERE rolname = 'octo_app_pr_2') \
                     AND dbid = (SELECT oid FROM pg_database WHERE datname = '{}')",
                    generation(1)
                )
            ),
            "0",
            "{}: the sealed template grants the victim nothing",
            pg.admin
        );
        ok(
            &pg.provision("drop", "octo_app_pr_2", PASSWORD),
            "the victim's teardown",
        );
        assert_eq!(
            pg.query("postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'octo_app_pr_2' OR rolname LIKE 'pvgone%'"),
            "0"
        );
    }
}
