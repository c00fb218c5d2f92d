//! `/preview` commands: who may run them (GitHub's permission, not the association), which
//! comments count, the answers, and bounded work for strangers.

use super::*;
use crate::common::eventually;
use crate::common::github::{BOT, Fault};

#[tokio::test]
async fn read_permission_refuses_destroy_and_write_accepts_it() {
    let (app, github, previewd) = setup().await;
    github.grant("reader", "read");
    github.grant("writer", "write");
    previewd.open(&app).await;

    app.send(&command("/preview destroy", "reader", "MEMBER", 501))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    let refused: String = app
        .scalar("SELECT status FROM commands WHERE comment_id = 501")
        .await;
    assert_eq!(refused, "refused");
    assert!(github.reacted(501, "confused"));
    assert!(!github.reacted(501, "eyes"));
    let history: i64 = app
        .scalar("SELECT COUNT(*) FROM history WHERE what = 'command_refused' AND actor = 'reader'")
        .await;
    assert_eq!(history, 1, "refusals are recorded with the actor");

    app.send(&command("/preview destroy", "writer", "MEMBER", 502))
        .await;
    previewd.pass().await;
    assert!(github.reacted(502, "eyes"));
    assert!(github.reacted(502, "rocket"));
    let replies = github.replies();
    assert_eq!(replies.len(), 2);
    assert!(replies[0].contains("Sorry @reader"), "{}", replies[0]);
    assert!(
        replies[1].contains("@writer: tearing the preview down"),
        "{}",
        replies[1]
    );
    assert_eq!(app.count("previews").await, 0, "torn down in the same pass");
    let answered: i64 = app
        .scalar("SELECT answered FROM commands WHERE comment_id = 502")
        .await;
    assert_eq!(answered, 1, "the command outlives its preview");
}

/// A member whose organisation membership is private arrives as CONTRIBUTOR in the webhook:
/// GitHub's permission endpoint, not the association, decides; and a burst of commands from
/// one person asks it once.
#[tokio::test]
async fn a_private_member_arriving_as_contributor_is_asked_for_once_and_obeyed() {
    let (app, github, previewd) = setup().await;
    github.grant("quiet-member", "write");
    previewd.open(&app).await;

    app.send(&command(
        "/preview keep",
        "quiet-member",
        "CONTRIBUTOR",
        601,
    ))
    .await;
    app.send(&command(
        "/preview unkeep",
        "Quiet-Member",
        "CONTRIBUTOR",
        602,
    ))
    .await;
    previewd.pass().await;
    let statuses: Vec<String> = app
        .scalars("SELECT status FROM commands WHERE comment_id IN (601, 602) ORDER BY comment_id")
        .await;
    assert_eq!(statuses, ["done", "done"]);
    assert_eq!(
        github.count("", "/collaborators/"),
        1,
        "the answer is cached: {:?}",
        github.hub().log
    );
}

#[tokio::test]
async fn the_authors_own_extend_is_bounded_by_the_maximum_lifetime() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    app.send(&command("/preview extend 30d", "Codertocat", "OWNER", 601))
        .await;
    previewd.pass().await;
    let (created, expires): (i64, i64) = app
        .row("SELECT created_at, expires_at FROM previews WHERE number = 2")
        .await;
    assert_eq!(
        expires - created,
        14 * 86_400,
        "capped at defaults.max_lifetime"
    );
    assert!(github.reply_to(601).contains("maximum lifetime"));
}

#[tokio::test]
async fn our_own_and_edited_comments_never_run_a_command() {
    let (app, _github, previewd) = setup().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let ours = command("/preview destroy", BOT, "NONE", 801).edit(|body| {
        body["comment"]["user"]["type"] = json!("Bot");
    });
    app.send(&ours).await;
    let edited = command("/preview destroy", "Codertocat", "OWNER", 802).edit(|body| {
        body["action"] = json!("edited");
        body["changes"] = json!({"body": {"from": "hello"}});
    });
    app.send(&edited).await;
    previewd.pass().await;
    assert_eq!(app.count("commands").await, 0);
    assert_eq!(desired(&app).await, "deployed");
}

#[tokio::test]
async fn every_recorded_issue_comment_goes_through_intake_and_the_command_path() {
    let (app, _github, previewd) = setup().await;
    let fixtures: Vec<String> = std::fs::read_dir(format!(
        "{}/tests/fixtures/github",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .map(|e| e.unwrap().file_name().into_string().unwrap())
    .filter(|n| n.starts_with("issue_comment."))
    .map(|n| n.trim_end_matches(".json").to_owned())
    .collect();
    assert!(fixtures.len() >= 8, "{fixtures:?}");
    for (i, name) in fixtures.iter().enumerate() {
        // As recorded (none holds a /preview command), then with one.
        let (status, _) = app.send(&Delivery::fixture(name)).await;
        assert_eq!(status, 200, "{name}: ignored");
        let with_command = Delivery::fixture(name)
            .edit(|body| body["comment"]["body"] = json!("Looks good!\n/preview status"))
            .guid(&format!("with-command-{i}"));
        let (status, answer) = app.send(&with_command).await;
        let queues = name.starts_with("issue_comment.created.pull_request");
        assert_eq!(status, if queues { 202 } else { 200 }, "{name}: {answer}");
    }
    previewd.pass().await;
    let statuses: Vec<String> = app.scalars("SELECT status FROM commands ORDER BY id").await;
    assert!(!statuses.is_empty());
    assert!(
        statuses.iter().all(|s| s == "done"),
        "status is open to anyone on a PR previewd does not track: {statuses:?}"
    );
}

/// Every request the fake saw, from the `from`th on.
fn requests_since(github: &FakeGitHub, from: usize) -> Vec<String> {
    github.hub().log[from..].to_vec()
}

#[tokio::test]
async fn a_strangers_forty_help_comments_get_no_reply_and_a_bounded_few_reactions() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    let before = github.hub().log.len();
    for i in 0..40 {
        let line = if i % 2 == 0 {
            "/preview help"
        } else {
            "/preview status"
        };
        app.send(&command(line, "stranger", "NONE", 3000 + i)).await;
    }
    previewd.passes(2).await;
    assert_eq!(
        github.replies().len(),
        0,
        "an outsider is never answered with a comment"
    );
    let reactions = github.hub().reactions.clone();
    assert!(
        reactions.len() <= 3,
        "one reaction each, for the first few only: {reactions:?}"
    );
    let sent = requests_since(&github, before);
    assert!(sent.len() <= 3, "a bounded number of calls: {sent:?}");
    let unanswered: i64 = app
        .scalar("SELECT COUNT(*) FROM commands WHERE answered = 0")
        .await;
    assert_eq!(unanswered, 0, "the rest are settled, silently, not retried");
}

#[tokio::test]
async fn a_maintainers_command_goes_through_both_loops_and_is_answered() {
    let (app, github, previewd) = setup().await;
    github.grant("maintainer", "write");
    let _stop = previewd.run(&app);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let within = std::time::Duration::from_secs(5);
    assert!(eventually(within, || rendered_files(&app) == 1).await);
    app.send(&command(
        "/preview destroy",
        "maintainer",
        "CONTRIBUTOR",
        990,
    ))
    .await;
    assert!(
        eventually(within, || rendered_files(&app) == 0).await,
        "the worker confirmed the permission, the reconciler tore it down"
    );
    assert!(eventually(within, || github.reacted(990, "rocket")).await);
    let reply = github.reply_to(990);
    assert!(
        reply.contains("@maintainer"),
        "a writer is answered: {reply}"
    );
}

#[tokio::test]
async fn a_permission_github_will_not_tell_refuses_the_command_once_not_every_pass() {
    let (app, github, previewd) = setup().await;
    github.fail(Fault::get("/collaborators/", 403, NOT_ACCESSIBLE));
    previewd.open(&app).await;
    app.send(&command("/preview keep", "someone", "CONTRIBUTOR", 1201))
        .await;
    previewd.passes(3).await;
    let status: String = app
        .scalar("SELECT status FROM commands WHERE comment_id = 1201")
        .await;
    assert_eq!(status, "refused");
    assert_eq!(github.count("GET", "/collaborators/"), 1, "asked once");
    assert_eq!(github.hub().reactions, [(1201, "confused".to_owned())]);
}

/// Issue #41: the author puts their preview to sleep and wakes it by comment; each is
/// answered, and a second one says it is so already.
#[tokio::test]
async fn the_author_puts_the_preview_to_sleep_and_wakes_it() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    let asleep = || async {
        app.scalar::<Option<i64>>("SELECT sleeping_since FROM previews WHERE number = 2")
            .await
    };
    app.send(&command("/preview sleep", "Codertocat", "CONTRIBUTOR", 701))
        .await;
    previewd.pass().await;
    assert!(asleep().await.is_some());
    assert!(
        github.reply_to(701).contains("goes to sleep"),
        "{}",
        github.reply_to(701)
    );
    app.send(&command("/preview sleep", "Codertocat", "CONTRIBUTOR", 702))
        .await;
    previewd.pass().await;
    assert!(github.reply_to(702).contains("asleep already"));

    app.send(&command("/preview wake", "Codertocat", "CONTRIBUTOR", 703))
        .await;
    previewd.pass().await;
    assert_eq!(asleep().await, None);
    assert!(
        github.reply_to(703).contains("waking up"),
        "{}",
        github.reply_to(703)
    );
    // Written awake in the same pass: where nobody reports health (this directory sink),
    // the wake is over then, and the login shows no waking page.
    let (observed, woke): (String, Option<i64>) = app
        .row("SELECT observed, woke_at FROM previews WHERE number = 2")
        .await;
    assert_eq!((observed.as_str(), woke), ("applied", None));
}
