//! Debian's real nginx, configured as ingress-nginx configures the preview's Ingress (the
//! helper chart's annotations, `auth-url` pinned to the preview's host), in front of the
//! preview's app, with previewd's router as the auth endpoint.

use std::sync::{Arc, Mutex};

use common::nginx::{Nginx, request};

use super::*;

/// A live preview of acme/docs#7, whose repository is `access = "public"`; its host.
async fn public_preview(world: &World) -> String {
    world
        .open(
            Delivery::fixture("pull_request.opened")
                .number(7)
                .guid("opened-docs-7")
                .edit(|j| {
                    j["repository"]["full_name"] = "acme/docs".into();
                    j["repository"]["name"] = "docs".into();
                    j["repository"]["owner"]["login"] = "acme".into();
                    j["pull_request"]["head"]["repo"]["full_name"] = "acme/docs".into();
                    j["pull_request"]["base"]["repo"]["full_name"] = "acme/docs".into();
                }),
        )
        .await
}

/// previewd's router on a port of 127.0.0.1.
async fn serve(world: &World) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = world.app.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// The preview's app: records the `Host` and `X-Auth-Request-User` of what reaches it.
async fn app() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let router = axum::Router::new().fallback(move |headers: HeaderMap| {
        let log = log.clone();
        async move {
            let text = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            log.lock().unwrap().push((
                text("host").unwrap_or_default(),
                text("x-auth-request-user"),
            ));
            "the private preview's page\n"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (addr, seen)
}

/// The preview's Ingress as the helper chart renders it: `auth-url` pinned to `host`.
async fn ingress_for(world: &World, host: &str, app_addr: &str) -> Nginx {
    let previewd = serve(world).await;
    Nginx::ingress(&[host], app_addr)
        .auth_url(&format!("http://{previewd}/auth/check?host={host}"))
        .auth_signin("https://previewd.example.com/auth/signin")
        .auth_response_headers(&["X-Auth-Request-User"])
        .https()
        .start()
        .await
}

#[tokio::test]
async fn through_nginx_a_stranger_signs_in_and_a_reader_reaches_the_app_named() {
    let world = World::new("repo").await;
    let (app_addr, seen) = app().await;
    let nginx = ingress_for(&world, &world.host, &app_addr).await;
    let reply = nginx
        .get(&world.host, "/cart", &[("X-Auth-Request-User", "forged")])
        .await;
    assert_eq!(reply.status, 302);
    let to = reply.header("location").unwrap().to_owned();
    assert!(
        to.starts_with("https://previewd.example.com/auth/signin?rd=https://"),
        "{to}"
    );
    assert!(seen.lock().unwrap().is_empty(), "the app saw nothing");

    world.github_user("alice", 1001);
    world.github.grant("alice", "read");
    let signed = world.sign_in(&world.url("/cart")).await;
    let path = signed.back.strip_prefix(&world.url("")).unwrap().to_owned();
    let reply = nginx
        .get(&world.host, &path, &[("X-Auth-Request-User", "forged")])
        .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let cookie = reply
        .header("set-cookie")
        .expect("the session, passed on by nginx");
    let session = cookie.split(';').next().unwrap().to_owned();
    let reply = nginx
        .get(&world.host, "/other", &[("Cookie", &session)])
        .await;
    assert_eq!(reply.status, 200);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|(_, user)| user.as_deref() == Some("alice")),
        "the app hears the user previewd named, never the client's: {seen:?}"
    );
}

#[tokio::test]
async fn a_request_line_naming_a_private_preview_with_a_public_ones_host_is_refused() {
    // nginx picks the server by the request line, but `X-Original-URL` carries the `Host`
    // header: without the pinned host, previewd judged the public preview and nginx served
    // the private one (found by the attack review).
    let world = World::with(
        "repo",
        "[[repos]]\nname = \"Codertocat/Hello-World\"\naccess = \"repo\"\n\
         [[repos]]\nname = \"acme/docs\"\naccess = \"public\"\n",
    )
    .await;
    let private = world.host.clone();
    let public = public_preview(&world).await;
    let (app_addr, seen) = app().await;
    let nginx = ingress_for(&world, &private, &app_addr).await;
    let reply = request(
        &nginx.addr,
        "GET",
        &public,
        &format!("http://{private}/admin"),
        &[],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 403, "{}", reply.text());
    assert!(
        seen.lock().unwrap().is_empty(),
        "the private app saw nothing"
    );
}

/// Issue #41 through real nginx: a reader's request to a sleeping preview wakes it; nginx
/// sends the browser where a 401 goes (`auth-signin`), where previewd shows the waking
/// page; once the preview is ready the same request reaches the app.
#[tokio::test]
async fn through_nginx_a_request_to_a_sleeping_preview_wakes_it_and_reaches_the_app_once_ready() {
    let world = World::new("public").await;
    let (app_addr, seen) = app().await;
    let nginx = ingress_for(&world, &world.host, &app_addr).await;
    let id = world.preview_id().await;
    assert!(
        previewd::db::sleep::sleep(world.app.state(), id, "idle", None, common::NOW - 3600)
            .await
            .unwrap()
    );
    let reconciler = std::sync::Arc::new(common::directory_reconciler(&world.app));
    reconciler.pass().await.unwrap();
    let reply = nginx.get(&world.host, "/cart", &[]).await;
    assert_eq!(reply.status, 302, "{}", reply.text());
    let to = reply.header("location").unwrap().to_owned();
    assert!(
        to.starts_with("https://previewd.example.com/auth/signin?rd=https://"),
        "{to}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "the sleeping app saw nothing"
    );
    let woke: Option<i64> = world.app.scalar("SELECT woke_at FROM previews").await;
    assert_eq!(woke, Some(common::NOW));
    // The browser follows nginx's redirect to previewd's sign-in route: the waking page.
    let path = to.strip_prefix("https://previewd.example.com").unwrap();
    let (status, headers, page) = world.get(path, &[("accept", "text/html")]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers["retry-after"], "5");
    assert!(page.contains("Waking up"), "{page}");

    reconciler.pass().await.unwrap();
    let reply = nginx.get(&world.host, "/cart", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(seen.lock().unwrap().len(), 1);
}
