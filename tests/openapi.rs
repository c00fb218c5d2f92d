//! The API against its own OpenAPI document: every answer it gives, refusals included, is
//! one the document lists, in the shape it says (a JSON-schema validator), and schemathesis,
//! fuzzing the real binary with the document, finds nothing else.

mod common;

use std::path::Path;
use std::process::Command;

use common::http::request;
use common::openapi::{documented, get_documented, openapi};
use common::{Delivery, TestApp};
use serde_json::Value;

#[tokio::test]
async fn every_refusal_of_the_api_is_one_its_openapi_document_describes() {
    let app = TestApp::start_with("[api]\ntoken = \"s3cret-token\"\n").await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let openapi = json_of_with(&app, "/api/openapi.json", "Bearer s3cret-token").await;
    let (list, one, destroy) = (
        "/api/previews",
        "/api/previews/{owner}/{repo}/{number}",
        "/api/previews/{owner}/{repo}/{number}/destroy",
    );
    let bearer = Some("Bearer s3cret-token");
    for (template, path) in [(list, "/api/previews"), (one, "/api/previews/a/b/1")] {
        get_documented(&app, &openapi, template, path, None, 401).await;
        get_documented(&app, &openapi, template, path, Some("Bearer wrong"), 401).await;
    }
    // A query or a path it cannot read is the caller's mistake, answered in JSON.
    for path in ["/api/previews?limit=many", "/api/previews?limit=-1"] {
        get_documented(&app, &openapi, list, path, bearer, 400).await;
    }
    for path in [
        "/api/previews/a/b/many",
        "/api/previews/a/b/4294967296",
        "/api/previews/a/b/18446744073709551616",
    ] {
        get_documented(&app, &openapi, one, path, bearer, 400).await;
    }
    // DNS rebinding: another site's name for 127.0.0.1.
    let request = axum::http::Request::get("/api/previews")
        .header("host", "evil.example")
        .header("authorization", "Bearer s3cret-token")
        .body(axum::body::Body::empty())
        .unwrap();
    let (status, _, body) = app.answer(request).await;
    assert_eq!(status, 421);
    documented(&openapi, "get", list, 421, &String::from_utf8_lossy(&body));

    // The operator's destroy: each of its answers.
    for (path, auth, expected) in [
        ("/api/previews/codertocat/hello-world/2/destroy", None, 401),
        (
            "/api/previews/codertocat/hello-world/2/destroy",
            bearer,
            202,
        ),
        (
            "/api/previews/codertocat/hello-world/2/destroy",
            bearer,
            200,
        ),
        (
            "/api/previews/codertocat/hello-world/99/destroy",
            bearer,
            404,
        ),
        (
            "/api/previews/codertocat/hello-world/0x2/destroy",
            bearer,
            400,
        ),
    ] {
        let (status, body) = app.call("POST", path, auth).await;
        assert_eq!(status, expected, "{path}: {body}");
        documented(&openapi, "post", destroy, expected, &body);
    }
    let open = TestApp::start().await;
    let (status, body) = open
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            None,
        )
        .await;
    assert_eq!(status, 403);
    documented(&openapi, "post", destroy, 403, &body);

    // A state that cannot be read.
    app.pool().close().await;
    for (template, path) in [(list, "/api/previews"), (one, "/api/previews/a/b/1")] {
        get_documented(&app, &openapi, template, path, bearer, 503).await;
    }
}

#[tokio::test]
async fn a_pr_number_the_document_allows_is_read_and_one_beyond_it_refused() {
    let app = TestApp::start().await;
    let openapi = openapi(&app).await;
    let number = &openapi["paths"]["/api/previews/{owner}/{repo}/{number}"]["get"]["parameters"][2];
    assert_eq!(number["name"], "number");
    let maximum = number["schema"]["maximum"].as_u64().unwrap();
    assert_eq!(
        maximum,
        u64::from(u32::MAX),
        "a PR number is 32 bits (PreviewKey)"
    );
    let (status, body) = app.get(&format!("/api/previews/a/b/{maximum}"), None).await;
    assert_eq!(status, 404, "the largest number is read: {body}");
    let (status, body) = app
        .get(&format!("/api/previews/a/b/{}", maximum + 1), None)
        .await;
    assert_eq!(status, 400, "one beyond is refused: {body}");
}

async fn json_of_with(app: &TestApp, path: &str, auth: &str) -> Value {
    let (status, body) = app.get(path, Some(auth)).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// `previewd serve` on a free port in `dir`, with the test webhook secret and `token`.
fn serve(dir: &Path, token: &str) -> common::process::Server {
    common::process::Server::start(
        dir,
        &[
            ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
            ("PREVIEWD_API_TOKEN", token),
        ],
    )
}

/// schemathesis (tests/requirements.txt), beside the interpreter `scripts/test` prepares.
fn schemathesis() -> std::path::PathBuf {
    let python = std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let python = Path::new(&python);
    let beside = python.with_file_name("schemathesis");
    assert!(
        beside.exists(),
        "{} is missing: run scripts/test (it installs tests/requirements.txt)",
        beside.display()
    );
    beside
}

#[test]
fn schemathesis_finds_every_answer_of_the_api_in_its_openapi_document() {
    let dir = tempfile::tempdir().unwrap();
    let token = "a-long-random-api-token";
    let server = serve(dir.path(), token);
    for number in [2, 3] {
        let delivery = Delivery::fixture("pull_request.opened")
            .number(number)
            .guid(&format!("schemathesis-{number}"));
        let headers = delivery.headers();
        let answer = request(
            &server.addr,
            "POST",
            "/webhooks/github",
            &headers,
            &delivery.body,
        );
        assert_eq!(answer.unwrap().status, 202);
    }
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis.toml");
    let output = Command::new(schemathesis())
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("http://{}/api/openapi.json", server.addr))
        .args(["--header", &format!("Authorization: Bearer {token}")])
        // Bounded, and the same cases every run: a failure reproduces.
        .args(["--max-examples", "25", "--seed", "14", "--workers", "1"])
        .args(["--checks", "all"])
        .args(["--request-timeout", "10"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
}
