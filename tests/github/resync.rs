//! Resync of open PRs from GitHub's listing: lost events healed, previews destroyed on
//! purpose not brought back.

use super::*;
use crate::common::github::Fault;

/// The fixture PR as GitHub's pull request listing has it.
fn listed_pull(number: u64, state: &str, sha: &str) -> Value {
    json!({
        "number": number, "state": state, "title": "Listed", "draft": false,
        "user": {"login": "Codertocat"}, "merged_at": null,
        "updated_at": "2026-11-29T11:00:00Z",
        "head": {"sha": sha, "ref": "feature", "repo": {"id": 186853002}},
        "base": {"ref": "main", "repo": {"id": 186853002}},
    })
}

#[tokio::test]
async fn resync_heals_a_lost_opened_and_a_lost_closed_and_a_failed_listing_changes_nothing() {
    let (app, github, previewd) = setup().await;
    // PR #2 is tracked but was closed while previewd was away; PR #9 opened unseen.
    previewd.open(&app).await;
    github.fail(Fault::get("/pulls", 500, "Server Error").times(3));
    {
        let mut hub = github.hub();
        hub.pulls.push(listed_pull(2, "closed", HEAD));
        hub.pulls.push(listed_pull(
            9,
            "open",
            "9999999999999999999999999999999999999999",
        ));
    }
    assert_eq!(previewd.resync.pass().await.unwrap(), 0);
    assert_eq!(
        (app.count("previews").await, desired(&app).await.as_str()),
        (1, "deployed")
    );
    // The outage holds the owner's calls a moment; then the listing is tried again.
    let held = previewd.github.held(&HELLO.parse().unwrap(), None);
    tokio::time::sleep(held.expect("held after a 5xx")).await;

    assert_eq!(previewd.resync.pass().await.unwrap(), 2);
    previewd.pass().await;
    let numbers: Vec<i64> = app
        .scalars("SELECT number FROM previews ORDER BY number")
        .await;
    assert_eq!(numbers, [9], "#2 closed and gone, #9 deployed");
    assert_eq!(
        previewd.resync.pass().await.unwrap(),
        0,
        "nothing new the second time"
    );
}

#[tokio::test]
async fn resync_does_not_bring_back_a_preview_destroyed_on_purpose() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    app.send(&command("/preview destroy", "Codertocat", "OWNER", 950))
        .await;
    previewd.pass().await;
    assert_eq!(app.count("previews").await, 0);
    github.hub().pulls.push(listed_pull(2, "open", HEAD));
    assert_eq!(
        previewd.resync.pass().await.unwrap(),
        0,
        "destroyed at this head: stays gone"
    );
    github.hub().pulls[0] = listed_pull(2, "open", "7777777777777777777777777777777777777777");
    assert_eq!(
        previewd.resync.pass().await.unwrap(),
        1,
        "a new push brings it back"
    );
}

/// Review repro: the only thing that keeps resync from re-creating a preview destroyed (or
/// expired) on purpose at an unchanged head is its `destroyed` history row, which retention
/// deletes once the PR has been quiet for 30 days and 20 other previews were destroyed since.
/// `closed_prs.ended_at` does not hold either: GitHub moves the PR's `updated_at` on every
/// comment and comment edit (shared/fixtures/github/issue_comment.edited.pull_request.bot-sticky.json:
/// issue.updated_at = the edit's time), previewd's own reply and sticky report included, so the
/// listed PR is always "newer" than the end.
#[tokio::test]
async fn resync_does_not_bring_back_a_destroyed_preview_after_retention() {
    let (app, github, previewd) = setup().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    previewd.pass().await;
    app.send(&command("/preview destroy", "Codertocat", "OWNER", 951))
        .await;
    previewd.pass().await;
    assert_eq!(app.count("previews").await, 0);
    // 20 other previews destroyed since (a busy repository), then 31 quiet days.
    for n in 100..120 {
        let at = common::NOW + n;
        app.execute(&format!("INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('{HELLO}', {n}, 'destroyed', 'previewd', 'PR closed: x', {at})"))
            .await;
    }
    app.clock.advance(31 * 86_400);
    previewd::sweep::Sweeper::new(
        app.state().clone(),
        app.app.config.clone(),
        Arc::new(app.clock.clone()),
    )
    .pass(previewd::sweep::Pass::Record)
    .await
    .unwrap();
    assert!(
        app.history(HELLO, 2).await.is_empty(),
        "retention forgot #2's history"
    );
    // Still open at the destroyed head; updated_at = previewd's own reply, seconds after the destroy.
    github.hub().pulls.push(json!({
        "number": 2, "state": "open", "title": "Still open", "draft": false,
        "user": {"login": "Codertocat"}, "merged_at": null,
        "updated_at": "2026-11-29T00:00:05Z",
        "head": {"sha": HEAD, "ref": "feature", "repo": {"id": 186853002}},
        "base": {"ref": "main", "repo": {"id": 186853002}},
    }));
    let recorded = previewd.resync.pass().await.unwrap();
    previewd.pass().await;
    assert_eq!(
        (recorded, app.count("previews").await),
        (0, 0),
        "destroyed at this head: nobody pushed, so it stays gone"
    );
}

/// Issue #17's budget: once a listing is known, an hour at steady state of resync (six
/// passes) and reporting (120 passes) costs no counted call: each listing is a 304, which
/// GitHub does not count, and nothing is reported again. A changed listing is read afresh.
#[tokio::test]
async fn an_hour_at_steady_state_costs_no_counted_call() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    github.hub().pulls.push(listed_pull(2, "open", HEAD));
    assert_eq!(previewd.resync.pass().await.unwrap(), 0);
    previewd.pass().await;
    let before = github.hub().log.len();
    for _ in 0..6 {
        assert_eq!(previewd.resync.pass().await.unwrap(), 0);
        for _ in 0..20 {
            previewd.feedback.report().await;
        }
    }
    let (sent, unchanged) = {
        let hub = github.hub();
        (hub.log[before..].to_vec(), hub.not_modified.len())
    };
    assert_eq!(sent.len(), 6, "only the six listings: {sent:?}");
    assert!(
        sent.iter()
            .all(|l| l.starts_with("GET") && l.contains("/pulls?state=open"))
    );
    assert_eq!(unchanged, 6, "every listing after the first answered 304");

    // A new push changes the listing: it is read afresh (a counted 200) and acted on.
    github.hub().pulls[0] = listed_pull(2, "open", "7777777777777777777777777777777777777777");
    assert_eq!(previewd.resync.pass().await.unwrap(), 1);
    assert_eq!(github.hub().not_modified.len(), 6);
}
