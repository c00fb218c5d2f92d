//! What PR events make of a preview: opened, pushed, closed and reopened PRs, forks
//! awaiting approval, and drafts.

use super::*;
use crate::common::{Delivery, NOW, TestApp};
use axum::http::StatusCode;

const HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

#[tokio::test]
async fn opened_pr_records_a_deployed_preview_that_expires_after_the_ttl() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(preview.desired, "deployed");
    assert_eq!(preview.head_sha, HEAD);
    assert_eq!(
        (preview.author.as_str(), preview.title.as_str()),
        ("Codertocat", "Update the README with new information.")
    );
    assert_eq!(preview.installation_id, Some(1));
    assert_eq!(preview.created_at, NOW);
    assert_eq!(preview.expires_at, NOW + 72 * 3600);
    assert_eq!(
        app.history(HELLO, 2).await,
        vec![(
            "opened".into(),
            "Codertocat".into(),
            "deploy ec26c3e".into()
        )]
    );
}

#[tokio::test]
async fn push_moves_the_preview_to_the_new_head_and_restarts_its_clock() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.clock.advance(3600);
    let new_head = "1111111111111111111111111111111111111111";
    let push = Delivery::push(new_head, "2019-05-15T16:00:00Z");
    assert_eq!(app.send(&push).await.0, StatusCode::ACCEPTED);
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(preview.head_sha, new_head);
    assert_eq!(preview.expires_at, NOW + 3600 + 72 * 3600);
    assert_eq!(app.history(HELLO, 2).await.len(), 2);
}

/// The signature covers the body, not the delivery's id: a captured push sent again under a
/// fresh id verifies, and is recorded as a delivery, but it is the PR's recorded state
/// again and must not keep the preview from expiring.
#[tokio::test]
async fn a_push_replayed_under_a_fresh_delivery_id_restarts_no_clock() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.clock.advance(3600);
    let new_head = "1111111111111111111111111111111111111111";
    let push = Delivery::push(new_head, "2019-05-15T16:00:00Z");
    app.send(&push).await;
    let expires_at = NOW + 3600 + 72 * 3600;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().expires_at, expires_at);
    app.clock.advance(86_400);
    let replay = push.guid("00000000-0000-4000-8000-feedfacecafe");
    let (status, body) = app.send(&replay).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(app.preview(HELLO, 2).await.unwrap().expires_at, expires_at);
    assert_eq!(app.count("deliveries").await, 3);
    assert_eq!(app.history(HELLO, 2).await.len(), 2, "opened, pushed");
}

#[tokio::test]
async fn pushes_never_extend_a_preview_past_its_maximum_lifetime() {
    let app = TestApp::with_config("[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n[defaults]\nttl = \"2d\"\nmax_lifetime = \"3d\"\n").await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.clock.advance(2 * 86_400);
    app.send(&Delivery::fixture("pull_request.synchronize").updated_at("2019-05-20T00:00:00Z"))
        .await;
    assert_eq!(
        app.preview(HELLO, 2).await.unwrap().expires_at,
        NOW + 3 * 86_400
    );
}

#[tokio::test]
async fn closed_pr_marks_its_preview_absent_with_the_reason() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let (status, _) = app
        .send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(
        (preview.desired.as_str(), preview.end_reason.as_deref()),
        ("absent", Some("closed"))
    );
    let merged = Delivery::fixture("pull_request.closed.unmerged")
        .edit(|j| j["pull_request"]["merged"] = true.into())
        .updated_at("2019-05-15T15:30:00Z");
    app.send(&merged).await;
    assert_eq!(
        app.preview(HELLO, 2).await.unwrap().end_reason.as_deref(),
        Some("merged")
    );
    let whats: Vec<String> = app
        .history(HELLO, 2)
        .await
        .into_iter()
        .map(|h| h.2)
        .collect();
    assert_eq!(
        whats,
        [
            "deploy ec26c3e",
            "PR closed: tear down",
            "PR merged: tear down"
        ]
    );
}

#[tokio::test]
async fn reopened_pr_is_deployed_again() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(
        (preview.desired.as_str(), preview.end_reason),
        ("deployed", None)
    );
}

#[tokio::test]
async fn fork_pr_is_recorded_as_awaiting_approval_and_never_deployed() {
    let app = TestApp::start().await;
    let (status, _) = app
        .send(&Delivery::fixture("pull_request.synchronize.fork"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let preview = app
        .preview("googlecloudplatform/python-docs-samples-1", 1)
        .await
        .unwrap();
    assert_eq!(preview.desired, "awaiting_approval");
    assert!(preview.fork);
    let history = app
        .history("googlecloudplatform/python-docs-samples-1", 1)
        .await;
    assert_eq!(history[0].1, "dandhlee"); // the sender who pushed, not the PR author
    assert!(history[0].2.contains("/preview approve"), "{history:?}");
}

#[tokio::test]
async fn drafts_wait_until_ready_for_review() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.converted_to_draft"))
        .await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!((preview.desired.as_str(), preview.draft), ("draft", true));
    app.send(
        &Delivery::fixture("pull_request.ready_for_review").updated_at("2019-05-15T15:30:00Z"),
    )
    .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

/// GitHub's `synchronize` of a head previewd already has (or any PR event that moves only
/// times) restarts the clock and wakes no reconcile: nothing the preview shows changed, and
/// the new expiry reaches the reconciler at its next full pass. A new head wakes it at once.
/// How many previews the reconciler was told of within `wait` ms (`None`: none).
async fn woken(pending: &mut previewd::work::Pending, wait: u64) -> Option<usize> {
    let next = pending.next();
    tokio::time::timeout(std::time::Duration::from_millis(wait), next)
        .await
        .ok()
        .flatten()
        .map(|keys| keys.len())
}

#[tokio::test]
async fn a_pull_request_event_that_moves_only_times_wakes_no_reconcile() {
    let app = TestApp::start().await;
    let mut pending = app.pending.lock().unwrap().take().unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(woken(&mut pending, 2000).await, Some(1), "a new preview");
    app.clock.advance(60);
    let again = Delivery::push(HEAD, "2019-05-15T16:00:00Z");
    assert_eq!(app.send(&again).await.0, StatusCode::ACCEPTED);
    assert_eq!(
        app.preview(HELLO, 2).await.unwrap().expires_at,
        NOW + 60 + 72 * 3600,
        "its clock restarted all the same"
    );
    assert_eq!(woken(&mut pending, 300).await, None, "nothing to reconcile");
    let pushed = Delivery::push(
        "1111111111111111111111111111111111111111",
        "2019-05-15T16:01:00Z",
    );
    assert_eq!(app.send(&pushed).await.0, StatusCode::ACCEPTED);
    assert_eq!(woken(&mut pending, 2000).await, Some(1), "a new head");
}
