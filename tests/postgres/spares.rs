//! Spare clones of a template generation (#16), as the chart's SQL makes and claims them on
//! the real server: the pool keeper tops a sealed generation's pool up (never before the
//! seal, never past the count), a preview's clone claims a spare by renaming it (no file
//! copied) and owns everything in it, two previews claiming at once get two databases, an
//! empty pool falls back to the copy, and dropping the generation drops its spares first.

use super::template::generation;
use super::*;

impl Postgres {
    /// One pass of generation `n`'s pool keeper, asking for `spares`.
    pub(crate) fn top_up(&self, n: u32, spares: u32) -> Output {
        self.chart_sql(
            "template-spares.sql",
            &[
                ("template", &generation(n)),
                ("spares", &spares.to_string()),
            ],
        )
    }

    /// Generation 1's pool keeper (files/template-spares.sh) as the chart runs it, keeping 2
    /// spares, checking every 0.2 s, with `env` added; its stderr dropped.
    fn keeper(&self, env: &[(&str, &str)]) -> Command {
        let mut command = Command::new("sh");
        command
            .arg(chart_file("template-spares.sh"))
            .env_clear()
            .envs(self.env("postgres", "postgres"))
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("TEMPLATE", generation(1))
            .env("SPARES", "2")
            .env("INTERVAL", "0.2")
            .env("SQL_DIR", chart_file(""))
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::null());
        command
    }

    /// Generation `n`'s spares, by name.
    pub(crate) fn spares(&self, n: u32) -> Vec<String> {
        let prefix = self.query(
            "postgres",
            &format!(
                "SELECT 'pvs_' || substr(encode(sha256(convert_to('{}', 'UTF8')), 'hex'), 1, 16) || '_'",
                generation(n)
            ),
        );
        let listed = self.query(
            "postgres",
            &format!("SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_database WHERE starts_with(datname, '{prefix}')"),
        );
        listed
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

#[test]
fn a_generations_pool_is_topped_up_only_once_it_is_sealed_and_never_past_the_count() {
    let pg = Postgres::start();
    let db = generation(1);
    let vars = [("role", db.as_str()), ("db", db.as_str())];
    ok(&pg.chart_sql("template-create.sql", &vars), "create");
    ok(&pg.top_up(1, 2), "top up while building");
    assert!(
        pg.spares(1).is_empty(),
        "no spare of a generation still being built"
    );
    ok(&pg.chart_sql("template-seal.sql", &vars), "seal");
    ok(&pg.top_up(1, 2), "top up");
    let spares = pg.spares(1);
    assert_eq!(spares.len(), 2, "{spares:?}");
    ok(&pg.top_up(1, 2), "top up again");
    assert_eq!(pg.spares(1), spares, "a full pool is left as it is");
    // Closed to every preview role, as the template is.
    pg.create("octo_app_pr_3", "a preview");
    let refused = failed(&pg.run_as("octo_app_pr_3", &spares[0], "SELECT 1"));
    assert!(
        refused.contains("not currently accepting connections"),
        "{refused}"
    );
}

#[test]
fn a_preview_claims_a_spare_instead_of_copying_and_owns_everything_in_it() {
    let pg = Postgres::start();
    pg.build_template(1, 1000);
    ok(&pg.top_up(1, 2), "top up");
    let before = pg.spares(1);
    let cloned = ok(&pg.clone_preview("octo_app_pr_7", 1, 1), "clone");
    assert!(
        cloned.contains(&format!("claimed spare clone {}", before[0])),
        "{cloned}"
    );
    assert_eq!(pg.spares(1), before[1..], "one spare taken");
    assert_eq!(pg.recorded_clone("octo_app_pr_7"), "previewd clone 1");
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "1000"
    );
    assert_eq!(
        pg.query(
            "postgres",
            "SELECT pg_get_userbyid(datdba), datconnlimit FROM pg_database WHERE datname = 'octo_app_pr_7'"
        ),
        format!("{}|-1", pg.admin),
        "the admin's, and open to the preview"
    );
    assert_eq!(
        pg.query(
            "octo_app_pr_7",
            "SELECT string_agg(DISTINCT pg_get_userbyid(relowner), ',') FROM pg_class WHERE relname IN ('items', 'schema_migrations')"
        ),
        "octo_app_pr_7"
    );
    pg.create("octo_app_pr_8", "another preview");
    assert_eq!(pg.may_connect("octo_app_pr_8", "octo_app_pr_7"), "f");
    // A reseed claims the next spare; with the pool empty, the next one copies.
    let reseeded = ok(&pg.clone_preview("octo_app_pr_7", 1, 2), "reseed");
    assert!(reseeded.contains("claimed spare clone"), "{reseeded}");
    assert!(pg.spares(1).is_empty());
    let copied = ok(
        &pg.clone_preview("octo_app_pr_9", 1, 1),
        "clone, pool empty",
    );
    assert!(!copied.contains("claimed"), "{copied}");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM items"),
        "1000"
    );
}

#[test]
fn two_previews_claiming_the_last_spare_at_once_both_get_their_own_database() {
    let pg = Postgres::start();
    pg.build_template(1, 1000);
    ok(&pg.top_up(1, 1), "top up");
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| pg.clone_preview("octo_app_pr_1", 1, 1));
        let b = s.spawn(|| pg.clone_preview("octo_app_pr_2", 1, 1));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (a, b) = (ok(&a, "first"), ok(&b, "second"));
    assert_eq!(
        [&a, &b]
            .iter()
            .filter(|o| o.contains("claimed spare clone"))
            .count(),
        1,
        "{a}\n{b}"
    );
    for db in ["octo_app_pr_1", "octo_app_pr_2"] {
        assert_eq!(pg.query(db, "SELECT count(*) FROM items"), "1000", "{db}");
        assert_eq!(pg.recorded_clone(db), "previewd clone 1");
    }
    assert!(pg.spares(1).is_empty());
}

#[test]
fn dropping_a_generation_drops_its_spares_and_then_its_role() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    ok(&pg.top_up(1, 2), "top up");
    ok(&pg.clone_preview("octo_app_pr_7", 1, 1), "a clone lives on");
    assert_eq!(pg.spares(1).len(), 1);
    ok(&pg.drop_generation(1), "drop");
    assert!(pg.spares(1).is_empty());
    assert_eq!(
        pg.query(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_roles WHERE rolname = '{}'",
                generation(1)
            )
        ),
        "0"
    );
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "100"
    );
}

#[test]
fn the_pool_keeper_fills_the_pool_after_the_seal_and_refills_what_a_preview_takes() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    let mut keeper = pg
        .keeper(&[])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let wait_for = |count: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while pg.spares(1).len() != count {
            assert!(std::time::Instant::now() < deadline, "{:?}", pg.spares(1));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    wait_for(2);
    ok(&pg.clone_preview("octo_app_pr_7", 1, 1), "claim");
    wait_for(2);
    keeper.kill().unwrap();
    keeper.wait().unwrap();
}

/// A session holding `sql`'s locks in an open transaction, until `end`.
struct Held {
    session: std::process::Child,
    stdin: std::process::ChildStdin,
}

impl Held {
    /// Ends the transaction (`COMMIT` or `ROLLBACK`) and the session.
    fn end(mut self, how: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{how};").unwrap();
        drop(self.stdin);
        self.session.wait().unwrap();
    }
}

impl Postgres {
    /// `sql` run as the admin in a transaction left open.
    fn hold(&self, sql: &str) -> Held {
        use std::io::Write;
        let mut session = self
            .psql("postgres", "postgres", &[])
            .args(["-v", "ON_ERROR_STOP=1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = session.stdin.take().unwrap();
        writeln!(stdin, "BEGIN; {sql}").unwrap();
        stdin.flush().unwrap();
        Held { session, stdin }
    }

    /// Waits (up to 30 s) until a statement containing `start` waits for a lock.
    fn waits_for_a_lock(&self, start: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while self.query(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%{start}%'"
            ),
        ) == "0"
        {
            assert!(std::time::Instant::now() < deadline, "{start} never waited");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// The pool keeper's copy runs in the server, not in the keeper's pod: a pod stopped with
/// its Application (terminationGracePeriodSeconds 5) leaves its CREATE DATABASE running to
/// the end (a big template takes minutes), and the PostDelete drop meets it. The drop must
/// still drop that spare and the role, in one run: not list the spares before the copy
/// commits, drop the template after it and then fail on DROP ROLE (the spare's objects
/// belong to the role), leaving the spare of a template that is gone.
#[test]
fn dropping_a_generation_while_the_keepers_copy_is_still_running_drops_that_spare_and_the_role() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    // Something holds the template for a moment (any lock CREATE DATABASE waits behind),
    // so that the keeper's copy is in flight when the drop starts.
    let holder = pg.hold(&format!("COMMENT ON DATABASE {} IS 'held';", generation(1)));
    let held = std::time::Instant::now();
    while pg.query(
        "postgres",
        "SELECT count(*) FROM pg_locks WHERE locktype = 'object' AND mode = 'ShareUpdateExclusiveLock' AND granted",
    ) == "0"
    {
        assert!(held.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (top_up, dropped) = std::thread::scope(|s| {
        let keeper = s.spawn(|| pg.top_up(1, 1));
        pg.waits_for_a_lock("CREATE DATABASE");
        let teardown = s.spawn(|| pg.drop_generation(1));
        pg.waits_for_a_lock("DROP DATABASE");
        holder.end("ROLLBACK");
        (keeper.join().unwrap(), teardown.join().unwrap())
    });
    ok(&top_up, "the keeper's last copy");
    ok(&dropped, "the drop, in one run");
    assert!(pg.spares(1).is_empty(), "{:?}", pg.spares(1));
    assert_eq!(
        pg.query(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_roles WHERE rolname = '{}'",
                generation(1)
            )
        ),
        "0"
    );
}

/// Two previews' create Jobs at once (what `two_previews_claiming_the_last_spare_at_once_...`
/// runs, and fails about one run in six): both begin with the same REVOKE on `postgres`,
/// which rewrites that database's catalog row. Held for a moment by the other Job (here,
/// deterministically), the second REVOKE waits and then fails "tuple concurrently updated":
/// the preview's create Job fails instead of claiming its spare.
#[test]
fn a_preview_created_while_another_previews_create_job_closes_postgres_still_gets_its_database() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    ok(&pg.top_up(1, 2), "top up");
    // The other Job's first statement, its transaction not yet committed.
    let other = pg.hold("REVOKE CONNECT, TEMPORARY ON DATABASE postgres FROM PUBLIC;");
    let cloned = std::thread::scope(|s| {
        let clone = s.spawn(|| pg.clone_preview("octo_app_pr_7", 1, 1));
        pg.waits_for_a_lock("REVOKE CONNECT");
        other.end("COMMIT");
        clone.join().unwrap()
    });
    let cloned = ok(&cloned, "the clone beside another preview's create Job");
    assert!(cloned.contains("claimed spare clone"), "{cloned}");
    assert_eq!(
        pg.query("octo_app_pr_7", "SELECT count(*) FROM items"),
        "100"
    );
}

#[test]
fn a_pool_keeper_that_cannot_reach_the_server_backs_off_instead_of_retrying_every_few_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let mut keeper = Command::new("sh")
        .arg(chart_file("template-spares.sh"))
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("PGHOST", dir.path())
        .env("TEMPLATE", generation(1))
        .env("SPARES", "2")
        .env("INTERVAL", "0.1")
        .env("SQL_DIR", chart_file(""))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(keeper.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("trying again in") {
        let mut line = String::new();
        assert!(
            std::io::BufRead::read_line(&mut stderr, &mut line).unwrap() > 0,
            "{said}"
        );
        said += &line;
    }
    keeper.kill().unwrap();
    keeper.wait().unwrap();
    assert!(said.contains("trying again in 10 s"), "{said}");
}

/// Spares are made ahead of need: with `database.server_size`, only while the server's
/// databases, the new spare included, fit within it (never what fills the disk).
#[test]
fn spares_are_made_only_while_the_server_has_room_for_them() {
    for pg in [Postgres::start(), Postgres::start_managed()] {
        pg.build_template(1, 1000);
        let used: i64 = pg
            .query("postgres", "SELECT pg_tablespace_size('pg_default')")
            .parse()
            .unwrap();
        let size: i64 = pg
            .query(
                "postgres",
                &format!("SELECT pg_database_size('{}')", generation(1)),
            )
            .parse()
            .unwrap();
        let top_up = |room: i64| {
            pg.chart_sql(
                "template-spares.sql",
                &[
                    ("template", &generation(1)),
                    ("spares", "3"),
                    ("room", &room.to_string()),
                ],
            )
        };
        let said = ok(&top_up(used + size + size / 2), "room for one");
        assert!(said.contains("room for 1 of 3"), "{said}");
        assert_eq!(pg.spares(1).len(), 1, "{}", pg.admin);
        ok(&top_up(used), "no room at all");
        assert_eq!(pg.spares(1).len(), 1);
        ok(&top_up(used + 10 * size), "room for the rest");
        assert_eq!(pg.spares(1).len(), 3);
    }
}

/// The pool keeper hands `ROOM` (database.server_size) to each top-up: with no room, it
/// makes nothing and says why.
#[test]
fn the_pool_keeper_makes_no_spare_without_room_on_the_server() {
    let pg = Postgres::start();
    pg.build_template(1, 100);
    let keeper = pg
        .keeper(&[("ROOM", "1048576")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(pg.spares(1).is_empty(), "{:?}", pg.spares(1));
    let pid = keeper.id().to_string();
    assert!(Command::new("kill").arg(&pid).status().unwrap().success());
    let said = String::from_utf8_lossy(&keeper.wait_with_output().unwrap().stdout).into_owned();
    assert!(said.contains("room for 0 of 2"), "{said}");
}
