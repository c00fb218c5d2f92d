//! The dashboard and the API accept the same GitHub sign-in as the previews: a person sees
//! the previews of repositories they can read; the operator's token still sees everything.

use super::*;

const TOKEN: &str = "api-token-for-the-dashboard-tests";

async fn world() -> World {
    World::with("repo", &format!("[api]\ntoken = {TOKEN:?}\n")).await
}

#[tokio::test]
async fn a_browser_without_a_token_is_sent_to_sign_in_and_comes_back_to_the_page() {
    let world = world().await;
    let (status, headers, _) = world.get("/previews/codertocat/hello-world/2", &[]).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(
        location(&headers),
        "/auth/signin?rd=%2Fpreviews%2Fcodertocat%2Fhello%2Dworld%2F2"
    );
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in("/previews/codertocat/hello-world/2").await;
    assert_eq!(signed.status, StatusCode::FOUND, "{}", signed.page);
    assert_eq!(signed.back, "/previews/codertocat/hello-world/2");
    let cookie = signed.signed_in.unwrap();
    let (status, _, page) = world
        .get("/previews/codertocat/hello-world/2", &[("cookie", &cookie)])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("people who can read codertocat/hello-world sign in with GitHub"),
        "the page says how to get in: {page}"
    );
}

#[tokio::test]
async fn a_person_sees_only_the_previews_of_repositories_they_can_read() {
    let world = world().await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let alice = world.sign_in("/").await.signed_in.unwrap();
    world.github.sign_in_as("mallory", 666);
    let mallory = world.sign_in("/").await.signed_in.unwrap();

    let (status, _, body) = world.get("/api/previews", &[("cookie", &alice)]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("codertocat/hello-world"), "{body}");
    let (status, _, body) = world.get("/api/previews", &[("cookie", &mallory)]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.contains("codertocat/hello-world"), "{body}");
    let (status, _, _) = world
        .get(
            "/api/previews/codertocat/hello-world/2",
            &[("cookie", &mallory)],
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, page) = world.get("/", &[("cookie", &mallory)]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("hello-world#2"), "{page}");
    let bearer = format!("Bearer {TOKEN}");
    let (_, _, body) = world
        .get("/api/previews", &[("authorization", &bearer)])
        .await;
    assert!(
        body.contains("codertocat/hello-world"),
        "the token sees everything"
    );
}

#[tokio::test]
async fn a_sign_in_reads_but_never_destroys_or_scrapes() {
    let world = world().await;
    world.github_user("alice", 1001);
    world.github.grant("alice", "admin");
    let alice = world.sign_in("/").await.signed_in.unwrap();
    let (status, _, _) = world.get("/metrics", &[("cookie", &alice)]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let request = Request::post("/api/previews/codertocat/hello-world/2/destroy")
        .header("host", "127.0.0.1:8080")
        .header("cookie", &alice)
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = world.app.answer(request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = world.get("/api/previews", &[]).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "an API client without either"
    );
}

/// A live preview of acme/secret#7; its host.
async fn secret_preview(world: &World) -> String {
    world
        .open(
            Delivery::fixture("pull_request.opened")
                .number(7)
                .guid("opened-secret-7")
                .edit(|j| {
                    j["repository"]["full_name"] = "acme/secret".into();
                    j["repository"]["name"] = "secret".into();
                    j["repository"]["owner"]["login"] = "acme".into();
                    j["pull_request"]["head"]["repo"]["full_name"] = "acme/secret".into();
                    j["pull_request"]["base"]["repo"]["full_name"] = "acme/secret".into();
                }),
        )
        .await
}

#[tokio::test]
async fn no_cursor_count_or_filter_names_a_preview_the_reader_cannot_read() {
    // Found by the second attack review: the cursor (base64 of `number:repo`) and the
    // count were the whole state's, a reader's filter applied after them.
    let world = world().await;
    secret_preview(&world).await;
    world.github_user("mallory", 666); // reads nothing
    let mallory = world.sign_in("/").await.signed_in.unwrap();
    let (status, _, body) = world
        .get("/api/previews?limit=1", &[("cookie", &mallory)])
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, r#"{"previews":[],"next":null}"#);
    for repo in ["acme/secret", "acme/nothing"] {
        let (_, _, body) = world
            .get(
                &format!("/api/previews?limit=1&repo={repo}"),
                &[("cookie", &mallory)],
            )
            .await;
        assert_eq!(body, r#"{"previews":[],"next":null}"#, "{repo}");
    }
    let (_, _, page) = world.get("/?limit=1", &[("cookie", &mallory)]).await;
    assert!(page.contains("0 live"), "what the reader sees: {page}");
    assert!(!page.contains("cursor="), "no next page: {page}");
    // The operator's token still pages through everything.
    let bearer = format!("Bearer {TOKEN}");
    let (_, _, body) = world
        .get("/api/previews?limit=1", &[("authorization", &bearer)])
        .await;
    assert!(body.contains("\"next\":\""), "{body}");
}

#[tokio::test]
async fn a_signed_in_stranger_cannot_spend_previewds_github_budget() {
    let world = world().await;
    world.github_user("mallory", 666);
    let mallory = world.sign_in("/").await.signed_in.unwrap();
    let asked = || {
        world
            .github
            .count("GET", "/collaborators/mallory/permission")
    };
    let before = asked();
    for i in 0..50 {
        let (status, _, _) = world
            .get(
                &format!("/api/previews/someone/repo-{i}/1"),
                &[("cookie", &mallory)],
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(asked(), before, "no record, no question to GitHub");
    world.github.fail(common::github::Fault::get(
        "/collaborators/mallory/permission",
        502,
        "Bad gateway",
    ));
    std::thread::sleep(std::time::Duration::from_millis(1100)); // past access_cache
    let before = asked();
    for _ in 0..20 {
        world
            .get(
                "/api/previews/codertocat/hello-world/2",
                &[("cookie", &mallory)],
            )
            .await;
    }
    assert!(
        asked() - before <= 3,
        "a failing look-up is not repeated for every request: {}",
        asked() - before
    );
}
