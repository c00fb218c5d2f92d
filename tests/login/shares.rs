//! Share links: a writer's time-limited pass to one preview, for reviewers without a
//! GitHub account.

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
    let link = share_link(&world.app.app.login, &share.id, &world.host, true);
    (share.id, link)
}

#[tokio::test]
async fn a_share_link_lets_a_reviewer_in_until_it_expires() {
    let world = World::new("repo").await;
    let (_, link) = shared(&world, 24).await;
    let (status, headers) = world.check(&link, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(user(&headers).unwrap().starts_with("share:"));
    let session = set_cookie(&headers, "__Host-previewd").unwrap();
    let (status, _) = world.check(&world.url("/page"), Some(&session)).await;
    assert_eq!(status, StatusCode::OK, "the pass became a session");
    world.app.clock.advance(24 * 3600);
    let (status, _) = world.check(&world.url("/page"), Some(&session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "expired with the share");
    let (status, _) = world.check(&link, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn unshare_revokes_the_link_and_the_sessions_it_made() {
    let world = World::new("repo").await;
    let (_, link) = shared(&world, 24).await;
    let (_, headers) = world.check(&link, None).await;
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
    let (status, _) = world.check(&link, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_share_link_opens_only_its_own_preview_and_not_when_tampered() {
    let world = World::new("repo").await;
    let (id, link) = shared(&world, 24).await;
    let elsewhere = share_link(
        &world.app.app.login,
        &id,
        "pv-other-0000000000000000-pr-9.preview.example.com",
        true,
    );
    let moved = elsewhere.replace(
        "pv-other-0000000000000000-pr-9.preview.example.com",
        &world.host,
    );
    let (status, _) = world.check(&moved, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a pass names its host");
    let last = link.chars().last().unwrap();
    let tampered = format!(
        "{}{}",
        &link[..link.len() - 1],
        if last == 'A' { 'B' } else { 'A' }
    );
    let (status, _) = world.check(&tampered, None).await;
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
    let (status, _) = world.check(&link, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    world.app.execute("DELETE FROM previews").await;
    assert_eq!(
        world.app.count("shares").await,
        0,
        "gone with the preview, by cascade"
    );
}
