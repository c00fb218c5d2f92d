//! Following Argo CD's changes: the sink's watch of previewd's Applications, as the API
//! server speaks it (a list for the version, then a chunked stream of events), including the
//! expiry of that version (410 Gone, apiserver storage/cacher "too old resource version"),
//! after which it lists again and goes on from the new version. kube-fake-client has no
//! watch, so this API server is a script. And what the watch keeps: a look decides on it and
//! reads nothing, except on a name whose write by previewd the watch has not delivered yet.

use std::time::Duration;

use super::*;
use common::Delivery;
use previewd::sink::Owner;

/// Answers a list of previewd's Applications with `versions[i]` on the i-th list, and the
/// i-th watch with `watches[i]` (newline-separated events, then the end of the stream); a
/// watch beyond them never answers. Records each request's path and query.
fn scripted(
    versions: Vec<&'static str>,
    watches: Vec<String>,
) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let requests = seen.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (versions, watches, requests) = (versions.clone(), watches.clone(), requests.clone());
        async move {
            let uri = request.uri().to_string();
            let (lists, watched) = {
                let mut requests = requests.lock().unwrap();
                requests.push(uri.clone());
                let watched = requests.iter().filter(|r| r.contains("watch=true")).count();
                (requests.len() - watched, watched)
            };
            let body = if uri.contains("watch=true") {
                match watches.get(watched - 1) {
                    Some(events) => events.clone(),
                    None => std::future::pending().await,
                }
            } else {
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": {"resourceVersion": versions[lists - 1]}, "items": []})
                .to_string()
            };
            Ok::<_, kube::Error>(ok_json(body))
        }
    });
    (kube::Client::new(service, "default"), seen)
}

/// A 200 answer with `body` as JSON.
fn ok_json(body: String) -> http::Response<kube::client::Body> {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(body.into_bytes()))
        .unwrap()
}

fn event(kind: &str, name: &str, version: &str) -> String {
    json!({"type": kind, "object": {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
           "metadata": {"name": name, "namespace": "argocd", "resourceVersion": version}}})
    .to_string()
}

#[tokio::test]
async fn every_change_argo_cd_makes_is_seen_by_name_across_an_expired_watch() {
    let expired = json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
        "status": "Failure", "reason": "Expired", "code": 410,
        "message": "too old resource version: 5 (9)"}})
    .to_string();
    let (client, requests) = scripted(
        vec!["5", "9"],
        vec![
            [event("MODIFIED", "pv-a-1-helpers", "6"), expired].join("\n"),
            [
                event("MODIFIED", "pv-a-1-app", "10"),
                event("DELETED", "pv-b-2-helpers", "11"),
            ]
            .join("\n"),
            // The server ends a watch at its timeout; the next one goes on from version 11.
            event("ADDED", "pv-c-3-helpers", "12"),
        ],
    );
    let sink = KubeSink::new(client, "argocd");
    let changed = Arc::new(Mutex::new(Vec::new()));
    let names = changed.clone();
    let watching = sink.watch("inst-1", move |name| {
        names.lock().unwrap().push(name.to_owned())
    });
    let result = tokio::time::timeout(Duration::from_millis(500), watching).await;
    assert!(
        result.is_err(),
        "a watch only returns on an error: {result:?}"
    );

    assert_eq!(
        *changed.lock().unwrap(),
        [
            "pv-a-1-helpers",
            "pv-a-1-app",
            "pv-b-2-helpers",
            "pv-c-3-helpers"
        ]
    );
    let requests = requests.lock().unwrap();
    let version = |r: &String| {
        let watch = if r.contains("watch=true") {
            "watch"
        } else {
            "list"
        };
        let from = r
            .split("resourceVersion=")
            .nth(1)
            .map(|v| v.split('&').next().unwrap_or(""));
        format!("{watch} {}", from.unwrap_or("-"))
    };
    assert_eq!(
        requests.iter().map(version).collect::<Vec<_>>(),
        [
            "list -", "watch 5", "list -", "watch 9", "watch 11", "watch 12"
        ],
        "a 410 lists again; an ended watch goes on from the last version seen: {requests:?}"
    );
    let selector = "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dpreviewd%2Cpreviewd.dev%2Finstance%3Dinst-1";
    assert!(
        requests.iter().all(|r| r.contains(selector)),
        "only this state's Applications: {requests:?}"
    );
}

#[tokio::test]
async fn a_watch_the_server_refuses_is_an_error_for_the_caller_to_retry() {
    let refused = json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
        "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": "applications.argoproj.io is forbidden: cannot watch"}})
    .to_string();
    let (client, _) = scripted(vec!["5"], vec![refused]);
    let sink = KubeSink::new(client, "argocd");
    let result = tokio::time::timeout(Duration::from_secs(5), sink.watch("inst-1", |_| {})).await;
    let error = result.expect("returns").expect_err("an error");
    assert!(format!("{error:#}").contains("cannot watch"), "{error:#}");
}

/// Before, a watch on a connection that died without a word (half-open: no reset, no end)
/// waited for ever, and what it kept, which looks decide on, went stale unnoticed.
#[tokio::test(start_paused = true)]
async fn a_watch_that_goes_silent_past_its_timeout_is_an_error_and_forgotten() {
    let (client, requests) = scripted(vec!["5"], vec![]);
    let sink = KubeSink::new(client, "argocd");
    let result = tokio::time::timeout(Duration::from_secs(120), sink.watch("inst-1", |_| {})).await;
    let error = result.expect("returns").expect_err("an error");
    assert!(format!("{error:#}").contains("went silent"), "{error:#}");
    assert_eq!(
        sink.observe_watched(APP, &Owner::instance("inst-1")),
        None,
        "nothing it kept is answered"
    );
    let requests = requests.lock().unwrap();
    assert!(
        requests.iter().any(|r| r.contains("timeoutSeconds=60")),
        "the server ends each watch well before previewd gives up on it: {requests:?}"
    );
}

/// Before, a server that ended every watch at once (an empty body, a proxy's error page)
/// had the watch opened again at once, forever, with no backoff.
#[tokio::test]
async fn a_watch_the_server_ends_at_once_is_an_error_not_a_hot_loop() {
    let (client, requests) = scripted(vec!["5"], vec![String::new(); 1000]);
    let sink = KubeSink::new(client, "argocd");
    let result = tokio::time::timeout(Duration::from_secs(5), sink.watch("inst-1", |_| {})).await;
    let error = result.expect("returns").expect_err("an error");
    assert!(
        format!("{error:#}").contains("ended the watch"),
        "{error:#}"
    );
    assert_eq!(requests.lock().unwrap().len(), 2, "one list, one watch");
}

/// The fake API server behind a count of the GETs of single Applications, with every watch
/// held open and empty (what the watch keeps is then its list's).
fn counting_gets(client: kube::Client) -> (kube::Client, Arc<AtomicUsize>) {
    let gets = Arc::new(AtomicUsize::new(0));
    let counted = gets.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (client, counted) = (client.clone(), counted.clone());
        async move {
            let uri = request.uri().to_string();
            if uri.contains("watch=true") {
                std::future::pending::<()>().await;
            }
            if request.method() == http::Method::GET && uri.contains("/applications/") {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            client.send(request).await
        }
    });
    (kube::Client::new(service, "default"), gets)
}

/// The watch of `sink` for `instance`, running until it has listed.
async fn watching(sink: &KubeSink, instance: &str) -> tokio::task::JoinHandle<()> {
    let (sink, instance) = (sink.clone(), instance.to_owned());
    let task = tokio::spawn({
        let (sink, instance) = (sink.clone(), instance.clone());
        async move {
            let _ = sink.watch(&instance, |_| {}).await;
        }
    });
    let listed = common::eventually(Duration::from_secs(5), || {
        sink.observe_watched(APP, &Owner::instance(&instance))
            .is_some()
    })
    .await;
    assert!(listed, "the watch lists");
    task
}

/// A preview opened and applied on the fake API server behind `counting_gets`.
struct Opened {
    argo: Arc<ArgoCd>,
    gets: Arc<AtomicUsize>,
    applications: Api<Application>,
    sink: KubeSink,
    reconciler: Arc<Reconciler>,
    instance: String,
}

async fn opened(app: &TestApp) -> Opened {
    let argo = Arc::new(ArgoCd::default());
    let (client, gets) = counting_gets(cluster(argo.clone()).await);
    let applications: Api<Application> = Api::namespaced(client.clone(), "argocd");
    let sink = KubeSink::new(client, "argocd");
    let reconciler = reconciler_with(app, sink.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let labels = applications.get(APP).await.unwrap().metadata.labels;
    let instance = labels.unwrap()["previewd.dev/instance"].clone();
    Opened {
        argo,
        gets,
        applications,
        sink,
        reconciler,
        instance,
    }
}

/// An API server answering every request with `stored`, counting the PATCHes.
fn answering(stored: serde_json::Value) -> (kube::Client, Arc<AtomicUsize>) {
    let patches = Arc::new(AtomicUsize::new(0));
    let counted = patches.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let (stored, counted) = (stored.clone(), counted.clone());
        async move {
            if request.method() == http::Method::PATCH {
                counted.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<_, kube::Error>(ok_json(stored.to_string()))
        }
    });
    (kube::Client::new(service, "default"), patches)
}

#[tokio::test]
async fn a_pass_over_a_settled_preview_takes_what_the_watch_saw_and_reads_nothing() {
    let app = TestApp::start().await;
    let Opened {
        argo: _,
        gets,
        applications,
        sink,
        reconciler,
        instance,
    } = opened(&app).await;
    apply::report_ready(&applications, APP).await;

    let _watch = watching(&sink, &instance).await;
    let before = gets.load(Ordering::SeqCst);
    reconciler.pass().await.unwrap();
    assert_eq!(
        observed(&app).await,
        "ready",
        "decided on what the watch saw"
    );
    reconciler.pass().await.unwrap();
    assert_eq!(
        gets.load(Ordering::SeqCst),
        before,
        "neither the look that found it ready nor an idle pass reads an Application"
    );
}

/// Before, every look with anything to do read the Applications afresh, though the watch
/// had delivered them: three reads of a 24 KB object per push (issue #17).
#[tokio::test]
async fn a_push_is_applied_on_what_the_watch_saw_and_never_applied_twice() {
    let app = TestApp::start().await;
    let Opened {
        argo,
        gets,
        applications,
        sink,
        reconciler,
        instance,
    } = opened(&app).await;
    apply::report_ready(&applications, APP).await;
    let watch = watching(&sink, &instance).await;

    let head = "b1e5a3f0c6d04c1e9a6d7e6f5a4b3c2d1e0f9a8b";
    app.send(&Delivery::push(head, "2019-05-15T16:00:00Z"))
        .await;
    let (before, patched) = (
        gets.load(Ordering::SeqCst),
        argo.patches.load(Ordering::SeqCst),
    );
    reconciler.pass().await.unwrap();
    assert_eq!(
        gets.load(Ordering::SeqCst),
        before,
        "the look and the write take the Application (and its uid) the watch saw"
    );
    assert_eq!(argo.patches.load(Ordering::SeqCst), patched + 1, "applied");
    let applied = applications.get(APP).await.unwrap();
    let annotations = applied.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations["previewd.dev/head-sha"], head);

    // The watch has not delivered that write (it is held empty here): what it saw is the
    // old rendering, on which a look would apply the new one again and run its hooks twice.
    let before = gets.load(Ordering::SeqCst);
    reconciler.pass().await.unwrap();
    assert_eq!(
        argo.patches.load(Ordering::SeqCst),
        patched + 1,
        "a look on a name just written does not apply it again"
    );
    assert!(gets.load(Ordering::SeqCst) > before, "it reads it");

    // Once the watch delivers the write (here by listing again), it answers again.
    watch.abort();
    let _ = watch.await;
    let _watch = watching(&sink, &instance).await;
    let before = gets.load(Ordering::SeqCst);
    reconciler.pass().await.unwrap();
    assert_eq!(gets.load(Ordering::SeqCst), before, "nothing read");
    assert_eq!(argo.patches.load(Ordering::SeqCst), patched + 1);
}

/// An API server answering each list with `page(uri)` and holding every watch open and
/// empty; records each request's path and query.
fn listing(page: fn(&str) -> serde_json::Value) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let requests = seen.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let requests = requests.clone();
        async move {
            let uri = request.uri().to_string();
            requests.lock().unwrap().push(uri.clone());
            if uri.contains("watch=true") {
                std::future::pending::<()>().await;
            }
            Ok::<_, kube::Error>(ok_json(page(&uri).to_string()))
        }
    });
    (kube::Client::new(service, "default"), seen)
}

#[tokio::test]
async fn the_watch_lists_page_by_page_and_keeps_every_page() {
    let (client, seen) = listing(|uri| {
        let app = |name: &str| {
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                   "metadata": {"name": name, "namespace": "argocd", "labels": {
                       "app.kubernetes.io/managed-by": "previewd", "previewd.dev/instance": "inst-1"}}})
        };
        if uri.contains("continue=") {
            json!({"kind": "ApplicationList", "apiVersion": "argoproj.io/v1alpha1",
                   "metadata": {"resourceVersion": "7"}, "items": [app("pv-b-2-helpers")]})
        } else {
            json!({"kind": "ApplicationList", "apiVersion": "argoproj.io/v1alpha1",
                   "metadata": {"resourceVersion": "7", "continue": "page-2"},
                   "items": [app("pv-a-1-helpers")]})
        }
    });
    let sink = KubeSink::new(client, "argocd");
    let watching = tokio::spawn({
        let sink = sink.clone();
        async move { sink.watch("inst-1", |_| {}).await }
    });
    let anyone = Owner::instance("inst-1");
    let listed = common::eventually(Duration::from_secs(5), || {
        sink.observe_watched("pv-a-1-helpers", &anyone).is_some()
    })
    .await;
    assert!(listed);
    for name in ["pv-a-1-helpers", "pv-b-2-helpers"] {
        assert!(
            matches!(
                sink.observe_watched(name, &anyone),
                Some(previewd::plan::Observed::Present { .. })
            ),
            "{name} kept"
        );
    }
    let requests = seen.lock().unwrap().clone();
    assert!(requests[0].contains("limit=50"), "{requests:?}");
    assert!(requests[1].contains("continue=page-2"), "{requests:?}");
    assert!(
        requests[2].contains("watch=true") && requests[2].contains("resourceVersion=7"),
        "{requests:?}"
    );
    watching.abort();
    let _ = watching.await;
    assert_eq!(
        sink.observe_watched("pv-a-1-helpers", &anyone),
        None,
        "a watch that ended keeps nothing"
    );
}

/// Before, the orphan check listed every Application in one answer: at 5,000 previews the
/// emulator's 120 MB of them was the whole peak memory of previewd (tests/e2e/scale.py).
#[tokio::test]
async fn the_orphan_checks_list_is_read_page_by_page_while_no_watch_is_live() {
    let (client, seen) = listing(|uri| {
        let item = |name: &str| {
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": name, "namespace": "argocd"}})
        };
        let (items, next) = if uri.contains("continue=") {
            (vec![item("pv-b-2-helpers")], json!(null))
        } else {
            (vec![item("pv-a-1-helpers")], json!("page-2"))
        };
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
               "metadata": {"resourceVersion": "7", "continue": next}, "items": items})
    });
    let sink = Sink::Kubernetes(KubeSink::new(client, "argocd"));
    let names = sink.list("inst-1").await.unwrap();
    assert_eq!(names, ["pv-a-1-helpers", "pv-b-2-helpers"]);
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests[0].contains("limit=500"), "{requests:?}");
    assert!(requests[1].contains("continue=page-2"), "{requests:?}");
}

/// Before, a push decided on the watch's copy force-applied over an Application an operator
/// had just given to another PR, unseen by the watch yet: the copy said it was this
/// preview's, and the uid matched (the same object).
#[tokio::test]
async fn a_write_on_a_copy_the_server_moved_past_is_refused_and_decided_again_on_a_read() {
    let app = TestApp::start().await;
    let Opened {
        argo: _,
        gets,
        applications,
        sink,
        reconciler,
        instance,
    } = opened(&app).await;
    apply::report_ready(&applications, APP).await;
    let _watch = watching(&sink, &instance).await;

    merge(
        &applications,
        APP,
        &json!({"metadata": {"labels": {"previewd.dev/pr": "99"}}}),
    )
    .await;
    let head = "b1e5a3f0c6d04c1e9a6d7e6f5a4b3c2d1e0f9a8b";
    app.send(&Delivery::push(head, "2019-05-15T16:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    let now = applications.get(APP).await.unwrap();
    let labels = now.metadata.labels.unwrap_or_default();
    assert_eq!(labels["previewd.dev/pr"], "99", "not taken back");
    let annotations = now.metadata.annotations.unwrap_or_default();
    assert_ne!(annotations["previewd.dev/head-sha"], head, "not written");
    // The next look (soon: it was requeued) decides on a read.
    let before = gets.load(Ordering::SeqCst);
    reconciler.pass().await.unwrap();
    assert!(gets.load(Ordering::SeqCst) > before, "read afresh");
    let labels = applications.get(APP).await.unwrap().metadata.labels;
    assert_eq!(labels.unwrap_or_default()["previewd.dev/pr"], "99");
    let error: Option<String> = app.scalar("SELECT last_error FROM previews").await;
    assert!(
        error.as_deref().is_some_and(|e| e.contains("belongs to")),
        "reported as the conflict it is: {error:?}"
    );
}

/// Before, a sync was asked for whenever the Application read just then had no operation
/// running, though the look had decided on a copy from before Argo CD finished the sync it
/// asked for: the hooks ran again.
#[tokio::test]
async fn a_sync_is_asked_for_only_of_an_application_that_needs_one_as_read() {
    let app = TestApp::start().await;
    let (argo, _, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    apply::report_ready(&applications, APP).await;
    let labels = applications.get(APP).await.unwrap().metadata.labels;
    let instance = labels.unwrap()["previewd.dev/instance"].clone();
    let sink = KubeSink::new(applications.clone().into_client(), "argocd");
    let patched = argo.patches.load(Ordering::SeqCst);
    let asked = sink
        .request_sync(APP, &Owner::instance(&instance))
        .await
        .unwrap();
    assert!(!asked, "synced and healthy: nothing to ask");
    assert_eq!(argo.patches.load(Ordering::SeqCst), patched);
}

/// Before, an apply retried after its answer was lost (a timeout; the write had landed, and
/// Argo CD may have run and cleared its sync since) wrote the same rendering again, with the
/// sync asked for again: the hooks ran twice.
#[tokio::test]
async fn an_apply_whose_rendering_the_read_finds_written_already_writes_nothing() {
    let labels =
        json!({"app.kubernetes.io/managed-by": "previewd", "previewd.dev/instance": "inst-1"});
    let stored = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "namespace": "argocd", "uid": "u-1", "resourceVersion": "7",
                     "labels": labels, "annotations": {"previewd.dev/applied-hash": "h2"}},
        "spec": {"source": {"repoURL": "https://example.com/helpers.git"}}});
    let (client, patches) = answering(stored);
    let sink = KubeSink::new(client, "argocd");
    let mut manifest = serde_json::from_str::<serde_json::Value>(&json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "labels": labels, "annotations": {"previewd.dev/applied-hash": "h2"}},
        "spec": {"source": {"repoURL": "https://example.com/helpers.git"}}})
    .to_string())
    .unwrap();
    sink.apply(APP, &manifest, &Owner::instance("inst-1"))
        .await
        .unwrap();
    assert_eq!(patches.load(Ordering::SeqCst), 0, "written already");
    manifest["metadata"]["annotations"]["previewd.dev/applied-hash"] = json!("h3");
    sink.apply(APP, &manifest, &Owner::instance("inst-1"))
        .await
        .unwrap();
    assert_eq!(
        patches.load(Ordering::SeqCst),
        1,
        "a new rendering is written"
    );
}

/// Before, a retried create whose first try had landed (its answer lost) took the uid the
/// watch had since delivered and wrote the rendering again, with its sync: the hooks ran
/// twice (helper-10's review).
#[tokio::test]
async fn an_apply_whose_rendering_the_watch_saw_written_already_writes_nothing() {
    let app = TestApp::start().await;
    let Opened {
        argo,
        applications,
        sink,
        instance,
        ..
    } = opened(&app).await;
    let written = applications.get(APP).await.unwrap();
    let _watch = watching(&sink, &instance).await;
    let patched = argo.patches.load(Ordering::SeqCst);
    let manifest = serde_json::to_value(&written).unwrap();
    sink.apply(APP, &manifest, &Owner::instance(&instance))
        .await
        .unwrap();
    assert_eq!(
        argo.patches.load(Ordering::SeqCst),
        patched,
        "written already"
    );
}

/// A look that decided to apply on a copy from before the Application's deletion is told so
/// (`Stale`), and decides again (to wait for the deletion), rather than write a sync onto an
/// Application Argo CD is taking apart.
#[tokio::test]
async fn an_apply_that_reads_the_application_being_deleted_is_stale_and_writes_nothing() {
    let labels =
        json!({"app.kubernetes.io/managed-by": "previewd", "previewd.dev/instance": "inst-1"});
    let stored = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "namespace": "argocd", "uid": "u-1", "resourceVersion": "7",
                     "deletionTimestamp": "2026-11-29T00:00:00Z", "finalizers": ["x"],
                     "labels": labels, "annotations": {"previewd.dev/applied-hash": "h1"}},
        "spec": {"source": {"repoURL": "https://example.com/helpers.git"}}});
    let (client, patches) = answering(stored);
    let sink = KubeSink::new(client, "argocd");
    let manifest = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": APP, "labels": labels, "annotations": {"previewd.dev/applied-hash": "h2"}},
        "spec": {"source": {"repoURL": "https://example.com/helpers.git"}}});
    let error = sink
        .apply(APP, &manifest, &Owner::instance("inst-1"))
        .await
        .expect_err("stale");
    assert!(error.is::<previewd::sink::Stale>(), "{error:#}");
    assert_eq!(patches.load(Ordering::SeqCst), 0);
}
