//! Applications previewd does not own (another repository's, someone else's app, one
//! relabelled since previewd saw it) are neither overwritten nor deleted, and do not stall a
//! teardown; and a new preview's Application is created as the API server allows.

use super::*;
use crate::common::Delivery;

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
    // Nothing was applied: no intent that teardown would take for this preview's own, and
    // no sealed values kept for a rendering nothing carries.
    assert_eq!(app.count("ledger").await, 0);
    assert_eq!(app.count("sealed_secrets").await, 0);

    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(argo.deletions.lock().unwrap().is_empty(), "never deleted");
    assert!(applications.get_opt(APP).await.unwrap().is_some());
    assert_eq!(app.count("previews").await, 0, "ours is gone: forgotten");
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

/// Before, previewd named a fresh uid in the apply that creates a preview's Application, to
/// refuse one created under the name since its read: the API server refuses any apply that
/// names a uid and finds no object (apiserver endpoints/handlers/patch.go applyPatch, "uid
/// mismatch ... no existing object was found"), so no preview was ever created on a real
/// cluster. kube-fake-client creates it anyway; `cluster` refuses as the API server does.
#[tokio::test]
async fn a_new_previews_application_is_created_by_an_apply_that_names_no_uid() {
    let app = TestApp::start().await;
    let (_, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let created = applications.get(APP).await.expect("created");
    assert!(created.metadata.uid.is_some());
    assert_eq!(observed(&app).await, "syncing");
}
