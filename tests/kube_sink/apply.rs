//! Applying Applications and reading what Argo CD reports: unchanged renderings not written
//! again, ready only when synced and healthy at that source, failed writes and migrations,
//! a sync asked for again, the app Application after healthy helpers.

use super::*;
use crate::common::Delivery;

/// previewd with the fixture repository's app chart configured.
async fn with_app_chart() -> TestApp {
    TestApp::start_with(
        "[[repos]]\nname = \"codertocat/hello-world\"\napp_chart = \"deploy/chart\"\n",
    )
    .await
}

/// Opens the fixture PR and has Argo CD report its helper Application synced: `ready`.
async fn ready_preview(
    app: &TestApp,
    reconciler: &Arc<Reconciler>,
    applications: &Api<Application>,
) {
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_ready(applications, APP).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(app).await, "ready");
}

#[tokio::test]
async fn a_new_preview_is_applied_and_an_unchanged_one_is_not_written_again() {
    let app = TestApp::start().await;
    let (argo, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let applied = applications.get(APP).await.unwrap();
    assert_eq!(
        applied.metadata.finalizers.as_deref(),
        Some(
            &[
                "resources-finalizer.argocd.argoproj.io".to_string(),
                // The drop runs even if the preview is closed before Argo CD's first refresh.
                "post-delete-finalizer.argocd.argoproj.io".to_string(),
                "post-delete-finalizer.argocd.argoproj.io/cleanup".to_string(),
            ][..]
        )
    );
    assert_eq!(applied.rest["spec"]["source"]["path"], "helpers-chart");
    let version = applied.metadata.resource_version.clone();
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(
        applications
            .get(APP)
            .await
            .unwrap()
            .metadata
            .resource_version,
        version,
        "no write for unchanged input"
    );
    assert_eq!(argo.patches.load(Ordering::SeqCst), 1);
    assert_eq!(
        observed(&app).await,
        "syncing",
        "Argo CD has not reported yet"
    );
}

#[tokio::test]
async fn a_push_updates_the_application_and_ready_means_synced_healthy_at_that_source() {
    let app = TestApp::start().await;
    let (_, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    // Argo CD reports the first push as synced and healthy.
    ready_preview(&app, &reconciler, &applications).await;

    let new_head = "4444444444444444444444444444444444444444";
    app.send(&Delivery::push(new_head, "2019-05-15T16:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    let updated = applications.get(APP).await.unwrap();
    assert_eq!(
        updated.rest["spec"]["source"]["helm"]["valuesObject"]["preview"]["sha"],
        new_head
    );
    reconciler.pass().await.unwrap();
    assert_eq!(
        observed(&app).await,
        "syncing",
        "a status about the previous push does not count"
    );
}

#[tokio::test]
async fn an_api_server_that_fails_and_recovers_is_recorded_then_converges() {
    let app = TestApp::start().await;
    let (argo, client, reconciler, _) = on_a_cluster(&app, ArgoCd::default()).await;
    argo.failing_writes.store(3, Ordering::SeqCst);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let error: Option<String> = app.scalar("SELECT last_error FROM previews").await;
    assert_eq!(observed(&app).await, "error");
    assert!(error.unwrap().contains("apply failed 3 times"));
    // A failed apply (a timeout the API server may have acted on) was recorded before it was
    // sent: teardown knows what may exist.
    let ledger: Vec<(String, String)> = app.rows("SELECT kind, state FROM ledger").await;
    assert!(
        ledger.contains(&("Application".into(), "applying".into()))
            && ledger.contains(&("Namespace".into(), "applying".into())),
        "{ledger:?}"
    );
    reconciler.pass().await.unwrap();
    assert!(
        Api::<Application>::namespaced(client, "argocd")
            .get_opt(APP)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        observed(&app).await,
        "syncing",
        "applied, waiting for Argo CD"
    );
}

/// What Argo CD writes once its sync of `app` succeeded and it found it healthy.
pub(crate) async fn report_ready(applications: &Api<Application>, name: &str) {
    let app = applications.get(name).await.unwrap();
    let source = &app.rest["spec"]["source"];
    let revision = &source["targetRevision"];
    // The sync previewd asked for in its write: done, so Argo CD clears the request.
    let asked = app.rest["operation"].clone();
    assert!(
        asked.is_object(),
        "previewd asks for a sync of each rendering: {app:?}"
    );
    let status = json!({"operation": null, "status": {
        "sync": {"status": "Synced", "revision": revision, "comparedTo": {"source": source}},
        "health": {"status": "Healthy"},
        "operationState": {"phase": "Succeeded", "message": "successfully synced (all tasks run)",
                           "operation": asked, "syncResult": {"revision": revision, "source": source}},
    }});
    merge(applications, name, &status).await;
}

/// What Argo CD writes when the sync of `name`'s current source failed in its migration hook
/// (the shape of gitops-engine's sync_context.go results).
async fn report_failed_migration(applications: &Api<Application>, name: &str) {
    let app = applications.get(name).await.unwrap();
    let source = &app.rest["spec"]["source"];
    let asked = app.rest["operation"].clone();
    assert!(
        asked.is_object(),
        "previewd asks for a sync of each rendering: {app:?}"
    );
    let status = json!({"operation": null, "status": {
        "sync": {"status": "OutOfSync", "revision": source["targetRevision"], "comparedTo": {"source": source}},
        "health": {"status": "Healthy"},
        "operationState": {"phase": "Failed", "operation": asked,
            "message": "one or more synchronization tasks completed unsuccessfully (retried 2 times).",
            "syncResult": {"revision": source["targetRevision"], "source": source, "resources": [
                {"group": "batch", "kind": "Job", "namespace": NAMESPACE, "name": format!("{NAMESPACE}-migrate"),
                 "hookType": "Sync", "syncPhase": "Sync", "hookPhase": "Failed", "status": "Synced",
                 "message": "Job has reached the specified backoff limit"}]}},
    }});
    merge(applications, name, &status).await;
}

#[tokio::test]
async fn a_failed_migration_fails_the_preview_and_keeps_the_app_where_it_was() {
    let app = with_app_chart().await;
    let (_, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    let app_name = APP.replace("-helpers", "-app");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, &app_name).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "ready");

    let new_head = "4444444444444444444444444444444444444444";
    app.send(&Delivery::push(new_head, "2019-05-15T16:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    report_failed_migration(&applications, APP).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let (state, error): (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!(state, "failed");
    let error = error.unwrap();
    assert!(
        error.starts_with(&format!(
            "hook Job/{NAMESPACE}-migrate failed: Job has reached the specified backoff limit"
        )),
        "{error}"
    );
    assert_eq!(
        applications.get(&app_name).await.unwrap().rest["spec"]["source"]["targetRevision"],
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
        "the app stays at the last head whose migration passed"
    );
    let failures: i64 = app.recorded("failed").await;
    assert_eq!(failures, 1, "one history row per failure, not one per look");
}

/// Argo CD syncs on its own only what is OutOfSync: when the last operation is not the one
/// previewd asked for this rendering (a self-heal replaced it, or Argo CD dropped the request
/// while another sync ran), previewd asks again rather than wait forever or call it ready.
#[tokio::test]
async fn a_rendering_whose_sync_did_not_run_is_asked_for_again() {
    let app = TestApp::start().await;
    let (_, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    ready_preview(&app, &reconciler, &applications).await;

    let self_heal = json!({"status": {"operationState": {"operation": {
        "sync": {"resources": [{"kind": "ConfigMap", "name": "x"}]}, "initiatedBy": {"automated": true}, "info": null}}}});
    merge(&applications, APP, &self_heal).await;
    reconciler.pass().await.unwrap();
    assert_eq!(
        observed(&app).await,
        "syncing",
        "not ready on a sync nobody asked for"
    );
    let asked = applications.get(APP).await.unwrap();
    let hash = &asked.metadata.annotations.as_ref().unwrap()[previewd::sink::APPLIED_HASH];
    assert_eq!(
        asked.rest["operation"]["info"],
        json!([{"name": previewd::sink::argocd::RENDERING_INFO, "value": hash}])
    );
}

#[tokio::test]
async fn the_app_application_waits_for_healthy_helpers_and_is_deleted_first() {
    let app = with_app_chart().await;
    let (argo, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    let app_name = APP.replace("-helpers", "-app");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(
        applications.get_opt(&app_name).await.unwrap().is_none(),
        "no app before the helpers are healthy"
    );

    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    let created = applications.get(&app_name).await.unwrap();
    assert_eq!(
        created.rest["spec"]["source"]["targetRevision"],
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "syncing", "the app is not synced yet");
    report_ready(&applications, &app_name).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "ready");
    let confirmed: i64 = app
        .scalar("SELECT COUNT(*) FROM ledger WHERE state = 'confirmed'")
        .await;
    assert!(
        confirmed >= 3,
        "Argo CD's word confirms the ledger: {confirmed}"
    );

    argo.released.store(true, Ordering::SeqCst);
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    assert_eq!(*argo.deletions.lock().unwrap(), [app_name, APP.to_owned()]);
    assert_eq!(app.count("previews").await, 0);
}
