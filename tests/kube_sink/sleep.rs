//! Sleep and wake through the kubernetes sink: a sleep and a wake are written as new
//! renderings synced without hooks (Argo CD's apply strategy), both Applications at once; a
//! push to a sleeping preview is synced with its hooks, the app waiting for the helpers; the
//! quota's count is read once the preview is ready.

use k8s_openapi::api::core::v1::ResourceQuota;

use super::apply::report_ready;
use super::*;
use crate::common::Delivery;

pub(super) fn app_name() -> String {
    APP.replace("-helpers", "-app")
}

/// previewd with an app chart and mail; its preview of the fixture PR ready on a cluster
/// whose quota counts two pods.
async fn ready_preview() -> (TestApp, Arc<Reconciler>, Api<Application>) {
    let app = TestApp::start_with(
        "[[repos]]\nname = \"codertocat/hello-world\"\napp_chart = \"deploy/chart\"\nmail = true\n",
    )
    .await;
    let (_, client, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NAMESPACE);
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": format!("{NAMESPACE}-quota"), "namespace": NAMESPACE},
        "spec": {"hard": {"pods": "20"}},
        "status": {"hard": {"pods": "20"},
                   "used": {"pods": "2", "requests.cpu": "350m", "requests.memory": "640Mi"}}});
    quotas
        .create(&Default::default(), &serde_json::from_value(quota).unwrap())
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "ready");
    (app, reconciler, applications)
}

pub(super) async fn sleep(app: &TestApp) {
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    assert!(
        previewd::db::sleep::sleep(app.state(), id, "idle", None, common::NOW)
            .await
            .unwrap()
    );
}

async fn wake(app: &TestApp, at: i64) {
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    assert!(
        previewd::db::sleep::wake(app.state(), id, "a request", at)
            .await
            .unwrap()
    );
}

fn strategy(app: &Application) -> serde_json::Value {
    app.rest["operation"]["sync"]["syncStrategy"].clone()
}

/// The Helm parameters the sleep rides in (`render::sleep`).
fn parameters(app: &Application) -> serde_json::Value {
    app.rest["spec"]["source"]["helm"]["parameters"].clone()
}

#[tokio::test]
async fn a_ready_preview_records_what_its_quota_counts() {
    let (app, ..) = ready_preview().await;
    let used: (i64, i64, i64) = app
        .row("SELECT used_pods, used_cpu_millis, used_memory_bytes FROM previews")
        .await;
    assert_eq!(used, (2, 350, 640 << 20));
}

#[tokio::test]
async fn a_sleep_and_a_wake_rewrite_both_applications_at_once_without_hooks() {
    let (app, reconciler, applications) = ready_preview().await;
    sleep(&app).await;
    reconciler.pass().await.unwrap();
    let (helpers, own) = (
        applications.get(APP).await.unwrap(),
        applications.get(&app_name()).await.unwrap(),
    );
    assert_eq!(strategy(&helpers), json!({"apply": {}}));
    assert_eq!(
        strategy(&own),
        json!({"apply": {}}),
        "not held behind the helpers"
    );
    assert_eq!(
        parameters(&own)[0],
        json!({"name": "replicaCount", "value": "0"})
    );
    assert_eq!(
        parameters(&helpers),
        json!([{"name": "mail.asleep", "value": "true"}])
    );
    report_ready(&applications, APP).await;
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "sleeping");

    wake(&app, common::NOW + 3600).await;
    reconciler.pass().await.unwrap();
    let own = applications.get(&app_name()).await.unwrap();
    assert_eq!(strategy(&own), json!({"apply": {}}));
    assert_eq!(parameters(&own), json!([]), "the chart's own count again");
    report_ready(&applications, APP).await;
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "ready");
    let (slept, saved, woke): (i64, i64, Option<i64>) = app
        .row("SELECT slept_seconds, saved_pod_seconds, woke_at FROM previews")
        .await;
    assert_eq!(
        (slept, saved),
        (3600, 2 * 3600),
        "two pods kept off for an hour"
    );
    assert_eq!(woke, None, "the wake is over once ready");
}

#[tokio::test]
async fn a_push_to_a_sleeping_preview_deploys_it_awake_hooks_and_all() {
    let (app, reconciler, applications) = ready_preview().await;
    sleep(&app).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "sleeping");

    let sha = "1111111111111111111111111111111111111111";
    app.send(&Delivery::push(sha, "2026-05-29T00:00:00Z")).await;
    reconciler.pass().await.unwrap();
    let helpers = applications.get(APP).await.unwrap();
    assert_eq!(
        strategy(&helpers),
        json!({"hook": {}}),
        "the migration runs"
    );
    assert_eq!(parameters(&helpers), json!([]));
    let own = applications.get(&app_name()).await.unwrap();
    assert_ne!(
        own.rest["spec"]["source"]["targetRevision"], sha,
        "the app waits for the helpers at the new head"
    );
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    let own = applications.get(&app_name()).await.unwrap();
    assert_eq!(own.rest["spec"]["source"]["targetRevision"], sha);
    assert_eq!(strategy(&own), json!({"hook": {}}));
    assert_eq!(parameters(&own), json!([]), "awake");
    let asleep: Option<i64> = app.scalar("SELECT sleeping_since FROM previews").await;
    assert_eq!(asleep, None);
}
