//! Many deliveries at once: each lands exactly once, none sees "database is locked".

mod common;

use axum::http::StatusCode;
use common::{Delivery, TestApp};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_deliveries_land_exactly_once() {
    let app = std::sync::Arc::new(TestApp::start().await);
    let deliveries: Vec<Delivery> = (1..=200)
        .map(|n| Delivery::fixture("pull_request.opened").number(n))
        .collect();
    // Every delivery is sent twice at the same time, as a redelivery racing the original.
    let mut tasks = Vec::new();
    for delivery in deliveries.iter().chain(&deliveries) {
        let delivery = delivery.clone();
        let app = app.clone();
        tasks.push(tokio::spawn(async move { app.send(&delivery).await }));
    }
    let mut accepted = 0;
    let mut duplicates = 0;
    for task in tasks {
        let (status, body) = task.await.unwrap();
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
    sqlx::query("CREATE TRIGGER refuse_pr_13 BEFORE INSERT ON previews WHEN NEW.number = 13 BEGIN SELECT RAISE(ABORT, 'refused by test'); END")
        .execute(app.pool())
        .await
        .unwrap();
    let deliveries: Vec<Delivery> = (1..=40)
        .map(|n| Delivery::fixture("pull_request.opened").number(n))
        .collect();
    let mut tasks = Vec::new();
    for delivery in &deliveries {
        let delivery = delivery.clone();
        let app = app.clone();
        tasks.push(tokio::spawn(async move { app.send(&delivery).await }));
    }
    for (n, task) in (1..=40).zip(tasks) {
        let (status, body) = task.await.unwrap();
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

    sqlx::query("DROP TRIGGER refuse_pr_13")
        .execute(app.pool())
        .await
        .unwrap();
    assert_eq!(app.send(failed).await.0, StatusCode::ACCEPTED);
    assert_eq!(app.count("previews").await, 40);
    assert_eq!(
        app.delivery_outcome(failed.guid_str()).await.as_deref(),
        Some("accepted")
    );
}
