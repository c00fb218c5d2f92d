//! GitHub feedback and PR commands against a local stand-in for GitHub's REST API: the
//! sticky comment, deployments and their statuses, failures GitHub really produces, command
//! authorization, fork approval, resync of open PRs, and the look-ups of a PR's files.

#[path = "../common/mod.rs"]
mod common;

mod approval;
mod ci;
mod commands;
mod faults;
mod gate_faults;
mod lookups;
mod oauth;
mod optin;
mod reports;
mod resync;

use std::sync::Arc;

use common::github::FakeGitHub;
use common::{Delivery, TestApp};
use previewd::feedback::Feedback;
use previewd::github::GitHub;
use previewd::reconcile::Reconciler;
use previewd::resync::Resync;
use serde_json::{Value, json};

pub(crate) const HELLO: &str = "codertocat/hello-world";
pub(crate) const HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

pub(crate) const NOT_ACCESSIBLE: &str = "Resource not accessible by integration";
/// What the fixture PR's author pushes next, in most tests.
const NEW_HEAD: &str = "4444444444444444444444444444444444444444";

pub(crate) async fn setup() -> (TestApp, FakeGitHub, Previewd) {
    setup_with("").await
}

/// `setup` with `toml` (tables, like `[[repos]]`) after the GitHub settings.
pub(crate) async fn setup_with(toml: &str) -> (TestApp, FakeGitHub, Previewd) {
    let github = FakeGitHub::start().await;
    let app = TestApp::start_with(&format!(
        "token = \"test-token\"\napi_url = {:?}\n{toml}",
        github.url
    ))
    .await;
    let previewd = Previewd::new(&app);
    (app, github, previewd)
}

/// The reconciler, the feedback worker and resync on one state and one GitHub client,
/// wired as `serve` wires them.
pub(crate) struct Previewd {
    pub(crate) reconciler: Arc<Reconciler>,
    pub(crate) resync: Arc<Resync>,
    pub(crate) feedback: Arc<Feedback>,
    pub(crate) github: Arc<GitHub>,
}

impl Previewd {
    pub(crate) fn new(app: &TestApp) -> Self {
        let config = &app.app.config;
        let client = Arc::new(
            GitHub::new(
                &config.github.api_url,
                config.github.credentials.as_ref().unwrap(),
            )
            .unwrap(),
        );
        let feedback = Feedback::new(
            app.state().clone(),
            config.clone(),
            Arc::new(app.clock.clone()),
            Some(client.clone()),
        )
        .notifying(app.app.work.clone());
        let reconciler = common::directory_reconciler(app).with_feedback(feedback.nudge());
        let resync = Resync::new(
            app.state().clone(),
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
    pub(crate) async fn pass(&self) {
        self.feedback.obey().await.unwrap();
        self.feedback.look_up().await;
        self.reconciler.pass().await.unwrap();
        self.feedback.report().await;
    }

    /// The fixture PR (Hello-World's #2) is opened, and one pass made.
    pub(crate) async fn open(&self, app: &TestApp) {
        app.send(&Delivery::fixture("pull_request.opened")).await;
        self.pass().await;
    }

    /// The fixture PR opened from a fork at `HEAD`, and one pass made: it awaits approval.
    pub(crate) async fn open_from_a_fork(&self, app: &TestApp) {
        app.send(&fork_opened(HEAD, "2019-05-15T15:20:33Z", "f1"))
            .await;
        self.pass().await;
    }

    /// `n` passes in a row.
    pub(crate) async fn passes(&self, n: usize) {
        for _ in 0..n {
            self.pass().await;
        }
    }

    /// The loops running, as in `serve`; cancel the answer to stop them.
    pub(crate) fn run(&self, app: &TestApp) -> tokio_util::sync::CancellationToken {
        let stop = tokio_util::sync::CancellationToken::new();
        let pending = app.pending.lock().unwrap().take().unwrap();
        tokio::spawn(self.reconciler.clone().run(pending, stop.child_token()));
        tokio::spawn(self.feedback.clone().run(stop.child_token()));
        tokio::spawn(self.resync.clone().run(stop.child_token()));
        stop
    }
}

/// A `/preview` comment on PR #2 of the Hello-World fixture, by `login`.
pub(crate) fn command(line: &str, login: &str, association: &str, comment_id: u64) -> Delivery {
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

pub(crate) async fn desired(app: &TestApp) -> String {
    app.scalar("SELECT desired FROM previews WHERE number = 2")
        .await
}

/// The fixture PR's author pushes `NEW_HEAD` (at 16:00).
pub(crate) async fn push_new_head(app: &TestApp) {
    app.send(&Delivery::push(NEW_HEAD, "2019-05-15T16:00:00Z"))
        .await;
}

/// The body of the (first) sticky comment.
pub(crate) fn sticky_body(github: &FakeGitHub) -> String {
    sticky(github)[0]["body"].as_str().unwrap().to_owned()
}

pub(crate) fn sticky(github: &FakeGitHub) -> Vec<Value> {
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

/// The fixture PR opened from a fork (another repository id) at `sha`, updated at `at`.
pub(crate) fn fork_opened(sha: &str, at: &str, guid: &str) -> Delivery {
    Delivery::fixture("pull_request.opened")
        .edit(|body| body["pull_request"]["head"]["repo"]["id"] = json!(999))
        .at_sha(sha)
        .updated_at(at)
        .guid(guid)
}

/// The recorded `labeled` (or `unlabeled`) delivery, of `label`, the PR then carrying
/// `labels`, at `at`.
pub(crate) fn label_event(
    action: &str,
    label: &str,
    labels: &[&str],
    at: &str,
    guid: &str,
) -> Delivery {
    let fixture = format!("pull_request.{action}");
    Delivery::fixture(&fixture)
        .edit(|body| {
            body["label"]["name"] = json!(label);
            body["pull_request"]["labels"] = json!(
                labels
                    .iter()
                    .map(|name| json!({"id": 1, "name": name, "color": "ededed", "default": false,
                                        "node_id": "L", "url": "https://api.github.com/l", "description": null}))
                    .collect::<Vec<_>>()
            );
        })
        .updated_at(at)
        .guid(guid)
}

pub(crate) fn rendered_files(app: &TestApp) -> usize {
    std::fs::read_dir(app.dir.path().join("rendered")).map_or(0, |d| d.count())
}
