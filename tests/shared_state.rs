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

#[tokio::test]
async fn an_older_push_recorded_while_a_newer_close_commits_does_not_reopen_the_preview() {
    let url = pg::server().fresh_database();
    let (a, router) = replica(&url).await;
    let opened = Delivery::fixture("pull_request.opened")
        .number(1)
        .guid("opened-1");
    assert_eq!(answer(&router, &opened).await.0, 202);
    let pool = a.state.postgres().unwrap().clone();
    // Another replica records the PR's close (2026-11-28T12:00Z): its transaction holds the
    // row while a push from earlier that day arrives here.
    let closed_at = NOW - 12 * 3600;
    let mut close = pool.begin().await.unwrap();
    sqlx::query(
        "UPDATE previews SET desired = 'absent', end_reason = 'closed', pr_updated_at = $1",
    )
    .bind(closed_at)
    .execute(&mut *close)
    .await
    .unwrap();
    sqlx::query("INSERT INTO closed_prs (repo, number, pr_updated_at) SELECT repo, number, $1 FROM previews")
        .bind(closed_at)
        .execute(&mut *close)
        .await
        .unwrap();
    let push = Delivery::fixture("pull_request.synchronize")
        .number(1)
        .at_sha("0123456789abcdef0123456789abcdef01234567")
        .updated_at("2026-11-28T06:00:00Z")
        .guid("push-1");
    let pushing = tokio::spawn({
        let router = router.clone();
        async move { answer(&router, &push).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    close.commit().await.unwrap();
    let (status, body) = pushing.await.unwrap();
    assert!(status == 200 || status == 202, "{status} {body}");
    // As one writer would have it: the close is newer, so the push changes nothing.
    let desired: String = sqlx::query_scalar("SELECT desired FROM previews")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(desired, "absent", "the newer close stands: {body}");
}

#[test]
fn a_lost_race_on_postgresql_is_a_busy_error_to_retry_and_bad_input_is_not() {
    use previewd::db::is_busy;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = pg::server().fresh_database();
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let deadlock = sqlx::query("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '40P01'; END $$")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(is_busy(&deadlock), "{deadlock}");
        // 22021 (a NUL in text) ends in 0x05 read as a number: not SQLite's busy.
        let bad = sqlx::query("DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '22021'; END $$")
            .execute(&pool)
            .await
            .unwrap_err();
        assert!(!is_busy(&bad), "{bad}");
        pool.close().await;
    });
}

/// A server made with a language's collation (here ICU's en-US, which puts `_` first and
/// ignores case) lists text as SQLite does: byte by byte.
#[tokio::test]
async fn a_server_with_a_language_collation_orders_text_as_sqlite_does() {
    let url = pg::server()
        .fresh_database_with("LOCALE_PROVIDER icu ICU_LOCALE 'en-US' TEMPLATE template0");
    let (app, _) = replica(&url).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    for repo in ["acme/alpha", "acme/Zeta", "acme/_x"] {
        sqlx::query(
            "INSERT INTO template_repos (repo, base_sha, last_used_at, updated_at)
             VALUES ($1, 'b0b0', 0, 0)",
        )
        .bind(repo)
        .execute(&pool)
        .await
        .unwrap();
    }
    assert_eq!(
        previewd::db::template_repos(&app.state).await.unwrap(),
        ["acme/Zeta", "acme/_x", "acme/alpha"]
    );
}

#[tokio::test]
async fn every_text_column_of_the_postgresql_schema_compares_bytes() {
    let url = pg::server().fresh_database();
    let (_app, _) = replica(&url).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let other: Vec<String> = sqlx::query_scalar(
        "SELECT table_name || '.' || column_name FROM information_schema.columns
         WHERE table_schema = current_schema() AND data_type = 'text'
           AND table_name <> '_sqlx_migrations' AND collation_name IS DISTINCT FROM 'C'
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(other.is_empty(), "not in the \"C\" collation: {other:?}");
}
