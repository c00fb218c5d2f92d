//! The gates under attack: each test is a reproduction a review found (they failed before
//! their fixes): a fork push racing a deploy, labels on closed or destroyed PRs, look-ups
//! starved by PRs another gate holds, opting in that skipped CI or was born expired, and a
//! lost label webhook.
use previewd::clock::Clock as _;

use super::*;

const REPO: &str = "[[repos]]\nname = \"codertocat/hello-world\"\n";

/// Under `trigger = "label"`, any label event is a "create" change, so labeling a PR
/// that is already closed (GitHub sends `labeled` for closed PRs) brings its preview back.
#[tokio::test]
async fn labeling_a_closed_pr_does_not_deploy_it() {
    let (app, _github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    app.send(&label_event(
        "labeled",
        "preview",
        &["preview"],
        "2019-05-15T15:21:00Z",
        "a1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    app.send(
        &Delivery::fixture("pull_request.closed.unmerged")
            .updated_at("2019-05-15T15:22:00Z")
            .guid("a2"),
    )
    .await;
    previewd.passes(2).await;
    assert_eq!(gone_or(&app).await, "gone");
    assert_eq!(rendered_files(&app), 0);
    // A triager labels the closed PR afterwards.
    app.send(
        &label_event(
            "labeled",
            "bug",
            &["preview", "bug"],
            "2019-05-15T15:30:00Z",
            "a3",
        )
        .edit(|b| b["pull_request"]["state"] = json!("closed")),
    )
    .await;
    previewd.passes(2).await;
    assert_eq!(gone_or(&app).await, "gone", "a closed PR has no preview");
    assert_eq!(rendered_files(&app), 0, "nothing rendered for a closed PR");
}

/// An unrelated label on a PR whose preview was destroyed brings it back (under any
/// other trigger, only a push does).
#[tokio::test]
async fn an_unrelated_label_does_not_undo_a_destroy() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    github.grant("maintainer", "write");
    previewd.open(&app).await;
    app.send(&label_event(
        "labeled",
        "preview",
        &["preview"],
        "2019-05-15T15:21:00Z",
        "b1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    app.send(&command("/preview destroy", "maintainer", "MEMBER", 901))
        .await;
    previewd.passes(2).await;
    assert_eq!(gone_or(&app).await, "gone");
    app.send(&label_event(
        "labeled",
        "bug",
        &["preview", "bug"],
        "2019-05-15T15:40:00Z",
        "b2",
    ))
    .await;
    previewd.passes(2).await;
    assert_eq!(
        gone_or(&app).await,
        "gone",
        "destroyed stays destroyed until a push"
    );
    assert_eq!(rendered_files(&app), 0);
}

/// `lookups_due` returns, by id, opted-out PRs whose files `look_at_files` will never
/// list (another gate answers first: no label, an ignored author, trigger = comment) and
/// never marks; 50 of them fill every pass's `PER_PASS` (ORDER BY id LIMIT 50) and no later
/// preview is ever looked up: neither its files (`paths`) nor its checks (`wait_for`).
async fn starved(others: u64) -> (TestApp, FakeGitHub) {
    let (app, github, previewd) = setup_with(&format!(
        "{REPO}trigger = \"label\"\npaths = [\"services/**\"]\n"
    ))
    .await;
    for n in 100..100 + others {
        app.send(
            &Delivery::fixture("pull_request.opened")
                .number(n)
                .guid(&format!("o{n}")),
        )
        .await;
    }
    github.set_files(2, vec!["services/api/main.rs".into()]);
    previewd.open(&app).await;
    app.send(&label_event(
        "labeled",
        "preview",
        &["preview"],
        "2019-05-15T15:21:00Z",
        "s1",
    ))
    .await;
    previewd.passes(4).await;
    (app, github)
}

#[tokio::test]
async fn fifty_unlabeled_prs_do_not_starve_every_other_look_up() {
    let (app, github) = starved(50).await;
    assert_eq!(
        github.count("GET", "/pulls/2/files"),
        1,
        "#2's files were never listed"
    );
    assert_eq!(desired(&app).await, "deployed");
}

#[tokio::test]
async fn with_forty_nine_others_it_deploys_too() {
    let (app, github) = starved(49).await;
    assert_eq!(github.count("GET", "/pulls/2/files"), 1);
    assert_eq!(desired(&app).await, "deployed");
}

/// The writer's `/preview deploy` that opts a PR in (trigger = "comment") also
/// overrides `wait_for` for the head: the PR's image runs before CI built it.
#[tokio::test]
async fn opting_in_by_comment_still_waits_for_ci() {
    let (app, github, previewd) = setup_with(&format!(
        "{REPO}trigger = \"comment\"\nimage = \"ghcr.io/codertocat/hello-world\"\n\
         migrate_command = [\"./migrate\"]\nwait_for = [\"build-image\"]\n"
    ))
    .await;
    github.grant("maintainer", "write");
    previewd.open(&app).await;
    app.clock.advance(60);
    app.send(&command("/preview deploy", "maintainer", "MEMBER", 906))
        .await;
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed");
    let observed: String = app
        .scalar("SELECT observed FROM previews WHERE number = 2")
        .await;
    let dir = app.dir.path().join("rendered");
    let all: String = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        !all.contains(&format!("ghcr.io/codertocat/hello-world:{HEAD}")),
        "observed {observed}: the image (migrations) is rendered before build-image ran"
    );
}

/// `Effect::Deploy`'s UPDATE has no fork guard (unlike `Effect::Approve`'s `head_sha =
/// ?2`): `decide` checks `approved_sha == head_sha` on the row read before the permission
/// call, and a fork push landing in between (opted_out stays opted_out under
/// trigger = "comment") is deployed unapproved. The effect is applied here as
/// `run_command` would after that interleaving.
#[tokio::test]
async fn a_deploy_decided_before_a_fork_push_does_not_deploy_the_unapproved_head() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"comment\"\n")).await;
    github.grant("maintainer", "write");
    previewd.open_from_a_fork(&app).await;
    assert_eq!(desired(&app).await, "opted_out");
    app.send(&command(
        &format!("/preview approve {HEAD}"),
        "maintainer",
        "MEMBER",
        904,
    ))
    .await;
    previewd.pass().await;
    let approved: String = app.scalar("SELECT approved_sha FROM previews").await;
    assert_eq!(approved, HEAD);
    // The row `run_command` read: fork, approved head == head → `decide` says Deploy.
    let id: i64 = app.scalar("SELECT id FROM previews WHERE number = 2").await;
    // ... while GitHub answers the permission call, the fork's author pushes:
    let unapproved = "7777777777777777777777777777777777777777";
    app.send(&fork_opened(unapproved, "2019-05-15T16:00:00Z", "f9"))
        .await;
    assert_eq!(desired(&app).await, "opted_out");
    // ... and then the effect `decide` chose is written.
    let mut tx = previewd::db::begin(app.state()).await.unwrap();
    let seen_at = 1_557_933_600; // 15:20:00, the comment's time
    previewd::db::command_effect(
        &mut tx,
        id,
        &previewd::db::Effect::Deploy {
            by: "maintainer",
            seen_at,
            past_failed_wait: false,
        },
        1_557_940_000,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    previewd.pass().await;
    let head: String = app.scalar("SELECT head_sha FROM previews").await;
    assert_eq!(head, unapproved);
    assert_ne!(
        desired(&app).await,
        "deployed",
        "an unapproved fork head must not deploy"
    );
    assert_eq!(rendered_files(&app), 0);
}

/// An opted-out PR's clock runs from when it was first tracked; a writer's `/preview
/// deploy` (opted_out counts as live, so no fresh `ExpireAt`) deploys it already expired,
/// and the sweeper ends it at once.
#[tokio::test]
async fn a_comment_triggered_preview_is_not_born_expired() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"comment\"\n")).await;
    github.grant("maintainer", "write");
    previewd.open(&app).await;
    assert_eq!(desired(&app).await, "opted_out");
    // The PR sits without a preview for four days (ttl is 72h).
    app.clock.advance(4 * 86_400);
    app.send(&command("/preview deploy", "maintainer", "MEMBER", 905))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    let left: i64 = app
        .scalar(&format!(
            "SELECT expires_at - {} FROM previews WHERE number = 2",
            app.clock.now()
        ))
        .await;
    previewd::sweep::Sweeper::new(
        app.state().clone(),
        app.app.config.clone(),
        std::sync::Arc::new(app.clock.clone()),
    )
    .pass(previewd::sweep::Pass::Record)
    .await
    .unwrap();
    assert_eq!(
        desired(&app).await,
        "deployed",
        "just deployed by a writer, expired by the sweeper at once (expires_at - now = {left}s)"
    );
}

async fn gone_or(app: &TestApp) -> String {
    app.scalar("SELECT COALESCE((SELECT desired FROM previews WHERE number = 2), 'gone')")
        .await
}

/// A lost `labeled` webhook is never healed: resync compares only the head SHA, and
/// the label is now what decides whether a preview exists.
#[tokio::test]
async fn resync_heals_a_lost_labeled_webhook() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    assert_eq!(desired(&app).await, "opted_out");
    // The label is added; its webhook never arrives.
    github.hub().pulls.push(json!({
        "number": 2, "state": "open", "title": "Update the README", "draft": false,
        "user": {"login": "Codertocat"}, "merged_at": null,
        "updated_at": "2019-05-15T15:40:00Z",
        "labels": [{"name": "preview"}],
        "head": {"sha": HEAD, "ref": "changes", "repo": {"id": 186853002}},
        "base": {"ref": "master", "repo": {"id": 186853002}},
    }));
    previewd.resync.pass().await.unwrap();
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed", "the resync saw the label");
}

#[tokio::test]
async fn resync_sees_the_label_when_the_head_also_moved() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    github.hub().pulls.push(json!({
        "number": 2, "state": "open", "title": "Update the README", "draft": false,
        "user": {"login": "Codertocat"}, "merged_at": null,
        "updated_at": "2019-05-15T15:40:00Z",
        "labels": [{"name": "preview"}],
        "head": {"sha": "4444444444444444444444444444444444444444", "ref": "changes", "repo": {"id": 186853002}},
        "base": {"ref": "master", "repo": {"id": 186853002}},
    }));
    previewd.resync.pass().await.unwrap();
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed");
}
