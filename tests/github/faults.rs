//! Failures GitHub really produces: a 502 after the write, secondary rate limits, a
//! vanished PR, a refused deployment, a locked PR.

use super::*;
use crate::common::eventually;
use crate::common::github::Fault;
use axum::http::Method;

const SECONDARY_RATE_LIMIT: &str = "You have exceeded a secondary rate limit.";

#[tokio::test]
async fn a_502_on_a_post_does_not_duplicate_the_comment() {
    let (app, github, previewd) = setup().await;
    github.fail(
        Fault::post("/issues/2/comments", 502, "Bad Gateway")
            .times(1)
            .after_write(),
    );
    app.send(&Delivery::fixture("pull_request.opened")).await;
    previewd.pass().await; // the comment is made, but previewd hears a 502
    app.clock.advance(60);
    previewd.passes(2).await;
    assert_eq!(sticky(&github).len(), 1);
    assert_eq!(github.posts("/issues/2/comments"), 1, "never posted twice");
}

#[tokio::test]
async fn a_secondary_rate_limit_holds_the_installation_until_retry_after_and_then_it_goes_on() {
    let (app, github, previewd) = setup().await;
    github.fail(
        Fault::post("/issues/2/comments", 403, SECONDARY_RATE_LIMIT)
            .times(1)
            .retry_after("1"),
    );
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let started = std::time::Instant::now();
    previewd.pass().await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(1),
        "refused at once, not slept out"
    );
    let held = previewd.github.held(&HELLO.parse().unwrap(), None);
    assert!(
        held.is_some_and(|left| left <= std::time::Duration::from_secs(1)),
        "{held:?}"
    );
    let sent = github.hub().log.len();
    previewd.pass().await;
    assert_eq!(github.hub().log.len(), sent, "held: not a single call");
    tokio::time::sleep(held.unwrap()).await;
    previewd.pass().await;
    assert_eq!(sticky(&github).len(), 1);
    assert_eq!(
        github.posts("/issues/2/comments"),
        2,
        "refused once, then made"
    );
}

/// The Hello-World `fixture`, moved to another owner's repository as PR `number`.
fn elsewhere(fixture: &str, number: u64) -> Delivery {
    Delivery::fixture(fixture)
        .edit(|body| {
            body["repository"]["full_name"] = json!("octo-org/other");
            body["repository"]["name"] = json!("other");
            body["repository"]["owner"]["login"] = json!("octo-org");
        })
        .number(number)
}

/// A rate limit (`retry-after: 50`) on every call for Hello-World, for the whole test.
fn rate_limit_hello_world(github: &FakeGitHub) {
    for method in [Method::GET, Method::POST, Method::PATCH] {
        github.fail(
            Fault::on(
                method,
                "/repos/codertocat/hello-world/",
                403,
                SECONDARY_RATE_LIMIT,
            )
            .retry_after("50"),
        );
    }
}

#[tokio::test]
async fn a_rate_limited_repository_delays_neither_another_prs_deploy_nor_its_teardown() {
    let (app, github, previewd) = setup().await;
    rate_limit_hello_world(&github);
    let stop = previewd.run(&app);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    // Reporting on Hello-World has met the rate limit.
    assert!(
        eventually(std::time::Duration::from_secs(5), || {
            github.count("", "/repos/codertocat/hello-world/") > 0
        })
        .await
    );
    app.send(&elsewhere("pull_request.opened", 7)).await;
    let other = app.dir.path().join("rendered");
    let has_other = || {
        std::fs::read_dir(&other).is_ok_and(|dir| {
            dir.filter_map(Result::ok)
                .any(|f| f.file_name().to_string_lossy().contains("pr-7"))
        })
    };
    assert!(
        eventually(std::time::Duration::from_secs(3), has_other).await,
        "the other PR deploys while Hello-World waits out its rate limit"
    );
    assert!(
        eventually(std::time::Duration::from_secs(3), || {
            sticky(&github).iter().any(|c| c["issue_number"] == 7)
        })
        .await,
        "and is reported on: another owner's installation is not held"
    );
    app.send(&elsewhere("pull_request.closed.unmerged", 7).updated_at("2019-05-15T17:00:00Z"))
        .await;
    assert!(
        eventually(std::time::Duration::from_secs(3), || !has_other()).await,
        "and is torn down as fast"
    );
    stop.cancel();
}

#[tokio::test]
async fn a_sticky_comment_on_a_vanished_pr_is_given_up_after_a_few_tries() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    assert_eq!(sticky(&github).len(), 1);
    // The PR is gone (deleted, transferred): every issue call answers 404.
    for method in [Method::GET, Method::POST, Method::PATCH] {
        github.fail(Fault::on(method, "/issues/", 404, "Not Found"));
    }
    let before = github.count("", "/issues/");
    let push = |sha: &str, at: &str| Delivery::push(sha, at).guid(&format!("push-{sha}"));
    app.send(&push(
        "4444444444444444444444444444444444444444",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    previewd.passes(6).await;
    let tried = github.count("", "/issues/") - before;
    assert!(tried > 0, "tried at all");
    assert!(
        tried <= 2 * 3,
        "a bounded number of tries: {:?}",
        github.hub().log
    );
    // Final: neither later passes nor a new push try again.
    app.send(&push(
        "5555555555555555555555555555555555555555",
        "2019-05-15T17:00:00Z",
    ))
    .await;
    previewd.passes(3).await;
    assert_eq!(
        github.count("", "/issues/") - before,
        tried,
        "never retried"
    );
}

#[tokio::test]
async fn a_refused_deployment_is_given_up_for_its_head_and_the_comment_goes_on() {
    let (app, github, previewd) = setup().await;
    github.fail(Fault::post("/deployments", 403, NOT_ACCESSIBLE));
    app.send(&Delivery::fixture("pull_request.opened")).await;
    previewd.passes(5).await;
    assert_eq!(sticky(&github).len(), 1);
    assert_eq!(github.posts("/deployments"), 3, "{:?}", github.hub().log);
    push_new_head(&app).await;
    previewd.passes(5).await;
    assert!(
        sticky_body(&github).contains("`4444444`"),
        "the comment still follows the PR"
    );
    assert_eq!(
        github.posts("/deployments"),
        6,
        "a new head tries again, as few times"
    );
}

#[tokio::test]
async fn a_notice_on_a_locked_pr_is_dropped_after_a_few_tries() {
    let (app, github, previewd) = setup().await;
    app.execute(
        "INSERT INTO notices (repo, number, kind, body, created_at)
         VALUES ('codertocat/hello-world', 5, 'expiry_warning', 'expiring soon', 0)",
    )
    .await;
    github.fail(Fault::post(
        "/issues/5/comments",
        403,
        "Unable to create comment because issue is locked.",
    ));
    for _ in 0..5 {
        previewd.feedback.report().await;
    }
    assert_eq!(github.posts("/issues/5/comments"), 3);
    let posted: Option<i64> = app.scalar("SELECT posted_at FROM notices").await;
    assert!(posted.is_some(), "not owed any more");
}
