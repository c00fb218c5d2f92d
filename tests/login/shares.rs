//! Share links: a writer's time-limited pass to one preview, for reviewers without a
//! GitHub account. The pass rides in the link's fragment to previewd's share page, which
//! turns it into a one-time code to the preview: the preview's host never sees the pass.

use previewd::db::login::{create_share, revoke_shares};
use previewd::login::check::share_link;

use super::*;

async fn shared(world: &World, hours: i64) -> (String, String) {
    let now = previewd::clock::Clock::now(&world.app.clock);
    let share = create_share(
        world.app.state(),
        world.preview_id().await,
        "octowriter",
        now,
        now + hours * 3600,
    )
    .await
    .unwrap()
    .unwrap();
    let link = share_link(
        &world.app.app.login,
        "https://previewd.example.com",
        &share.id,
        &world.host,
        true,
    );
    (share.id, link)
}

/// The link followed as a browser follows it: previewd's answer when it refuses, else the
/// preview's check of where previewd sent the browser.
async fn enter(world: &World, link: &str) -> (StatusCode, HeaderMap) {
    match world.app.open_share_link(link).await {
        (_, Some(location)) => {
            assert!(
                !location.contains(link.split('#').nth(1).unwrap()),
                "the pass never reaches the preview's host"
            );
            world.check(&location, None).await
        }
        (status, None) => (status, HeaderMap::new()),
    }
}

#[tokio::test]
async fn a_share_link_lets_a_reviewer_in_until_it_expires() {
    let world = World::new("repo").await;
    let (_, link) = shared(&world, 24).await;
    assert!(
        link.starts_with("https://previewd.example.com/auth/share?rd=https%3A%2F%2Fpv%2D"),
        "{link}"
    );
    let (status, headers) = enter(&world, &link).await;
    assert_eq!(status, StatusCode::OK);
    assert!(user(&headers).unwrap().starts_with("share:"));
    let session = set_cookie(&headers, "__Host-previewd").unwrap();
    let (status, _) = world.check(&world.url("/page"), Some(&session)).await;
    assert_eq!(status, StatusCode::OK, "the pass became a session");
    let (status, _) = enter(&world, &link).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a link opens as often as it is followed"
    );
    world.app.clock.advance(24 * 3600);
    let (status, _) = world.check(&world.url("/page"), Some(&session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "expired with the share");
    let (status, _) = enter(&world, &link).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_share_page_reads_the_pass_from_the_fragment_under_a_strict_policy() {
    let world = World::new("repo").await;
    let (status, headers, page) = world.get("/auth/share?rd=x", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'sha256-"), "{policy}");
    assert!(policy.contains("form-action 'self'"), "{policy}");
    assert!(page.contains("location.hash"), "{page}");
    assert_eq!(headers["referrer-policy"], "no-referrer");
}

#[tokio::test]
async fn unshare_revokes_the_link_and_the_sessions_it_made() {
    let world = World::new("repo").await;
    let (_, link) = shared(&world, 24).await;
    let (_, headers) = enter(&world, &link).await;
    let session = set_cookie(&headers, "__Host-previewd").unwrap();
    let revoked = revoke_shares(
        world.app.state(),
        world.preview_id().await,
        previewd::clock::Clock::now(&world.app.clock),
    )
    .await
    .unwrap();
    assert_eq!(revoked, 1);
    let (status, _) = world.check(&world.url("/"), Some(&session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = enter(&world, &link).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_share_link_opens_only_its_own_preview_and_not_when_tampered() {
    let world = World::new("repo").await;
    let (id, link) = shared(&world, 24).await;
    let other = "pv-other-0000000000000000-pr-9.preview.example.com";
    let elsewhere = share_link(&world.app.app.login, "", &id, other, true);
    let (status, _) = enter(&world, &elsewhere).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a pass names its host: no such preview"
    );
    // A pass for this preview, sent on to another preview's address: back to its own.
    let (_, location) = world
        .app
        .open_share_link(&link.replace("rd=https", &format!("rd=https%3A%2F%2F{other}%2F&x=https")))
        .await;
    let location = location.unwrap();
    assert!(
        location.contains(&format!("://{}/?__previewd=", world.host)),
        "{location}"
    );
    let last = link.chars().last().unwrap();
    let tampered = format!(
        "{}{}",
        &link[..link.len() - 1],
        if last == 'A' { 'B' } else { 'A' }
    );
    let (status, _) = enter(&world, &tampered).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn destroying_the_preview_ends_its_share_links() {
    let world = World::new("repo").await;
    let (_, link) = shared(&world, 24).await;
    world
        .app
        .execute("UPDATE previews SET desired = 'absent', end_reason = 'destroyed'")
        .await;
    let (status, _) = enter(&world, &link).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    world.app.execute("DELETE FROM previews").await;
    assert_eq!(
        world.app.count("shares").await,
        0,
        "gone with the preview, by cascade"
    );
}
