//! The read API and the dashboard through the real router: shapes checked against the
//! served OpenAPI description, filters, a destroyed preview's history, the token, and
//! HTML escaping.

mod common;

use std::sync::Arc;

use common::{Delivery, TestApp};
use previewd::reconcile::Reconciler;
use serde_json::{Value, json};

fn reconciler(app: &TestApp) -> Arc<Reconciler> {
    Arc::new(common::directory_reconciler(app))
}

async fn json_of(app: &TestApp, path: &str) -> Value {
    let (status, body) = app.get(path, None).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Two previews by different authors; #2 pushed once.
async fn two_previews(app: &TestApp) {
    let reconciler = reconciler(app);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(
        &Delivery::fixture("pull_request.opened")
            .number(3)
            .edit(|b| {
                b["pull_request"]["user"]["login"] = json!("octocat");
                b["pull_request"]["title"] = json!("<script>alert('x')</script> & friends");
            })
            .guid("opened-3"),
    )
    .await;
    reconciler.pass().await.unwrap();
}

/// Every object's keys are exactly the schema's (required, and nothing else).
fn conforms(object: &Value, schema: &Value) {
    let mut keys: Vec<&String> = object.as_object().unwrap().keys().collect();
    let mut required: Vec<&String> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| match k {
            Value::String(s) => s,
            _ => unreachable!(),
        })
        .collect();
    keys.sort();
    required.sort();
    assert_eq!(keys, required, "{object}");
}

#[tokio::test]
async fn previews_are_listed_filtered_and_shaped_as_the_openapi_description_says() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    let openapi = json_of(&app, "/api/openapi.json").await;
    let schemas = &openapi["components"]["schemas"];

    let all = json_of(&app, "/api/previews").await;
    let previews = all["previews"].as_array().unwrap();
    assert_eq!(previews.len(), 2);
    for p in previews {
        conforms(p, &schemas["Preview"]);
    }
    let first = &previews[0];
    assert_eq!(first["repo"], "codertocat/hello-world");
    assert_eq!(first["number"], 2);
    assert_eq!(first["author"], "Codertocat");
    assert_eq!(first["state"], "deploying");
    assert_eq!(first["cluster"], "in-cluster");
    assert_eq!(
        first["pr_url"],
        "https://github.com/codertocat/hello-world/pull/2"
    );
    assert_eq!(first["seconds_left"], 72 * 3600);

    let by_author = json_of(&app, "/api/previews?author=octocat").await;
    assert_eq!(by_author["previews"].as_array().unwrap().len(), 1);
    let by_state = json_of(&app, "/api/previews?state=ready").await;
    assert_eq!(by_state["previews"].as_array().unwrap().len(), 0);
    let by_cluster = json_of(
        &app,
        "/api/previews?cluster=in-cluster&repo=Codertocat/Hello-World",
    )
    .await;
    assert_eq!(by_cluster["previews"].as_array().unwrap().len(), 2);

    let detail = json_of(&app, "/api/previews/codertocat/hello-world/2").await;
    conforms(&detail["preview"], &schemas["Preview"]);
    for item in detail["ledger"].as_array().unwrap() {
        conforms(item, &schemas["LedgerItem"]);
    }
    assert!(detail["ledger"].as_array().unwrap().len() >= 2);
    let whats: Vec<&str> = detail["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["what"].as_str().unwrap())
        .collect();
    assert_eq!(whats, ["opened", "placed", "applied"]);
    let (status, _) = app
        .get("/api/previews/codertocat/hello-world/99", None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_destroyed_preview_keeps_its_history_in_the_api_and_the_dashboard() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler(&app).pass().await.unwrap();
    let detail = json_of(&app, "/api/previews/codertocat/hello-world/2").await;
    assert_eq!(detail["preview"], Value::Null);
    assert_eq!(detail["ledger"], json!([]));
    let history = detail["history"].as_array().unwrap();
    assert_eq!(history.last().unwrap()["what"], "destroyed");
    for h in history {
        conforms(
            h,
            &json_of(&app, "/api/openapi.json").await["components"]["schemas"]["HistoryEntry"],
        );
    }
    let (status, page) = app.get("/previews/codertocat/hello-world/2", None).await;
    assert_eq!(status, 200);
    assert!(page.contains("has been destroyed") && page.contains("destroyed"));
    let (_, index) = app.get("/", None).await;
    assert!(
        index.contains("Recently destroyed")
            && index.contains("/previews/codertocat/hello-world/2")
    );
}

#[tokio::test]
async fn a_title_with_a_script_tag_shows_as_text() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    let (status, page) = app.get("/", None).await;
    assert_eq!(status, 200);
    assert!(!page.contains("<script>"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; friends"));
    assert!(
        page.contains("2d 23h") || page.contains("3d"),
        "time left shown: {page}"
    );
}

#[tokio::test]
async fn with_a_token_reads_need_it_and_destroy_always_does() {
    let open = TestApp::start().await;
    two_previews(&open).await;
    let (status, body) = open
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            None,
        )
        .await;
    assert_eq!(
        status, 403,
        "no api.token: nobody destroys through the API: {body}"
    );

    let app = TestApp::with_config(&format!(
        "[github]\nwebhook_secret = {:?}\n[api]\ntoken = \"s3cret-token\"\n",
        common::SECRET
    ))
    .await;
    two_previews(&app).await;
    for path in [
        "/",
        "/api/previews",
        "/api/previews/codertocat/hello-world/2",
        "/api/openapi.json",
    ] {
        let (status, _) = app.get(path, None).await;
        assert_eq!(status, 401, "{path}");
        let (status, _) = app.get(path, Some("Bearer wrong")).await;
        assert_eq!(status, 401, "{path}");
        let (status, _) = app.get(path, Some("Bearer s3cret-token")).await;
        assert_eq!(status, 200, "{path}");
    }
    // A browser sends Basic auth after the prompt; the password is the token.
    let (status, _) = app.get("/", Some("Basic dXNlcjpzM2NyZXQtdG9rZW4=")).await;
    assert_eq!(status, 200);
    let (status, _) = app.get("/healthz", None).await;
    assert_eq!(status, 200, "health stays open");

    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            None,
        )
        .await;
    assert_eq!(status, 401);
    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            Some("Basic dXNlcjpzM2NyZXQtdG9rZW4="),
        )
        .await;
    assert_eq!(
        status, 401,
        "a browser's cached Basic credentials cannot destroy (CSRF)"
    );
    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            Some("Bearer s3cret-token"),
        )
        .await;
    assert_eq!(status, 202);
    let (desired, actor): (String, String) = sqlx::query_as(
        "SELECT p.desired, h.actor FROM previews p JOIN history h ON h.repo = p.repo AND h.number = p.number
         WHERE p.number = 2 AND h.what = 'destroy_requested'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!((desired.as_str(), actor.as_str()), ("absent", "api"));
}
