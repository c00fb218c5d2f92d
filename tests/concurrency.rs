//! Many deliveries at once: each lands exactly once, none sees "database is locked"; and
//! operators' destroys racing them (and another writer) wait for the lock instead of failing.
//! And the reconciler's own loop: what it must look at again comes back on time.

mod common;

use std::sync::Arc;

use axum::http::StatusCode;
use common::{Delivery, TestApp};
use sqlx::{Connection, Executor, SqliteConnection};

/// Another process (a CLI, a second connection) takes the write lock on `app`'s state and
/// runs `sql` in it; the lock is held until the connection commits or rolls back.
async fn hold_the_write_lock(app: &TestApp, sql: &str) -> SqliteConnection {
    let state = app.dir.path().join("previewd.db");
    let mut other = SqliteConnection::connect(&format!("sqlite://{}", state.display()))
        .await
        .unwrap();
    other.execute("BEGIN IMMEDIATE").await.unwrap();
    other.execute(sql).await.unwrap();
    other
}

/// The fixture's `pull_request.opened`, as PR `n`.
fn opened(n: u64) -> Delivery {
    Delivery::fixture("pull_request.opened").number(n)
}

/// Sends every delivery at the same time; the answers, in the deliveries' order.
async fn send_at_once<'a>(
    app: &Arc<TestApp>,
    deliveries: impl IntoIterator<Item = &'a Delivery>,
) -> Vec<(StatusCode, serde_json::Value)> {
    let tasks: Vec<_> = deliveries
        .into_iter()
        .map(|delivery| {
            let (app, delivery) = (app.clone(), delivery.clone());
            tokio::spawn(async move { app.send(&delivery).await })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_deliveries_land_exactly_once() {
    let app = std::sync::Arc::new(TestApp::start().await);
    let deliveries: Vec<Delivery> = (1..=200).map(opened).collect();
    // Every delivery is sent twice at the same time, as a redelivery racing the original.
    let mut accepted = 0;
    let mut duplicates = 0;
    for (status, body) in send_at_once(&app, deliveries.iter().chain(&deliveries)).await {
        match status {
            StatusCode::ACCEPTED => accepted += 1,
            StatusCode::OK if body["outcome"] == "duplicate" => duplicates += 1,
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((accepted, duplicates), (200, 200));
    assert_eq!(app.count("deliveries").await, 200);
    assert_eq!(app.count("previews").await, 200);
    assert_eq!(app.count("history").await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delivery_that_cannot_be_written_fails_alone_and_its_redelivery_succeeds() {
    let app = std::sync::Arc::new(TestApp::start().await);
    // Stand-in for a write that fails (disk full, a constraint): one PR number is refused.
    app.execute("CREATE TRIGGER refuse_pr_13 BEFORE INSERT ON previews WHEN NEW.number = 13 BEGIN SELECT RAISE(ABORT, 'refused by test'); END").await;
    let deliveries: Vec<Delivery> = (1..=40).map(opened).collect();
    for (n, (status, body)) in (1..=40).zip(send_at_once(&app, &deliveries).await) {
        let expected = if n == 13 {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::ACCEPTED
        };
        assert_eq!(status, expected, "PR {n}: {body}");
    }
    assert_eq!(app.count("previews").await, 39);
    let failed = &deliveries[12];
    assert_eq!(
        app.delivery_outcome(failed.guid_str()).await.as_deref(),
        Some("failed")
    );

    app.execute("DROP TRIGGER refuse_pr_13").await;
    assert_eq!(app.send(failed).await.0, StatusCode::ACCEPTED);
    assert_eq!(app.count("previews").await, 40);
    assert_eq!(
        app.delivery_outcome(failed.guid_str()).await.as_deref(),
        Some("accepted")
    );
}

const TOKEN: &str = "s3cret-token";

async fn app_with_token() -> Arc<TestApp> {
    Arc::new(TestApp::start_with(&format!("[api]\ntoken = {TOKEN:?}\n")).await)
}

/// An operator's destroy of Hello-World's PR `n` through the API.
async fn destroy(app: &TestApp, n: u64) -> (StatusCode, String) {
    let path = format!("/api/previews/codertocat/hello-world/{n}/destroy");
    app.call("POST", &path, Some(&format!("Bearer {TOKEN}")))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_and_twenty_destroys_while_deliveries_stream_in_all_succeed() {
    let app = app_with_token().await;
    for n in 1..=120 {
        let (status, body) = app.send(&opened(n)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    // The load: destroys through the API while other PRs' deliveries (and pings)
    // keep the single writer committing.
    let mut deliveries = Vec::new();
    for n in 1000..1300 {
        let app = app.clone();
        deliveries.push(tokio::spawn(async move {
            let delivery = if n % 3 == 0 {
                Delivery::fixture("ping").guid(&format!("ping-{n}"))
            } else {
                opened(n)
            };
            app.send(&delivery).await
        }));
    }
    let mut destroys = Vec::new();
    for n in 1..=120 {
        let app = app.clone();
        destroys.push(tokio::spawn(async move { destroy(&app, n).await }));
    }
    for (n, task) in (1..=120).zip(destroys) {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::ACCEPTED, "destroy of #{n}: {body}");
    }
    for task in deliveries {
        let (status, body) = task.await.unwrap();
        assert!(status.is_success(), "{status}: {body}");
    }
    let destroyed: i64 = app
        .scalar(
            "SELECT COUNT(*) FROM previews WHERE desired = 'absent' AND end_reason = 'destroyed'",
        )
        .await;
    assert_eq!(destroyed, 120);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_that_reads_then_writes_waits_for_another_writer_instead_of_failing() {
    let app = app_with_token().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    // Another process holds the write lock for a moment.
    let mut other =
        hold_the_write_lock(&app, "UPDATE previews SET title = 'held' WHERE number = 2").await;
    let pool = app.pool().clone();
    let destroy = tokio::spawn(async move {
        previewd::db::request_destroy(
            &previewd::db::State::from(&pool),
            "codertocat/hello-world",
            2,
            "api",
            common::NOW,
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    other.execute("COMMIT").await.unwrap();
    other.close().await.unwrap();
    // A deferred BEGIN reads first and then cannot upgrade to a writer: SQLite answers
    // SQLITE_BUSY at once, without waiting for the busy timeout.
    assert_eq!(destroy.await.unwrap().unwrap(), Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_that_finds_the_state_busy_is_retried_not_recorded_as_failed() {
    let app = TestApp::start().await;
    let reconciler = Arc::new(common::directory_reconciler(&app));
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    // A push: the next pass has a new head to apply, and so writes.
    app.send(&Delivery::push(
        "b1e5a3f0c6d04c1e9a6d7e6f5a4b3c2d1e0f9a8b",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    let before: String = app
        .scalar("SELECT observed FROM previews WHERE number = 2")
        .await;
    // Another process holds the write lock past the busy timeout (5 s), then lets go.
    let mut other = hold_the_write_lock(&app, "UPDATE leases SET holder = holder").await;
    let holder = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(5_500)).await;
        other.execute("COMMIT").await.unwrap();
        other.close().await.unwrap();
    });
    let _ = reconciler.pass().await;
    holder.await.unwrap();
    let (observed, last_error): (String, Option<String>) = app
        .row("SELECT observed, last_error FROM previews WHERE number = 2")
        .await;
    let errors: i64 = app.recorded("error").await;
    assert_eq!(
        (observed, last_error, errors),
        (before, None, 0),
        "a busy state is not the preview's failure"
    );
    // Once the lock is free, the retry applies the push.
    reconciler.pass().await.unwrap();
    let head: String = app
        .scalar("SELECT head_sha FROM previews WHERE number = 2")
        .await;
    assert!(head.starts_with("b1e5a3f"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destroy_that_cannot_get_the_lock_within_the_busy_timeout_answers_503_with_retry_after() {
    let app = app_with_token().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let mut other = hold_the_write_lock(&app, "UPDATE leases SET holder = holder").await;
    let request = axum::http::Request::builder()
        .method("POST")
        .uri("/api/previews/codertocat/hello-world/2/destroy")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(axum::body::Body::empty())
        .unwrap();
    let (status, headers, _) = app.answer(request).await;
    other.execute("ROLLBACK").await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        headers.get("retry-after").map(|v| v.to_str().unwrap()),
        Some("1")
    );
    // Asked again once the lock is free, it succeeds.
    let (status, body) = destroy(&app, 2).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// A preview whose reconcile failed is looked at again after the requeue's first delays
/// (2 s, then 4 s), by the reconciler itself: not only at the next full pass (30 s), and
/// without anyone telling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_preview_is_looked_at_again_after_its_delay_not_at_the_next_resync() {
    use std::time::{Duration, Instant};
    let app = TestApp::start().await;
    let rendered = app.dir.path().join("rendered");
    // The directory sink's directory is a file: every look at the preview fails.
    std::fs::write(&rendered, "not a directory").unwrap();
    let reconciler = Arc::new(common::directory_reconciler(&app));
    let pending = app.pending.lock().unwrap().take().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(reconciler.run(pending, stop.child_token()));
    app.send(&opened(2)).await;
    let failing = Instant::now();
    let failed = "SELECT COUNT(*) FROM previews WHERE observed = 'error'";
    while app.scalar::<i64>(failed).await == 0 {
        assert!(failing.elapsed() < Duration::from_secs(10), "never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Both first looks (the pass at start and the delivery's) are over by then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&rendered).unwrap();
    std::fs::create_dir(&rendered).unwrap();
    let fixed = Instant::now();
    while std::fs::read_dir(&rendered).unwrap().next().is_none() {
        assert!(
            fixed.elapsed() < Duration::from_secs(15),
            "not looked at again before the full pass"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    running.await.unwrap();
}
