//! Attacks on database tenancy (#36) as a hostile preview's (or generation's) code makes
//! them on the shared server: it runs as its own role (LOGIN, member of nothing, CONNECT,
//! TEMPORARY and CREATE on its own database, USAGE and CREATE on its `public`), knows every
//! other role's name, and wants another preview's create, clone or teardown to fail or hang,
//! another preview's data, anything run as the admin, or to outlive its own teardown.
//!
//! Every test asserts the SAFE outcome; each was written by an attack review, and those
//! still called "ATTACK" failed before the SQL they name was changed. One is a known limit
//! of a shared server and is ignored (the README says so).

use super::hostile::*;
use super::template::generation;
use super::*;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// Teardown held up by another preview's open transaction
// ---------------------------------------------------------------------------------------

/// ATTACK (worked before ab7ec7b): an uncommitted GRANT to another preview's role, held open. GRANT takes
/// AccessShareLock on the grantee role (pg_shdepend.c shdepLockAndCheckObject) until the
/// transaction ends; DROP ROLE wants AccessExclusiveLock on it. revoke-elsewhere.sql does
/// not see the uncommitted grant (MVCC), so the victim's drop Job reaches DROP ROLE and
/// waits for as long as the attacker's app keeps its transaction open (idle in transaction
/// needs no activity; idle_in_transaction_session_timeout is the session's to set), then
/// fails "some objects depend on it" when the attacker commits.
#[test]
fn an_uncommitted_grant_to_another_previews_role_never_holds_up_its_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &format!("BEGIN;\nGRANT SELECT ON bait TO {VICTIM};\nSELECT pg_sleep(12);\nCOMMIT;\n"),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(8)) {
            failures.push(why);
        }
        let _ = app.wait();
        // Whatever the Job did, the role must be gone once the attacker let go.
        if pg.roles_named(VICTIM) != "0" {
            failures.push(format!("{}: the victim's role is left behind", pg.admin));
        }
    }
    none(failures);
}

/// ATTACK (worked before ab7ec7b): the victim's role is granted on a table (committed), then the attacker's
/// app keeps a transaction open that rewrote that table's pg_class row (any ALTER TABLE, or
/// another GRANT on it). revoke-elsewhere.sql's DROP OWNED in the attacker's database must
/// rewrite the same row: it waits on the attacker's transaction, then fails "tuple
/// concurrently updated" (ExecGrant_Relation takes no lock on the table first).
#[test]
fn a_transaction_held_open_on_the_granting_table_never_holds_up_anothers_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                &format!("GRANT SELECT ON bait TO {VICTIM};"),
            ),
            "the attacker grants the victim",
        );
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            "BEGIN;\nALTER TABLE bait ADD COLUMN y int;\nSELECT pg_sleep(12);\nCOMMIT;\n",
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(8)) {
            failures.push(why);
        }
        let _ = app.wait();
        if pg.roles_named(VICTIM) != "0" {
            failures.push(format!("{}: the victim's role is left behind", pg.admin));
        }
    }
    none(failures);
}

/// ATTACK (worked before ab7ec7b; a race the attacker won most of the time): the attacker's app grants
/// every other preview's role again as fast as a drop revokes (two sessions, each running a
/// procedure that commits a GRANT on its own table to each of them every few
/// milliseconds). revoke-elsewhere.sql's DROP OWNED then meets a concurrent GRANT on the
/// same pg_class row and fails "tuple concurrently updated"; or every round finds a new
/// grant and the drop gives up after 100; or DROP ROLE meets the grant made after the last
/// round. Five victims are torn down one after another: each must succeed.
#[test]
fn regranting_as_fast_as_it_is_revoked_never_fails_anothers_teardown() {
    let victims = [
        "octo_app_pr_2",
        "octo_app_pr_3",
        "octo_app_pr_4",
        "octo_app_pr_5",
        "octo_app_pr_6",
    ];
    let mut failures = vec![];
    for pg in both_admins() {
        for victim in victims {
            pg.create(victim, "a victim");
        }
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                r#"
CREATE TABLE bait_1 (x int);
CREATE TABLE bait_2 (x int);
CREATE PROCEDURE regrant(tab text, seconds int) LANGUAGE plpgsql AS $$
DECLARE
  stop timestamptz := clock_timestamp() + seconds * interval '1 second';
  victim name;
BEGIN
  WHILE clock_timestamp() < stop LOOP
    FOR victim IN SELECT rolname FROM pg_roles
                   WHERE rolname LIKE 'octo\_app\_pr\_%' AND rolname <> current_user LOOP
      BEGIN
        EXECUTE format('GRANT SELECT ON %I TO %I', tab, victim);
      EXCEPTION WHEN OTHERS THEN
        NULL; -- that victim is gone, or a concurrent revoke won this time
      END;
    END LOOP;
    COMMIT;
    PERFORM pg_sleep(0.002);
  END LOOP;
END $$;
"#,
            ),
            "the attacker's procedure",
        );
        let mut apps: Vec<Child> = ["bait_1", "bait_2"]
            .iter()
            .map(|table| {
                let log = pg.dir.path().join(format!("attacker-{table}.log"));
                spawn_as(
                    &pg,
                    ATTACKER,
                    ATTACKER,
                    &format!("CALL regrant('{table}', 60);\n"),
                    &log,
                )
            })
            .collect();
        wait_for_session(&pg, ATTACKER, "bait_1'', 60");
        wait_for_session(&pg, ATTACKER, "bait_2'', 60");
        for victim in victims {
            if let Err(why) = drop_within(&pg, victim, Duration::from_secs(30)) {
                failures.push(format!("{} {victim}: {}", pg.admin, last_error(&why)));
            }
        }
        for app in &mut apps {
            let _ = app.kill();
            let _ = app.wait();
        }
    }
    none(failures);
}

/// ATTACK (worked before ab7ec7b): the same open-transaction grant, made to a template generation's role
/// (any other repository's: pg_roles names them all). The generation's retirement
/// (template-drop.sql) waits at DROP ROLE, then fails.
/// Also checked: a clone of that generation while the grant is held (REASSIGN OWNED and
/// DROP OWNED BY the generation's role take no lock that conflicts): withstood.
#[test]
fn an_uncommitted_grant_to_a_generations_role_never_holds_up_its_clones_or_retirement() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.build_template(1, 10);
        attacker(&pg);
        let g1 = generation(1);
        let log = pg.dir.path().join("attacker.log");
        let hold =
            format!("BEGIN;\nGRANT SELECT ON bait TO {g1};\nSELECT pg_sleep(10);\nCOMMIT;\n");
        let mut app = spawn_as(&pg, ATTACKER, ATTACKER, &hold, &log);
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        let clone = job_within(
            &pg,
            "create.sql",
            &[
                ("role", "octo_app_pr_3"),
                ("db", "octo_app_pr_3"),
                ("template", &g1),
                ("template_role", &g1),
                ("clone", "1"),
            ],
            Duration::from_secs(7),
        );
        if let Err(why) = clone {
            failures.push(format!("clone: {why}"));
        }
        let _ = app.wait();
        let mut app = spawn_as(&pg, ATTACKER, ATTACKER, &hold, &log);
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = job_within(
            &pg,
            "template-drop.sql",
            &[("role", &g1), ("db", &g1)],
            Duration::from_secs(7),
        ) {
            failures.push(format!("generation retired: {why}"));
        }
        let _ = app.wait();
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// Grant options steering DROP OWNED's grantor (managed admin)
// ---------------------------------------------------------------------------------------

/// ATTACK (worked before ab7ec7b with the managed admin; the superuser admin is immune): grant options
/// steer DROP OWNED's grantor. DROP OWNED BY <victim>, run by a non-superuser, revokes as
/// the first role in the admin's own membership list that holds every grant option on the
/// object (acl.c select_best_grantor: the admin itself first, then the roles it is a member
/// of, by OID), and removes only the entries that grantor made. The owner's entry for the
/// victim (victim=r/attacker) stays when the attacker has first given all grant options to
/// the admin itself (octo_app_pr_3's case), or to any role the admin is a member of with a
/// lower OID than the attacker's: an older preview's, the victim's own (octo_app_pr_2's
/// case). No round of revoke-elsewhere.sql changes anything; after 100 rounds the victim's
/// teardown fails, every time, with no race and no session kept open.
#[test]
fn grant_options_given_to_the_admin_or_an_older_preview_never_keep_another_from_its_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.create(VICTIM, "a victim older than the attacker");
        pg.create("octo_app_pr_3", "another victim");
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                &format!(
                    "GRANT ALL ON bait TO {admin} WITH GRANT OPTION;\n\
                     GRANT SELECT ON bait TO octo_app_pr_3;\n\
                     CREATE TABLE bait2 (x int);\n\
                     GRANT ALL ON bait2 TO {VICTIM} WITH GRANT OPTION;\n",
                    admin = pg.admin
                ),
            ),
            "the attacker's grants",
        );
        for victim in [VICTIM, "octo_app_pr_3"] {
            if let Err(why) = drop_within(&pg, victim, Duration::from_secs(60)) {
                failures.push(format!(
                    "{} {victim}: {}\n  left in the attacker's database: {}",
                    pg.admin,
                    last_error(&why),
                    pg.query(
                        ATTACKER,
                        "SELECT string_agg(relname || ' ' || relacl::text, '; ' ORDER BY relname) FROM pg_class WHERE relname LIKE 'bait%'"
                    )
                ));
            }
        }
    }
    none(failures);
}

/// ATTACK (worked before ab7ec7b with the managed admin): the same grant options, given by a generation's
/// code (any repository's default branch) to the admin, with a grant to a preview of
/// another repository. template-seal.sql's DROP OWNED BY <that preview's role> in the
/// template revokes as the admin and removes nothing, without an error; the template is
/// sealed with the grant in it (no one may connect to revoke it any more) and every spare
/// and clone copies it: the victim cannot be torn down while the generation lives (DROP
/// ROLE: "objects in database pv_..._tpl_1"), nor after it (every clone's DROP OWNED fails
/// as above).
#[test]
fn grant_options_a_generation_gives_the_admin_never_keep_a_preview_from_its_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.create(VICTIM, "the victim, of another repository");
        pg.build_template_with(
            1,
            10,
            &format!(
                "GRANT ALL ON items TO {} WITH GRANT OPTION;\nGRANT SELECT ON items TO {VICTIM};\n",
                pg.admin
            ),
        );
        ok(&pg.clone_preview("octo_app_pr_3", 1, 1), "a clone");
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(60)) {
            failures.push(format!(
                "{}: the victim's teardown, the generation alive: {}\n  databases still granting it: {}",
                pg.admin,
                last_error(&why),
                pg.query(
                    "postgres",
                    &format!("SELECT string_agg(DISTINCT d.datname, ', ') FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid WHERE s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = '{VICTIM}')")
                )
            ));
        }
        ok(&pg.drop_generation(1), "the generation retired");
        if pg.roles_named(VICTIM) != "0" {
            if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(60)) {
                failures.push(format!(
                    "{}: the victim's teardown, the generation retired: {}",
                    pg.admin,
                    last_error(&why)
                ));
            }
        }
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// Shared resources without a bound
// ---------------------------------------------------------------------------------------

/// Takes session-level advisory locks (which outlive a rolled-back subtransaction) until the
/// server's shared lock table is full, then keeps the session.
const FILL_LOCK_TABLE: &str = r#"
DO $$
DECLARE
  n int := 0;
BEGIN
  FOR c IN 0..10000 LOOP
    BEGIN
      PERFORM pg_advisory_lock(c * 1000 + i) FROM generate_series(1, 1000) i;
      n := n + 1000;
    EXCEPTION WHEN out_of_memory THEN
      FOR j IN 1..1000 LOOP
        BEGIN
          PERFORM pg_advisory_lock(c * 1000 + j);
          n := n + 1;
        EXCEPTION WHEN out_of_memory THEN
          RAISE NOTICE 'holding % locks', n;
          RETURN;
        END;
      END LOOP;
    END;
  END LOOP;
END $$;
SELECT pg_sleep(60);
"#;

/// A KNOWN LIMIT (the README's Security section says so): one session of a preview's app
/// fills PostgreSQL's shared lock table (max_locks_per_transaction x max_connections
/// entries, shared by every database; nothing bounds one role's share) with advisory locks,
/// which need no table and no privilege (relation locks fill it too). From then on no one can
/// even connect ("FATAL: out of shared memory"): not the admin's Jobs, not other previews'
/// apps, not a superuser, for as long as the attacker's session lasts. No SQL the chart
/// runs can bound it; run it with `--ignored` to see it.
#[test]
#[ignore = "a known limit of a shared PostgreSQL server: no per-role bound on the lock table"]
fn a_preview_filling_the_shared_lock_table_never_stops_other_previews_or_the_admin() {
    let mut failures = vec![];
    for pg in both_admins() {
        attacker(&pg);
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(&pg, ATTACKER, ATTACKER, FILL_LOCK_TABLE, &log);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("holding")
        {
            assert!(
                Instant::now() < deadline,
                "the lock table never filled: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Err(why) = job_within(
            &pg,
            "create.sql",
            &[("role", VICTIM), ("db", VICTIM)],
            Duration::from_secs(20),
        ) {
            failures.push(format!(
                "{} [attacker: {}]",
                why.trim(),
                std::fs::read_to_string(&log).unwrap_or_default().trim()
            ));
        }
        let _ = app.kill();
        let _ = app.wait();
    }
    none(failures);
}

/// Withstood since database.max_connections (the role's CONNECTION LIMIT, 5 here): without
/// it the app could open every connection slot but superuser_reserved_connections, and
/// another preview's create Job (the managed admin is no superuser) and every other
/// preview's app were refused. (max_connections is lowered to 20 to keep the test small.
/// Each session is an app pool's: a refused connection is tried again.)
#[test]
fn a_preview_opening_every_connection_it_can_never_stops_other_previews_or_the_admin() {
    let mut failures = vec![];
    for pg in both_admins() {
        restart_with(&pg, "-c max_connections=20");
        pg.create(VICTIM, "the victim, before the flood");
        ok(
            &pg.chart_sql(
                "create.sql",
                &[
                    ("role", ATTACKER),
                    ("db", ATTACKER),
                    ("max_connections", "5"),
                ],
            ),
            "the attacker's preview, as the chart creates it",
        );
        let mut sessions: Vec<Child> = (0..20)
            .map(|_| {
                // An app's pool: a connection refused is tried again.
                Command::new("sh")
                    .args([
                        "-c",
                        "for i in $(seq 1 1200); do psql -X -c 'SELECT pg_sleep(60)' && break; sleep 0.05; done",
                    ])
                    .env_clear()
                    .envs(pg.env(ATTACKER, ATTACKER))
                    .env("PATH", format!("{}:/usr/bin:/bin", pg.bin.display()))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        wait_until(
            &pg,
            &format!("SELECT count(*) >= 5 FROM pg_stat_activity WHERE usename = '{ATTACKER}'"),
            "the attacker's flood",
        );
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!(
            pg.query(
                "postgres",
                &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{ATTACKER}'")
            ),
            "5",
            "{}: the role's limit holds",
            pg.admin
        );
        if let Err(why) = job_within(
            &pg,
            "create.sql",
            &[("role", "octo_app_pr_3"), ("db", "octo_app_pr_3")],
            Duration::from_secs(20),
        ) {
            failures.push(format!("another preview's create: {}", why.trim()));
        }
        let app = pg
            .psql(VICTIM, VICTIM, &[])
            .args(["-c", "SELECT 1"])
            .output()
            .unwrap();
        if !app.status.success() {
            failures.push(format!(
                "{}: the victim's app cannot connect: {}",
                pg.admin,
                String::from_utf8_lossy(&app.stderr).trim()
            ));
        }
        for session in &mut sessions {
            let _ = session.kill();
            let _ = session.wait();
        }
    }
    none(failures);
}

/// Withstood by refusing the server: a PREPARE TRANSACTION outlives every session,
/// pg_terminate_backend and DROP DATABASE ... WITH (FORCE), and only its preparer or a
/// superuser may finish it (the managed admin may not). One holding a GRANT to another
/// preview's role kept that role's lock for ever, and the attacker's own database could not
/// be dropped ("being used by prepared transactions"). So with max_prepared_transactions
/// above 0 no preview and no generation is provisioned, saying why.
#[test]
fn a_server_that_allows_prepared_transactions_is_refused_saying_why() {
    for pg in both_admins() {
        restart_with(&pg, "-c max_prepared_transactions=5");
        for file in ["create.sql", "template-create.sql"] {
            let refused = failed(&pg.chart_sql(file, &[("role", VICTIM), ("db", VICTIM)]));
            assert!(
                refused.contains("max_prepared_transactions is 5"),
                "{file}: {refused}"
            );
        }
        assert_eq!(pg.roles_named(VICTIM), "0", "{}", pg.admin);
        assert_eq!(pg.databases_named(VICTIM), "0");
    }
}

/// withstood (default configuration): max_prepared_transactions is 0 by default, so the
/// attack above cannot start. (Managed services ship 0 too; an operator raising it opens it.)
#[test]
fn withstood_prepared_transactions_are_off_by_default() {
    let pg = Postgres::start();
    attacker(&pg);
    let refused = failed(&pg.run_as(
        ATTACKER,
        ATTACKER,
        "BEGIN;\nINSERT INTO bait VALUES (1);\nPREPARE TRANSACTION 'kept';\n",
    ));
    assert!(
        refused.contains("prepared transactions are disabled"),
        "{refused}"
    );
}

// ---------------------------------------------------------------------------------------
// A create Job that stops halfway
// ---------------------------------------------------------------------------------------

/// ATTACK (worked before the datconnlimit check; availability, needs no hostile code): create.sql makes the database with
/// CONNECTION LIMIT 0 and PostgreSQL's default ACL (CONNECT and TEMPORARY to PUBLIC), and
/// only access.sql, statements later, revokes PUBLIC. Meanwhile (another create Job running
/// at the same moment: two PRs opened together) or for good (a Job killed in between:
/// eviction, deadline) that database counts as "open to every role" in every other create
/// Job's check, which then refuses to provision anything on the server. template-create.sql
/// and template-clone.sql's copy have the same window. The comment "a run that dies
/// halfway leaves it closed" holds for connections, not for that check.
#[test]
fn a_database_a_create_job_left_halfway_stops_no_other_previews_create() {
    let mut failures = vec![];
    for pg in both_admins() {
        // What create.sql had done for octo_app_pr_9 when its pod went away.
        let halfway = pg
            .psql(pg.admin, "postgres", &[])
            .args([
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                "CREATE ROLE octo_app_pr_9 LOGIN",
                "-c",
                "CREATE DATABASE octo_app_pr_9 TEMPLATE template0 CONNECTION LIMIT 0",
            ])
            .output()
            .unwrap();
        ok(&halfway, "the first half of a create Job");
        if let Err(why) = job_within(
            &pg,
            "create.sql",
            &[("role", VICTIM), ("db", VICTIM)],
            Duration::from_secs(20),
        ) {
            failures.push(why.trim().to_owned());
        }
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// Withstood
// ---------------------------------------------------------------------------------------

/// withstood: role membership and ownership games. PostgreSQL 15.x no longer lets a role
/// administer itself (the session-user rule is gone), so the preview can neither grant its
/// role to another (giving the other its CONNECT, or making a GRANT chain with a grantor
/// other than the owner, which DROP OWNED run as the owner would not revoke) nor take its
/// role from the admin (which would deny the managed admin DROP OWNED in its database and
/// DROP DATABASE ... WITH (FORCE) of its sessions). It cannot give its objects to another
/// role, nor raise its own attributes or connection limit.
#[test]
fn withstood_a_preview_cannot_play_with_role_membership_or_ownership() {
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        let admin = pg.admin;
        for (attack, refusal) in [
            (
                format!("GRANT {ATTACKER} TO {VICTIM}"),
                "must have admin option",
            ),
            (
                format!("GRANT {ATTACKER} TO {VICTIM} WITH ADMIN OPTION"),
                "must have admin option",
            ),
            (
                format!("REVOKE {ATTACKER} FROM {admin}"),
                "must have admin option",
            ),
            (
                format!("ALTER TABLE bait OWNER TO {VICTIM}"),
                "must be member of role",
            ),
            (
                format!("ALTER TABLE bait OWNER TO {admin}"),
                "must be member of role",
            ),
            (
                format!("ALTER ROLE {ATTACKER} CONNECTION LIMIT -1"),
                "permission denied",
            ),
            (
                format!("ALTER ROLE {ATTACKER} CREATEDB"),
                "permission denied",
            ),
            (format!("SET ROLE {admin}"), "permission denied"),
            (
                format!("SET SESSION AUTHORIZATION {VICTIM}"),
                "permission denied",
            ),
            (
                format!("ALTER SCHEMA public OWNER TO {ATTACKER}"),
                "must be owner",
            ),
            ("DROP SCHEMA public CASCADE".to_owned(), "must be owner"),
        ] {
            let refused = failed(&pg.run_as(ATTACKER, ATTACKER, &format!("{attack};")));
            assert!(
                refused.to_lowercase().contains(&refusal.to_lowercase()),
                "{admin}: {attack}: {refused}"
            );
        }
        assert!(
            pg.query(
                "postgres",
                &format!("SELECT pg_has_role('{admin}', '{ATTACKER}', 'MEMBER')")
            ) == "t"
        );
        ok(
            &pg.provision("drop", VICTIM, PASSWORD),
            "the victim's teardown",
        );
        ok(
            &pg.provision("drop", ATTACKER, PASSWORD),
            "the attacker's teardown",
        );
        assert_eq!(pg.roles_named(VICTIM), "0");
        assert_eq!(pg.roles_named(ATTACKER), "0");
    }
}

/// withstood: every kind of grant a preview's code can make to other previews' roles in its
/// own database (column privileges, large objects, default privileges,
/// row-level security policies naming the role, types, functions, schemas, sequences) is
/// undone by revoke-elsewhere.sql's DROP OWNED, with either admin (the managed admin acts as
/// the owner through its membership in the attacker's role). Grant OPTIONS are the next
/// test's: they are not withstood.
#[test]
fn withstood_every_kind_of_grant_to_other_previews_is_revoked_at_their_teardown() {
    let victims = [
        "octo_app_pr_21",
        "octo_app_pr_22",
        "octo_app_pr_23",
        "octo_app_pr_24",
        "octo_app_pr_25",
    ];
    for pg in both_admins() {
        for v in victims {
            pg.create(v, "a victim");
        }
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                r#"
CREATE TABLE t (x int, y int);
ALTER TABLE t ENABLE ROW LEVEL SECURITY;
CREATE POLICY only_21 ON t TO octo_app_pr_21 USING (true);
CREATE POLICY two ON t TO octo_app_pr_21, octo_app_pr_22 USING (true);
SELECT lo_create(4242);
GRANT SELECT, UPDATE ON LARGE OBJECT 4242 TO octo_app_pr_22;
ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO octo_app_pr_23;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO octo_app_pr_23;
GRANT SELECT (x) ON t TO octo_app_pr_24;
CREATE SEQUENCE sq; GRANT USAGE ON SEQUENCE sq TO octo_app_pr_24;
GRANT ALL ON t TO octo_app_pr_25;
CREATE TYPE ty AS (a int); GRANT USAGE ON TYPE ty TO octo_app_pr_25;
CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1';
GRANT EXECUTE ON FUNCTION f() TO octo_app_pr_25;
CREATE SCHEMA s; GRANT USAGE, CREATE ON SCHEMA s TO octo_app_pr_25;
"#,
            ),
            "the attacker's grants",
        );
        for v in victims {
            ok(
                &pg.provision("drop", v, PASSWORD),
                &format!("{}: {v}'s teardown", pg.admin),
            );
            assert_eq!(pg.roles_named(v), "0");
        }
        ok(
            &pg.provision("drop", ATTACKER, PASSWORD),
            "the attacker's teardown",
        );
    }
}

/// withstood: what the preview's code can make that lives outside its tables (trusted
/// extensions, a publication, large objects, settings on its own role, in its database and
/// in others, a changed password, grants to the admin, to predefined roles and to PUBLIC)
/// goes with its teardown; what would outlive it or run code as someone else (a
/// subscription, an event trigger, a tablespace, a foreign server, a replication slot,
/// parameter privileges) is refused to it.
#[test]
fn withstood_nothing_a_preview_makes_outlives_its_teardown() {
    for pg in both_admins() {
        attacker(&pg);
        let admin = pg.admin;
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                &format!(
                    r#"
CREATE EXTENSION hstore; CREATE EXTENSION pgcrypto; CREATE EXTENSION "uuid-ossp";
CREATE EXTENSION lo; CREATE EXTENSION tcn; CREATE EXTENSION pg_trgm; CREATE EXTENSION citext;
CREATE PUBLICATION pub FOR TABLE bait;
SELECT lo_create(0);
GRANT SELECT ON bait TO {admin}, pg_monitor, pg_read_all_data, pg_signal_backend, PUBLIC;
ALTER ROLE {ATTACKER} SET search_path = public, pg_catalog;
ALTER ROLE {ATTACKER} SET work_mem = '1GB';
ALTER ROLE {ATTACKER} IN DATABASE {ATTACKER} SET statement_timeout = 0;
ALTER ROLE {ATTACKER} IN DATABASE postgres SET statement_timeout = 0;
ALTER ROLE {ATTACKER} PASSWORD 'chosen-by-the-attacker';
"#
                ),
            ),
            "the attacker's code",
        );
        for (attack, refusal) in [
            (
                format!("CREATE SUBSCRIPTION sub CONNECTION 'dbname={ATTACKER}' PUBLICATION pub WITH (connect = false)"),
                "must be superuser",
            ),
            (
                "CREATE FUNCTION et() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN END $$; CREATE EVENT TRIGGER et ON ddl_command_start EXECUTE FUNCTION et()".to_owned(),
                "must be superuser",
            ),
            ("CREATE TABLESPACE ts LOCATION '/tmp'".to_owned(), "must be superuser"),
            ("CREATE EXTENSION postgres_fdw".to_owned(), "permission denied"),
            ("CREATE EXTENSION dblink".to_owned(), "permission denied"),
            ("SELECT pg_create_logical_replication_slot('s', 'pgoutput')".to_owned(), "must be superuser or replication role"),
            ("GRANT SET ON PARAMETER work_mem TO PUBLIC".to_owned(), "permission denied"),
            ("ALTER DATABASE postgres SET search_path = public".to_owned(), "must be owner"),
        ] {
            let refused = failed(&pg.run_as(ATTACKER, ATTACKER, &format!("{attack};")));
            assert!(
                refused.to_lowercase().contains(&refusal.to_lowercase()),
                "{admin}: {attack}: {refused}"
            );
        }
        let oid = pg.query(
            "postgres",
            &format!("SELECT oid FROM pg_roles WHERE rolname = '{ATTACKER}'"),
        );
        ok(
            &pg.provision("drop", ATTACKER, PASSWORD),
            "the attacker's teardown",
        );
        assert_eq!(pg.roles_named(ATTACKER), "0");
        assert_eq!(pg.databases_named(ATTACKER), "0");
        assert_eq!(
            pg.query(
                "postgres",
                &format!(
                    "SELECT (SELECT count(*) FROM pg_db_role_setting WHERE setrole = {oid}) + (SELECT count(*) FROM pg_shdepend WHERE refobjid = {oid})"
                )
            ),
            "0",
            "{admin}: nothing of the role's is left"
        );
    }
}

/// withstood: operators and functions planted in the attacker's `public` (the ones the
/// admin's statements in that database would resolve if `public` were searched: `=` on
/// names, format, quote_ident, starts_with, ...) plus a search_path on its own role: the
/// admin's sessions there (access.sql on a rerun of its create Job, revoke-elsewhere.sql
/// when another preview it granted is torn down) run with search_path=pg_catalog,pg_temp
/// and never call them. Each trap records current_user in a table PUBLIC may write.
#[test]
fn withstood_functions_and_operators_planted_in_public_never_run_as_the_admin() {
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                &format!(
                    r#"
CREATE TABLE public.caught (who name, what text);
GRANT INSERT ON public.caught TO PUBLIC;
CREATE FUNCTION public.trap(what text) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO public.caught VALUES (current_user, what);
END $f$;
CREATE FUNCTION public.eq(name, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('= name text'); RETURN $1::text = $2; END $f$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = text, FUNCTION = public.eq);
CREATE FUNCTION public.eqn(name, name) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('= name name'); RETURN $1::text = $2::text; END $f$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.eqn);
CREATE FUNCTION public.format(text, text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('format'); RETURN pg_catalog.format($1, $2); END $f$;
CREATE FUNCTION public.quote_ident(text) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('quote_ident'); RETURN pg_catalog.quote_ident($1); END $f$;
CREATE FUNCTION public.starts_with(text, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('starts_with'); RETURN pg_catalog.starts_with($1, $2); END $f$;
CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('set_config'); RETURN pg_catalog.set_config($1, $2, $3); END $f$;
CREATE FUNCTION public.has_database_privilege(text, oid, text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('has_database_privilege'); RETURN pg_catalog.has_database_privilege($1, $2, $3); END $f$;
ALTER ROLE {ATTACKER} SET search_path = public, pg_catalog;
GRANT SELECT ON bait TO {VICTIM};
"#
                ),
            ),
            "the attacker plants its traps",
        );
        pg.create(
            ATTACKER,
            "the attacker's create Job again (access.sql in its database)",
        );
        ok(
            &pg.provision("drop", VICTIM, PASSWORD),
            "the victim's teardown (DROP OWNED in the attacker's database)",
        );
        assert_eq!(
            pg.query(ATTACKER, "SELECT count(*) FROM public.caught"),
            "0",
            "{}: a trap ran: {}",
            pg.admin,
            pg.query(
                ATTACKER,
                "SELECT string_agg(who || ' ' || what, ', ') FROM public.caught"
            )
        );
        ok(
            &pg.provision("drop", ATTACKER, PASSWORD),
            "the attacker's teardown",
        );
    }
}

/// withstood (as designed, and only for that generation): a generation's code granting a
/// role the managed admin cannot act for (an operator's `reporting` role, say) fails that
/// generation's seal, naming the role; other previews and other generations go on, and the
/// failed generation is still retired. The superuser admin revokes it and seals. Grants to
/// predefined roles (pinned: no pg_shdepend row) and to the admin are harmless and left.
#[test]
fn withstood_a_generation_granting_a_role_the_admin_cannot_act_for_fails_only_its_own_seal() {
    for pg in both_admins() {
        pg.query("postgres", "CREATE ROLE reporting NOLOGIN");
        let g1 = generation(1);
        let vars = [("role", g1.as_str()), ("db", g1.as_str())];
        ok(
            &pg.chart_sql("template-create.sql", &vars),
            "template create",
        );
        ok(
            &pg.run_as(
                &g1,
                &g1,
                &format!(
                    "CREATE TABLE items (id int PRIMARY KEY, name text);\
                     GRANT SELECT ON items TO reporting, pg_monitor, pg_read_all_data, {};",
                    pg.admin
                ),
            ),
            "the generation's code",
        );
        let seal = pg.chart_sql("template-seal.sql", &vars);
        if pg.admin == "admin" {
            let text = format!("{}{}", String::from_utf8_lossy(&seal.stdout), failed(&seal));
            assert!(text.contains("DROP OWNED BY reporting"), "{text}");
            assert!(text.contains("permission denied to drop objects"), "{text}");
        } else {
            ok(&seal, "the superuser's seal");
            ok(&pg.clone_preview("octo_app_pr_3", 1, 1), "a clone");
            assert_eq!(
                pg.query(
                    "octo_app_pr_3",
                    "SELECT has_table_privilege('reporting', 'items', 'SELECT')"
                ),
                "f"
            );
            ok(
                &pg.provision("drop", "octo_app_pr_3", PASSWORD),
                "the clone's teardown",
            );
        }
        pg.create(VICTIM, "another preview");
        pg.build_template(2, 10);
        ok(
            &pg.clone_preview("octo_app_pr_4", 2, 1),
            "a clone of another generation",
        );
        ok(&pg.drop_generation(1), "the generation retired");
        assert_eq!(pg.roles_named(&g1), "0");
    }
}

/// withstood: reaching another preview's data. The attacker's role may not connect to
/// another preview's database, a sealed generation or its spares, nor `postgres` or
/// `template1`; it does not see the query text of another role's session; it may not read
/// server files or measure another database.
#[test]
fn withstood_a_preview_reaches_no_other_previews_data() {
    for pg in both_admins() {
        pg.build_template(1, 10);
        ok(&pg.top_up(1, 1), "a spare");
        pg.create(VICTIM, "the victim");
        ok(
            &pg.run_as(
                VICTIM,
                VICTIM,
                "CREATE TABLE secrets (s text); INSERT INTO secrets VALUES ('victim-secret');",
            ),
            "the victim's data",
        );
        attacker(&pg);
        let mut databases = vec![
            VICTIM.to_owned(),
            generation(1),
            "postgres".into(),
            "template1".into(),
        ];
        databases.extend(pg.spares(1));
        for db in &databases {
            let refused = failed(&pg.run_as(ATTACKER, db, "SELECT 1;"));
            assert!(
                refused.contains("permission denied for database")
                    || refused.contains("not currently accepting connections"),
                "{}: {db}: {refused}",
                pg.admin
            );
        }
        let mut app = pg
            .psql(VICTIM, VICTIM, &[])
            .args(["-c", "SELECT pg_sleep(20), 'victim-secret-query'"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_session(&pg, VICTIM, "victim-secret-query");
        let seen = ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                "\\pset tuples_only on\n\\pset format unaligned\nSELECT 'seen:' || count(*) FROM pg_stat_activity WHERE query LIKE '%victim-secret-query%' AND pid <> pg_backend_pid();\n",
            ),
            "the attacker looks at pg_stat_activity",
        );
        let _ = app.kill();
        let _ = app.wait();
        assert!(seen.contains("seen:0"), "{}: {seen}", pg.admin);
        for attack in [
            "SELECT pg_read_file('PG_VERSION')",
            "COPY bait FROM '/etc/hostname'",
            "SELECT lo_import('/etc/hostname')",
            "SELECT pg_database_size('octo_app_pr_2')",
            "SELECT * FROM pg_authid",
        ] {
            let refused = failed(&pg.run_as(ATTACKER, ATTACKER, &format!("{attack};")));
            assert!(
                refused.contains("permission denied") || refused.contains("must be superuser"),
                "{}: {attack}: {refused}",
                pg.admin
            );
        }
    }
}
