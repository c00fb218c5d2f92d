//! Hooks where they must run (found by the attack review of #41): a reseed or a redeploy
//! while asleep, a preview closed asleep and reopened, a sleep right after a push before
//! Argo CD ran its sync. Only a change that is the sleep alone, of a rendering Argo CD
//! synced, goes without them.

use super::apply::report_ready;
use super::sleep::{app_name, sleep};
use super::*;
use crate::common::Delivery;

fn strategy(app: &Application) -> serde_json::Value {
    app.rest
        .get("operation")
        .map_or(serde_json::Value::Null, |o| {
            o["sync"]["syncStrategy"].clone()
        })
}

async fn ready_asleep(argo: ArgoCd) -> (TestApp, Arc<ArgoCd>, Arc<Reconciler>, Api<Application>) {
    let app = TestApp::start_with(
        "[[repos]]\nname = \"codertocat/hello-world\"\napp_chart = \"deploy/chart\"\nmail = true\n",
    )
    .await;
    let (argo, _client, reconciler, applications) = on_a_cluster(&app, argo).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "ready");
    sleep(&app).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    assert_eq!(observed(&app).await, "sleeping");
    (app, argo, reconciler, applications)
}

/// `/preview reseed` and `/preview redeploy` (what their Effects write) on a sleeping
/// preview: the new renderings differ in more than the sleep, yet both are synced with the
/// apply strategy (no hooks: no seed Job, no app hook); and the wake after them too.
#[tokio::test]
async fn a_reseed_and_a_redeploy_while_asleep_run_their_hooks() {
    let (app, _argo, reconciler, applications) = ready_asleep(ArgoCd::default()).await;
    let before = applications.get(APP).await.unwrap();
    app.execute("UPDATE previews SET seed_generation = seed_generation + 1, redeploy_generation = redeploy_generation + 1").await;
    reconciler.pass().await.unwrap();
    let helpers = applications.get(APP).await.unwrap();
    let own = applications.get(&app_name()).await.unwrap();
    assert_ne!(
        before
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("previewd.dev/applied-hash"),
        helpers
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get("previewd.dev/applied-hash"),
        "the reseed changed the helpers' rendering"
    );
    let (h1, mut a1) = (strategy(&helpers), strategy(&own));
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    let own = applications.get(&app_name()).await.unwrap();
    if a1.is_null() {
        a1 = strategy(&own);
    }
    if own.rest.get("operation").is_some_and(|o| !o.is_null()) {
        report_ready(&applications, &app_name()).await;
    }
    reconciler.pass().await.unwrap();
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    assert!(
        previewd::db::sleep::wake(app.state(), id, "a request", common::NOW + 60)
            .await
            .unwrap()
    );
    reconciler.pass().await.unwrap();
    let helpers = applications.get(APP).await.unwrap();
    let own = applications.get(&app_name()).await.unwrap();
    let (h2, a2) = (strategy(&helpers), strategy(&own));
    let hook = json!({"hook": {}});
    assert!(
        h1 == hook || h2 == hook,
        "the reseed's seed hook never runs: helpers synced {h1} asleep, then {h2} on the wake"
    );
    assert!(
        a1 == hook || a2 == hook || a2.is_null(),
        "the redeploy's hooks never run: app synced {a1} asleep, then {a2} on the wake"
    );
}

/// A sleeping preview whose PR is closed and reopened (same head) while its namespace
/// still terminates: the row is kept, `sleeping_since` with it, and the Applications are
/// created anew, in a fresh namespace, still asleep and with the apply strategy (no
/// database-creating Sync hook, no migration, no seed); the wake after that runs none either.
#[tokio::test]
async fn a_preview_closed_asleep_and_reopened_comes_back_awake_with_its_hooks() {
    let argo = ArgoCd::default();
    argo.released.store(true, Ordering::SeqCst);
    argo.namespaces.lock().unwrap().insert(NAMESPACE.into());
    let (app, argo, reconciler, applications) = ready_asleep(argo).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    for _ in 0..6 {
        reconciler.pass().await.unwrap();
    }
    assert!(
        applications.get_opt(APP).await.unwrap().is_none(),
        "Applications deleted"
    );
    assert_eq!(
        app.count("previews").await,
        1,
        "kept while the namespace terminates"
    );
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:30:00Z"))
        .await;
    argo.namespaces.lock().unwrap().clear();
    let (desired, asleep): (String, Option<i64>) = app
        .row("SELECT desired, sleeping_since FROM previews")
        .await;
    assert_eq!(
        (desired.as_str(), asleep),
        ("deployed", None),
        "a reopen ends the sleep"
    );
    for _ in 0..3 {
        reconciler.pass().await.unwrap();
        if applications.get_opt(APP).await.unwrap().is_some() {
            break;
        }
    }
    let helpers = applications.get(APP).await.unwrap();
    let asleep: Option<i64> = app.scalar("SELECT sleeping_since FROM previews").await;
    assert_eq!(
        strategy(&helpers),
        json!({"hook": {}}),
        "a new helpers Application (fresh namespace, no database) synced without hooks; sleeping_since {asleep:?}, parameters {}",
        helpers.rest["spec"]["source"]["helm"]["parameters"]
    );
}

/// `/preview sleep` right after a push, before Argo CD ran the push's sync: the sleep's
/// write replaces the pending hook sync of the new head with an apply-strategy one (the
/// Application "carries" the new hash, so the sleep looks sleep-only); the wake after it
/// is apply too. The new head's migration is never asked for.
#[tokio::test]
async fn a_sleep_right_after_a_push_keeps_the_pushs_hooks() {
    let app = TestApp::start_with(
        "[[repos]]\nname = \"codertocat/hello-world\"\napp_chart = \"deploy/chart\"\nmail = true\n",
    )
    .await;
    let (_argo, _client, reconciler, applications) = on_a_cluster(&app, ArgoCd::default()).await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, APP).await;
    reconciler.pass().await.unwrap();
    report_ready(&applications, &app_name()).await;
    reconciler.pass().await.unwrap();
    let sha = "1111111111111111111111111111111111111111";
    app.send(&Delivery::push(sha, "2026-05-29T00:00:00Z")).await;
    reconciler.pass().await.unwrap();
    let helpers = applications.get(APP).await.unwrap();
    assert_eq!(
        strategy(&helpers),
        json!({"hook": {}}),
        "the push's migration asked for"
    );
    // Argo CD has not run it yet; the author says /preview sleep (no observed-state check).
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    assert!(
        previewd::db::sleep::sleep(app.state(), id, "/preview sleep", None, common::NOW)
            .await
            .unwrap()
    );
    reconciler.pass().await.unwrap();
    let helpers = applications.get(APP).await.unwrap();
    assert_eq!(
        strategy(&helpers),
        json!({"hook": {}}),
        "the pending hook sync of {sha} was replaced before it ran"
    );
}
