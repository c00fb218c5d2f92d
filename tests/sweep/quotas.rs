//! Quotas: at the cap previews queue and are promoted in order, and eviction picks the
//! least recently active unpinned preview.

use super::*;

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
