//! Previews across an upgrade, a recreated state and clock skew: the names they keep, the
//! objects they own, and ends that hold against replays but not against genuine pushes
//! (a hostile review's reproductions; each failed before its fix).

mod common;

use std::path::PathBuf;

use common::{Delivery, TestApp};
use previewd::naming::Names;
use previewd::reconcile::Reconciler;

const HELLO: &str = "codertocat/hello-world";

fn rendered(app: &TestApp) -> PathBuf {
    app.dir.path().join("rendered")
}

fn key() -> previewd::preview::PreviewKey {
    "codertocat/hello-world#2".parse().unwrap()
}

async fn recorded_names(app: &TestApp) -> Option<Names> {
    let json: Option<String> = sqlx::query_scalar("SELECT names FROM previews WHERE number = 2")
        .fetch_one(app.pool())
        .await
        .unwrap();
    json.map(|j| serde_json::from_str(&j).unwrap())
}

/// A preview from before names were recorded (names NULL) whose repository is dropped from
/// `[[repos]]` in the same upgrade: `names_of` records `Names::legacy` with the *defaults'*
/// domain, not the host the live Application carries; re-adding the repository then
/// re-renders the preview under that wrong host (a rename the contract forbids).
#[tokio::test]
async fn a_frozen_legacy_preview_records_the_host_it_actually_has() {
    let listed = format!(
        "[github]\nwebhook_secret = {:?}\n[[repos]]\nname = \"codertocat/hello-world\"\ndomain = \"hello.example.com\"\n",
        common::SECRET
    );
    let app = TestApp::with_config(&listed).await;
    let reconciler = std::sync::Arc::new(common::directory_reconciler(&app));
    app.send(&Delivery::fixture("pull_request.opened")).await;
    // As the previous version left it: applied under the legacy names, no names recorded.
    sqlx::query("UPDATE previews SET names = NULL")
        .execute(app.pool())
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    let legacy = Names::legacy(&key(), "hello.example.com");
    let live = std::fs::read_to_string(rendered(&app).join(format!("{}.yaml", legacy.application)))
        .unwrap();
    assert!(live.contains("hello.example.com"));
    sqlx::query("UPDATE previews SET names = NULL")
        .execute(app.pool())
        .await
        .unwrap();

    // Upgrade + the repository dropped from [[repos]] (frozen).
    let TestApp { dir, .. } = app;
    let dropped = format!(
        "[github]\nwebhook_secret = {:?}\n[[repos]]\nname = \"someone/else\"\n",
        common::SECRET
    );
    let app = TestApp::in_dir(dir, &dropped).await;
    std::sync::Arc::new(common::directory_reconciler(&app))
        .pass()
        .await
        .unwrap();
    assert_eq!(
        recorded_names(&app).await,
        None,
        "frozen, its domain is unknown: nothing is recorded (the defaults' would be wrong)"
    );

    // Listed again: recorded with its own domain, the host the live Application carries.
    let TestApp { dir, .. } = app;
    let app = TestApp::in_dir(dir, &listed).await;
    std::sync::Arc::new(common::directory_reconciler(&app))
        .pass()
        .await
        .unwrap();
    assert_eq!(recorded_names(&app).await.unwrap().host, legacy.host);
}

/// An Application previewd itself wrote, but without today's instance label (written before
/// 7bfbd83, or by this previewd before its state was recreated), is `Foreign`: the preview is
/// "failed" forever, and its close forgets it with every ledger item recorded "gone" while
/// the Application (and so its namespace and database) is still there.
#[tokio::test]
async fn a_foreign_helper_is_not_recorded_gone_nor_forgotten_while_it_exists() {
    // As labelled before 7bfbd83 (no instance label).
    foreign_own_helper(|text| {
        text.lines()
            .filter(|l| !l.contains("previewd.dev/instance"))
            .map(|l| format!("{l}\n"))
            .collect()
    })
    .await;
}

#[tokio::test]
async fn a_recreated_state_does_not_forget_its_previous_states_objects_silently() {
    // Written by this previewd before its state was recreated (another instance id).
    foreign_own_helper(of_another_instance).await;
}

/// `text` as another previewd's state (another instance id) labels it.
fn of_another_instance(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.contains("previewd.dev/instance") {
                "    previewd.dev/instance: 0123456789abcdef".to_owned()
            } else {
                l.to_owned()
            }
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// A PR opened and applied, then its helper Application's file rewritten by `relabel`
/// (which must change it): the app, its reconciler, the file, and what it holds now.
async fn opened_then_relabelled(
    relabel: fn(&str) -> String,
) -> (TestApp, std::sync::Arc<Reconciler>, PathBuf, String) {
    let app = TestApp::start().await;
    let reconciler = std::sync::Arc::new(common::directory_reconciler(&app));
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let names = recorded_names(&app).await.unwrap();
    let path = rendered(&app).join(format!("{}.yaml", names.application));
    let text = std::fs::read_to_string(&path).unwrap();
    let relabelled = relabel(&text);
    assert_ne!(text, relabelled, "the instance label was there");
    std::fs::write(&path, &relabelled).unwrap();
    (app, reconciler, path, relabelled)
}

async fn foreign_own_helper(relabel: fn(&str) -> String) {
    // The same object, as labelled before the instance label existed.
    let (app, reconciler, path, _) = opened_then_relabelled(relabel).await;

    app.send(
        &Delivery::fixture("pull_request.synchronize")
            .at_sha("1111111111111111111111111111111111111111")
            .updated_at("2019-05-15T16:00:00Z"),
    )
    .await;
    reconciler.pass().await.unwrap();
    let (observed, last_error): (String, Option<String>) =
        sqlx::query_as("SELECT observed, last_error FROM previews WHERE number = 2")
            .fetch_one(app.pool())
            .await
            .unwrap();
    println!("after a push: observed={observed} last_error={last_error:?}");

    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    let history = app.history(HELLO, 2).await;
    println!("history: {history:#?}");
    println!(
        "previews rows: {}, Application file still there: {}",
        app.count("previews").await,
        path.exists()
    );
    assert!(
        !(app.count("previews").await == 0 && path.exists()),
        "the preview was forgotten (ledger all 'gone') while its Application still exists"
    );
}

/// `ended_at` is previewd's clock; `pr_updated_at` is GitHub's. A push GitHub stamps in the
/// same second as previewd's destroy (or later, by GitHub's clock, when previewd's runs a
/// little ahead) is refused as if it were a replay.
#[tokio::test]
async fn a_push_after_a_destroy_by_githubs_clock_deploys_again() {
    let app = TestApp::start().await;
    let reconciler = std::sync::Arc::new(common::directory_reconciler(&app));
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    // previewd's clock 3 s ahead of GitHub's (NTP-level skew is ms; VMs drift seconds).
    app.clock.advance(3);
    previewd::db::request_destroy(app.state(), HELLO, 2, "octocat", common::NOW + 3)
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0);
    // By GitHub's clock the push is 1 s after the destroy (NOW + 1 vs the destroy at NOW).
    let after = time::OffsetDateTime::from_unix_timestamp(common::NOW + 1)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let (_, body) = app
        .send(
            &Delivery::fixture("pull_request.synchronize")
                .guid("real-push")
                .at_sha("2222222222222222222222222222222222222222")
                .updated_at(&after),
        )
        .await;
    println!("push answered: {body}");
    assert_eq!(
        app.count("previews").await,
        1,
        "a genuine push after the destroy"
    );
}

/// A conflict's history row and the state it leads to commit together. They were two
/// commits through the pool: a failure between them (a crash; here a trigger refusing the
/// state) kept the history row without the state, and the next look, seeing no conflict
/// recorded, wrote the same row again.
#[tokio::test]
async fn a_conflict_whose_state_was_not_written_is_told_once_in_the_history() {
    // Another previewd's (another instance id): a conflict, never written over.
    let (app, reconciler, path, foreign) = opened_then_relabelled(of_another_instance).await;
    app.execute(
        "CREATE TRIGGER refuse BEFORE UPDATE OF observed ON previews
         WHEN NEW.observed = 'failed' BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .await;
    app.send(
        &Delivery::fixture("pull_request.synchronize")
            .at_sha("1111111111111111111111111111111111111111")
            .updated_at("2019-05-15T16:00:00Z"),
    )
    .await;
    let _ = reconciler.pass().await;
    app.execute("DROP TRIGGER refuse").await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let observed: String = app
        .scalar("SELECT observed FROM previews WHERE number = 2")
        .await;
    assert_eq!(observed, "failed");
    let conflicts = app
        .history(HELLO, 2)
        .await
        .into_iter()
        .filter(|(what, ..)| what == "conflict")
        .count();
    assert_eq!(conflicts, 1, "{:#?}", app.history(HELLO, 2).await);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        foreign,
        "never written over"
    );
}
