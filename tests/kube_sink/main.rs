//! The kubernetes sink through kube-fake-client, an in-memory API server that speaks the
//! real API to kube-rs (server-side apply with field managers, resource versions). Argo CD
//! is played by the tests: they write `status`, and hold and release the cascade finalizer.

#[path = "../common/mod.rs"]
mod common;

mod apply;
mod ownership;
mod sleep;
mod sleep_hooks;
mod teardown;
mod watch;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::TestApp;
use kube::api::{Api, Patch, PatchParams};
use kube_fake_client::{ClientBuilder, Error, interceptor};
use previewd::reconcile::Reconciler;
use previewd::seal::SealingCert;
use previewd::sink::Sink;
use previewd::sink::argocd::Application;
use previewd::sink::kubernetes::KubeSink;
use serde_json::json;

pub(crate) const APP: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers";
pub(crate) const NAMESPACE: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");

/// What the pretend Argo CD is doing: holding a deletion, and failing some writes.
#[derive(Default)]
pub(crate) struct ArgoCd {
    pub(crate) deleting: Mutex<Option<serde_json::Value>>,
    pub(crate) failing_writes: AtomicUsize,
    pub(crate) patches: AtomicUsize,
    /// Patches that asked a running sync to terminate.
    pub(crate) terminations: AtomicUsize,
    pub(crate) released: AtomicBool,
    /// Applications whose deletion was asked for, in order.
    pub(crate) deletions: Mutex<Vec<String>>,
    /// Namespaces that exist on the cluster (the preview's, while it terminates).
    pub(crate) namespaces: Mutex<BTreeSet<String>>,
    /// The DeleteOptions body of every deletion (the fake itself ignores preconditions).
    pub(crate) delete_options: Mutex<Vec<serde_json::Value>>,
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

pub(crate) async fn cluster(argo: Arc<ArgoCd>) -> kube::Client {
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
            // As the API server does and the fake does not: an apply that names a uid and
            // finds no object is refused (apiserver endpoints/handlers/patch.go applyPatch).
            if let Some(uid) = ctx.patch["metadata"]["uid"].as_str()
                && ctx
                    .client
                    .get::<Application>(ctx.namespace, ctx.name)
                    .is_err()
            {
                return Err(Error::Conflict(format!(
                    "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                )));
            }
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
pub(crate) async fn intercepted(funcs: interceptor::Funcs, argo: Arc<ArgoCd>) -> kube::Client {
    let fake = ClientBuilder::new()
        .with_resource::<Application>()
        // The preview namespace's quota, whose count the dashboard shows.
        .with_resource::<k8s_openapi::api::core::v1::ResourceQuota>()
        .with_interceptor_funcs(funcs)
        .build()
        .await
        .unwrap();
    with_namespaces(fake, argo)
}

/// A fake API server with Argo CD `argo` on it, and `app`'s reconciler applying there; its
/// client, and the Applications in `argocd`.
pub(crate) async fn on_a_cluster(
    app: &TestApp,
    argo: ArgoCd,
) -> (Arc<ArgoCd>, kube::Client, Arc<Reconciler>, Api<Application>) {
    let argo = Arc::new(argo);
    let client = cluster(argo.clone()).await;
    let applications = Api::namespaced(client.clone(), "argocd");
    (argo, client.clone(), reconciler(app, client), applications)
}

pub(crate) fn reconciler(app: &TestApp, client: kube::Client) -> Arc<Reconciler> {
    reconciler_with(app, KubeSink::new(client, "argocd"))
}

/// `app`'s reconciler applying through `sink` (a clone of which may watch for the test).
pub(crate) fn reconciler_with(app: &TestApp, sink: KubeSink) -> Arc<Reconciler> {
    let cert = SealingCert::from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-cert.pem")).unwrap(),
        common::NOW,
    )
    .unwrap();
    let certs = [("in-cluster".to_string(), cert)].into();
    let sink = Sink::Kubernetes(sink);
    Arc::new(Reconciler::new(
        app.state().apart(),
        app.app.config.clone(),
        sink,
        certs,
        None,
        Arc::new(app.clock.clone()),
    ))
}

pub(crate) async fn observed(app: &TestApp) -> String {
    app.scalar("SELECT observed FROM previews").await
}

/// A merge patch of Application `name`, as Argo CD writes its status.
pub(crate) async fn merge(applications: &Api<Application>, name: &str, patch: &serde_json::Value) {
    applications
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}
