//! Teardown: Argo CD's cascade finalizer waited for, a restart midway, running syncs
//! terminated so that a deletion can proceed, deletions preconditioned on the uid read.

use super::*;
use crate::common::Delivery;
use kube::api::DeleteParams;
use previewd::sink::Owner;

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
    let errors: Vec<Option<String>> = app.scalars("SELECT last_error FROM previews").await;
    let error = errors.into_iter().next().flatten();
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

/// What Argo CD writes while a sync of the helper Application waits on a wave that never
/// gets healthy.
async fn report_a_sync_still_running(applications: &Api<Application>) {
    let stuck = json!({"operation": {"sync": {"revision": "v0.1.0"}}, "status": {"operationState": {
        "phase": "Running", "message": "waiting for healthy state of cert-manager.io/Certificate/x-tls"}}});
    merge(applications, APP, &stuck).await;
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
