//! The kubernetes sink through kube-fake-client, an in-memory API server that speaks the
//! real API to kube-rs (server-side apply with field managers, resource versions). Argo CD
//! is played by the tests: they write `status`, and hold and release the cascade finalizer.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{Delivery, TestApp};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_fake_client::{ClientBuilder, Error, interceptor};
use previewd::argocd::Application;
use previewd::reconcile::Reconciler;
use previewd::seal::SealingCert;
use previewd::sink::kubernetes::KubeSink;
use previewd::sink::{Owner, Sink};
use serde_json::json;

const APP: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers";
const NAMESPACE: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");

/// What the pretend Argo CD is doing: holding a deletion, and failing some writes.
#[derive(Default)]
struct ArgoCd {
    deleting: Mutex<Option<serde_json::Value>>,
    failing_writes: AtomicUsize,
    patches: AtomicUsize,
    /// Patches that asked a running sync to terminate.
    terminations: AtomicUsize,
    released: AtomicBool,
    /// Applications whose deletion was asked for, in order.
    deletions: Mutex<Vec<String>>,
    /// Namespaces that exist on the cluster (the preview's, while it terminates).
    namespaces: Mutex<BTreeSet<String>>,
    /// The DeleteOptions body of every deletion (the fake itself ignores preconditions).
    delete_options: Mutex<Vec<serde_json::Value>>,
}

/// kube-fake-client cannot route a cluster-scoped core path (`/api/v1/namespaces/NAME` reads
/// as a namespaced one), so namespace lookups are answered here, with the API's own shapes;
/// every other request goes to the fake.
fn with_namespaces(fake: kube::Client, argo: Arc<ArgoCd>) -> kube::Client {
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (fake, argo) = (fake.clone(), argo.clone());
        async move {
            let path = request.uri().path().to_owned();
            if request.method() == http::Method::DELETE {
                use http_body_util::BodyExt;
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await.unwrap().to_bytes();
                let options = serde_json::from_slice(&bytes).unwrap_or_default();
                argo.delete_options.lock().unwrap().push(options);
                let request =
                    http::Request::from_parts(parts, kube::client::Body::from(bytes.to_vec()));
                return fake.send(request).await;
            }
            let Some(name) = path
                .strip_prefix("/api/v1/namespaces/")
                .filter(|rest| !rest.contains('/'))
            else {
                return fake.send(request).await;
            };
            let (status, body) = if argo.namespaces.lock().unwrap().contains(name) {
                let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
                                  "status": {"phase": "Terminating"}});
                (200, body)
            } else {
                let body = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                                  "reason": "NotFound", "code": 404,
                                  "message": format!("namespaces \"{name}\" not found")});
                (404, body)
            };
            Ok::<_, kube::Error>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.to_string().into_bytes()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

async fn cluster(argo: Arc<ArgoCd>) -> kube::Client {
    let (on_delete, on_get, on_patch) = (argo.clone(), argo.clone(), argo.clone());
    let funcs = interceptor::Funcs::default()
        .delete(move |ctx| {
            on_delete
                .deletions
                .lock()
                .unwrap()
                .push(ctx.name.to_owned());
            if on_delete.released.load(Ordering::SeqCst) {
                return Ok(None);
            }
            // The cascade finalizer holds the object: it stays, with a deletion timestamp.
            let mut app: serde_json::Value =
                serde_json::to_value(ctx.client.get::<Application>(ctx.namespace, ctx.name)?)?;
            app["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z");
            *on_delete.deleting.lock().unwrap() = Some(app.clone());
            Ok(Some(app))
        })
        .get(move |ctx| {
            Ok(on_get
                .deleting
                .lock()
                .unwrap()
                .clone()
                .filter(|_| ctx.name == APP))
        })
        .patch(move |ctx| {
            on_patch.patches.fetch_add(1, Ordering::SeqCst);
            if ctx.patch["status"]["operationState"]["phase"] == "Terminating" {
                on_patch.terminations.fetch_add(1, Ordering::SeqCst);
            }
            let failing = on_patch.failing_writes.load(Ordering::SeqCst);
            if failing > 0 {
                on_patch.failing_writes.store(failing - 1, Ordering::SeqCst);
                return Err(Error::Internal("etcdserver: request timed out".into()));
            }
            Ok(None)
        });
    intercepted(funcs, argo).await
}

/// The fake API server with Applications, `funcs` intercepting its verbs, and `argo`'s
/// namespaces.
async fn intercepted(funcs: interceptor::Funcs, argo: Arc<ArgoCd>) -> kube::Client {
    let fake = ClientBuilder::new()
        .with_resource::<Application>()
        .with_interceptor_funcs(funcs)
        .build()
        .await
        .unwrap();
    with_namespaces(fake, argo)
}

/// A fake API server with Argo CD `argo` on it, and `app`'s reconciler applying there; its
/// client, and the Applications in `argocd`.
async fn on_a_cluster(
    app: &TestApp,
    argo: ArgoCd,
) -> (Arc<ArgoCd>, kube::Client, Arc<Reconciler>, Api<Application>) {
    let argo = Arc::new(argo);
    let client = cluster(argo.clone()).await;
    let applications = Api::namespaced(client.clone(), "argocd");
    (argo, client.clone(), reconciler(app, client), applications)
}

fn reconciler(app: &TestApp, client: kube::Client) -> Arc<Reconciler> {
    let cert = SealingCert::from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-cert.pem")).unwrap(),
        common::NOW,
    )
    .unwrap();
    let certs = [("in-cluster".to_string(), cert)].into();
    let sink = Sink::Kubernetes(KubeSink::new(client, "argocd"));
    Arc::new(Reconciler::new(
        app.pool().clone(),
        app.app.config.clone(),
        sink,
        certs,
        None,
        Arc::new(app.clock.clone()),
    ))
}

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

async fn observed(app: &TestApp) -> String {
    app.scalar("SELECT observed FROM previews").await
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
        Some(&["resources-finalizer.argocd.argoproj.io".to_string()][..])
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
async fn teardown_waits_for_argo_cds_finalizer_and_then_forgets_the_preview() {
    let app = TestApp::start().await;
    let (argo, client, reconciler, _) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let error: Option<String> = app.scalar("SELECT last_error FROM previews").await;
    assert_eq!(
        (app.count("previews").await, observed(&app).await.as_str()),
        (1, "tearing_down"),
        "never forgotten before the Application is gone: {error:?}"
    );

    // Still deleting after 15 minutes: reported once, not forced.
    app.clock.advance(16 * 60);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let stuck: i64 = app.recorded("teardown_stuck").await;
    assert_eq!(
        (stuck, observed(&app).await.as_str()),
        (1, "teardown_stuck")
    );

    // Argo CD releases the Application while the namespace still terminates: not yet gone.
    argo.namespaces.lock().unwrap().insert(NAMESPACE.into());
    argo.released.store(true, Ordering::SeqCst);
    *argo.deleting.lock().unwrap() = None;
    Api::<Application>::namespaced(client, "argocd")
        .delete(APP, &DeleteParams::default())
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(
        app.count("previews").await,
        1,
        "the namespace is still there"
    );
    let ledger: Vec<(String, String)> =
        app.rows("SELECT kind, state FROM ledger ORDER BY id").await;
    let waiting: Vec<_> = ledger.iter().filter(|(_, state)| state != "gone").collect();
    assert_eq!(waiting, [&("Namespace".into(), "deleting".into())]);
    assert!(
        ledger.len() > 2,
        "the database and certificate are in the ledger too"
    );

    argo.namespaces.lock().unwrap().clear();
    reconciler.pass().await.unwrap();
    let error: Option<String> = sqlx::query_scalar("SELECT last_error FROM previews")
        .fetch_optional(app.pool())
        .await
        .unwrap()
        .flatten();
    assert_eq!(app.count("previews").await, 0, "{error:?}");
    let destroyed: i64 = app.recorded("destroyed").await;
    assert_eq!(destroyed, 1);
    let reason: String = app.reason_recorded("destroyed").await;
    assert!(
        reason.contains(&format!("Namespace {NAMESPACE} gone")),
        "{reason}"
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

#[tokio::test]
async fn a_restart_in_the_middle_of_a_teardown_does_not_delete_twice_or_forget_early() {
    let (app, argo) = (TestApp::start().await, Arc::new(ArgoCd::default()));
    let client = cluster(argo.clone()).await;
    reconciler(&app, client.clone()).pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler(&app, client.clone()).pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler(&app, client.clone()).pass().await.unwrap();
    // "Restart": a new reconciler on the same state and cluster, deletion still running.
    let restarted = reconciler(&app, client.clone());
    restarted.pass().await.unwrap();
    assert_eq!(
        (app.count("previews").await, observed(&app).await.as_str()),
        (1, "tearing_down")
    );
    let started: i64 = app.recorded("teardown_started").await;
    assert_eq!(started, 1);
    argo.released.store(true, Ordering::SeqCst);
    *argo.deleting.lock().unwrap() = None;
    Api::<Application>::namespaced(client, "argocd")
        .delete(APP, &DeleteParams::default())
        .await
        .unwrap();
    restarted.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0);
}

/// A merge patch of Application `name`, as Argo CD writes its status.
async fn merge(applications: &Api<Application>, name: &str, patch: &serde_json::Value) {
    applications
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// What Argo CD writes while a sync of the helper Application waits on a wave that never
/// gets healthy.
async fn report_a_sync_still_running(applications: &Api<Application>) {
    let stuck = json!({"operation": {"sync": {"revision": "v0.1.0"}}, "status": {"operationState": {
        "phase": "Running", "message": "waiting for healthy state of cert-manager.io/Certificate/x-tls"}}});
    merge(applications, APP, &stuck).await;
}

/// What Argo CD writes once its sync of `app` succeeded and it found it healthy.
async fn report_ready(applications: &Api<Application>, name: &str) {
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

/// A sync whose wave never gets healthy runs forever (Argo CD has no sync timeout), and
/// Argo CD finalizes no deletion while one runs: teardown terminates it as `argocd app
/// terminate-op` does (server/application/application.go TerminateOperation).
#[tokio::test]
async fn a_running_sync_is_terminated_so_that_a_teardown_can_proceed() {
    let app = TestApp::start().await;
    let (_, client, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_a_sync_still_running(&applications).await;
    let sink = KubeSink::new(client, "argocd");
    let owner = owner_of(&applications.get(APP).await.unwrap());
    assert!(sink.stop_operation(APP, &owner).await.unwrap());
    let terminating = applications.get(APP).await.unwrap();
    assert_eq!(
        terminating.rest["status"]["operationState"]["phase"],
        "Terminating"
    );
    assert!(
        !sink.stop_operation(APP, &owner).await.unwrap(),
        "a sync already terminating (or done) is left alone"
    );
    assert!(
        !sink
            .stop_operation("no-such-application", &owner)
            .await
            .unwrap()
    );
    let stranger = Owner::instance("another-previewd");
    report_a_sync_still_running(&applications).await;
    assert!(
        !sink.stop_operation(APP, &stranger).await.unwrap(),
        "another instance's Application is never touched"
    );
}

/// Who the Application says it belongs to (its labels), as the sink checks it.
fn owner_of(app: &Application) -> Owner {
    let labels = app.metadata.labels.as_ref().unwrap();
    Owner {
        repo: labels.get("previewd.dev/repo").cloned(),
        pr: labels.get("previewd.dev/pr").cloned(),
        instance: labels["previewd.dev/instance"].clone(),
    }
}

/// The security review's takeover: two repositories whose names collided (24-bit hash) got
/// one Application, the second PR overwrote the first's and its close deleted it. Now an
/// Application of the expected name that carries another repository is neither written
/// over nor deleted, and the preview shows the conflict.
#[tokio::test]
async fn an_application_of_the_same_name_from_another_repository_is_neither_overwritten_nor_deleted()
 {
    let app = TestApp::start().await;
    let argo = ArgoCd::default();
    argo.released.store(true, Ordering::SeqCst);
    let (argo, _, reconciler, applications) = on_a_cluster(&app, argo).await;
    let victim = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "namespace": "argocd", "labels": {
            "app.kubernetes.io/managed-by": "previewd", "previewd.dev/repo": "acme.payments",
            "previewd.dev/pr": "2", "previewd.dev/instance": "victims"}},
        "spec": {"project": "victims", "source": {"repoURL": "https://example.com/victim.git"}}});
    applications
        .patch(APP, &PatchParams::apply("victim"), &Patch::Apply(&victim))
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let after = applications.get(APP).await.unwrap();
    assert_eq!(after.rest["spec"]["project"], "victims", "not overwritten");
    assert_eq!(observed(&app).await, "failed");
    let error: String = app.scalar("SELECT last_error FROM previews").await;
    assert!(
        error.contains("acme.payments") && error.contains("neither overwrites nor deletes"),
        "{error}"
    );

    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(argo.deletions.lock().unwrap().is_empty(), "never deleted");
    assert!(applications.get_opt(APP).await.unwrap().is_some());
    assert_eq!(app.count("previews").await, 0, "ours is gone: forgotten");
}

/// A deletion names the object it read: one re-created under the same name between the read
/// and the delete (another preview's) fails the precondition instead of being deleted.
#[tokio::test]
async fn teardown_deletes_with_the_uid_it_read_as_a_precondition() {
    let app = TestApp::start().await;
    let argo = ArgoCd::default();
    argo.released.store(true, Ordering::SeqCst);
    let (argo, _, reconciler, applications) = on_a_cluster(&app, argo).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let uid = applications.get(APP).await.unwrap().metadata.uid.unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    let options = argo.delete_options.lock().unwrap().clone();
    assert_eq!(options.len(), 1, "{options:?}");
    assert_eq!(
        options[0]["preconditions"]["uid"],
        uid.as_str(),
        "{options:?}"
    );
}

/// ... and the teardown itself asks for it while Argo CD holds the deletion.
#[tokio::test]
async fn a_teardown_held_by_a_running_sync_asks_argo_cd_to_stop_it() {
    let app = TestApp::start().await;
    let (argo, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_a_sync_still_running(&applications).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    assert_eq!(*argo.deletions.lock().unwrap(), [APP.to_owned()]);
    assert!(
        argo.terminations.load(Ordering::SeqCst) >= 1,
        "the running sync holding the deletion was asked to stop"
    );
    assert_eq!(
        app.count("previews").await,
        1,
        "and the preview waits for Argo CD"
    );
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
        json!([{"name": previewd::argocd::RENDERING_INFO, "value": hash}])
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

/// Review repro: with an Application of someone else's under the app's name (`<slug>-app`,
/// `Observed::Foreign`, which teardown counts as gone), the helper's deletion held by a running
/// sync is never unblocked: `Teardown::Wait` picks the Application to stop by
/// `app == Observed::Missing`, so it asks the *foreign* app (refused by `patch_as_read`), never
/// the helper, and the teardown waits on a sync with no timeout forever.
#[tokio::test]
async fn a_foreign_app_application_does_not_keep_the_helpers_running_sync_from_being_stopped() {
    let (app, argo) = (TestApp::start().await, Arc::new(ArgoCd::default()));
    let client = cluster(argo.clone()).await;
    let reconciler = reconciler(&app, client.clone());
    let applications: Api<Application> = Api::namespaced(client, "argocd");
    let foreign_name = APP.replace("-helpers", "-app");
    let foreign = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": foreign_name, "namespace": "argocd", "labels": {"team": "someone-else"}},
        "spec": {"project": "default", "source": {"repoURL": "https://example.com/other.git"}}});
    applications
        .patch(
            &foreign_name,
            &PatchParams::apply("someone"),
            &Patch::Apply(&foreign),
        )
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let stuck = json!({"operation": {"sync": {"revision": "v0.1.0"}}, "status": {"operationState": {
        "phase": "Running", "message": "waiting for healthy state of cert-manager.io/Certificate/x-tls"}}});
    applications
        .patch(APP, &PatchParams::default(), &Patch::Merge(&stuck))
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(*argo.deletions.lock().unwrap(), [APP.to_owned()]);
    assert!(
        argo.terminations.load(Ordering::SeqCst) >= 1,
        "the helper's running sync holding the deletion was asked to stop"
    );
}

/// An Application created under the name between previewd's look (Missing) and its write —
/// another previewd sharing the Argo CD, a person's own — is not taken over by the forced
/// apply: the write names the uid it expects, which the API server never lets an update
/// change (apimachinery api/validation/objectmeta.go: uid is immutable). kube-fake-client
/// keeps the stored uid silently, so the interceptor refuses as the API server does.
#[tokio::test]
async fn an_application_created_between_the_look_and_the_apply_is_not_overwritten() {
    let app = TestApp::start().await;
    let raced = Arc::new(AtomicBool::new(false));
    let race = raced.clone();
    let funcs = interceptor::Funcs::default().patch(move |ctx| {
        if ctx.name != APP {
            return Ok(None);
        }
        if !race.swap(true, Ordering::SeqCst) {
            let theirs: Application = serde_json::from_value(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": APP, "namespace": "argocd", "labels": {
                    "app.kubernetes.io/managed-by": "previewd", "previewd.dev/repo": "codertocat.hello-world",
                    "previewd.dev/pr": "2", "previewd.dev/instance": "another-previewd"}},
                "spec": {"project": "theirs", "source": {"repoURL": "https://example.com/theirs.git"}}}))
            .unwrap();
            ctx.client.create("argocd", &theirs, &Default::default())?;
        }
        let stored = ctx.client.get::<Application>(ctx.namespace, ctx.name)?;
        let asked = ctx.patch["metadata"]["uid"].as_str();
        if asked.is_some_and(|uid| Some(uid) != stored.metadata.uid.as_deref()) {
            return Err(Error::InvalidRequest("metadata.uid: field is immutable".into()));
        }
        Ok(None)
    });
    let client = intercepted(funcs, Arc::new(ArgoCd::default())).await;
    let reconciler = reconciler(&app, client.clone());
    let applications: Api<Application> = Api::namespaced(client, "argocd");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let _ = reconciler.pass().await;
    assert!(raced.load(Ordering::SeqCst), "the other object came first");
    let after = applications.get(APP).await.unwrap();
    assert_eq!(after.rest["spec"]["project"], "theirs", "not taken over");
    assert_eq!(
        after.metadata.labels.unwrap()["previewd.dev/instance"],
        "another-previewd"
    );
}
