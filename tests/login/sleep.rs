//! A sleeping preview's first request (issue #41): whoever may enter wakes it and sees the
//! waking page until it is ready; whoever may not wakes nothing; a use is recorded at most
//! once a minute.

use super::*;

/// Puts the world's preview to sleep, as the sweeper or `/preview sleep` would.
async fn asleep(world: &World) {
    let id = world.preview_id().await;
    assert!(
        previewd::db::sleep::sleep(world.app.state(), id, "idle", None, common::NOW - 7200)
            .await
            .unwrap()
    );
}

async fn sleep_columns(world: &World) -> (Option<i64>, Option<i64>) {
    world
        .app
        .row("SELECT sleeping_since, woke_at FROM previews")
        .await
}

async fn reconcile(world: &World) {
    std::sync::Arc::new(common::directory_reconciler(&world.app))
        .pass()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_request_to_a_sleeping_public_preview_wakes_it_and_the_sign_in_route_shows_the_waking_page()
 {
    let world = World::new("public").await;
    asleep(&world).await;
    reconcile(&world).await;
    assert_eq!(
        world
            .app
            .scalar::<String>("SELECT observed FROM previews")
            .await,
        "sleeping"
    );

    // ingress-nginx: anything but 2xx, 401 and 403 would be a 500, so a 401 it is.
    let (status, _) = world.check(&world.url("/cart?x=1"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (since, woke) = sleep_columns(&world).await;
    assert_eq!(
        (since, woke),
        (None, Some(common::NOW)),
        "the wake is recorded"
    );
    assert_eq!(world.app.recorded("woke").await, 1);

    // ... and the 401 sends the browser to the sign-in route, which shows the waking page.
    let rd = enc(&world.url("/cart?x=1"));
    let (status, headers, page) = world
        .get(&format!("/auth/signin?rd={rd}"), &[("accept", "text/html")])
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "5");
    assert!(page.contains("Waking up"), "{page}");
    assert!(
        page.contains(&format!("content=\"5;url={}\"", world.url("/cart?x=1"))),
        "it comes back by itself: {page}"
    );
    let (status, headers, text) = world.get(&format!("/auth/signin?rd={rd}"), &[]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert_eq!(headers["retry-after"], "5");

    // A second request while it wakes wakes nothing more.
    let (status, _) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(world.app.recorded("woke").await, 1);

    reconcile(&world).await;
    let (status, _) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::OK, "awake: the app again");
}

#[tokio::test]
async fn traefik_and_envoy_show_the_waking_page_straight_from_the_check() {
    let world = World::new("public").await;
    asleep(&world).await;
    let (status, headers, page) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", &world.host),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-uri", "/"),
                ("accept", "text/html,application/xhtml+xml"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "5");
    assert!(page.contains("Waking up"), "{page}");
    assert_eq!(sleep_columns(&world).await.0, None, "woken");
}

#[tokio::test]
async fn someone_who_may_not_enter_wakes_nothing() {
    let world = World::new("repo").await;
    asleep(&world).await;
    let (status, _) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "sign in first");
    assert!(sleep_columns(&world).await.0.is_some(), "still asleep");
    // The sign-in route starts the sign-in: no waking page for a preview nobody woke.
    let rd = enc(&world.url("/"));
    let (status, headers, _) = world.get(&format!("/auth/signin?rd={rd}"), &[]).await;
    assert_eq!(status, StatusCode::FOUND);
    assert!(
        location(&headers).contains("/login/oauth/authorize"),
        "{headers:?}"
    );
    assert_eq!(world.app.recorded("woke").await, 0);
}

#[tokio::test]
async fn a_use_is_recorded_at_most_once_a_minute() {
    let world = World::new("public").await;
    let used = || async {
        world
            .app
            .scalar::<Option<i64>>("SELECT last_used_at FROM previews")
            .await
    };
    assert_eq!(used().await, None);
    assert_eq!(world.check(&world.url("/"), None).await.0, StatusCode::OK);
    // Written off the request's path: give it its turn.
    for _ in 0..100 {
        if used().await.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(used().await, Some(common::NOW));
    world.app.clock.advance(30);
    assert_eq!(world.check(&world.url("/"), None).await.0, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(
        used().await,
        Some(common::NOW),
        "not again within the minute"
    );
    world.app.clock.advance(30);
    assert_eq!(world.check(&world.url("/"), None).await.0, StatusCode::OK);
    for _ in 0..100 {
        if used().await != Some(common::NOW) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(used().await, Some(common::NOW + 60));
}

/// Found by the attack review: the sign-in route told anyone that a private preview was
/// waking (someone had opened it). Only whoever may enter sees the waking page there.
#[tokio::test]
async fn the_sign_in_route_tells_no_stranger_that_a_private_preview_is_waking() {
    let world = World::new("repo").await;
    let id = world.preview_id().await;
    let state = world.app.state();
    assert!(
        previewd::db::sleep::sleep(state, id, "idle", None, common::NOW - 7200)
            .await
            .unwrap()
    );
    assert!(
        previewd::db::sleep::wake(state, id, "a request", common::NOW)
            .await
            .unwrap()
    );
    // Argo CD reports the awake rendering syncing.
    world
        .app
        .execute("UPDATE previews SET observed = 'syncing'")
        .await;
    let rd = enc(&world.url("/"));
    let (status, headers, _) = world.get(&format!("/auth/signin?rd={rd}"), &[]).await;
    assert_eq!(
        status,
        StatusCode::FOUND,
        "to GitHub's sign-in, as for any preview"
    );
    assert!(location(&headers).contains("/login/oauth/authorize"));
}
