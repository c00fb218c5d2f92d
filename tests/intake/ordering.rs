//! Events out of order: a late older event, a late opened, a close before its open, and an
//! edit overtaking ready_for_review.

use super::*;
use crate::common::{Delivery, TestApp};
use axum::http::StatusCode;

#[tokio::test]
async fn a_late_older_event_never_rolls_the_preview_back() {
    let app = TestApp::start().await;
    let newer = "2222222222222222222222222222222222222222";
    app.send(&Delivery::push(newer, "2019-05-15T17:00:00Z"))
        .await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "ignored");
    assert_eq!(app.preview(HELLO, 2).await.unwrap().head_sha, newer);
    assert_eq!(app.history(HELLO, 2).await.len(), 1);
}

#[tokio::test]
async fn a_late_opened_never_brings_back_a_closed_prs_preview() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    // Teardown finished: the row is gone (as the reconciler leaves it).
    app.execute("DELETE FROM previews").await;
    let (_, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    let late = app
        .send(&Delivery::fixture("pull_request.synchronize"))
        .await;
    assert_eq!(
        (body["outcome"].as_str(), late.1["outcome"].as_str()),
        (Some("ignored"), Some("ignored"))
    );
    assert_eq!(app.count("previews").await, 0);
    // A reopen is newer than the close: it deploys again.
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

#[tokio::test]
async fn a_close_that_arrives_before_its_open_still_wins() {
    let app = TestApp::start().await;
    let (_, closed) = app
        .send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    assert_eq!(closed["outcome"], "ignored", "no preview to close yet");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(app.count("previews").await, 0);
}

#[tokio::test]
async fn an_edit_that_overtakes_ready_for_review_does_not_hide_it() {
    let app = TestApp::start().await;
    app.send(
        &Delivery::fixture("pull_request.converted_to_draft").updated_at("2019-05-15T15:00:00Z"),
    )
    .await;
    // GitHub delivers the (newer) edit first, then the (older) ready_for_review.
    let edit = Delivery::fixture("pull_request.labeled")
        .edit(|j| j["pull_request"]["draft"] = false.into());
    app.send(&edit.updated_at("2019-05-15T15:30:00Z")).await;
    app.send(
        &Delivery::fixture("pull_request.ready_for_review").updated_at("2019-05-15T15:20:00Z"),
    )
    .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

/// Found by helper-13: a close older than an end on purpose, replayed under a fresh id,
/// cleared the head that end was at, and resync would then have brought the destroyed
/// preview back (`db::ended_on_purpose_at`).
#[tokio::test]
async fn a_replayed_older_close_does_not_forget_an_end_on_purpose() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let close = Delivery::fixture("pull_request.closed.unmerged");
    app.send(&close).await;
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    // `/preview destroy`, as the reconciler records it.
    app.execute("UPDATE previews SET desired = 'absent', end_reason = 'destroyed'")
        .await;
    let head = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
    let ended = "SELECT ended_sha FROM closed_prs";
    assert_eq!(
        app.scalar::<Option<String>>(ended).await.as_deref(),
        Some(head)
    );
    app.send(&close.guid("00000000-0000-4000-8000-00000000c105"))
        .await;
    assert_eq!(
        app.scalar::<Option<String>>(ended).await.as_deref(),
        Some(head)
    );
    // A close newer than the end still clears it: a reopen after it comes back.
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T16:00:00Z"))
        .await;
    assert_eq!(app.scalar::<Option<String>>(ended).await, None);
}
