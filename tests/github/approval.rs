//! Fork PRs: nothing deploys before a maintainer approves the commit they name, and a push
//! revokes the approval.

use super::*;

#[tokio::test]
async fn a_fork_pr_deploys_only_after_approve_and_a_new_push_needs_a_new_one() {
    let (app, github, previewd) = setup().await;
    github.grant("maintainer", "admin");
    previewd.open_from_a_fork(&app).await;
    assert_eq!(desired(&app).await, "awaiting_approval");
    assert_eq!(
        rendered_files(&app),
        0,
        "nothing deployed before the approval"
    );
    assert!(sticky_body(&github).contains("/preview approve"));

    let approve = format!("/preview approve {}", &HEAD[..7]);
    app.send(&command(&approve, "maintainer", "MEMBER", 701))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(rendered_files(&app), 1);
    let approved: String = app.scalar("SELECT approved_sha FROM previews").await;
    assert_eq!(approved, HEAD);

    app.send(&fork_opened(
        "5555555555555555555555555555555555555555",
        "2019-05-15T16:00:00Z",
        "f2",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(
        desired(&app).await,
        "awaiting_approval",
        "a new push revokes it"
    );
}

#[tokio::test]
async fn an_approval_does_not_cover_a_push_that_landed_after_the_comment() {
    let (app, github, previewd) = setup().await;
    github.grant("maintainer", "write");
    previewd.open_from_a_fork(&app).await;
    let approve = format!("/preview approve {HEAD}");
    app.send(&command(&approve, "maintainer", "MEMBER", 901))
        .await;
    app.clock.advance(5);
    // The fork's author pushes before previewd runs the command.
    app.send(&fork_opened(
        "6666666666666666666666666666666666666666",
        "2019-05-15T16:00:00Z",
        "f2",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "awaiting_approval");
    assert_eq!(rendered_files(&app), 0, "the new head never ran");
    let reply = github.reply_to(901);
    assert!(
        reply.contains("nothing was approved")
            && reply.contains("6666666666666666666666666666666666666666"),
        "{reply}"
    );
}

/// A fork PR opened at `HEAD` whose author pushes `head` at 15:29:55, seconds before the
/// maintainer's `line` (commented at 15:30:00, see `command`); and the reply to it.
async fn approve_after_a_push(line: &str, head: &str) -> (TestApp, String) {
    let (app, github, previewd) = setup().await;
    github.grant("maintainer", "write");
    previewd.open_from_a_fork(&app).await;
    app.send(&fork_opened(head, "2019-05-15T15:29:55Z", "f2"))
        .await;
    app.send(&command(line, "maintainer", "MEMBER", 911)).await;
    previewd.pass().await;
    (app, github.reply_to(911))
}

/// After `approve_after_a_push`: the fork still waits, nothing approved, nothing deployed;
/// and the reply says `says` and names the `pushed` head.
async fn assert_approved_nothing(app: &TestApp, reply: &str, says: &str, pushed: &str) {
    assert_eq!(desired(app).await, "awaiting_approval");
    assert_eq!(approved_sha(app).await, None);
    assert_eq!(rendered_files(app), 0, "the push never ran");
    assert!(reply.contains(says) && reply.contains(pushed), "{reply}");
}

async fn approved_sha(app: &TestApp) -> Option<String> {
    app.scalar("SELECT approved_sha FROM previews").await
}

/// The attack of issue #13: a push seconds before the maintainer's bare `/preview approve`
/// got that push approved. An approval must name the commit.
#[tokio::test]
async fn an_approval_naming_no_commit_approves_nothing_and_names_the_head() {
    let pushed = "7777777777777777777777777777777777777777";
    let (app, reply) = approve_after_a_push("/preview approve", pushed).await;
    assert_approved_nothing(&app, &reply, "Nothing was approved", pushed).await;
}

/// The maintainer read `HEAD` and names it; the push that landed just before the comment
/// is not what they named, so it is not approved.
#[tokio::test]
async fn approving_the_commit_read_after_a_push_landed_approves_nothing() {
    let pushed = "7777777777777777777777777777777777777777";
    let line = format!("/preview approve {}", &HEAD[..7]);
    let (app, reply) = approve_after_a_push(&line, pushed).await;
    assert_approved_nothing(&app, &reply, "`ec26c3e` is not the head", pushed).await;
}

/// Naming the head that is there approves it: the full SHA it prefixes is stored.
#[tokio::test]
async fn approving_the_head_by_its_prefix_pins_the_full_sha() {
    let pushed = "7777777abcdef0123456789abcdef0123456789a";
    let (app, reply) = approve_after_a_push("/preview approve 7777777ABC", pushed).await;
    assert_eq!(desired(&app).await, "deployed", "{reply}");
    assert_eq!(approved_sha(&app).await.as_deref(), Some(pushed));
}

/// On a fork, `/preview deploy` names no commit either: it is no approval.
#[tokio::test]
async fn deploy_on_an_unapproved_fork_approves_nothing() {
    let pushed = "7777777777777777777777777777777777777777";
    let (app, reply) = approve_after_a_push("/preview deploy", pushed).await;
    assert_approved_nothing(&app, &reply, pushed, pushed).await;
}
