//! Attacks on the fixes of ab7ec7b and 5606be6 (the second attack review of #36): the
//! teardown's sessions-ending and lock bounds, the owner's DROP OWNED (GRANT victim TO
//! owner; SET ROLE owner), the pvgone_ set-aside roles and the seal's revoke.
//!
//! Every test asserts the SAFE outcome, so it FAILS while the attack works. Tests of attacks
//! that are withstood are marked "withstood"; those still called "ATTACK" failed before the
//! teardown hardening that followed this review.

use super::hostile::*;
use super::template::generation;
use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// A raw PostgreSQL client, for an app that reconnects faster than psql starts
// ---------------------------------------------------------------------------------------

fn socket(pg: &Postgres) -> PathBuf {
    pg.data().join(".s.PGSQL.5432")
}

/// The protocol 3.0 startup packet (trust authentication: nothing else is asked).
fn startup(stream: &mut UnixStream, user: &str, db: &str) -> std::io::Result<()> {
    let mut body = 196608i32.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", db)] {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut message = ((body.len() + 4) as i32).to_be_bytes().to_vec();
    message.extend(body);
    stream.write_all(&message)
}

/// Reads until ReadyForQuery (true) or an ErrorResponse or the end (false).
fn until_ready(stream: &mut UnixStream) -> bool {
    loop {
        let mut head = [0u8; 5];
        if stream.read_exact(&mut head).is_err() {
            return false;
        }
        let len = i32::from_be_bytes(head[1..5].try_into().unwrap()) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        if stream.read_exact(&mut body).is_err() {
            return false;
        }
        match head[0] {
            b'Z' => return true,
            b'E' => return false,
            _ => {}
        }
    }
}

fn send_query(stream: &mut UnixStream, sql: &str) -> std::io::Result<()> {
    let mut message = vec![b'Q'];
    message.extend_from_slice(&((sql.len() + 5) as i32).to_be_bytes());
    message.extend_from_slice(sql.as_bytes());
    message.push(0);
    stream.write_all(&message)
}

/// The attacker's app, written to win the race against a teardown's pg_terminate_backend:
/// `sentinels` sessions run `sentinel_sql`; beside them `parked` connections are open but
/// have not sent their startup packet yet (a backend that has not read it shows no role and
/// no database in pg_stat_activity, so no terminate picks it; authentication_timeout gives
/// it a minute, every managed service's SCRAM exchange can be parked the same way). The
/// moment a sentinel is killed, every parked connection logs in and runs `strike_sql`,
/// keeping it open. Repeats until stopped.
struct Racer {
    stop: Arc<AtomicBool>,
    strikes: Arc<AtomicU32>,
    thread: Option<JoinHandle<()>>,
}

impl Racer {
    fn start(pg: &Postgres, sentinels: usize, sentinel_sql: &str, strikers: &[String]) -> Racer {
        let stop = Arc::new(AtomicBool::new(false));
        let strikes = Arc::new(AtomicU32::new(0));
        let path = socket(pg);
        let (sentinel_sql, strikers) = (sentinel_sql.to_owned(), strikers.to_vec());
        let (stop2, strikes2) = (stop.clone(), strikes.clone());
        let ready = Arc::new(AtomicBool::new(false));
        let ready2 = ready.clone();
        let thread = std::thread::spawn(move || {
            let mut held: Vec<UnixStream> = vec![];
            while !stop2.load(Ordering::SeqCst) {
                let mut watch = vec![];
                for _ in 0..sentinels {
                    let mut s = UnixStream::connect(&path).unwrap();
                    startup(&mut s, ATTACKER, ATTACKER).unwrap();
                    if until_ready(&mut s) {
                        send_query(&mut s, &sentinel_sql).unwrap();
                        s.set_nonblocking(true).unwrap();
                        watch.push(s);
                    }
                }
                let mut parked: Vec<UnixStream> = strikers
                    .iter()
                    .map(|_| UnixStream::connect(&path).unwrap())
                    .collect();
                ready2.store(true, Ordering::SeqCst);
                let cycle = Instant::now() + Duration::from_secs(30);
                let mut fired = false;
                while !fired && !stop2.load(Ordering::SeqCst) && Instant::now() < cycle {
                    for s in &mut watch {
                        let mut byte = [0u8; 1];
                        match s.read(&mut byte) {
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            _ => fired = true,
                        }
                    }
                    if !fired {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                if fired {
                    for (p, sql) in parked.iter_mut().zip(&strikers) {
                        if startup(p, ATTACKER, ATTACKER).is_ok() && until_ready(p) {
                            let _ = send_query(p, sql);
                        }
                    }
                    strikes2.fetch_add(1, Ordering::SeqCst);
                    held.append(&mut parked);
                }
            }
            drop(held);
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "the racer never got ready");
            std::thread::sleep(Duration::from_millis(10));
        }
        Racer {
            stop,
            strikes,
            thread: Some(thread),
        }
    }

    fn strikes(&self) -> u32 {
        self.strikes.load(Ordering::SeqCst)
    }
}

impl Drop for Racer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. Locks the teardown does not bound: a database object
// ---------------------------------------------------------------------------------------

/// The attacker's session: holds AccessShareLock on each database in `dbs` (ALTER ROLE
/// <self> IN DATABASE <any> SET ..., allowed to every role on itself and needing no CONNECT,
/// takes it: user.c AlterRoleSet, shdepLockAndCheckObject) for `seconds`.
fn lock_databases(dbs: &[&str], seconds: u32) -> String {
    let mut sql = String::from("BEGIN;\n");
    for db in dbs {
        sql.push_str(&format!(
            "ALTER ROLE {ATTACKER} IN DATABASE \"{db}\" SET work_mem = '64kB';\n"
        ));
    }
    sql.push_str(&format!("SELECT pg_sleep({seconds});\nCOMMIT;\n"));
    sql
}

/// ATTACK: DROP DATABASE ... WITH (FORCE) takes AccessExclusiveLock on the database object
/// (dbcommands.c dropdb) and waits, with no lock_timeout (drop.sql sets none), for any
/// holder. FORCE ends only the sessions connected to that database. The attacker's app, in
/// its own database, holds AccessShareLock on the victim's database object for as long as
/// it keeps a transaction open (ALTER ROLE <itself> IN DATABASE <victim's> SET ...), so the
/// victim's teardown hangs until the Job's activeDeadlineSeconds, every retry. One session
/// can lock every database on the server at once.
#[test]
fn a_lock_on_another_previews_database_object_never_holds_up_its_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &lock_databases(&[VICTIM], 25),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(15)) {
            failures.push(why);
        }
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
    }
    none(failures);
}

/// ATTACK: the same lock on a template generation's database, and on its spare clone:
/// template-drop.sql's DROP DATABASE of the generation hangs, and so does every clone that
/// claims a spare (template-clone.sql's ALTER DATABASE <spare> RENAME TO ... takes
/// AccessExclusiveLock too, inside a block whose EXCEPTION WHEN OTHERS never fires while it
/// waits).
#[test]
fn a_lock_on_a_generations_or_spares_database_object_never_holds_up_a_clone_or_retirement() {
    let mut failures = vec![];
    for pg in both_admins() {
        pg.build_template(1, 10);
        ok(&pg.top_up(1, 1), "a spare");
        let spares = pg.spares(1);
        assert_eq!(spares.len(), 1);
        attacker(&pg);
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &lock_databases(&[&spares[0]], 25),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        let clone = job_within(
            &pg,
            "create.sql",
            &[
                ("role", "octo_app_pr_3"),
                ("db", "octo_app_pr_3"),
                ("template", &generation(1)),
                ("template_role", &generation(1)),
                ("clone", "1"),
            ],
            Duration::from_secs(15),
        );
        if let Err(why) = clone {
            failures.push(format!("a clone claiming the spare: {why}"));
        }
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &lock_databases(&[&generation(1)], 25),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = job_within(
            &pg,
            "template-drop.sql",
            &[("role", &generation(1)), ("db", &generation(1))],
            Duration::from_secs(15),
        ) {
            failures.push(format!("the generation retired: {why}"));
        }
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// 2. The granting database closed by the attacker's own size guard (managed admin)
// ---------------------------------------------------------------------------------------

/// ATTACK (managed admin; withstood since the guard closes by privilege, not by
/// CONNECTION LIMIT 0): the attacker grants the victim something, then writes past
/// database.max_size: its guard (guard.sql) closed its database, CONNECTION LIMIT 0. A
/// non-superuser is not exempt from that limit (postinit.c CheckMyDatabase), so the
/// victim's teardown, which must connect there to revoke (revoke-elsewhere.sql keeps only
/// datallowconn), fails "too many connections for database", every retry, until the
/// attacker's preview is destroyed or reseeded. The superuser admin is exempt.
#[test]
fn a_granting_database_closed_by_its_size_guard_never_fails_anothers_teardown() {
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
        // The attacker's own guard: past its bound (1 kB here), it closes the database.
        let guard = pg.chart_sql(
            "guard.sql",
            &[("role", ATTACKER), ("db", ATTACKER), ("max_bytes", "1000")],
        );
        assert!(failed(&guard).contains("takes no more connections"));
        assert_eq!(
            pg.may_connect(ATTACKER, ATTACKER),
            "f",
            "closed by privilege"
        );
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(60)) {
            failures.push(why);
        }
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// 3. Racing the terminate: reconnecting before the admin acts
// ---------------------------------------------------------------------------------------

/// ATTACK: revoke-elsewhere.sql ends the sessions in the granting database from
/// `postgres`, then opens a new connection there (\c) and runs DROP OWNED, ~10-20 ms later.
/// The attacker's app reconnects in that window (connections parked before their startup
/// packet are not in pg_stat_activity, so not ended) and, in an open transaction, updates
/// the granting table's pg_class row again (a GRANT it already made). DROP OWNED waits on
/// that row, and lock_timeout (10s) fails the victim's teardown, every retry: the
/// open-transaction attack ab7ec7b fixed, back.
#[test]
fn reconnecting_right_after_the_terminate_never_fails_anothers_teardown() {
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
        let strike = format!("BEGIN; GRANT SELECT ON bait TO {VICTIM}; SELECT pg_sleep(30)");
        let racer = Racer::start(&pg, 2, "SELECT pg_sleep(600)", &vec![strike; 3]);
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(40)) {
            failures.push(format!(
                "{why} [the app struck {} time(s)]",
                racer.strikes()
            ));
        }
        drop(racer);
        end_sessions(&pg);
    }
    none(failures);
}

/// ATTACK (a narrower race, tried on three victims per admin): drop-role.sql ends the
/// holders of an uncommitted GRANT to the role, then runs DROP ROLE ~1-2 ms later. Sessions
/// queued behind the holder on the same table's row, and the attacker's parked connections
/// (which log in when the holder is killed and grant the role again on tables of their
/// own), race for a lock on the role; if one gets it before DROP ROLE asks, DROP ROLE waits
/// lock_timeout and the first DO block, which catches only dependent_objects_still_exist,
/// fails the teardown ("canceling statement due to lock timeout").
#[test]
fn regranting_right_after_drop_roles_terminate_never_fails_anothers_teardown() {
    let mut failures = vec![];
    for pg in both_admins() {
        attacker(&pg);
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                "CREATE TABLE s1 (x int); CREATE TABLE s2 (x int); CREATE TABLE s3 (x int); CREATE TABLE s4 (x int);",
            ),
            "the attacker's tables",
        );
        for n in 2..5 {
            let victim = format!("octo_app_pr_{n}");
            pg.create(&victim, "a victim");
            // A teardown takes a lock holder's database from it (end-holders.sql) until its
            // next sync: the attacker's, before each round.
            pg.create(ATTACKER, "the attacker's next sync");
            let strikers: Vec<String> = (1..5)
                .map(|i| format!("BEGIN; GRANT SELECT ON s{i} TO {victim}; SELECT pg_sleep(20)"))
                .collect();
            // Three sentinels with the same grant: the first holds the lock on the role, the
            // others wait behind it on bait's row and go on the moment it is killed.
            let racer = Racer::start(
                &pg,
                3,
                &format!("BEGIN; GRANT SELECT ON bait TO {victim}; SELECT pg_sleep(600)"),
                &strikers,
            );
            wait_until(
                &pg,
                &format!(
                    "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_authid'::regclass AND objid = (SELECT oid FROM pg_roles WHERE rolname = '{victim}')"
                ),
                "the sentinel's lock on the victim",
            );
            if let Err(why) = drop_within(&pg, &victim, Duration::from_secs(30)) {
                failures.push(format!(
                    "{victim}: {why} [the app struck {} time(s)]",
                    racer.strikes()
                ));
            }
            drop(racer);
            end_sessions(&pg);
        }
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// 4. pvgone_ roles
// ---------------------------------------------------------------------------------------

/// Sets `role` aside as drop-role.sql does when DROP ROLE finds it granted something (what
/// a regranting race the design accepts leaves), returning its new name.
fn set_aside(pg: &Postgres, role: &str) -> String {
    let gone = pg.query(
        "postgres",
        &format!("SELECT 'pvgone_' || oid FROM pg_roles WHERE rolname = '{role}'"),
    );
    pg.query(
        "postgres",
        &format!("ALTER ROLE {role} RENAME TO {gone}; ALTER ROLE {gone} NOLOGIN PASSWORD NULL"),
    );
    gone
}

/// ATTACK: every teardown's sweep tries DROP ROLE on each pvgone_ role, waiting lock_timeout
/// (10 s) for each one a session holds a lock on (lock_not_available is caught; nothing ends
/// those holders: drop-role.sql ends only the holders of a lock on the role it drops). The
/// attacker keeps the set-aside roles it made granted (so they stay) and holds an
/// uncommitted GRANT to each: every teardown on the server, of any preview, takes 10 s more
/// per such role; 60 of them take every teardown past its Job's activeDeadlineSeconds
/// (600 s). Here two pvgone_ roles, and an innocent preview's teardown must end within 15 s.
#[test]
fn held_set_aside_roles_never_slow_every_teardown_on_the_server() {
    let mut failures = vec![];
    for pg in both_admins() {
        attacker(&pg);
        let mut gone = vec![];
        for n in [2, 3] {
            let victim = format!("octo_app_pr_{n}");
            pg.create(&victim, "a victim");
            ok(
                &pg.run_as(
                    ATTACKER,
                    ATTACKER,
                    &format!("GRANT SELECT ON bait TO {victim};"),
                ),
                "the grant, kept",
            );
            // What drop.sql leaves when the regranting race is won, made here without it.
            pg.query("postgres", &format!("DROP DATABASE {victim} WITH (FORCE)"));
            gone.push(set_aside(&pg, &victim));
        }
        pg.create("octo_app_pr_9", "an innocent preview");
        ok(
            &pg.run_as(ATTACKER, ATTACKER, "CREATE TABLE bait2 (x int);"),
            "another table",
        );
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &format!(
                "BEGIN;\nGRANT SELECT ON bait2 TO {};\nSELECT pg_sleep(40);\nCOMMIT;\n",
                gone.join(", ")
            ),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        if let Err(why) = drop_within(&pg, "octo_app_pr_9", Duration::from_secs(15)) {
            failures.push(format!("an innocent preview's teardown: {why}"));
        }
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
    }
    none(failures);
}

/// ATTACK (low: a retry succeeds): two teardowns at once both sweep the same droppable
/// pvgone_ role: the second's DROP ROLE fails "tuple concurrently deleted" (XX000) or "role
/// ... does not exist" (42704), neither caught, and its Job fails. An attacker holding a
/// lock on a pvgone_ role the sweep meets first lines both sweeps up (both wait the same 10
/// s there).
#[test]
fn two_teardowns_sweeping_the_same_set_aside_role_both_succeed() {
    let mut failures = vec![];
    for pg in both_admins() {
        attacker(&pg);
        for n in [2, 3] {
            let victim = format!("octo_app_pr_{n}");
            pg.create(&victim, "a victim");
            ok(
                &pg.run_as(
                    ATTACKER,
                    ATTACKER,
                    &format!("GRANT SELECT ON bait TO {victim};"),
                ),
                "the grant",
            );
            pg.query("postgres", &format!("DROP DATABASE {victim} WITH (FORCE)"));
            set_aside(&pg, &victim);
        }
        // The sweep's order (no ORDER BY): hold the first, free the second.
        let order = pg.query(
            "postgres",
            "SELECT string_agg(rolname, ',') FROM pg_roles WHERE rolname ~ '^pvgone_[0-9]+$'",
        );
        let order: Vec<&str> = order.split(',').collect();
        ok(
            &pg.run_as(
                ATTACKER,
                ATTACKER,
                &format!("REVOKE ALL ON bait FROM {};", order[1]),
            ),
            "the second set-aside role freed (its granting database gone, say)",
        );
        ok(
            &pg.run_as(ATTACKER, ATTACKER, "CREATE TABLE bait2 (x int);"),
            "another table",
        );
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &format!(
                "BEGIN;\nGRANT SELECT ON bait2 TO {};\nSELECT pg_sleep(40);\nCOMMIT;\n",
                order[0]
            ),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        pg.create("octo_app_pr_8", "an innocent preview");
        pg.create("octo_app_pr_9", "another");
        let a = std::thread::scope(|s| {
            let one = s.spawn(|| drop_within(&pg, "octo_app_pr_8", Duration::from_secs(35)));
            std::thread::sleep(Duration::from_millis(300));
            let two = s.spawn(|| drop_within(&pg, "octo_app_pr_9", Duration::from_secs(35)));
            [one.join().unwrap(), two.join().unwrap()]
        });
        for r in a {
            if let Err(why) = r {
                failures.push(why);
            }
        }
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
    }
    none(failures);
}

// ---------------------------------------------------------------------------------------
// Withstood
// ---------------------------------------------------------------------------------------

/// withstood (PostgreSQL 15+): a role may not grant or revoke membership in itself, nor
/// in another role, nor make or take a pvgone_ name. (PostgreSQL 13 and 14, which the
/// README still allows, let a session whose session user is the role GRANT/REVOKE
/// membership in it: see the ignored test below for what follows.)
#[test]
fn withstood_a_preview_changes_no_role_membership_and_takes_no_pvgone_name() {
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        for (attack, refusal) in [
            (
                format!("GRANT {ATTACKER} TO {VICTIM}"),
                "must have admin option",
            ),
            (
                format!("REVOKE {ATTACKER} FROM {}", pg.admin),
                "must have admin option",
            ),
            (
                format!("GRANT {VICTIM} TO {ATTACKER}"),
                "must have admin option",
            ),
            ("CREATE ROLE pvgone_1".to_owned(), "permission denied"),
            (
                format!("ALTER ROLE {ATTACKER} RENAME TO pvgone_1"),
                "cannot be renamed",
            ),
            (
                format!("ALTER ROLE {ATTACKER} CONNECTION LIMIT -1"),
                "permission denied",
            ),
        ] {
            let refused = failed(&pg.run_as(ATTACKER, ATTACKER, &format!("{attack};")));
            assert!(
                refused.to_lowercase().contains(&refusal.to_lowercase()),
                "{}: {attack}: {refused}",
                pg.admin
            );
        }
    }
}

/// A KNOWN-VERSION ATTACK, emulated (ignored: this harness runs PostgreSQL 15, which refuses
/// the first step; run with --ignored to see the consequence). On PostgreSQL 13 and 14 the
/// attacker's own session may `GRANT <attacker> TO <victim>` (self-administration, removed in
/// 15). revoke-elsewhere.sql's `GRANT <victim> TO <attacker>` in the attacker's database
/// then fails "role <victim> is a member of role <attacker>" (a membership loop), with
/// either admin, every round and every retry: the victim can never be torn down while the
/// attacker lives. Here the superuser makes the membership the attacker would make itself.
#[test]
#[ignore = "the first step needs PostgreSQL 13 or 14: emulated by the superuser"]
fn pg13_14_a_victim_made_a_member_of_the_attacker_is_still_torn_down() {
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
            "the grant",
        );
        pg.query("postgres", &format!("GRANT {ATTACKER} TO {VICTIM}"));
        if let Err(why) = drop_within(&pg, VICTIM, Duration::from_secs(60)) {
            failures.push(why);
        }
    }
    none(failures);
}

/// withstood: the admin's `SET ROLE <attacker>` in the attacker's database, holding the
/// victim's privileges for a moment, runs none of the attacker's code: not role settings
/// (ALTER ROLE ... SET applies at login only, not on SET ROLE), not functions in row-level
/// security policies naming the victim, in domain checks, column defaults, triggers or
/// rules, and the victim's privileges are gone once the teardown is done (the attacker's
/// role is not left a member of anything).
#[test]
fn withstood_the_owners_drop_owned_runs_none_of_the_attackers_code() {
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
CREATE FUNCTION public.trap(what text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  INSERT INTO public.caught VALUES (current_user, what);
  RETURN true;
END $f$;
GRANT EXECUTE ON FUNCTION public.trap(text) TO PUBLIC;
CREATE FUNCTION public.trig() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM public.trap('trigger'); RETURN NULL; END $f$;
CREATE DOMAIN public.d AS int CHECK (public.trap('domain'));
CREATE TABLE public.t (x public.d, y int DEFAULT (public.trap('default'))::int);
CREATE TRIGGER t AFTER INSERT OR UPDATE OR DELETE ON public.t FOR EACH STATEMENT EXECUTE FUNCTION public.trig();
ALTER TABLE public.t ENABLE ROW LEVEL SECURITY;
CREATE POLICY p ON public.t TO {VICTIM} USING (public.trap('policy'));
CREATE POLICY q ON public.t TO {VICTIM}, {ATTACKER} USING (public.trap('policy2'));
CREATE VIEW public.v AS SELECT * FROM public.t;
CREATE RULE r AS ON INSERT TO public.v DO INSTEAD SELECT public.trap('rule');
GRANT ALL ON public.t, public.v TO {VICTIM} WITH GRANT OPTION;
GRANT USAGE ON DOMAIN public.d TO {VICTIM};
ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO {VICTIM};
ALTER ROLE {ATTACKER} SET search_path = public, pg_catalog;
ALTER ROLE {ATTACKER} IN DATABASE {ATTACKER} SET search_path = public, pg_catalog;
ALTER ROLE {ATTACKER} SET default_transaction_read_only = on;
"#
                ),
            ),
            "the attacker's traps",
        );
        ok(
            &pg.provision("drop", VICTIM, PASSWORD),
            "the victim's teardown",
        );
        assert_eq!(pg.roles_named(VICTIM), "0");
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
        assert_eq!(
            pg.query(
                "postgres",
                &format!("SELECT count(*) FROM pg_auth_members WHERE member = (SELECT oid FROM pg_roles WHERE rolname = '{ATTACKER}')")
            ),
            "0",
            "{}: the attacker's role is left a member of something",
            pg.admin
        );
    }
}

/// withstood: a generation's code racing its own seal the same way (parked connections
/// logging in when its sessions are ended, to grant another preview's role again after
/// the seal's revoke): the seal revokes the generation's CONNECT before it ends its
/// sessions, so they are refused, and the sealed generation grants the victim nothing.
#[test]
fn withstood_a_generation_racing_its_seal_leaves_no_grant_in_the_template() {
    for pg in both_admins() {
        pg.create(VICTIM, "the victim, another repository's");
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
                &format!("CREATE TABLE items (id int); GRANT SELECT ON items TO {VICTIM};"),
            ),
            "the generation's code",
        );
        // The racer logs in as ATTACKER: use a generation-named clone of it here.
        let strike = format!("GRANT SELECT ON items TO {VICTIM}");
        let mut sentinel = UnixStream::connect(socket(&pg)).unwrap();
        startup(&mut sentinel, &g1, &g1).unwrap();
        assert!(until_ready(&mut sentinel));
        send_query(&mut sentinel, "SELECT pg_sleep(600)").unwrap();
        let mut parked: Vec<UnixStream> = (0..3)
            .map(|_| UnixStream::connect(socket(&pg)).unwrap())
            .collect();
        let g = g1.clone();
        let watcher = std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let _ = sentinel.read(&mut byte);
            let mut refused = 0;
            for p in &mut parked {
                if startup(p, &g, &g).is_ok() && until_ready(p) {
                    let _ = send_query(p, &strike);
                    let _ = until_ready(p);
                } else {
                    refused += 1;
                }
            }
            refused
        });
        ok(&pg.chart_sql("template-seal.sql", &vars), "the seal");
        let refused = watcher.join().unwrap();
        assert_eq!(refused, 3, "{}: a parked connection got in", pg.admin);
        ok(&pg.clone_preview("octo_app_pr_3", 1, 1), "a clone");
        assert_eq!(
            pg.query(
                "postgres",
                &format!("SELECT count(*) FROM pg_shdepend WHERE refobjid = (SELECT oid FROM pg_roles WHERE rolname = '{VICTIM}') AND dbid <> (SELECT oid FROM pg_database WHERE datname = '{VICTIM}')")
            ),
            "0",
            "{}: the template or its clone grants the victim",
            pg.admin
        );
        ok(
            &pg.provision("drop", VICTIM, PASSWORD),
            "the victim's teardown",
        );
    }
}

/// withstood: the size guard and the create Job of another preview are not held up by the
/// same database-object lock that holds DROP DATABASE (ALTER DATABASE ... CONNECTION LIMIT,
/// OWNER, IS_TEMPLATE, REVOKE, COMMENT and connecting take no conflicting lock).
#[test]
fn withstood_a_lock_on_another_previews_database_never_holds_up_its_guard_or_create() {
    for pg in both_admins() {
        pg.create(VICTIM, "the victim");
        attacker(&pg);
        let log = pg.dir.path().join("attacker.log");
        let mut app = spawn_as(
            &pg,
            ATTACKER,
            ATTACKER,
            &lock_databases(&[VICTIM, "template0", "postgres"], 25),
            &log,
        );
        wait_for_session(&pg, ATTACKER, "pg_sleep");
        job_within(
            &pg,
            "create.sql",
            &[("role", VICTIM), ("db", VICTIM)],
            Duration::from_secs(10),
        )
        .unwrap();
        job_within(
            &pg,
            "create.sql",
            &[("role", "octo_app_pr_5"), ("db", "octo_app_pr_5")],
            Duration::from_secs(10),
        )
        .unwrap();
        let guard = job_within(
            &pg,
            "guard.sql",
            &[("role", VICTIM), ("db", VICTIM), ("max_bytes", "1000")],
            Duration::from_secs(10),
        );
        let why = guard.unwrap_err();
        assert!(why.contains("takes no more connections"), "{why}");
        let _ = app.kill();
        let _ = app.wait();
        end_sessions(&pg);
    }
}

/// A KNOWN-VERSION ATTACK, emulated (ignored, as the one above; managed admin): on
/// PostgreSQL 13 and 14 the attacker's session may also `REVOKE <attacker> FROM <admin>`.
/// The managed admin then is no member of the attacker's role, so drop-role.sql's and
/// revoke-elsewhere.sql's terminates skip the attacker's sessions (pg_has_role(...,
/// 'MEMBER') is false; it could not signal them anyway), and an uncommitted GRANT held open
/// holds DROP ROLE until lock_timeout fails the teardown: the first review's attack, without
/// a race. (guard.sql's pg_terminate_backend of the attacker's sessions fails the same way:
/// "must be a member of the role whose process is being terminated".)
#[test]
#[ignore = "the first step needs PostgreSQL 13 or 14: emulated by the superuser"]
fn pg13_14_an_attacker_leaving_the_admins_membership_never_holds_up_a_teardown() {
    let pg = Postgres::start_managed();
    pg.create(VICTIM, "the victim");
    attacker(&pg);
    pg.query("postgres", &format!("REVOKE {ATTACKER} FROM admin"));
    let log = pg.dir.path().join("attacker.log");
    let mut app = spawn_as(
        &pg,
        ATTACKER,
        ATTACKER,
        &format!("BEGIN;\nGRANT SELECT ON bait TO {VICTIM};\nSELECT pg_sleep(25);\nCOMMIT;\n"),
        &log,
    );
    wait_for_session(&pg, ATTACKER, "pg_sleep");
    let result = drop_within(&pg, VICTIM, Duration::from_secs(20));
    let _ = app.kill();
    let _ = app.wait();
    end_sessions(&pg);
    none(result.err().into_iter().collect());
}
