//! Deliveries: every recorded payload gets its answer and rows, redeliveries, repositories
//! outside the allow list, no webhook secret, and the health endpoints.

use super::*;
use crate::common::{Delivery, TestApp};
use axum::http::StatusCode;

#[tokio::test]
async fn every_recorded_payload_gets_the_answer_and_rows_it_should() {
    // (fixture, status, outcome, preview rows, history rows, queued commands, installations)
    let cases = [
        ("pull_request.opened", 202, "accepted", 1, 1, 0, 0),
        (
            "pull_request.opened.with-null-body",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        ("pull_request.reopened", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.synchronize", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.synchronize.fork", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.ready_for_review", 202, "accepted", 1, 1, 0, 0),
        (
            "pull_request.ready_for_review.with-installation",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        (
            "pull_request.converted_to_draft",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        (
            "pull_request.converted_to_draft.with-installation",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        // Closing, editing or labelling a PR previewd never saw creates nothing.
        ("pull_request.closed.unmerged", 200, "ignored", 0, 0, 0, 0),
        (
            "pull_request.closed.merged.fork",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("pull_request.edited", 200, "ignored", 0, 0, 0, 0),
        ("pull_request.labeled", 200, "ignored", 0, 0, 0, 0),
        ("pull_request.unlabeled", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.created.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.created.pull_request.collaborator",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.created.issue", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.created.issue.with-installation",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.edited.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.edited.pull_request.bot-sticky",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.edited.issue", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.deleted.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.deleted.issue", 200, "ignored", 0, 0, 0, 0),
        ("ping", 200, "ignored", 0, 0, 0, 0),
        ("ping.with-app_id", 200, "ignored", 0, 0, 0, 0),
        ("push", 200, "ignored", 0, 0, 0, 0),
        ("installation.created", 202, "accepted", 0, 0, 0, 1),
        (
            "installation.created.with-requester",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
        ("installation.deleted", 202, "accepted", 0, 0, 0, 0),
        (
            "installation_repositories.added",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
        (
            "installation_repositories.removed",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
    ];
    for (name, status, outcome, previews, history, commands, installations) in cases {
        let app = TestApp::start().await;
        let delivery = Delivery::fixture(name);
        let (got_status, body) = app.send(&delivery).await;
        assert_eq!(got_status.as_u16(), status, "{name}: {body}");
        assert_eq!(body["outcome"], outcome, "{name}: {body}");
        assert_eq!(
            app.delivery_outcome(delivery.guid_str()).await.as_deref(),
            Some(outcome),
            "{name}"
        );
        assert_eq!(app.count("deliveries").await, 1, "{name}");
        assert_eq!(app.count("previews").await, previews, "{name}");
        assert_eq!(app.count("history").await, history, "{name}");
        assert_eq!(app.count("commands").await, commands, "{name}");
        assert_eq!(app.count("installations").await, installations, "{name}");
    }
}

#[tokio::test]
async fn redelivery_of_a_processed_delivery_is_a_harmless_200() {
    let app = TestApp::start().await;
    let delivery = Delivery::fixture("pull_request.opened");
    assert_eq!(app.send(&delivery).await.0, StatusCode::ACCEPTED);
    let (status, body) = app.send(&delivery).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["outcome"].as_str(), body["previous"].as_str()),
        (Some("duplicate"), Some("accepted"))
    );
    assert_eq!(
        (app.count("deliveries").await, app.count("history").await),
        (1, 1)
    );
    // The same GUID through another hook (a repo hook beside the App) is its own delivery.
    assert_eq!(
        app.send(&delivery.clone().hook("999")).await.1["outcome"],
        "accepted"
    );
    assert_eq!(app.count("deliveries").await, 2);
}

#[tokio::test]
async fn redelivery_of_a_failed_delivery_is_processed_again() {
    let app = TestApp::start().await;
    let delivery = Delivery::fixture("pull_request.opened");
    app.execute(&format!(
        "INSERT INTO deliveries (hook_id, guid, event, outcome, received_at) VALUES ('12345', '{}', 'pull_request', 'failed', 0)",
        delivery.guid_str()
    ))
    .await;
    assert_eq!(app.send(&delivery).await.0, StatusCode::ACCEPTED);
    assert_eq!(
        app.delivery_outcome(delivery.guid_str()).await.as_deref(),
        Some("accepted")
    );
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

#[tokio::test]
async fn repositories_outside_the_allow_list_are_refused_politely() {
    let app = TestApp::with_config(
        "[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n[[repos]]\nname = \"octo/app\"\n",
    )
    .await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["outcome"], "refused");
    assert_eq!(app.count("previews").await, 0);
    let history = app.history(HELLO, 2).await;
    assert_eq!(
        (history[0].0.as_str(), history[0].1.as_str()),
        ("refused", "Codertocat")
    );
}

#[tokio::test]
async fn without_a_webhook_secret_every_delivery_is_refused() {
    let app = TestApp::with_config("").await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("github.webhook_secret"),
        "{body}"
    );
    assert_eq!(app.total_rows().await, 0);
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let app = TestApp::start().await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(app.get(path, None).await.0, StatusCode::OK, "{path}");
    }
}
