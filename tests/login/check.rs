//! The check as each proxy asks it, for a visitor without a session.

use super::*;

#[tokio::test]
async fn a_stranger_is_sent_to_sign_in() {
    let world = World::new("repo").await;
    let (status, headers) = world.check(&world.url("/cart"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(user(&headers), None);
}

#[tokio::test]
async fn a_public_preview_lets_anyone_in_without_a_name() {
    let world = World::new("public").await;
    let (status, headers) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user(&headers), None);
}

#[tokio::test]
async fn a_host_that_is_no_previews_is_never_let_in() {
    let world = World::new("public").await;
    for url in [
        "https://previewd.example.com/",
        "https://pv-other-0000000000000000-pr-1.preview.example.com/",
        "https://example.org/",
    ] {
        let (status, _) = world.check(url, None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{url}");
    }
}

#[tokio::test]
async fn traefik_and_envoy_are_read_like_ingress_nginx() {
    let world = World::new("public").await;
    let (status, _, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", world.host.as_str()),
                ("x-forwarded-uri", "/a"),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "Traefik");
    let mut request = Request::get("/auth/forward/some/path").header("host", world.host.as_str());
    request = request.header("x-forwarded-proto", "https");
    let (status, _, _) = world.app.answer(request.body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "Envoy");
}

#[tokio::test]
async fn traefik_asking_for_a_redirect_is_sent_to_sign_in_with_the_way_back() {
    let world = World::new("repo").await;
    let (status, headers, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", world.host.as_str()),
                ("x-forwarded-uri", "/a?b=1"),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FOUND);
    let to = location(&headers);
    assert!(
        to.starts_with("http://127.0.0.1:8080/auth/signin?rd=https%3A%2F%2F"),
        "{to}"
    );
}

#[tokio::test]
async fn an_ended_preview_admits_no_one() {
    let world = World::new("public").await;
    world
        .app
        .execute("UPDATE previews SET desired = 'absent', end_reason = 'destroyed'")
        .await;
    let (status, _) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn a_proxy_that_names_no_original_request_is_refused_not_failed() {
    // ingress-nginx turns any answer but 2xx, 401 and 403 into a 500 for the browser.
    let world = World::new("public").await;
    for headers in [
        vec![("x-original-url", "not a url")],
        vec![],
        vec![("x-forwarded-host", world.host.as_str())],
    ] {
        let (status, _, _) = world.get("/auth/check", &headers).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}");
    }
}

#[tokio::test]
async fn characters_a_browser_sends_raw_are_no_error() {
    let world = World::new("public").await;
    for path in ["/q?x=<b>", "/q?x=a\"b", "/{a}|^`[]"] {
        let (status, _) = world.check(&world.url(path), None).await;
        assert_eq!(status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn traefik_gets_the_session_with_a_redirect_that_drops_the_code() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/a?b=1")).await;
    let uri = signed.back.strip_prefix(&world.url("")).unwrap().to_owned();
    let (status, headers, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", world.host.as_str()),
                ("x-forwarded-uri", uri.as_str()),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(location(&headers), world.url("/a?b=1"));
    let session = set_cookie(&headers, "__Host-previewd").expect("the session");
    let (status, headers, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", world.host.as_str()),
                ("x-forwarded-uri", "/a?b=1"),
                ("x-forwarded-proto", "https"),
                ("cookie", session.as_str()),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user(&headers).as_deref(), Some("alice"));
}

/// A public preview's inbox holds what the app mailed (sign-up links, password resets):
/// only people who may read the repository open it, however the path is spelled (nginx
/// decodes and normalizes it before it picks the inbox's location).
#[tokio::test]
async fn a_public_previews_mail_inbox_still_asks_who_you_are() {
    let world = World::new("public").await;
    for path in [
        "/__mail/",
        "/__mail/api/v1/messages",
        "/%5F%5Fmail/",
        "//__mail/",
        "/app/../__mail/",
    ] {
        let (status, _) = world.check(&world.url(path), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/__mail/")).await;
    let (status, headers) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user(&headers).as_deref(), Some("alice"));
    let session = set_cookie(&headers, "__Host-previewd").expect("the session");
    world.github_user("mallory", 1002);
    let (status, _) = world.check(&world.url("/"), None).await;
    assert_eq!(status, StatusCode::OK, "the app itself stays public");
    let (status, _) = world.check(&world.url("/__mail/"), Some(&session)).await;
    assert_eq!(status, StatusCode::OK, "alice, who may read it");
}

#[tokio::test]
async fn a_public_previews_inbox_refuses_someone_who_may_not_read_the_repository() {
    let world = World::new("public").await;
    world.github_user("mallory", 1002);
    let signed = world.sign_in(&world.url("/__mail/")).await;
    let (status, _) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

/// Envoy appends the path it routed; a client's own `X-Forwarded-Host`/`-Uri` passed along
/// beside it must not name another path (a public preview's inbox claimed as `/`).
#[tokio::test]
async fn an_appended_path_and_a_forwarded_uri_that_disagree_are_refused() {
    let world = World::new("public").await;
    let mut request = Request::get("/auth/forward/__mail/api/v1/messages")
        .header("host", world.host.as_str())
        .header("x-forwarded-host", world.host.as_str())
        .header("x-forwarded-uri", "/")
        .header("x-forwarded-proto", "https");
    let (status, _, _) = world.app.answer(request.body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "two paths, no guess");
    request = Request::get("/auth/forward/__mail/api/v1/messages")
        .header("host", world.host.as_str())
        .header("x-forwarded-proto", "https");
    let (status, _, _) = world.app.answer(request.body(Body::empty()).unwrap()).await;
    assert_eq!(
        status,
        StatusCode::FOUND,
        "Envoy's own path: the inbox asks who you are"
    );
}
