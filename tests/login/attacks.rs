//! The attacks of issue #39, each a reproduction that must fail.

use super::*;

/// A second live preview of the same repository (#3), and its host.
async fn second_preview(world: &World) -> String {
    world
        .open(
            Delivery::fixture("pull_request.opened")
                .number(3)
                .guid("opened-3"),
        )
        .await
}

async fn session_of(world: &World, login: &str) -> String {
    world.github_user(login, 1001);
    world.github.grant(login, "read");
    let signed = world.sign_in(&world.url("/")).await;
    let (status, headers) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::OK);
    set_cookie(&headers, "__Host-previewd").unwrap()
}

#[tokio::test]
async fn the_return_url_never_leads_off_the_preview_domains() {
    let world = World::new("repo").await;
    for rd in [
        "https://evil.example/",
        "https://preview.example.com.evil.example/",
        "https://evilpreview.example.com/",
        "https://preview.example.com/",
        "https://pv-x.preview.example.com@evil.example/",
        "//evil.example/",
        "/relative",
        "javascript:alert(1)//pv-x.preview.example.com",
        "https://pv-x.preview.example.com\\@evil.example/",
    ] {
        let (status, headers, _) = world
            .get(&format!("/auth/signin?rd={}", enc(rd)), &[])
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{rd}");
        assert!(headers.get("location").is_none(), "{rd}");
    }
}

#[tokio::test]
async fn a_session_from_one_preview_is_worthless_on_another() {
    let world = World::new("repo").await;
    let other = second_preview(&world).await;
    let session = session_of(&world, "alice").await;
    let (status, _) = world
        .check(&format!("https://{other}/"), Some(&session))
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Nor under the name a sibling host could set for the parent domain.
    let plain = session.replacen("__Host-previewd", "previewd", 1);
    let (status, _) = world.check(&format!("http://{other}/"), Some(&plain)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_hand_off_code_works_once_and_only_on_its_host() {
    let world = World::new("repo").await;
    let other = second_preview(&world).await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/")).await;
    let code = signed.back.split("__previewd=").nth(1).unwrap().to_owned();
    let (status, _) = world
        .check(&format!("https://{other}/?__previewd={code}"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "redirected to another host"
    );
    let (status, _) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "replayed");
}

#[tokio::test]
async fn a_hand_off_code_expires_within_a_minute() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/")).await;
    world.app.clock.advance(61);
    let (status, _) = world.check(&signed.back, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn forged_proxy_headers_name_no_other_host() {
    let world = World::new("repo").await;
    let other = second_preview(&world).await;
    let session = session_of(&world, "alice").await;
    // A client's own `X-Forwarded-Host` beside the proxy's `X-Original-URL`.
    let (status, _, _) = world
        .get(
            "/auth/check",
            &[
                ("x-original-url", &format!("https://{other}/")),
                ("x-forwarded-host", &world.host),
                ("cookie", &session),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The session names its host; claiming another host with it gets a sign-in, no pass.
    let (status, headers, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", &other),
                ("x-forwarded-proto", "https"),
                ("cookie", &session),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FOUND);
    assert!(location(&headers).contains("/auth/signin?rd="));
    // And a client's own `X-Original-URL` is not what a forwarding proxy's check reads.
    let (status, headers, _) = world
        .get(
            "/auth/forward",
            &[
                ("x-forwarded-host", &other),
                ("x-original-url", &world.url("/")),
                ("x-forwarded-proto", "https"),
                ("cookie", &session),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FOUND, "{headers:?}");
}

#[tokio::test]
async fn sign_in_without_this_browsers_state_is_refused() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    // The attacker's own sign-in, started in the attacker's browser...
    let (_, headers, _) = world
        .get(&format!("/auth/signin?rd={}", enc(&world.url("/"))), &[])
        .await;
    let (_, callback) = follow(&location(&headers)).await;
    let path = callback.strip_prefix("http://127.0.0.1:8080").unwrap();
    // ...completed in the victim's, which holds no pending sign-in or another one.
    let (status, _, _) = world.get(path, &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, victims, _) = world
        .get(&format!("/auth/signin?rd={}", enc(&world.url("/"))), &[])
        .await;
    let victim_pending = set_cookie(&victims, "previewd-oauth").unwrap();
    let (status, _, _) = world.get(path, &[("cookie", &victim_pending)]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_cookie_planted_before_sign_in_is_never_the_session() {
    let world = World::new("repo").await;
    let planted = "__Host-previewd=attacker-chosen-value".to_owned();
    let (status, _) = world.check(&world.url("/"), Some(&planted)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/")).await;
    let (status, headers) = world.check(&signed.back, Some(&planted)).await;
    assert_eq!(status, StatusCode::OK);
    let fresh = set_cookie(&headers, "__Host-previewd").unwrap();
    assert_ne!(
        fresh, planted,
        "the session is minted at sign-in, never adopted"
    );
    let (status, _) = world.check(&world.url("/"), Some(&planted)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the planted value stays worthless"
    );
}

#[tokio::test]
async fn a_tampered_session_opens_nothing() {
    let world = World::new("repo").await;
    let session = session_of(&world, "alice").await;
    let (name, value) = session.split_once('=').unwrap();
    let mut bytes = value.as_bytes().to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] = if bytes[middle] == b'A' { b'B' } else { b'A' };
    let tampered = format!("{name}={}", String::from_utf8(bytes).unwrap());
    let (status, _) = world.check(&world.url("/"), Some(&tampered)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_expired_session_signs_in_again() {
    let world = World::new("repo").await;
    let session = session_of(&world, "alice").await;
    world.app.clock.advance(12 * 3600 + 1);
    let (status, _) = world.check(&world.url("/"), Some(&session)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn one_pending_sign_in_reaches_github_once_however_often_it_is_replayed() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    let (pending, state) = world.start_sign_in(&world.url("/")).await;
    let mut refused = 0;
    for i in 0..50 {
        let (status, _, _) = world
            .get(
                &format!("/auth/callback?code=flood-{i}&state={state}"),
                &[("cookie", &pending)],
            )
            .await;
        if status == StatusCode::BAD_REQUEST {
            refused += 1;
        }
    }
    assert_eq!(refused, 49, "a state is used once");
    assert_eq!(world.github.count("POST", "/login/oauth/access_token"), 1);
}

#[tokio::test]
async fn a_request_naming_another_preview_than_the_server_it_reached_is_refused() {
    // ingress-nginx routes by the request line (`GET https://PRIVATE/ HTTP/1.1`) but names
    // the `Host` header (`Host: PUBLIC`) in `X-Original-URL`; the Ingress pins its host.
    let world = World::new("public").await;
    let other = second_preview(&world).await;
    let (status, _, _) = world
        .get(
            &format!("/auth/check?host={other}"),
            &[("x-original-url", &world.url("/admin"))],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = world
        .get(
            &format!("/auth/check?host={}", world.host),
            &[("x-original-url", &world.url("/admin"))],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "the host the Ingress pins");
}

#[tokio::test]
async fn a_code_someone_else_minted_never_replaces_who_is_signed_in() {
    let world = World::new("repo").await;
    let victim = session_of(&world, "alice").await;
    world.github.sign_in_as("mallory", 666);
    world.github.grant("mallory", "read");
    let attackers = world.sign_in(&world.url("/account")).await;
    let (status, headers) = world.check(&attackers.back, Some(&victim)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(user(&headers).as_deref(), Some("alice"));
    assert!(
        headers.get("set-cookie").is_none(),
        "the victim's session stays"
    );
}

#[tokio::test]
async fn envoy_reads_the_code_in_the_query_it_appends() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/a")).await;
    let query = signed.back.split_once('?').unwrap().1.to_owned();
    let request = Request::get(format!("/auth/forward/a?{query}"))
        .header("host", world.host.as_str())
        .header("x-forwarded-proto", "https")
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = world.app.answer(request).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(location(&headers), world.url("/a"));
    assert!(set_cookie(&headers, "__Host-previewd").is_some());
}

#[tokio::test]
async fn signing_out_takes_previewds_own_page_not_another_sites_link() {
    let world = World::new("repo").await;
    let (status, _, _) = world.get("/auth/signout", &[]).await;
    assert_eq!(status, StatusCode::OK, "the page with the button");
    let request = |site: &str| {
        Request::post("/auth/signout")
            .header("host", "127.0.0.1:8080")
            .header("sec-fetch-site", site)
            .body(Body::empty())
            .unwrap()
    };
    let (status, headers, _) = world.app.answer(request("cross-site")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(headers.get("set-cookie").is_none());
    let (status, headers, _) = world.app.answer(request("same-origin")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(set_cookie(&headers, "previewd-login").is_some());
}

#[tokio::test]
async fn one_account_cannot_mint_codes_without_end() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed_in = world.sign_in(&world.url("/")).await.signed_in.unwrap();
    let mut limited = 0;
    for _ in 0..40 {
        let (status, _, _) = world
            .get(
                &format!("/auth/signin?rd={}", enc(&world.url("/"))),
                &[("cookie", &signed_in)],
            )
            .await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            limited += 1;
        }
    }
    assert_eq!(limited, 11, "30 codes a minute, the first at sign-in");
}

#[tokio::test]
async fn the_sign_out_page_may_post_its_own_form() {
    let world = World::new("repo").await;
    let (_, headers, page) = world.get("/auth/signout", &[]).await;
    assert!(page.contains("<form method=\"post\" action=\"/auth/signout\">"));
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("form-action 'self'"), "{policy}");
}

#[tokio::test]
async fn a_sibling_previews_page_cannot_spend_a_persons_codes() {
    let world = World::new("repo").await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed_in = world.sign_in(&world.url("/")).await.signed_in.unwrap();
    for _ in 0..40 {
        let (status, _, _) = world
            .get(
                &format!("/auth/signin?rd={}", enc(&world.url("/"))),
                &[
                    ("cookie", &signed_in),
                    ("sec-fetch-site", "same-site"),
                    ("sec-fetch-mode", "no-cors"),
                    ("sec-fetch-dest", "image"),
                ],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    let (status, headers, _) = world
        .get(
            &format!("/auth/signin?rd={}", enc(&world.url("/"))),
            &[
                ("cookie", &signed_in),
                ("sec-fetch-mode", "navigate"),
                ("sec-fetch-dest", "document"),
            ],
        )
        .await;
    assert_eq!(
        status,
        StatusCode::FOUND,
        "the person's own sign-in still works"
    );
    assert!(location(&headers).contains("__previewd="));
}
