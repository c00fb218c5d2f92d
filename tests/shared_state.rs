//! Several previewd replicas on one PostgreSQL state: what each takes in is recorded once,
//! and what is used once is used once across them (issue #42).

mod common;

use std::sync::Arc;

use common::{Delivery, NOW, config, pg};
use previewd::clock::ManualClock;
use previewd::config::Config;
use previewd::server::app::App;

/// A replica: previewd's request side on the state at `url`, with the config every
/// replica of a shared state needs.
async fn replica(url: &str) -> (Arc<App>, axum::Router) {
    let toml = format!(
        "{}\n[[clusters]]\nname = \"in-cluster\"\nserver = \"https://kubernetes.default.svc\"\nsealing_cert = \"unused.pem\"\n",
        config("")
    );
    let env = vec![
        ("PREVIEWD_STATE".to_owned(), url.to_owned()),
        (
            "PREVIEWD_LOGIN_SESSION_SECRET".to_owned(),
            "a-test-session-secret-of-32-bytes-or-more".to_owned(),
        ),
    ];
    let config = Config::from_toml(&toml, env).unwrap();
    let started = previewd::serve::start(config, Arc::new(ManualClock::at(NOW)))
        .await
        .unwrap();
    let router = previewd::server::router(started.app.clone());
    (started.app, router)
}

async fn answer(router: &axum::Router, delivery: &Delivery) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let response = router.clone().oneshot(delivery.request()).await.unwrap();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn one_delivery_sent_to_two_replicas_at_once_is_recorded_once() {
    let url = pg::server().fresh_database();
    let (a, router_a) = replica(&url).await;
    let (_b, router_b) = replica(&url).await;
    for round in 0..20u64 {
        let delivery = Delivery::fixture("pull_request.opened")
            .number(round + 1)
            .guid(&format!("both-replicas-{round}"));
        let (first, second) =
            tokio::join!(answer(&router_a, &delivery), answer(&router_b, &delivery));
        // One records it (202), the other finds it recorded (200, a duplicate): both
        // answer GitHub with success, and neither is lost.
        let mut outcomes =
            [&first, &second].map(|(status, body)| (*status, body["outcome"].clone()));
        outcomes.sort_by_key(|(status, _)| *status);
        assert_eq!(
            outcomes,
            [(200, "duplicate".into()), (202, "accepted".into())],
            "{first:?} {second:?}"
        );
    }
    let pool = a.state.postgres().unwrap();
    assert_eq!(count(pool, "SELECT COUNT(*) FROM deliveries").await, 20);
    assert_eq!(count(pool, "SELECT COUNT(*) FROM previews").await, 20);
    assert_eq!(
        count(pool, "SELECT COUNT(*) FROM history WHERE what = 'opened'").await,
        20,
        "each PR opened once in its history"
    );
}

#[tokio::test]
async fn a_code_used_on_one_replica_does_not_open_on_another() {
    let url = pg::server().fresh_database();
    let (a, _) = replica(&url).await;
    let (b, _) = replica(&url).await;
    let until = NOW + 60;
    assert!(
        a.login
            .handoffs
            .take_in(&a.state, "nonce-1", until, NOW)
            .await
    );
    assert!(
        !b.login
            .handoffs
            .take_in(&b.state, "nonce-1", until, NOW)
            .await
    );
    assert!(
        !a.login
            .handoffs
            .take_in(&a.state, "nonce-1", until, NOW)
            .await
    );
    assert!(
        b.login
            .handoffs
            .take_in(&b.state, "nonce-2", until, NOW)
            .await
    );
    // Once expired it is forgotten (it would not open anyway: the sealed code expired too).
    assert!(
        b.login
            .handoffs
            .take_in(&b.state, "nonce-1", until + 120, until + 1)
            .await
    );
}

#[tokio::test]
async fn replicas_share_one_instance_id() {
    let url = pg::server().fresh_database();
    let (a, _) = replica(&url).await;
    let (b, _) = replica(&url).await;
    let (ida, idb) = tokio::join!(
        previewd::db::instance_id(&a.state),
        previewd::db::instance_id(&b.state)
    );
    assert_eq!(ida.unwrap(), idb.unwrap());
}
