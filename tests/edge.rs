//! The edge harness proved: a real nginx configured as ingress-nginx configures an Ingress
//! with `auth-url`, `auth-signin` and `auth-response-headers` (tests/common/nginx.rs), in
//! front of an in-test auth server and an in-test app that echoes what it got.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use common::nginx::{Ingress, Nginx};
use serde_json::{Value, json};

const HOST: &str = "pr-2.preview.test";
const SIGNIN: &str = "http://previewd.test/auth/start";

/// A request as a server received it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    uri: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A server on a free port of 127.0.0.1 that records every request and answers with
/// `answer`.
async fn server(answer: fn(&Seen) -> Response) -> (String, Log) {
    let log: Log = Arc::default();
    let router =
        Router::new().fallback(
            move |State(log): State<Log>,
                  method: Method,
                  uri: Uri,
                  headers: HeaderMap,
                  body: Bytes| async move {
                let seen = Seen {
                    method: method.to_string(),
                    uri: uri.to_string(),
                    headers: headers
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.to_string(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect(),
                    body: body.to_vec(),
                };
                log.lock().unwrap().push(seen.clone());
                answer(&seen)
            },
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let router = router.with_state(log.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (addr, log)
}

/// The auth check: `session=alice` is signed in (200, the user named, the cookie
/// refreshed), `session=public` is let in without a user, `session=nobody` has no access
/// (403); anything else is not signed in (401, clearing a stale cookie).
fn check(seen: &Seen) -> Response {
    let cookie = seen.header("cookie").unwrap_or_default();
    if cookie.contains("session=alice") {
        (
            [
                ("X-Auth-Request-User", "alice"),
                (
                    "Set-Cookie",
                    "session=alice; Path=/; HttpOnly; Max-Age=3600",
                ),
            ],
            "",
        )
            .into_response()
    } else if cookie.contains("session=public") {
        StatusCode::OK.into_response()
    } else if cookie.contains("session=nobody") {
        StatusCode::FORBIDDEN.into_response()
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [("Set-Cookie", "session=; Path=/; Max-Age=0")],
        )
            .into_response()
    }
}

/// The app: what it got, as JSON.
fn echo(seen: &Seen) -> Response {
    axum::Json(json!({
        "method": seen.method,
        "uri": seen.uri,
        "headers": seen.headers,
        "body": String::from_utf8_lossy(&seen.body),
    }))
    .into_response()
}

struct Edge {
    nginx: Nginx,
    auth: Log,
    app: Log,
}

/// An auth server, an app, and nginx in front of the app for `HOST`, the auth annotations
/// set as previewd's chart sets them, then `configure`d.
async fn edge(configure: fn(Ingress) -> Ingress) -> Edge {
    let (auth_addr, auth) = server(check).await;
    let (app_addr, app) = server(echo).await;
    let ingress = Nginx::ingress(&[HOST], &app_addr)
        .auth_url(&format!("http://{auth_addr}/auth/check"))
        .auth_signin(SIGNIN)
        .auth_response_headers(&["X-Auth-Request-User"]);
    let nginx = configure(ingress).start().await;
    Edge { nginx, auth, app }
}

fn seen(log: &Log) -> Vec<Seen> {
    log.lock().unwrap().clone()
}

#[tokio::test]
async fn without_a_session_the_browser_is_sent_to_sign_in_with_its_address() {
    let edge = edge(|i| i).await;
    let reply = edge
        .nginx
        .get(
            HOST,
            "/some/page?a=1&b=two%20words",
            &[("Accept", "text/html")],
        )
        .await;

    assert_eq!(reply.status, 302, "{}", edge.nginx.error_log());
    // `rd` is `$pass_access_scheme://$http_host` as is, then the request URI escaped by
    // set-misc's set_escape_uri.
    assert_eq!(
        reply.header("location"),
        Some(
            "http://previewd.test/auth/start?rd=http://pr-2.preview.test%2Fsome%2Fpage%3Fa%3D1%26b%3Dtwo%2520words"
        )
    );
    // The auth answer's Set-Cookie rides on the redirect (add_header in the sign-in location).
    assert_eq!(
        reply.header("set-cookie"),
        Some("session=; Path=/; Max-Age=0")
    );
    assert!(seen(&edge.app).is_empty(), "the app was reached");

    let auth = seen(&edge.auth);
    assert_eq!(auth.len(), 1);
    let check = &auth[0];
    assert_eq!(check.method, "GET");
    assert_eq!(check.uri, "/auth/check");
    assert_eq!(
        check.header("host"),
        Some("127.0.0.1"),
        "the auth URL's host, no port"
    );
    assert_eq!(
        check.header("x-original-url"),
        Some("http://pr-2.preview.test/some/page?a=1&b=two%20words")
    );
    assert_eq!(check.header("x-original-method"), Some("GET"));
    assert_eq!(
        check.header("x-sent-from"),
        Some("nginx-ingress-controller")
    );
    assert_eq!(check.header("x-real-ip"), Some("127.0.0.1"));
    assert_eq!(check.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(
        check.header("x-auth-request-redirect"),
        Some("/some/page?a=1&b=two%20words")
    );
    assert_eq!(
        check.header("x-forwarded-proto"),
        None,
        "cleared for the check"
    );
    assert!(
        check
            .header("x-request-id")
            .is_some_and(|id| id.len() == 32)
    );
    // The client's own headers go along.
    assert_eq!(check.header("accept"), Some("text/html"));
}

#[tokio::test]
async fn over_tls_the_return_address_and_the_original_url_say_https() {
    let edge = edge(Ingress::https).await;
    let reply = edge.nginx.get(HOST, "/", &[]).await;
    assert_eq!(
        reply.header("location"),
        Some("http://previewd.test/auth/start?rd=https://pr-2.preview.test%2F")
    );
    let auth = seen(&edge.auth);
    assert_eq!(
        auth[0].header("x-original-url"),
        Some("https://pr-2.preview.test/")
    );
}

#[tokio::test]
async fn behind_another_proxy_the_scheme_comes_from_x_forwarded_proto() {
    let edge = edge(Ingress::use_forwarded_headers).await;
    let reply = edge
        .nginx
        .get(HOST, "/x", &[("X-Forwarded-Proto", "https")])
        .await;
    assert_eq!(
        reply.header("location"),
        Some("http://previewd.test/auth/start?rd=https://pr-2.preview.test%2Fx")
    );
    // ingress-nginx's X-Original-URL keeps the listener's `$scheme`.
    let auth = seen(&edge.auth);
    assert_eq!(
        auth[0].header("x-original-url"),
        Some("http://pr-2.preview.test/x")
    );
}

#[tokio::test]
async fn a_signed_in_request_reaches_the_app_as_the_user_the_check_named() {
    let edge = edge(|i| i).await;
    let reply = edge
        .nginx
        .get(
            HOST,
            "/dashboard",
            &[
                ("Cookie", "session=alice"),
                // A client cannot name itself.
                ("X-Auth-Request-User", "mallory"),
            ],
        )
        .await;

    assert_eq!(reply.status, 200, "{}", edge.nginx.error_log());
    assert_eq!(
        reply.header("set-cookie"),
        Some("session=alice; Path=/; HttpOnly; Max-Age=3600"),
        "the check's cookie reaches the browser"
    );
    let got: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(got["uri"], "/dashboard");
    let app = seen(&edge.app);
    assert_eq!(app.len(), 1);
    assert_eq!(app[0].all("x-auth-request-user"), vec!["alice"]);
    assert_eq!(app[0].header("host"), Some(HOST));
    assert_eq!(app[0].header("x-forwarded-host"), Some(HOST));
    assert_eq!(app[0].header("x-forwarded-proto"), Some("http"));
    assert_eq!(app[0].header("x-forwarded-port"), Some("80"));
    assert_eq!(app[0].header("cookie"), Some("session=alice"));
}

#[tokio::test]
async fn a_check_that_names_nobody_leaves_no_user_header_for_the_app() {
    let edge = edge(|i| i).await;
    let reply = edge
        .nginx
        .get(
            HOST,
            "/",
            &[
                ("Cookie", "session=public"),
                ("X-Auth-Request-User", "mallory"),
            ],
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        seen(&edge.app)[0].all("x-auth-request-user"),
        Vec::<&str>::new()
    );
}

#[tokio::test]
async fn the_request_body_goes_to_the_app_and_never_to_the_check() {
    let edge = edge(|i| i).await;
    let reply = edge
        .nginx
        .send(
            "POST",
            HOST,
            "/form",
            &[("Cookie", "session=alice"), ("Content-Type", "text/plain")],
            b"secret-payload",
        )
        .await;
    assert_eq!(reply.status, 200);

    let auth = seen(&edge.auth);
    assert_eq!(
        auth[0].method, "GET",
        "the check is a GET whatever the method"
    );
    assert_eq!(auth[0].header("x-original-method"), Some("POST"));
    assert_eq!(auth[0].header("content-length"), None);
    assert!(auth[0].body.is_empty());
    let app = seen(&edge.app);
    assert_eq!(app[0].method, "POST");
    assert_eq!(app[0].body, b"secret-payload");
}

#[tokio::test]
async fn a_403_from_the_check_is_the_browsers_403() {
    let edge = edge(|i| i).await;
    let reply = edge
        .nginx
        .get(HOST, "/", &[("Cookie", "session=nobody")])
        .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.header("location"), None);
    assert!(seen(&edge.app).is_empty());
}

#[tokio::test]
async fn without_auth_the_same_server_asks_no_one() {
    let edge = edge(Ingress::without_auth).await;
    let reply = edge.nginx.get(HOST, "/", &[]).await;
    assert_eq!(reply.status, 200, "{}", edge.nginx.config);
    assert!(seen(&edge.auth).is_empty());
    assert!(!edge.nginx.config.contains("auth_request"));
}

#[tokio::test]
async fn a_path_without_auth_goes_to_its_own_service_unchecked_and_other_hosts_get_404() {
    let (other_addr, other) = server(echo).await;
    let (auth_addr, auth) = server(check).await;
    let (app_addr, app) = server(echo).await;
    let nginx = Nginx::ingress(&[HOST, "pr-3.preview.test"], &app_addr)
        .auth_url(&format!("http://{auth_addr}/auth/check"))
        .auth_signin(SIGNIN)
        .path_without_auth("/.previewd/", &other_addr)
        .start()
        .await;

    let reply = nginx
        .get("pr-3.preview.test", "/.previewd/callback?code=x", &[])
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(seen(&other).len(), 1);
    assert!(seen(&auth).is_empty());

    assert_eq!(nginx.get("pr-3.preview.test", "/", &[]).await.status, 302);
    assert_eq!(nginx.get("elsewhere.test", "/", &[]).await.status, 404);
    assert!(seen(&app).is_empty());
}
