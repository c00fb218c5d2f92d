//! Sweep passes: a crash in the middle leaves nothing done twice or forgotten, the lease
//! keeps two sweepers from both acting, and a dry run changes nothing.

use super::*;
use previewd::clock::Clock;

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
    let mut plan = first.plan(now, Orphans::Skip).await.unwrap();
    assert_eq!(plan.expire.len(), 4);
    // The process dies after two of the four expiries were recorded.
    plan.expire.truncate(2);
    first.apply(&plan, now).await.unwrap();
    drop(first);

    let restarted = sweeper(&app);
    let (_, report) = restarted.pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.expired, 2, "only the two not yet recorded");
    assert_eq!(app.recorded("expired").await, 4, "each once");
    restarted.pass(Pass::Record).await.unwrap();
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
        previewd::db::take_lease(app.state(), "sweep", "a-holder", now + 300, now)
            .await
            .unwrap()
    );
    assert!(b.pass(Pass::Record).await.unwrap().is_none(), "b skips");
    assert_eq!(app.recorded("expired").await, 0);
    previewd::db::release_lease(app.state(), "sweep", "a-holder")
        .await
        .unwrap();
    let (_, report) = a.pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.expired, 1);
    // A lease left by a crashed holder lapses.
    assert!(
        previewd::db::take_lease(app.state(), "sweep", "crashed", now + 300, now)
            .await
            .unwrap()
    );
    app.clock.advance(301);
    assert!(b.pass(Pass::Record).await.unwrap().is_some());
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
    let instance = previewd::db::instance_id(app.state()).await.unwrap();
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

    let files = |app: &TestApp| {
        let mut names: Vec<_> = std::fs::read_dir(app.dir.path().join("rendered"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let (rows_before, files_before) = (dump(&app).await, files(&app));
    let (plan, _) = sweeper(&app).pass(Pass::DryRun).await.unwrap().unwrap();
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

/// previewd runs every task on one thread: a sweep due at the same moment as the
/// reconciler's full pass (both from the start: the sweep every minute, the pass every
/// 30 s) would share it with the pass, each waiting on the other's turns.
#[test]
fn sweeps_after_the_first_run_between_the_reconcilers_full_passes() {
    use previewd::sweep::due;
    use std::time::Duration;
    let resync = previewd::reconcile::RESYNC.as_secs();
    assert_eq!(due(0, Duration::from_secs(60)), Some(Duration::ZERO));
    for period in [30, 60, 90, 120, 300, 3600] {
        for k in 1..200 {
            let at = due(k, Duration::from_secs(period)).unwrap();
            assert_ne!(
                at.as_secs() % resync,
                0,
                "sweep {k} of every {period} s at {at:?}"
            );
            assert!(at >= Duration::from_secs(period * u64::from(k)), "{at:?}");
        }
    }
    // An interval too long for a clock is never due again, not a panic.
    assert_eq!(due(2, Duration::MAX / 2 + Duration::from_secs(1)), None);
    assert_eq!(due(1, Duration::MAX), None);
}

/// Shutdown comes before a pass that is due (the first is due at once), every time.
#[tokio::test]
async fn a_sweeper_told_to_stop_stops_before_a_pass_that_is_due() {
    let app = app_with("ttl = \"72h\"\nwarn_before = \"24h\"").await;
    app.send(&opened(2, "alice")).await;
    reconciler(&app).pass().await.unwrap();
    app.clock.advance(73 * HOUR);
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    for _ in 0..20 {
        sweeper(&app).run(cancel.clone()).await;
    }
    let desired: Vec<String> = app.scalars("SELECT desired FROM previews").await;
    assert_eq!(desired, ["deployed"], "no pass ran, so nothing expired");
    // Due indeed: one pass expires it.
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.expired, 1);
}

/// Every row of the tables a pass could write, by key, and each preview's expiry state:
/// what a dry run must leave as it was (the same SQL on both stores).
async fn dump(app: &TestApp) -> Vec<String> {
    let mut all = Vec::new();
    for table in ["previews", "history", "notices"] {
        let ids: Vec<i64> = app
            .scalars(&format!("SELECT id FROM {table} ORDER BY id"))
            .await;
        all.push(format!("{table}: {ids:?}"));
    }
    let deliveries: Vec<String> = app
        .scalars("SELECT hook_id || '/' || guid FROM deliveries ORDER BY hook_id, guid")
        .await;
    all.push(format!("deliveries: {deliveries:?}"));
    let leases: Vec<(String, String, i64)> = app
        .rows("SELECT name, holder, expires_at FROM leases ORDER BY name")
        .await;
    all.push(format!("leases: {leases:?}"));
    let state: Vec<(i64, String, Option<i64>, i64)> = app
        .rows("SELECT number, desired, warned_expires_at, expires_at FROM previews ORDER BY number")
        .await;
    all.push(format!("{state:?}"));
    all
}
