//! The stand-in's OAuth web flow, as GitHub documents it: authorize, exchange the code once,
//! read the person with the token; and the look-ups a check makes (organization
//! membership, repository permission).

use serde_json::Value;

use crate::common::github::FakeGitHub;
use crate::common::nginx::{Reply, request};

const CLIENT_ID: &str = "Iv1.previewd0test";
const SECRET: &str = "client-secret-0123";
const CALLBACK: &str = "https://previewd.example.com/auth/callback";

async fn github() -> FakeGitHub {
    let github = FakeGitHub::start().await;
    github.register_oauth_app(CLIENT_ID, SECRET, CALLBACK);
    github.sign_in_as("alice", 1001);
    github
}

async fn call(
    github: &FakeGitHub,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let addr = github.url.trim_start_matches("http://");
    request(addr, method, addr, path, headers, body.as_bytes())
        .await
        .unwrap()
}

fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, percent_encoding::NON_ALPHANUMERIC).to_string()
}

async fn authorize(github: &FakeGitHub, redirect_uri: Option<&str>, state: &str) -> Reply {
    let mut path = format!(
        "/login/oauth/authorize?client_id={}&state={}&scope={}",
        encode(CLIENT_ID),
        encode(state),
        encode("read:user read:org")
    );
    if let Some(uri) = redirect_uri {
        path.push_str(&format!("&redirect_uri={}", encode(uri)));
    }
    call(github, "GET", &path, &[], "").await
}

/// The code in an authorize answer's `Location`.
fn code_of(reply: &Reply) -> String {
    let location = reply.header("location").expect("a redirect");
    let query = location.split_once('?').unwrap().1;
    query
        .split('&')
        .find_map(|p| p.strip_prefix("code="))
        .expect("a code")
        .to_owned()
}

async fn exchange(github: &FakeGitHub, code: &str, secret: &str) -> Value {
    let body = format!(
        "client_id={}&client_secret={}&code={code}&redirect_uri={}",
        encode(CLIENT_ID),
        encode(secret),
        encode(CALLBACK)
    );
    let reply = call(
        github,
        "POST",
        "/login/oauth/access_token",
        &[
            ("Accept", "application/json"),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        &body,
    )
    .await;
    assert_eq!(reply.status, 200, "GitHub answers its token errors 200 too");
    serde_json::from_slice(&reply.body).unwrap()
}

#[tokio::test]
async fn authorize_then_exchange_then_read_the_person_and_a_code_serves_once() {
    let github = github().await;
    let reply = authorize(&github, Some(CALLBACK), "st@te/1").await;
    assert_eq!(reply.status, 302);
    let location = reply.header("location").unwrap();
    assert!(
        location.starts_with(&format!("{CALLBACK}?code="))
            && location.ends_with("&state=st%40te%2F1"),
        "{location}"
    );
    let code = code_of(&reply);

    let token = exchange(&github, &code, SECRET).await;
    assert_eq!(token["token_type"], "bearer");
    assert_eq!(token["scope"], "read:user,read:org");
    let access = token["access_token"].as_str().unwrap().to_owned();
    assert!(access.starts_with("gho_") && access.len() == 40, "{access}");

    for scheme in ["Bearer", "token"] {
        let auth = format!("{scheme} {access}");
        let user = call(&github, "GET", "/user", &[("Authorization", &auth)], "").await;
        assert_eq!(user.status, 200);
        let user: Value = serde_json::from_slice(&user.body).unwrap();
        assert_eq!(user["login"], "alice");
        assert_eq!(user["id"], 1001);
        assert_eq!(user["type"], "User");
        assert!(user["name"].is_string() && user["avatar_url"].is_string());
    }

    let again = exchange(&github, &code, SECRET).await;
    assert_eq!(again["error"], "bad_verification_code");
    assert_eq!(
        again["error_description"],
        "The code passed is incorrect or expired."
    );
    assert!(
        again["error_uri"]
            .as_str()
            .unwrap()
            .starts_with("https://docs.github.com/")
    );
    assert!(again.get("access_token").is_none());

    assert_eq!(github.count("GET", "/login/oauth/authorize"), 1);
    assert_eq!(github.count("POST", "/login/oauth/access_token"), 2);
    assert_eq!(github.count("GET", "/user"), 2);
}

#[tokio::test]
async fn a_wrong_secret_is_refused_and_leaves_the_code_usable() {
    let github = github().await;
    let code = code_of(&authorize(&github, None, "s").await);
    let refused = exchange(&github, &code, "not-the-secret").await;
    assert_eq!(refused["error"], "incorrect_client_credentials");
    assert!(exchange(&github, &code, SECRET).await["access_token"].is_string());
    assert_eq!(
        exchange(&github, "0123456789abcdef0123", SECRET).await["error"],
        "bad_verification_code"
    );
}

#[tokio::test]
async fn without_json_the_token_answer_is_form_encoded_and_a_json_body_is_read_too() {
    let github = github().await;
    let code = code_of(&authorize(&github, None, "s").await);
    let body = serde_json::json!({"client_id": CLIENT_ID, "client_secret": SECRET, "code": code});
    let reply = call(
        &github,
        "POST",
        "/login/oauth/access_token",
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert!(
        reply
            .header("content-type")
            .unwrap()
            .starts_with("application/x-www-form-urlencoded")
    );
    let text = reply.text();
    assert!(text.starts_with("access_token=gho_"), "{text}");
    assert!(text.contains("&token_type=bearer"), "{text}");
}

#[tokio::test]
async fn authorize_refuses_unknown_apps_and_redirects_github_would_not_accept() {
    let github = github().await;
    // Left out: the registered callback.
    let reply = authorize(&github, None, "s").await;
    assert!(
        reply
            .header("location")
            .unwrap()
            .starts_with(&format!("{CALLBACK}?code="))
    );
    // Under the callback's path, or on a subdomain of its host: GitHub accepts them.
    for good in [
        "https://previewd.example.com/auth/callback/deeper",
        "https://pr-2.previewd.example.com/auth/callback",
    ] {
        let reply = authorize(&github, Some(good), "s").await;
        assert_eq!(reply.status, 302, "{good}");
        assert!(reply.header("location").unwrap().starts_with(good));
    }
    for bad in [
        "https://evil.example/auth/callback",
        "http://previewd.example.com/auth/callback",
        "https://previewd.example.com:8443/auth/callback",
        "https://previewd.example.com/elsewhere",
        "https://previewd.example.com/auth/callbackx",
    ] {
        let reply = authorize(&github, Some(bad), "s").await;
        assert_eq!(reply.status, 400, "{bad}");
        assert!(reply.text().contains("redirect_uri"), "{bad}");
        assert_eq!(reply.header("location"), None);
    }
    let unknown = call(
        &github,
        "GET",
        "/login/oauth/authorize?client_id=nope&state=s",
        &[],
        "",
    )
    .await;
    assert_eq!(unknown.status, 400);
    assert!(unknown.text().contains("client_id"));
    assert!(
        github.hub().oauth.codes.len() == 3,
        "only the accepted ones got codes"
    );
}

#[tokio::test]
async fn a_loopback_callback_takes_any_port_as_github_allows() {
    let github = FakeGitHub::start().await;
    github.register_oauth_app(CLIENT_ID, SECRET, "http://127.0.0.1:8080/auth/callback");
    github.sign_in_as("alice", 1001);
    let reply = authorize(&github, Some("http://127.0.0.1:5555/auth/callback"), "s").await;
    assert_eq!(reply.status, 302);
    let reply = authorize(&github, Some("http://localhost:8080/auth/callback"), "s").await;
    assert_eq!(reply.status, 400, "another host");
}

#[tokio::test]
async fn a_refusing_browser_user_comes_back_with_access_denied_and_no_code() {
    let github = github().await;
    github.hub().deny_sign_in();
    let reply = authorize(&github, None, "xyz").await;
    assert_eq!(reply.status, 302);
    let location = reply.header("location").unwrap();
    assert!(
        location.starts_with(&format!("{CALLBACK}?error=access_denied&")),
        "{location}"
    );
    assert!(location.ends_with("&state=xyz"));
    assert!(!location.contains("code="));
}

#[tokio::test]
async fn an_expired_code_is_a_bad_verification_code() {
    let github = github().await;
    let code = code_of(&authorize(&github, None, "s").await);
    github.hub().expire_codes();
    assert_eq!(
        exchange(&github, &code, SECRET).await["error"],
        "bad_verification_code"
    );
}

#[tokio::test]
async fn user_refuses_missing_and_unknown_tokens_and_previewds_token_reads_as_the_bot() {
    let github = github().await;
    let none = call(&github, "GET", "/user", &[], "").await;
    assert_eq!(none.status, 401);
    let forged = call(
        &github,
        "GET",
        "/user",
        &[("Authorization", "Bearer gho_forged")],
        "",
    )
    .await;
    assert_eq!(forged.status, 401);
    let body: Value = serde_json::from_slice(&forged.body).unwrap();
    assert_eq!(body["message"], "Bad credentials");
    let bot = call(
        &github,
        "GET",
        "/user",
        &[("Authorization", "token test-token")],
        "",
    )
    .await;
    let body: Value = serde_json::from_slice(&bot.body).unwrap();
    assert_eq!(body["login"], crate::common::github::BOT);

    // A token revoked mid-session.
    let code = code_of(&authorize(&github, None, "s").await);
    let token = exchange(&github, &code, SECRET).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    github.hub().revoke_token(&token);
    let auth = format!("Bearer {token}");
    let revoked = call(&github, "GET", "/user", &[("Authorization", &auth)], "").await;
    assert_eq!(revoked.status, 401);
}

#[tokio::test]
async fn organization_membership_and_repository_permission_can_change_mid_test() {
    let github = github().await;
    github.add_member("Acme", "alice");
    let path = "/orgs/acme/members/Alice";
    let member = call(
        &github,
        "GET",
        path,
        &[("Authorization", "token test-token")],
        "",
    )
    .await;
    assert_eq!(member.status, 204);
    assert!(member.body.is_empty());
    github.remove_member("acme", "alice");
    let gone = call(
        &github,
        "GET",
        path,
        &[("Authorization", "token test-token")],
        "",
    )
    .await;
    assert_eq!(gone.status, 404);
    assert_eq!(github.count("GET", "/orgs/acme/members/"), 2);

    let permission = "/repos/codertocat/hello-world/collaborators/alice/permission";
    github.grant("alice", "read");
    let read: Value =
        serde_json::from_slice(&call(&github, "GET", permission, &[], "").await.body).unwrap();
    assert_eq!(read["permission"], "read");
    github.revoke("alice");
    let none: Value =
        serde_json::from_slice(&call(&github, "GET", permission, &[], "").await.body).unwrap();
    assert_eq!(none["permission"], "none");
    assert_eq!(none["user"]["permissions"]["pull"], false);
}
