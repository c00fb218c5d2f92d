//! Orphan removal: the sweeper looks again before recording what must go, and the
//! reconciler spares what a preview has come to own.

use super::*;

/// Orphan removal acts on a plan made earlier (a pass's, or one a dry run printed): a preview
/// created since may own a listed name. The sweeper looks again before recording what must
/// go, and deletes nothing itself; the reconciler deletes it, only what carries this state's
/// labels.
#[tokio::test]
async fn orphan_removal_looks_again_before_deleting_and_spares_what_a_preview_now_owns() {
    let app = TestApp::start_with("[sweep]\nremove_orphans = true\n").await;
    let reconciler = reconciler(&app);
    // Enough previews tracked for three orphans to look like leftovers, not a wrong state.
    for (number, author) in [(2, "alice"), (3, "bob"), (5, "dave"), (6, "erin")] {
        app.send(&opened(number, author)).await;
    }
    reconciler.pass().await.unwrap();
    let instance = previewd::db::instance_id(app.state()).await.unwrap();
    let file = |name: &str, managed: bool| {
        let managed = if managed {
            "    app.kubernetes.io/managed-by: previewd\n"
        } else {
            ""
        };
        std::fs::write(
            app.dir.path().join("rendered").join(format!("{name}.yaml")),
            format!("kind: Application\nmetadata:\n  labels:\n{managed}    previewd.dev/instance: \"{instance}\"\n"),
        )
        .unwrap();
    };
    let key = "codertocat/hello-world#4".parse().unwrap();
    let four = previewd::naming::Names::of(&key, "preview.localhost").application;
    file(&four, true);
    let left_behind = "pv-left-behind-0000000000000000-pr-9-helpers";
    file(left_behind, true);
    // Listed by its instance label, but not previewd's (no managed-by): left, not an error.
    let hand_made = "pv-hand-made-0000000000000000-pr-8-helpers";
    file(hand_made, false);
    let sweeper = sweeper(&app);
    let plan = sweeper.plan(common::NOW, Orphans::Look).await.unwrap();
    assert_eq!(plan.orphans.len(), 3, "{:?}", plan.orphans);

    // PR 4 is opened (and owns that name) between the plan and its removal.
    app.send(&opened(4, "carol")).await;
    let report = sweeper.apply(&plan, common::NOW).await.unwrap();
    assert_eq!(
        report.orphans_recorded, 2,
        "the hand-made one too: the reconciler's delete tells it is not previewd's"
    );
    let rendered = app.dir.path().join("rendered");
    let exists = |name: &str| rendered.join(format!("{name}.yaml")).exists();
    assert!(exists(left_behind), "the sweeper records, never deletes");

    reconciler.pass().await.unwrap();
    assert!(exists(&four), "PR 4's own is spared");
    assert!(!exists(left_behind), "the reconciler removed it");
    assert!(exists(hand_made), "not previewd's: left alone");
    assert_eq!(app.count("orphans").await, 0, "done with");
}

/// The reconciler looks once more before deleting a recorded orphan: a preview opened after
/// the sweep owns the name, and its Application is not deleted.
#[tokio::test]
async fn a_recorded_orphan_a_preview_came_to_own_is_spared_by_the_reconciler() {
    let app = TestApp::start_with("[sweep]\nremove_orphans = true\n").await;
    let reconciler = reconciler(&app);
    let key = "codertocat/hello-world#4".parse().unwrap();
    let four = previewd::naming::Names::of(&key, "preview.localhost").application;
    previewd::db::record_orphans(app.state(), std::slice::from_ref(&four), common::NOW)
        .await
        .unwrap();
    app.send(&opened(4, "carol")).await;
    reconciler.pass().await.unwrap();
    let path = app.dir.path().join("rendered").join(format!("{four}.yaml"));
    assert!(path.exists(), "PR 4's Application stays");
    assert_eq!(app.count("orphans").await, 0, "and the record is dropped");
}

/// Orphans recorded while `sweep.remove_orphans` was on are not deleted by a previewd
/// restarted with it off: the operator may have turned it off because of what it was
/// about to delete. The records go; the Application stays.
#[tokio::test]
async fn recorded_orphans_are_left_alone_once_removal_is_turned_off() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app);
    let instance = previewd::db::instance_id(app.state()).await.unwrap();
    let left_behind = "pv-left-behind-0000000000000000-pr-9-helpers";
    let path = app
        .dir
        .path()
        .join("rendered")
        .join(format!("{left_behind}.yaml"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        format!("kind: Application\nmetadata:\n  labels:\n    app.kubernetes.io/managed-by: previewd\n    previewd.dev/instance: \"{instance}\"\n"),
    )
    .unwrap();
    previewd::db::record_orphans(app.state(), &[left_behind.to_owned()], common::NOW)
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert!(path.exists(), "removal is off: the Application stays");
    assert_eq!(app.count("orphans").await, 0, "and the record is dropped");
}

/// A template generation's Application (#16) is no preview's, but its recorded row owns it:
/// never an orphan.
#[tokio::test]
async fn a_template_generations_application_is_not_an_orphan() {
    let app = TestApp::start_with(
        "[sweep]\nremove_orphans = true\n[[repos]]\nname = \"codertocat/hello-world\"\ndatabase_template = true\n",
    )
    .await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    let generation = app
        .dir
        .path()
        .join("rendered")
        .join("pv-codertocat-hello-worl-4d960c3af87af320-tpl-1-helpers.yaml");
    assert!(generation.exists(), "generation 1 is written");
    let plan = sweeper(&app)
        .plan(common::NOW, Orphans::Look)
        .await
        .unwrap();
    assert!(plan.orphans.is_empty(), "{:?}", plan.orphans);
}

/// Ownership is every recorded generation, however many: a display limit (the API's 1,000
/// rows) must never make a live generation's Application look orphaned.
#[tokio::test]
async fn a_template_generations_application_is_not_an_orphan_however_many_generations_are_recorded()
{
    let app = TestApp::start_with(
        "[sweep]\nremove_orphans = true\n[[repos]]\nname = \"codertocat/hello-world\"\ndatabase_template = true\n",
    )
    .await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    // 1,000 generations of repositories that sort before it (e.g. 500 repositories with a
    // current generation and one a clone still needs).
    // Each store builds JSON its own way.
    let object = match common::pg::on_postgres() {
        true => "json_build_object",
        false => "json_object",
    };
    let text = match common::pg::on_postgres() {
        true => "::text",
        false => "",
    };
    app.execute(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
         INSERT INTO templates (repo, generation, base_sha, cluster, names, state, created_at, updated_at)
         SELECT 'aaa/r' || (i / 2), 1 + i % 2, 'x', 'in-cluster',
                {object}('slug', 's' || i, 'application', 'pv-aaa-' || i || '-tpl-helpers',
                         'app_application', 'a' || i, 'host', 'h', 'database', 'd' || i,
                         'repo_label', 'aaa.r'){text},
                'ready', 0, 0 FROM n"
    ))
    .await;
    let plan = sweeper(&app)
        .plan(common::NOW, Orphans::Look)
        .await
        .unwrap();
    assert!(
        plan.orphans.is_empty(),
        "codertocat/hello-world's generation 1 (its row recorded) counted as an orphan: {:?}",
        plan.orphans
    );
}
