//! Bad input: every malformed, unsigned, oversize or hostile delivery gets its 4xx and
//! leaves no row behind.

mod common;

use axum::http::StatusCode;
use common::{Delivery, TestApp};

/// Deterministic bytes, so a failure reproduces.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn assert_rejected(app: &TestApp, delivery: &Delivery, expected: StatusCode, what: &str) {
    let (status, body) = app.send(delivery).await;
    assert_eq!(status, expected, "{what}: {body}");
    assert!(
        body["error"].is_string(),
        "{what}: the answer says why: {body}"
    );
    assert_eq!(
        app.total_rows().await,
        0,
        "{what}: a rejected delivery wrote a row"
    );
}

#[tokio::test]
async fn random_bytes_are_rejected_without_a_row() {
    let app = TestApp::start().await;
    for seed in 0..50 {
        let body = noise(seed, (seed as usize * 97) % 4096 + 1);
        assert_rejected(
            &app,
            &Delivery::raw("pull_request", body),
            StatusCode::BAD_REQUEST,
            "noise",
        )
        .await;
    }
}

#[tokio::test]
async fn truncated_json_is_rejected_without_a_row() {
    let app = TestApp::start().await;
    let body = common::fixture_bytes("pull_request.opened");
    for cut in [1, 2, 100, body.len() / 2, body.len() - 2] {
        let delivery = Delivery::raw("pull_request", body[..cut].to_vec());
        assert_rejected(
            &app,
            &delivery,
            StatusCode::BAD_REQUEST,
            &format!("cut at {cut}"),
        )
        .await;
    }
}

#[tokio::test]
async fn wrong_types_are_rejected_without_a_row() {
    let app = TestApp::start().await;
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit); 5] = [
        ("number as text", |j| j["number"] = "two".into()),
        ("head sha as number", |j| {
            j["pull_request"]["head"]["sha"] = 7.into()
        }),
        ("pull_request as list", |j| {
            j["pull_request"] = serde_json::json!([])
        }),
        ("negative number", |j| j["number"] = (-2).into()),
        ("repository name with markup", |j| {
            j["repository"]["full_name"] = "<script>/x".into()
        }),
    ];
    for (what, edit) in cases {
        let delivery = Delivery::fixture("pull_request.opened").edit(edit);
        assert_rejected(&app, &delivery, StatusCode::BAD_REQUEST, what).await;
    }
}

#[tokio::test]
async fn bad_or_absent_signatures_are_401_without_a_row() {
    let app = TestApp::start().await;
    let opened = || Delivery::fixture("pull_request.opened");
    assert_rejected(
        &app,
        &opened().signed_with("wrong secret"),
        StatusCode::UNAUTHORIZED,
        "wrong secret",
    )
    .await;
    assert_rejected(
        &app,
        &opened().without("X-Hub-Signature-256"),
        StatusCode::UNAUTHORIZED,
        "no signature",
    )
    .await;
    assert_rejected(
        &app,
        &opened().signature("sha256="),
        StatusCode::UNAUTHORIZED,
        "empty signature",
    )
    .await;
    assert_rejected(
        &app,
        &opened().signature("sha1=2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"),
        StatusCode::UNAUTHORIZED,
        "sha1",
    )
    .await;
    // Signed correctly, then altered in flight.
    let mut tampered = opened();
    tampered.signature = Some(common::sign(common::SECRET, &tampered.body));
    tampered.body[100] ^= 1;
    assert_rejected(&app, &tampered, StatusCode::UNAUTHORIZED, "tampered body").await;
}

#[tokio::test]
async fn missing_headers_are_400_without_a_row() {
    let app = TestApp::start().await;
    for header in ["X-GitHub-Event", "X-GitHub-Delivery"] {
        let delivery = Delivery::fixture("pull_request.opened").without(header);
        assert_rejected(&app, &delivery, StatusCode::BAD_REQUEST, header).await;
    }
    let long_guid = Delivery::fixture("pull_request.opened").guid(&"a".repeat(500));
    assert_rejected(&app, &long_guid, StatusCode::BAD_REQUEST, "long guid").await;
}

#[tokio::test]
async fn form_encoded_bodies_are_400_with_a_hint() {
    let app = TestApp::start().await;
    let json = common::fixture_bytes("ping");
    let form = format!(
        "payload={}",
        String::from_utf8_lossy(&json).replace('{', "%7B")
    );
    let delivery =
        Delivery::raw("ping", form.into_bytes()).content_type("application/x-www-form-urlencoded");
    let (status, body) = app.send(&delivery).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("application/json"),
        "{body}"
    );
    assert_eq!(app.total_rows().await, 0);
}

#[tokio::test]
async fn huge_bodies_are_413_without_a_row() {
    let app = TestApp::start().await;
    let mut body = common::fixture_bytes("pull_request.opened");
    body.resize(previewd::server::MAX_BODY + 1, b' ');
    assert_rejected(
        &app,
        &Delivery::raw("pull_request", body),
        StatusCode::PAYLOAD_TOO_LARGE,
        "huge",
    )
    .await;
}

#[tokio::test]
async fn a_rejected_delivery_does_not_poison_its_guid() {
    let app = TestApp::start().await;
    let good = Delivery::fixture("pull_request.opened");
    assert_rejected(
        &app,
        &good.clone().signed_with("nope"),
        StatusCode::UNAUTHORIZED,
        "forged first",
    )
    .await;
    assert_eq!(app.send(&good).await.0, StatusCode::ACCEPTED);
}
