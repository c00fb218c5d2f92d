//! The sweeper with a manual clock: expiry, the warning before it, pinned previews, quotas
//! that queue or evict, a crash in the middle of a pass, the lease, and the dry run.

mod common;

use std::sync::Arc;

use common::{Delivery, TestApp};
use previewd::clock::Clock;
use previewd::reconcile::Reconciler;
use previewd::sink::{DirectorySink, Sink};
use previewd::sweep::Sweeper;
use serde_json::json;

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

async fn app_with(policy: &str) -> TestApp {
    TestApp::start_with(&format!("[defaults]\n{policy}\n")).await
}

fn sink(app: &TestApp) -> Sink {
    Sink::Directory(DirectorySink::new(app.dir.path().join("rendered")))
}

fn reconciler(app: &TestApp) -> Arc<Reconciler> {
    Arc::new(common::directory_reconciler(app))
}

fn sweeper(app: &TestApp) -> Sweeper {
    Sweeper::new(
        app.pool().clone(),
        app.app.config.clone(),
        Arc::new(app.clock.clone()),
    )
    .with_sink(sink(app))
}

/// PR `number` of the Hello-World fixture, opened by `author`.
fn opened(number: u64, author: &str) -> Delivery {
    Delivery::fixture("pull_request.opened")
        .number(number)
        .edit(|body| body["pull_request"]["user"]["login"] = json!(author))
        .guid(&format!("opened-{number}"))
}

async fn live(app: &TestApp) -> Vec<(i64, String, String)> {
    app.rows("SELECT number, desired, observed FROM previews ORDER BY number")
        .await
}

#[tokio::test]
async fn a_preview_is_warned_exactly_once_then_expires_and_its_history_stays() {
    let app = app_with("ttl = \"72h\"\nwarn_before = \"24h\"").await;
    let (reconciler, sweeper) = (reconciler(&app), sweeper(&app));
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();

    app.clock.advance(47 * HOUR);
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        0,
        "not yet in the window"
    );
    app.clock.advance(2 * HOUR);
    sweeper.pass(false).await.unwrap();
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        1,
        "warned exactly once"
    );
    let notice: String = app.scalar("SELECT body FROM notices").await;
    assert!(
        notice.contains("/preview extend 2d") && notice.contains("@alice"),
        "{notice}"
    );

    app.clock.advance(24 * HOUR);
    let (_, report) = sweeper.pass(false).await.unwrap().unwrap();
    assert_eq!(report.expired, 1);
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0, "torn down, row gone");
    assert_eq!(app.recorded("expired").await, 1);
    assert_eq!(app.recorded("destroyed").await, 1, "history kept");
}

#[tokio::test]
async fn an_extended_preview_is_not_warned_again_until_its_new_window() {
    let app = app_with("ttl = \"72h\"\nwarn_before = \"24h\"").await;
    let (reconciler, sweeper) = (reconciler(&app), sweeper(&app));
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    app.clock.advance(50 * HOUR);
    sweeper.pass(false).await.unwrap();
    assert_eq!(app.recorded("expiry_warning").await, 1);

    // A push restarts the clock: a new expiry, 72 h from now.
    app.send(&Delivery::push(
        "4444444444444444444444444444444444444444",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    sweeper.pass(false).await.unwrap();
    app.clock.advance(40 * HOUR);
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        1,
        "outside the new window"
    );
    app.clock.advance(10 * HOUR);
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        2,
        "warned for the new expiry"
    );
    assert_eq!(app.recorded("expired").await, 0);
}

#[tokio::test]
async fn a_pinned_preview_is_untouched_until_its_maximum_lifetime() {
    let app = app_with("ttl = \"1d\"\nwarn_before = \"2h\"\nmax_lifetime = \"5d\"").await;
    let (reconciler, sweeper) = (reconciler(&app), sweeper(&app));
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    // `/preview keep`, as the command records it.
    app.execute("UPDATE previews SET keep = 1, expires_at = created_at + 5 * 86400")
        .await;
    app.clock.advance(2 * DAY);
    app.send(&Delivery::push(
        "4444444444444444444444444444444444444444",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    app.clock.advance(2 * DAY);
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expired").await,
        0,
        "past its ttl, and a push did not shorten the keep"
    );
    app.clock.advance(DAY);
    sweeper.pass(false).await.unwrap();
    assert_eq!(
        app.recorded("expired").await,
        1,
        "the maximum lifetime ends it"
    );
    let reason: String = app.reason_recorded("expired").await;
    assert!(reason.contains("maximum lifetime"), "{reason}");
}

#[tokio::test]
async fn at_the_cap_previews_queue_and_are_promoted_in_order() {
    let app = app_with("max_per_repo = 1").await;
    let reconciler = reconciler(&app);
    for number in [2, 3, 4] {
        app.send(&opened(number, "alice")).await;
        app.clock.advance(1);
    }
    reconciler.pass().await.unwrap();
    let states: Vec<String> = live(&app).await.into_iter().map(|r| r.2).collect();
    assert_eq!(states, ["applied", "queued", "queued"]);

    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let rows = live(&app).await;
    assert_eq!(
        rows.iter().map(|r| (r.0, r.2.as_str())).collect::<Vec<_>>(),
        [(3, "applied"), (4, "queued")],
        "first come, first served"
    );
}

#[tokio::test]
async fn eviction_picks_the_least_recently_active_unpinned_preview() {
    let app = app_with("max_per_repo = 2\nat_cap = \"evict\"").await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    app.clock.advance(60);
    app.send(&opened(3, "bob")).await;
    app.clock.advance(60);
    reconciler.pass().await.unwrap();
    // #2 is the oldest, but pinned: #3 goes.
    app.execute("UPDATE previews SET keep = 1, expires_at = expires_at + 86400 WHERE number = 2")
        .await;
    app.send(&opened(4, "carol")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let numbers: Vec<i64> = live(&app).await.into_iter().map(|r| r.0).collect();
    assert_eq!(numbers, [2, 4]);
    let reason: String = app.reason_recorded("evicted").await;
    assert!(reason.contains("#4"), "{reason}");
    let notices: i64 = app
        .scalar("SELECT COUNT(*) FROM notices WHERE kind = 'evicted' AND number = 3")
        .await;
    assert_eq!(notices, 1, "the evicted PR is told why");
}

#[tokio::test]
async fn a_crash_in_the_middle_of_a_sweep_leaves_nothing_done_twice_or_forgotten() {
    let app = app_with("ttl = \"1d\"\nwarn_before = \"1h\"").await;
    let reconciler = reconciler(&app);
    for number in [2, 3, 4, 5] {
        app.send(&opened(number, "alice")).await;
    }
    reconciler.pass().await.unwrap();
    app.clock.advance(2 * DAY);
    let first = sweeper(&app);
    let now = app.clock.now();
    let mut plan = first.plan(now, false).await.unwrap();
    assert_eq!(plan.expire.len(), 4);
    // The process dies after two of the four expiries were recorded.
    plan.expire.truncate(2);
    first.apply(&plan, now).await.unwrap();
    drop(first);

    let restarted = sweeper(&app);
    let (_, report) = restarted.pass(false).await.unwrap().unwrap();
    assert_eq!(report.expired, 2, "only the two not yet recorded");
    assert_eq!(app.recorded("expired").await, 4, "each once");
    restarted.pass(false).await.unwrap();
    assert_eq!(app.recorded("expired").await, 4);
}

#[tokio::test]
async fn two_sweepers_on_one_state_never_both_act() {
    let app = app_with("ttl = \"1d\"").await;
    app.send(&opened(2, "alice")).await;
    app.clock.advance(2 * DAY);
    let (a, b) = (sweeper(&app), sweeper(&app));
    let now = app.clock.now();
    // `a` holds the lease (as if mid-pass) while `b` tries.
    assert!(
        previewd::db::take_lease(app.pool(), "sweep", "a-holder", now + 300, now)
            .await
            .unwrap()
    );
    assert!(b.pass(false).await.unwrap().is_none(), "b skips");
    assert_eq!(app.recorded("expired").await, 0);
    previewd::db::release_lease(app.pool(), "sweep", "a-holder")
        .await
        .unwrap();
    let (_, report) = a.pass(false).await.unwrap().unwrap();
    assert_eq!(report.expired, 1);
    // A lease left by a crashed holder lapses.
    assert!(
        previewd::db::take_lease(app.pool(), "sweep", "crashed", now + 300, now)
            .await
            .unwrap()
    );
    app.clock.advance(301);
    assert!(b.pass(false).await.unwrap().is_some());
}

#[tokio::test]
async fn a_dry_run_changes_no_row_and_no_file() {
    let app = app_with("ttl = \"1d\"\nwarn_before = \"12h\"").await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    app.send(&opened(3, "bob")).await;
    reconciler.pass().await.unwrap();
    app.execute("UPDATE previews SET expires_at = expires_at + 86400 WHERE number = 3")
        .await;
    // An Application file this state wrote that no preview owns, and one another previewd
    // (another instance label) wrote: only the first is an orphan.
    let instance = previewd::db::instance_id(app.pool()).await.unwrap();
    let labelled = |id: &str| {
        format!("kind: Application\nmetadata:\n  labels:\n    previewd.dev/instance: \"{id}\"\n")
    };
    let rendered = app.dir.path().join("rendered");
    std::fs::write(
        rendered.join("someone-else-pr-9-helpers.yaml"),
        labelled(&instance),
    )
    .unwrap();
    std::fs::write(
        rendered.join("other-previewd-pr-1-helpers.yaml"),
        labelled("0123456789abcdef"),
    )
    .unwrap();
    app.clock.advance(DAY + 13 * HOUR);

    let dump = |app: &TestApp| {
        let pool = app.pool().clone();
        async move {
            let mut all = Vec::new();
            for table in ["previews", "history", "notices", "deliveries", "leases"] {
                let rows: Vec<String> = sqlx::query_scalar(&format!(
                    "SELECT quote(rowid) || '|' || (SELECT COUNT(*) FROM {table}) FROM {table}"
                ))
                .fetch_all(&pool)
                .await
                .unwrap_or_default();
                all.push(format!("{table}: {rows:?}"));
            }
            let state: Vec<(i64, String, Option<i64>, i64)> = sqlx::query_as(
                "SELECT number, desired, warned_expires_at, expires_at FROM previews ORDER BY number",
            )
            .fetch_all(&pool)
            .await
            .unwrap();
            all.push(format!("{state:?}"));
            all
        }
    };
    let files = |app: &TestApp| {
        let mut names: Vec<_> = std::fs::read_dir(app.dir.path().join("rendered"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let (rows_before, files_before) = (dump(&app).await, files(&app));
    let (plan, _) = sweeper(&app).pass(true).await.unwrap().unwrap();
    let lines = plan.lines(true);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("expire codertocat/hello-world#2")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("warn codertocat/hello-world#3")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("someone-else-pr-9-helpers")),
        "{lines:?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("other-previewd")),
        "another instance's Applications are not ours to judge: {lines:?}"
    );
    assert_eq!(dump(&app).await, rows_before, "no row changed");
    assert_eq!(files(&app), files_before, "no file changed");
}

/// What a PR destroyed at `at` leaves behind: its history, a finished command, a posted
/// notice, its GitHub thread and its close.
async fn gone_pr(app: &TestApp, number: i64, at: i64) {
    let pool = app.pool();
    for (what, when) in [("opened", at - DAY), ("destroyed", at)] {
        sqlx::query("INSERT INTO history (repo, number, what, actor, at) VALUES ('acme/api', ?1, ?2, 'previewd', ?3)")
            .bind(number)
            .bind(what)
            .bind(when)
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO commands (repo, number, comment_id, actor, association, line, status, created_at, done_at, answered)
         VALUES ('acme/api', ?1, ?1, 'dev', 'OWNER', '/preview keep', 'done', ?2, ?2, 1)",
    )
    .bind(number)
    .bind(at - DAY)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO notices (repo, number, kind, body, created_at, posted_at) VALUES ('acme/api', ?1, 'expiry_warning', 'soon', ?2, ?2)")
        .bind(number)
        .bind(at - DAY)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO github_threads (repo, number, final_pending, updated_at) VALUES ('acme/api', ?1, 0, ?2)")
        .bind(number)
        .bind(at)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES ('acme/api', ?1, ?2)")
        .bind(number)
        .bind(at)
        .execute(pool)
        .await
        .unwrap();
}

/// Rows of `table` about PR `number` of acme/api.
async fn rows_of(app: &TestApp, table: &str, number: i64) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM {table} WHERE repo = 'acme/api' AND number = ?1"
    ))
    .bind(number)
    .fetch_one(app.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_sweep_forgets_what_belongs_to_previews_gone_past_the_window_and_keeps_the_recent() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    // 25 PRs destroyed 40 days ago (#1 the latest of them), one 2 days ago.
    for n in 1..=25 {
        gone_pr(&app, n, now - 40 * DAY - n * 60).await;
    }
    gone_pr(&app, 100, now - 2 * DAY).await;
    // A live preview keeps even its oldest history.
    app.send(&opened(2, "alice")).await;
    sqlx::query("INSERT INTO history (repo, number, what, actor, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', ?1)")
        .bind(now - 90 * DAY)
        .execute(app.pool())
        .await
        .unwrap();
    // An old delivery record goes after its own (shorter) retention.
    sqlx::query("INSERT INTO deliveries (hook_id, guid, event, outcome, received_at) VALUES ('', 'old', 'ping', 'accepted', ?1)")
        .bind(now - 8 * DAY)
        .execute(app.pool())
        .await
        .unwrap();

    let (_, report) = sweeper(&app).pass(false).await.unwrap().unwrap();

    // The dashboard lists the 20 most recently destroyed: #100 and #1..=#19 keep their history.
    for n in (1..=19).chain([100]) {
        assert_eq!(
            rows_of(&app, "history", n).await,
            2,
            "#{n} is shown as recent"
        );
    }
    for n in 20..=25 {
        assert_eq!(
            rows_of(&app, "history", n).await,
            0,
            "#{n} is gone past the window"
        );
    }
    for n in 1..=25 {
        assert_eq!(
            rows_of(&app, "closed_prs", n).await,
            1,
            "a close is kept at any age: it is what stops a replayed opened"
        );
    }
    for table in ["commands", "notices", "github_threads"] {
        for n in 1..=25 {
            assert_eq!(rows_of(&app, table, n).await, 0, "{table} of #{n}");
        }
        assert_eq!(
            rows_of(&app, table, 100).await,
            1,
            "{table} of #100 is recent"
        );
    }
    let live: i64 = app
        .scalar("SELECT COUNT(*) FROM history WHERE repo = 'codertocat/hello-world' AND number = 2")
        .await;
    assert_eq!(live, 2, "a live preview's history stays");
    assert_eq!(app.delivery_outcome("old").await, None);
    assert_eq!(report.pruned, 1);
    assert_eq!(report.forgotten, 6 * 2 + 25 * 3);

    // Nothing is forgotten twice, and history stays append-only outside retention.
    let (_, again) = sweeper(&app).pass(false).await.unwrap().unwrap();
    assert_eq!((again.forgotten, again.pruned), (0, 0));
    let tamper = sqlx::query("DELETE FROM history WHERE number = 100")
        .execute(app.pool())
        .await;
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
}

#[tokio::test]
async fn a_busy_previews_history_is_capped_to_its_newest_rows_in_batches() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    app.send(&opened(2, "alice")).await;
    let mut tx = app.pool().begin().await.unwrap();
    for i in 0..1_700 {
        sqlx::query("INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', ?1, ?2)")
            .bind(format!("push {i}"))
            .bind(now - 1_700 + i)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let (_, report) = sweeper(&app).pass(false).await.unwrap().unwrap();
    let kept: Vec<String> = app
        .scalars("SELECT what FROM history WHERE number = 2 ORDER BY at, id")
        .await;
    assert_eq!(kept.len() as i64, previewd::sweep::HISTORY_CAP);
    assert_eq!(
        report.forgotten,
        1_701 - 1_000,
        "the 'opened' row was the newest"
    );
    assert_eq!(kept.last().unwrap(), "opened", "the newest stays");
    let oldest: String = app
        .scalar("SELECT reason FROM history WHERE number = 2 ORDER BY at, id LIMIT 1")
        .await;
    assert_eq!(oldest, "push 701", "the oldest go");
}

#[tokio::test]
async fn a_backlog_of_expiries_is_worked_off_over_passes_a_bounded_read_each() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    let backlog = previewd::db::DUE_PER_PASS + 100;
    let mut tx = app.pool().begin().await.unwrap();
    for n in 1..=backlog {
        sqlx::query(
            "INSERT INTO previews (repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
                 fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
             VALUES ('acme/api', ?1, 1, 't', 'dev', 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', 'b', 'main',
                 0, 0, 'deployed', 'ready', 'in-cluster', ?2, ?2, ?2, ?2 - ?1)",
        )
        .bind(n)
        .bind(now - DAY)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let sweeper = sweeper(&app);
    let (_, first) = sweeper.pass(false).await.unwrap().unwrap();
    let (_, second) = sweeper.pass(false).await.unwrap().unwrap();
    assert_eq!(
        (first.expired as i64, second.expired as i64),
        (previewd::db::DUE_PER_PASS, 100)
    );
}

/// Orphan removal acts on a plan made earlier (a pass's, or one a dry run printed): a preview
/// created since may own a listed name. The sweeper looks again before recording what must
/// go, and deletes nothing itself; the reconciler deletes it, only what carries this state's
/// labels.
#[tokio::test]
async fn orphan_removal_looks_again_before_deleting_and_spares_what_a_preview_now_owns() {
    let app = TestApp::start_with("[sweep]\nremove_orphans = true\n").await;
    let reconciler = reconciler(&app);
    // Enough previews tracked for three orphans to look like leftovers, not a wrong state.
    for (number, author) in [(2, "alice"), (3, "bob"), (5, "dave"), (6, "erin")] {
        app.send(&opened(number, author)).await;
    }
    reconciler.pass().await.unwrap();
    let instance = previewd::db::instance_id(app.pool()).await.unwrap();
    let file = |name: &str, managed: bool| {
        let managed = if managed {
            "    app.kubernetes.io/managed-by: previewd\n"
        } else {
            ""
        };
        std::fs::write(
            app.dir.path().join("rendered").join(format!("{name}.yaml")),
            format!("kind: Application\nmetadata:\n  labels:\n{managed}    previewd.dev/instance: \"{instance}\"\n"),
        )
        .unwrap();
    };
    let key = "codertocat/hello-world#4".parse().unwrap();
    let four = previewd::naming::Names::of(&key, "preview.localhost").application;
    file(&four, true);
    let left_behind = "pv-left-behind-0000000000000000-pr-9-helpers";
    file(left_behind, true);
    // Listed by its instance label, but not previewd's (no managed-by): left, not an error.
    let hand_made = "pv-hand-made-0000000000000000-pr-8-helpers";
    file(hand_made, false);
    let sweeper = sweeper(&app);
    let plan = sweeper.plan(common::NOW, true).await.unwrap();
    assert_eq!(plan.orphans.len(), 3, "{:?}", plan.orphans);

    // PR 4 is opened (and owns that name) between the plan and its removal.
    app.send(&opened(4, "carol")).await;
    let report = sweeper.apply(&plan, common::NOW).await.unwrap();
    assert_eq!(
        report.orphans_recorded, 2,
        "the hand-made one too: the reconciler's delete tells it is not previewd's"
    );
    let rendered = app.dir.path().join("rendered");
    let exists = |name: &str| rendered.join(format!("{name}.yaml")).exists();
    assert!(exists(left_behind), "the sweeper records, never deletes");

    reconciler.pass().await.unwrap();
    assert!(exists(&four), "PR 4's own is spared");
    assert!(!exists(left_behind), "the reconciler removed it");
    assert!(exists(hand_made), "not previewd's: left alone");
    assert_eq!(app.count("orphans").await, 0, "done with");
}

/// The reconciler looks once more before deleting a recorded orphan: a preview opened after
/// the sweep owns the name, and its Application is not deleted.
#[tokio::test]
async fn a_recorded_orphan_a_preview_came_to_own_is_spared_by_the_reconciler() {
    let app = TestApp::start_with("[sweep]\nremove_orphans = true\n").await;
    let reconciler = reconciler(&app);
    let key = "codertocat/hello-world#4".parse().unwrap();
    let four = previewd::naming::Names::of(&key, "preview.localhost").application;
    previewd::db::record_orphans(app.pool(), std::slice::from_ref(&four), common::NOW)
        .await
        .unwrap();
    app.send(&opened(4, "carol")).await;
    reconciler.pass().await.unwrap();
    let path = app.dir.path().join("rendered").join(format!("{four}.yaml"));
    assert!(path.exists(), "PR 4's Application stays");
    assert_eq!(app.count("orphans").await, 0, "and the record is dropped");
}

/// Orphans recorded while `sweep.remove_orphans` was on are not deleted by a previewd
/// restarted with it off: the operator may have turned it off because of what it was
/// about to delete. The records go; the Application stays.
#[tokio::test]
async fn recorded_orphans_are_left_alone_once_removal_is_turned_off() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app);
    let instance = previewd::db::instance_id(app.pool()).await.unwrap();
    let left_behind = "pv-left-behind-0000000000000000-pr-9-helpers";
    let path = app
        .dir
        .path()
        .join("rendered")
        .join(format!("{left_behind}.yaml"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        format!("kind: Application\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: previewd\n    previewd.dev/instance: \"{instance}\"\n"),
    )
    .unwrap();
    previewd::db::record_orphans(app.pool(), &[left_behind.to_owned()], common::NOW)
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert!(path.exists(), "removal is off: the Application stays");
    assert_eq!(app.count("orphans").await, 0, "and the record is dropped");
}
