//! GitHub feedback and PR commands against a local stand-in for GitHub's REST API: the
//! sticky comment, deployments and their statuses, failures GitHub really produces, command
//! authorization, fork approval, and resync of open PRs.

mod common;

use std::sync::Arc;

use axum::http::Method;
use common::github::{BOT, FakeGitHub, Fault};
use common::{Delivery, TestApp, eventually};
use previewd::feedback::Feedback;
use previewd::github::GitHub;
use previewd::reconcile::Reconciler;
use previewd::resync::Resync;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");
const HELLO: &str = "codertocat/hello-world";
const HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
/// What the fixture PR's author pushes next, in most tests.
const SECONDARY_RATE_LIMIT: &str = "You have exceeded a secondary rate limit.";
const NOT_ACCESSIBLE: &str = "Resource not accessible by integration";
const NEW_HEAD: &str = "4444444444444444444444444444444444444444";

async fn setup() -> (TestApp, FakeGitHub, Previewd) {
    let github = FakeGitHub::start().await;
    let app = TestApp::start_with(&format!(
        "token = \"test-token\"\napi_url = {:?}\n",
        github.url
    ))
    .await;
    let previewd = Previewd::new(&app);
    (app, github, previewd)
}

/// The reconciler, the feedback worker and resync on one state and one GitHub client,
/// wired as `serve` wires them.
struct Previewd {
    reconciler: Arc<Reconciler>,
    resync: Arc<Resync>,
    feedback: Arc<Feedback>,
    github: Arc<GitHub>,
}

impl Previewd {
    fn new(app: &TestApp) -> Self {
        let config = &app.app.config;
        let client = Arc::new(
            GitHub::new(
                &config.github.api_url,
                config.github.credentials.as_ref().unwrap(),
            )
            .unwrap(),
        );
        let feedback = Feedback::new(
            app.pool().clone(),
            config.clone(),
            Arc::new(app.clock.clone()),
            Some(client.clone()),
        )
        .notifying(app.app.work.clone());
        let reconciler = common::directory_reconciler(app).with_feedback(feedback.nudge());
        let resync = Resync::new(
            app.pool().clone(),
            config.clone(),
            Arc::new(app.clock.clone()),
            client.clone(),
            app.app.intake.clone(),
        );
        Self {
            reconciler: Arc::new(reconciler),
            resync: Arc::new(resync),
            feedback: Arc::new(feedback),
            github: client,
        }
    }

    /// What the two loops do for a change, one step after the other: the commands, a
    /// reconcile pass, then the reports.
    async fn pass(&self) {
        self.feedback.obey().await.unwrap();
        self.reconciler.pass().await.unwrap();
        self.feedback.report().await;
    }

    /// The fixture PR (Hello-World's #2) is opened, and one pass made.
    async fn open(&self, app: &TestApp) {
        app.send(&Delivery::fixture("pull_request.opened")).await;
        self.pass().await;
    }

    /// The fixture PR opened from a fork at `HEAD`, and one pass made: it awaits approval.
    async fn open_from_a_fork(&self, app: &TestApp) {
        app.send(&fork_opened(HEAD, "2019-05-15T15:20:33Z", "f1"))
            .await;
        self.pass().await;
    }

    /// `n` passes in a row.
    async fn passes(&self, n: usize) {
        for _ in 0..n {
            self.pass().await;
        }
    }

    /// The loops running, as in `serve`; cancel the answer to stop them.
    fn run(&self, app: &TestApp) -> tokio_util::sync::CancellationToken {
        let stop = tokio_util::sync::CancellationToken::new();
        let pending = app.pending.lock().unwrap().take().unwrap();
        tokio::spawn(self.reconciler.clone().run(pending, stop.child_token()));
        tokio::spawn(self.feedback.clone().run(stop.child_token()));
        tokio::spawn(self.resync.clone().run(stop.child_token()));
        stop
    }
}

/// A `/preview` comment on PR #2 of the Hello-World fixture, by `login`.
fn command(line: &str, login: &str, association: &str, comment_id: u64) -> Delivery {
    Delivery::fixture("issue_comment.created.pull_request")
        .edit(|body| {
            body["repository"]["full_name"] = json!("Codertocat/Hello-World");
            body["repository"]["name"] = json!("Hello-World");
            body["repository"]["owner"]["login"] = json!("Codertocat");
            body["issue"]["number"] = json!(2);
            body["comment"]["body"] = json!(line);
            body["comment"]["id"] = json!(comment_id);
            body["comment"]["user"]["login"] = json!(login);
            body["comment"]["author_association"] = json!(association);
            // After the fixture PR's opening (15:20:33), before the pushes tests make (16:00).
            body["comment"]["created_at"] = json!("2019-05-15T15:30:00Z");
        })
        .guid(&format!("comment-{comment_id}"))
}

async fn desired(app: &TestApp) -> String {
    app.scalar("SELECT desired FROM previews WHERE number = 2")
        .await
}

/// The fixture PR's author pushes `NEW_HEAD` (at 16:00).
async fn push_new_head(app: &TestApp) {
    app.send(&Delivery::push(NEW_HEAD, "2019-05-15T16:00:00Z"))
        .await;
}

/// The fixture PR is closed unmerged (at 17:00).
async fn close(app: &TestApp) {
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
}

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

/// The body of the (first) sticky comment.
fn sticky_body(github: &FakeGitHub) -> String {
    sticky(github)[0]["body"].as_str().unwrap().to_owned()
}

fn sticky(github: &FakeGitHub) -> Vec<Value> {
    github
        .hub()
        .comments
        .iter()
        .filter(|c| {
            c["body"]
                .as_str()
                .unwrap()
                .starts_with("<!-- previewd:status -->")
        })
        .cloned()
        .collect()
}

#[tokio::test]
async fn the_sticky_comment_is_created_once_and_edited_afterwards() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    assert_eq!(sticky(&github).len(), 1);
    let body = sticky_body(&github);
    assert!(
        body.contains("Deploying") && body.contains("`ec26c3e`"),
        "{body}"
    );
    assert!(
        body.contains("/preview extend 2d") && body.contains("in-cluster"),
        "{body}"
    );

    // Nothing changed: nothing written.
    let writes = github.count("POST", "") + github.count("PATCH", "");
    previewd.pass().await;
    assert_eq!(github.count("POST", "") + github.count("PATCH", ""), writes);

    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(
        sticky(&github).len(),
        1,
        "edited in place, not posted again"
    );
    assert!(sticky_body(&github).contains("`4444444`"));
    assert_eq!(github.count("PATCH", "/issues/comments/"), 1);

    close(&app).await;
    previewd.passes(2).await;
    assert_eq!(sticky(&github).len(), 1);
    let body = sticky_body(&github);
    assert!(body.contains("Destroyed"), "{body}");
}

#[tokio::test]
async fn deployments_are_transient_per_head_and_end_inactive() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    {
        let hub = github.hub();
        assert_eq!(hub.deployments.len(), 1);
        let deployment = &hub.deployments[0];
        assert_eq!(deployment["ref"], HEAD);
        assert_eq!(deployment["environment"], "preview/pr-2");
        assert_eq!(deployment["auto_merge"], false);
        assert_eq!(deployment["required_contexts"], json!([]));
        assert_eq!(deployment["transient_environment"], true);
        assert_eq!(deployment["production_environment"], false);
        assert_eq!(hub.statuses.len(), 1);
        assert_eq!(hub.statuses[0].1["state"], "in_progress");
        // GitHub's "View logs": the preview's dashboard page (public_url defaults to the
        // loopback listen address).
        assert_eq!(
            hub.statuses[0].1["log_url"],
            "http://127.0.0.1:8080/previews/codertocat/hello-world/2"
        );
    }
    push_new_head(&app).await;
    previewd.pass().await;
    close(&app).await;
    previewd.passes(2).await;
    let hub = github.hub();
    assert_eq!(hub.deployments.len(), 2, "one per head SHA");
    let states: Vec<(u64, String)> = hub
        .statuses
        .iter()
        .map(|(id, s)| (*id, s["state"].as_str().unwrap().to_owned()))
        .collect();
    let (first, second) = (
        hub.deployments[0]["id"].as_u64().unwrap(),
        hub.deployments[1]["id"].as_u64().unwrap(),
    );
    assert_eq!(
        states,
        [
            (first, "in_progress".into()),
            (first, "inactive".into()),
            (second, "in_progress".into()),
            (second, "inactive".into()),
        ]
    );
}

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

/// The fixture PR opened from a fork (another repository id) at `sha`, updated at `at`.
fn fork_opened(sha: &str, at: &str, guid: &str) -> Delivery {
    Delivery::fixture("pull_request.opened")
        .edit(|body| body["pull_request"]["head"]["repo"]["id"] = json!(999))
        .at_sha(sha)
        .updated_at(at)
        .guid(guid)
}

fn rendered_files(app: &TestApp) -> usize {
    std::fs::read_dir(app.dir.path().join("rendered")).map_or(0, |d| d.count())
}

#[tokio::test]
async fn a_github_app_mints_an_installation_token_once_and_acts_with_it() {
    let github = FakeGitHub::start().await;
    let app = TestApp::start_with(&format!(
        "app_id = 4242\nprivate_key_path = \"{FIXTURES}/test-key.pem\"\napi_url = {:?}\n",
        github.url
    ))
    .await;
    let previewd = Previewd::new(&app);
    app.send(&Delivery::fixture("pull_request.opened")).await; // installation 1
    previewd.pass().await;
    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(sticky(&github).len(), 1, "found again by `<slug>[bot]`");
    assert_eq!(
        github.posts("/app/installations/1/access_tokens"),
        1,
        "minted once, then cached"
    );
    let hub = github.hub();
    let (as_the_app, as_the_installation): (Vec<_>, Vec<_>) = hub
        .log
        .iter()
        .zip(&hub.auth)
        .partition(|(line, _)| line.contains(" /app"));
    let jwt = |(_, header): &(&String, &String)| header.starts_with("Bearer ey");
    assert!(as_the_app.iter().all(jwt), "the App's JWT: {as_the_app:?}");
    let token = |(_, header): &(&String, &String)| header.ends_with("ghs_installation1");
    assert!(
        as_the_installation.iter().all(token),
        "the installation's token: {as_the_installation:?}"
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
        sqlx::query("INSERT INTO history (repo, number, what, actor, reason, at) VALUES (?1, ?2, 'destroyed', 'previewd', 'PR closed: x', ?3)")
            .bind(HELLO)
            .bind(n)
            .bind(common::NOW + n)
            .execute(app.pool())
            .await
            .unwrap();
    }
    app.clock.advance(31 * 86_400);
    previewd::sweep::Sweeper::new(
        app.pool().clone(),
        app.app.config.clone(),
        Arc::new(app.clock.clone()),
    )
    .pass(false)
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
