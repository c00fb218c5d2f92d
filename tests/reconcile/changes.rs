//! A pass follows what changed, not how many previews exist (issue #42): between full
//! passes only the previews the state stamped, the ones whose Application the sink says
//! changed, and the slow sweep's slice are looked at.

use std::os::unix::fs::MetadataExt;

use super::*;
use previewd::reconcile::Reconciler;

fn sweeping(app: &TestApp, previews: i64) -> Arc<Reconciler> {
    let reconciler = Arc::try_unwrap(reconciler(app, app.app.config.clone()))
        .ok()
        .expect("one owner");
    Arc::new(reconciler.with_sweep(previews))
}

fn file_of(app: &TestApp, number: u64) -> PathBuf {
    rendered(app).join(format!(
        "{}.yaml",
        APP.replace("pr-2", &format!("pr-{number}"))
    ))
}

/// PRs 2, 3 and 4 opened, a full pass, and the resync that reads the files it wrote.
async fn settled(sweep: i64) -> (TestApp, Arc<Reconciler>) {
    let app = TestApp::start().await;
    let reconciler = sweeping(&app, sweep);
    for number in [2, 3, 4] {
        app.send(&Delivery::fixture("pull_request.opened").number(number))
            .await;
    }
    reconciler.pass().await.unwrap();
    assert!([2, 3, 4].iter().all(|n| file_of(&app, *n).exists()));
    reconciler.pass_changed(true).await.unwrap();
    (app, reconciler)
}

#[tokio::test]
async fn a_resync_with_nothing_changed_looks_at_no_preview() {
    let (_app, reconciler) = settled(0).await;
    let looks = reconciler.looks();
    reconciler.pass_changed(true).await.unwrap();
    reconciler.pass_changed(false).await.unwrap();
    assert_eq!(reconciler.looks(), looks, "nothing changed: no look");
}

#[tokio::test]
async fn a_change_written_to_the_state_without_a_word_is_looked_at_alone() {
    let (app, reconciler) = settled(0).await;
    let looks = reconciler.looks();
    // `previewd destroy` from a shell, or another replica: nothing tells this process.
    let destroyed = previewd::db::request_destroy(app.state(), HELLO, 3, "ops", common::NOW);
    assert_eq!(destroyed.await.unwrap(), Some(true));
    reconciler.pass_changed(false).await.unwrap();
    assert!(!file_of(&app, 3).exists(), "torn down");
    assert!(file_of(&app, 2).exists() && file_of(&app, 4).exists());
    assert_eq!(reconciler.looks(), looks + 1, "PR 3 only");
}

#[tokio::test]
async fn a_look_a_word_asked_for_is_not_made_again_for_its_stamp() {
    let (app, reconciler) = settled(0).await;
    app.send(&Delivery::push(
        "1111111111111111111111111111111111111111",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    let key = "codertocat/hello-world#2".parse().unwrap();
    reconciler
        .pass_for(&std::collections::BTreeSet::from([key]))
        .await
        .unwrap();
    let looks = reconciler.looks();
    reconciler.pass_changed(false).await.unwrap();
    assert_eq!(reconciler.looks(), looks, "looked at at that stamp already");
}

#[tokio::test]
async fn an_application_removed_or_edited_by_hand_is_put_back_at_the_next_resync() {
    let (app, reconciler) = settled(0).await;
    let looks = reconciler.looks();
    std::fs::remove_file(file_of(&app, 2)).unwrap();
    // Another rendering's hash, as if someone wrote it there by hand.
    let edited = std::fs::read_to_string(file_of(&app, 4)).unwrap().replace(
        "previewd.dev/applied-hash: ",
        "previewd.dev/applied-hash: edited-",
    );
    assert!(edited.contains("edited-"), "{edited}");
    std::fs::write(file_of(&app, 4), &edited).unwrap();
    reconciler.pass_changed(false).await.unwrap();
    assert_eq!(
        reconciler.looks(),
        looks,
        "a directory is asked at the resync"
    );
    reconciler.pass_changed(true).await.unwrap();
    assert!(file_of(&app, 2).exists(), "written again");
    assert!(
        !std::fs::read_to_string(file_of(&app, 4))
            .unwrap()
            .contains("edited-"),
        "the edit is undone"
    );
    assert!(reconciler.looks() >= looks + 2);
}

#[tokio::test]
async fn the_slow_sweep_comes_round_to_a_change_nothing_stamped() {
    let (app, reconciler) = settled(1).await;
    let inode = |n: u64| std::fs::metadata(file_of(&app, n)).unwrap().ino();
    let before: Vec<u64> = [2, 3, 4].map(inode).to_vec();
    // A write that forgot its stamp: only the sweep finds it.
    app.execute("UPDATE previews SET redeploy_generation = redeploy_generation + 1")
        .await;
    for _ in 0..3 {
        let looks = reconciler.looks();
        reconciler.pass_changed(true).await.unwrap();
        assert!(
            reconciler.looks() - looks <= 2,
            "its slice, and a file it wrote"
        );
    }
    let after: Vec<u64> = [2, 3, 4].map(inode).to_vec();
    assert!(
        before.iter().zip(&after).all(|(b, a)| b != a),
        "every one rewritten: {before:?} {after:?}"
    );
}
