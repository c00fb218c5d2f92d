//! GitHub's OAuth web flow on previewd's host, and the hand-off that makes a session on
//! the preview host.

use super::*;

#[tokio::test]
async fn a_reader_signs_in_at_github_and_enters_the_preview() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/cart?x=1")).await;
    assert_eq!(signed.status, StatusCode::FOUND, "{}", signed.page);
    assert!(
        signed.back.starts_with(&world.url("/cart?x=1&__previewd=")),
        "back to the page asked for, with a code: {}",
        signed.back
    );
    assert!(
        signed.signed_in.is_some(),
        "signed in on previewd's host too"
    );
    let (status, headers) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user(&headers).as_deref(), Some("alice"));
    let raw = headers["set-cookie"].to_str().unwrap();
    for attribute in [
        "__Host-previewd=",
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Path=/",
        "Max-Age=",
    ] {
        assert!(raw.contains(attribute), "{attribute} in {raw}");
    }
    assert!(!raw.contains("Domain"), "host-only: {raw}");
    let session = set_cookie(&headers, "__Host-previewd").unwrap();
    for _ in 0..20 {
        let (status, headers) = world.check(&world.url("/other"), Some(&session)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(user(&headers).as_deref(), Some("alice"));
    }
    assert_eq!(
        world.github.count("GET", "/collaborators/alice/permission"),
        1,
        "one look-up per person, repository and cache period; none on the request path"
    );
}

#[tokio::test]
async fn a_non_reader_is_refused_by_a_page_that_says_why() {
    let world = World::new("repo").await;
    world.github_user("mallory", 666);
    let signed = world.sign_in(&world.url("/")).await;
    assert_eq!(signed.status, StatusCode::FORBIDDEN);
    assert!(signed.page.contains("mallory"), "{}", signed.page);
    assert!(signed.page.contains("cannot read"), "{}", signed.page);
    assert!(
        signed.page.contains("codertocat/hello-world"),
        "{}",
        signed.page
    );
    assert!(
        signed.page.contains("/preview share 24h"),
        "{}",
        signed.page
    );
}

#[tokio::test]
async fn someone_signed_in_here_already_goes_straight_back_with_a_code() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "write");
    let first = world.sign_in(&world.url("/")).await;
    let signed_in = first.signed_in.unwrap();
    let (status, headers, _) = world
        .get(
            &format!("/auth/signin?rd={}", enc(&world.url("/again"))),
            &[("cookie", &signed_in)],
        )
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert!(location(&headers).starts_with(&world.url("/again?__previewd=")));
    assert_eq!(
        world.github.count("GET", "/login/oauth/authorize"),
        1,
        "GitHub asked once"
    );
}

#[tokio::test]
async fn an_org_preview_admits_members_of_the_owning_organisation_only() {
    let world = World::new("org").await;
    world.github_user("alice", 1001);
    world.github.add_member("Codertocat", "alice");
    let signed = world.sign_in(&world.url("/")).await;
    assert_eq!(signed.status, StatusCode::FOUND, "{}", signed.page);
    world.github.sign_in_as("bob", 1002);
    world.github.grant("bob", "admin");
    let refused = world.sign_in(&world.url("/")).await;
    assert_eq!(
        refused.status,
        StatusCode::FORBIDDEN,
        "a collaborator outside the org"
    );
    assert!(refused.page.contains("not a member"), "{}", refused.page);
}

#[tokio::test]
async fn a_collaborator_removed_at_github_is_out_once_the_answer_expires() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/")).await;
    let (_, headers) = world.check(&signed.back, None).await;
    let session = set_cookie(&headers, "__Host-previewd").unwrap();
    world.github.revoke("alice");
    let (status, _) = world.check(&world.url("/"), Some(&session)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the answer is kept for login.access_cache"
    );
    // 1s here (5m by default).
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let (status, _) = world.check(&world.url("/"), Some(&session)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        world.github.count("GET", "/collaborators/alice/permission"),
        2
    );
}

#[tokio::test]
async fn sign_in_is_refused_when_github_refuses_the_code() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let (pending, state) = world.start_sign_in(&world.url("/")).await;
    let (status, _, page) = world
        .get(
            &format!("/auth/callback?code=made-up&state={state}"),
            &[("cookie", &pending)],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("bad_verification_code"), "{page}");
}
