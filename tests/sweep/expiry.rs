//! Expiry and the warning before it: warned once, an extension moves the window, pinned
//! previews last until their maximum lifetime, and a backlog of expiries is worked off a
//! bounded read at a time.

use super::*;
use previewd::clock::Clock;

#[tokio::test]
async fn a_preview_is_warned_exactly_once_then_expires_and_its_history_stays() {
    let app = app_with("ttl = \"72h\"\nwarn_before = \"24h\"").await;
    let (reconciler, sweeper) = (reconciler(&app), sweeper(&app));
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();

    app.clock.advance(47 * HOUR);
    sweeper.pass(Pass::Record).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        0,
        "not yet in the window"
    );
    app.clock.advance(2 * HOUR);
    sweeper.pass(Pass::Record).await.unwrap();
    sweeper.pass(Pass::Record).await.unwrap();
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
    let (_, report) = sweeper.pass(Pass::Record).await.unwrap().unwrap();
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
    sweeper.pass(Pass::Record).await.unwrap();
    assert_eq!(app.recorded("expiry_warning").await, 1);

    // A push restarts the clock: a new expiry, 72 h from now.
    app.send(&Delivery::push(
        "4444444444444444444444444444444444444444",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    sweeper.pass(Pass::Record).await.unwrap();
    app.clock.advance(40 * HOUR);
    sweeper.pass(Pass::Record).await.unwrap();
    assert_eq!(
        app.recorded("expiry_warning").await,
        1,
        "outside the new window"
    );
    app.clock.advance(10 * HOUR);
    sweeper.pass(Pass::Record).await.unwrap();
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
    sweeper.pass(Pass::Record).await.unwrap();
    assert_eq!(
        app.recorded("expired").await,
        0,
        "past its ttl, and a push did not shorten the keep"
    );
    app.clock.advance(DAY);
    sweeper.pass(Pass::Record).await.unwrap();
    assert_eq!(
        app.recorded("expired").await,
        1,
        "the maximum lifetime ends it"
    );
    let reason: String = app.reason_recorded("expired").await;
    assert!(reason.contains("maximum lifetime"), "{reason}");
}

#[tokio::test]
async fn a_backlog_of_expiries_is_worked_off_over_passes_a_bounded_read_each() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    let backlog = previewd::db::DUE_PER_PASS + 100;
    let at = now - DAY;
    // One statement valid on both stores: previews 1..=backlog, #n expired n seconds ago.
    app.execute(&format!(
        "WITH RECURSIVE pr(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM pr WHERE n < {backlog})
         INSERT INTO previews (repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
             fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
         SELECT 'acme/api', n, 1, 't', 'dev', 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', 'b', 'main',
             0, 0, 'deployed', 'ready', 'in-cluster', {at}, {at}, {at}, {at} - n FROM pr"
    ))
    .await;
    let sweeper = sweeper(&app);
    let (_, first) = sweeper.pass(Pass::Record).await.unwrap().unwrap();
    let (_, second) = sweeper.pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(
        (first.expired as i64, second.expired as i64),
        (previewd::db::DUE_PER_PASS, 100)
    );
}
