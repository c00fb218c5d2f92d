//! Failures and teardown: a failing sink recorded once, a restart in the middle of a
//! teardown, a PR reopened during one, and a replayed opened after a destroy.

use super::*;

/// The fixture PR is closed, and its teardown marked begun (the sink not yet called).
async fn closed_and_teardown_started(app: &TestApp) {
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    previewd::db::start_teardown(app.state(), id, common::NOW)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_failing_sink_is_recorded_once_and_recovers() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    // A file where the directory should be: every write fails.
    std::fs::write(rendered(&app), "not a directory").unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let (observed, error): (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!(observed, "error");
    assert!(
        error.as_deref().unwrap().contains("failed 3 times"),
        "{error:?}"
    );
    assert_eq!(
        whats(&app).await.iter().filter(|w| *w == "error").count(),
        1,
        "one history row per distinct error"
    );

    std::fs::remove_file(rendered(&app)).unwrap();
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some());
    let (observed, error): (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!((observed.as_str(), error), ("applied", None));
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_teardown_finishes_it_once() {
    let app = TestApp::start().await;
    reconciler(&app, app.app.config.clone())
        .pass()
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler(&app, app.app.config.clone())
        .pass()
        .await
        .unwrap();
    // A crash between deleting the Application and forgetting the preview: the teardown is
    // marked and the file is gone, the row is still there.
    closed_and_teardown_started(&app).await;
    std::fs::remove_file(rendered(&app).join(format!("{APP}.yaml"))).unwrap();
    // "Restart": a fresh reconciler on the same state and directory.
    let after_restart = reconciler(&app, app.app.config.clone());
    after_restart.pass().await.unwrap();
    after_restart.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0);
    let history = whats(&app).await;
    assert_eq!(
        history.iter().filter(|w| *w == "teardown_started").count(),
        1
    );
    assert_eq!(history.iter().filter(|w| *w == "destroyed").count(), 1);
}

#[tokio::test]
async fn a_pr_reopened_during_teardown_is_deployed_again_once() {
    let (app, reconciler) = opened_and_reconciled().await;
    // Closed, and the teardown begun (as with a sink whose deletion takes a while)...
    closed_and_teardown_started(&app).await;
    // ...then reopened before it finished.
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some());
    let (observed, teardown): (String, Option<i64>) = app
        .row("SELECT observed, teardown_started_at FROM previews")
        .await;
    assert_eq!(
        (app.count("previews").await, observed.as_str(), teardown),
        (1, "applied", None)
    );
    // The Application still on the sink is exactly the one wanted: nothing is rewritten.
    let history = whats(&app).await;
    assert_eq!(
        history.iter().filter(|w| *w == "applied").count(),
        1,
        "{history:?}"
    );
    assert!(!history.contains(&"destroyed".to_owned()));
}

/// The security review's replay: a captured `opened` re-sent with a fresh delivery GUID (the
/// GUID is an unsigned header) brought a destroyed preview back. An end on purpose holds
/// against any event not newer than it; a genuinely new push still deploys.
#[tokio::test]
async fn a_replayed_opened_with_a_fresh_guid_does_not_bring_back_a_destroyed_preview() {
    let (app, reconciler) = opened_and_reconciled().await;
    assert!(file(&app).is_some());
    previewd::db::request_destroy(app.state(), HELLO, 2, "octocat", common::NOW)
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!((app.count("previews").await, file(&app)), (0, None));

    for (fixture, guid) in [
        ("pull_request.opened", "replayed-1"),
        ("pull_request.reopened", "replayed-2"),
        ("pull_request.synchronize", "replayed-3"),
    ] {
        let (status, _) = app.send(&Delivery::fixture(fixture).guid(guid)).await;
        assert!(status.is_success(), "{fixture}: {status}");
        reconciler.pass().await.unwrap();
        assert_eq!(
            (app.count("previews").await, file(&app)),
            (0, None),
            "{fixture} replayed after the destroy"
        );
    }
    // A push after the destroy is news: the preview comes back.
    let after = time::OffsetDateTime::from_unix_timestamp(common::NOW + 60).unwrap();
    let after = after
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    app.send(
        &Delivery::fixture("pull_request.synchronize")
            .guid("new-push")
            .updated_at(&after),
    )
    .await;
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some(), "a newer push deploys again");
}

/// A full pass reads its rows a page at a time. A PR closed, then reopened while its page
/// waited its turn, was torn down on the row read before the reopen (its Applications
/// deleted, its database with them) and rebuilt on the next look.
#[tokio::test]
async fn a_row_read_before_a_reopen_does_not_tear_the_preview_down() {
    let (app, reconciler) = opened_and_reconciled().await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    let read_then = previewd::db::preview_row(app.state(), id)
        .await
        .unwrap()
        .unwrap();
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    reconciler.reconcile_read_earlier(read_then).await.unwrap();
    assert!(
        file(&app).is_some(),
        "the reopened preview keeps its Application"
    );
    assert!(
        !whats(&app).await.contains(&"teardown_started".to_string()),
        "{:?}",
        whats(&app).await
    );
}

/// The other way round: a row read while the preview was deployed, then the PR closed and
/// the Application file lost: the look that would write it again decides on the row as it
/// is now, and writes nothing for a closed PR.
#[tokio::test]
async fn a_row_read_before_a_close_writes_nothing_for_the_closed_pr() {
    let (app, reconciler) = opened_and_reconciled().await;
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    let read_then = previewd::db::preview_row(app.state(), id)
        .await
        .unwrap()
        .unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    std::fs::remove_file(rendered(&app).join(format!("{APP}.yaml"))).unwrap();
    reconciler.reconcile_read_earlier(read_then).await.unwrap();
    assert!(file(&app).is_none(), "not written again for a closed PR");
}
