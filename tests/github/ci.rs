//! `[[repos]] wait_for`: nothing that runs the PR's image before CI built it, what needs
//! none provisioned at once, CI's verdict on the PR, and the look-up that heals a lost
//! check webhook — through the router, with the recorded `check_run`, `check_suite`,
//! `status` and `workflow_run` payloads and the GitHub stand-in.

use super::*;

const WAITING: &str = "[[repos]]\nname = \"codertocat/hello-world\"\nimage = \"ghcr.io/codertocat/hello-world\"\n\
    migrate_command = [\"./migrate\"]\napp_chart = \"deploy/chart\"\nwait_for = [\"build-image\"]\n";

async fn waiting_setup() -> (TestApp, FakeGitHub, Previewd) {
    setup_with(WAITING).await
}

/// The recorded `check_run` delivery, as the run `name` on `sha` ended with `conclusion`
/// (or still running: `None`) at `at`.
fn check_run(name: &str, sha: &str, conclusion: Option<&str>, at: &str, guid: &str) -> Delivery {
    Delivery::fixture("check_run.completed")
        .edit(|body| {
            let run = &mut body["check_run"];
            run["name"] = json!(name);
            run["head_sha"] = json!(sha);
            run["html_url"] = json!(format!(
                "https://github.com/Codertocat/Hello-World/runs/{guid}"
            ));
            run["started_at"] = json!(at);
            match conclusion {
                Some(conclusion) => {
                    run["status"] = json!("completed");
                    run["conclusion"] = json!(conclusion);
                    run["completed_at"] = json!(at);
                }
                None => {
                    body["action"] = json!("created");
                    body["check_run"]["status"] = json!("in_progress");
                    body["check_run"]["conclusion"] = Value::Null;
                    body["check_run"]["completed_at"] = Value::Null;
                }
            }
        })
        .guid(guid)
}

async fn observed(app: &TestApp) -> String {
    app.scalar("SELECT observed FROM previews WHERE number = 2")
        .await
}

/// The rendered helper Application, and whether the app's own Application was written.
fn rendered(app: &TestApp) -> (String, bool) {
    let dir = app.dir.path().join("rendered");
    let mut helper = String::new();
    let mut app_written = false;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if path.file_name().unwrap().to_string_lossy().contains("-app") {
            app_written = true;
        } else {
            helper = text;
        }
    }
    (helper, app_written)
}

const IMAGE: &str = "ghcr.io/codertocat/hello-world:ec26c3e57ca3a959ca5aad62de7213c562f8c821";

#[tokio::test]
async fn helpers_are_provisioned_while_waiting_and_the_image_deploys_once_the_build_succeeds() {
    let (app, github, previewd) = waiting_setup().await;
    previewd.open(&app).await;
    assert_eq!(observed(&app).await, "waiting_for_ci");
    let (helper, app_written) = rendered(&app);
    assert!(
        helper.contains("kind: Application"),
        "the helpers are applied at once"
    );
    assert!(
        !helper.contains(IMAGE),
        "no Job runs the PR's image yet:\n{helper}"
    );
    assert!(!app_written, "nor the app");
    let body = sticky_body(&github);
    assert!(body.contains("Waiting for CI"), "{body}");
    assert!(body.contains("**build-image**"), "{body}");
    assert_eq!(github.hub().statuses.last().unwrap().1["state"], "queued");

    let (status, _) = app
        .send(&check_run(
            "build-image",
            HEAD,
            Some("success"),
            "2019-05-15T15:25:00Z",
            "c1",
        ))
        .await;
    assert_eq!(status, 202);
    previewd.pass().await;
    let (helper, app_written) = rendered(&app);
    assert!(
        helper.contains(IMAGE),
        "the migration runs the image CI built:\n{helper}"
    );
    assert!(app_written, "and the app deploys");
    assert_ne!(observed(&app).await, "waiting_for_ci");
}

#[tokio::test]
async fn a_failed_build_names_the_check_and_a_rerun_that_succeeds_deploys() {
    let (app, github, previewd) = waiting_setup().await;
    previewd.open(&app).await;
    app.send(&check_run(
        "build-image",
        HEAD,
        Some("failure"),
        "2019-05-15T15:25:00Z",
        "f1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(observed(&app).await, "ci_failed");
    let body = sticky_body(&github);
    assert!(body.contains("CI failed"), "{body}");
    assert!(
        body.contains("https://github.com/Codertocat/Hello-World/runs/f1"),
        "links the check: {body}"
    );
    assert_eq!(github.hub().statuses.last().unwrap().1["state"], "failure");
    let history: i64 = app
        .scalar("SELECT COUNT(*) FROM history WHERE what = 'ci_failed'")
        .await;
    assert_eq!(history, 1);
    let (api, text) = app
        .get("/api/previews/codertocat/hello-world/2", None)
        .await;
    assert_eq!(api, 200);
    assert!(text.contains("ci_failed"), "{text}");

    // Re-run: a new run of the same name starts, then succeeds.
    app.send(&check_run(
        "build-image",
        HEAD,
        None,
        "2019-05-15T15:40:00Z",
        "f2",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(observed(&app).await, "waiting_for_ci");
    app.send(&check_run(
        "build-image",
        HEAD,
        Some("success"),
        "2019-05-15T15:45:00Z",
        "f3",
    ))
    .await;
    previewd.pass().await;
    assert!(rendered(&app).1, "the re-run's success deploys the app");
}

#[tokio::test]
async fn a_completion_delivered_before_its_start_still_deploys() {
    let (app, _github, previewd) = waiting_setup().await;
    previewd.open(&app).await;
    app.send(&check_run(
        "build-image",
        HEAD,
        Some("success"),
        "2019-05-15T15:45:00Z",
        "o1",
    ))
    .await;
    let (status, body) = app
        .send(&check_run(
            "build-image",
            HEAD,
            None,
            "2019-05-15T15:40:00Z",
            "o2",
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    previewd.pass().await;
    assert!(rendered(&app).1);
}

#[tokio::test]
async fn a_check_for_a_commit_no_preview_waits_on_is_a_harmless_200() {
    let (app, _github, previewd) = waiting_setup().await;
    previewd.open(&app).await;
    let other = "9999999999999999999999999999999999999999";
    let (status, body) = app
        .send(&check_run(
            "build-image",
            other,
            Some("success"),
            "2019-05-15T15:25:00Z",
            "x1",
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.count("checks").await, 0);
    previewd.pass().await;
    assert_eq!(
        observed(&app).await,
        "waiting_for_ci",
        "a check of the same name on another SHA never crosses"
    );
    let (status, _) = app
        .send(&check_run(
            "lint",
            HEAD,
            Some("success"),
            "2019-05-15T15:25:00Z",
            "x2",
        ))
        .await;
    assert_eq!(status, 200, "a name wait_for does not ask for is not kept");
    assert_eq!(app.count("checks").await, 0);
}

#[tokio::test]
async fn a_lost_check_webhook_is_healed_by_looking_the_head_up() {
    let (app, github, previewd) = waiting_setup().await;
    github.check_run(HEAD, "build-image", "completed", Some("success"));
    previewd.open(&app).await;
    // The preview started waiting: its head's checks were looked up once.
    previewd.pass().await;
    assert!(rendered(&app).1, "deployed without any check webhook");
    assert_eq!(
        github.count("GET", "/check-runs"),
        1,
        "one look-up per head"
    );
}

#[tokio::test]
async fn a_failing_checks_api_keeps_the_preview_waiting_and_resync_asks_again() {
    let (app, github, previewd) = waiting_setup().await;
    // The App may not read checks yet (a permission not granted): GitHub refuses. (A 5xx
    // holds the whole installation instead, and its look-ups wait for the hold to end.)
    github.fail(common::github::Fault::get(
        "/check-runs",
        403,
        NOT_ACCESSIBLE,
    ));
    previewd.open(&app).await;
    previewd.passes(3).await;
    assert_eq!(observed(&app).await, "waiting_for_ci");
    let asked = github.count("GET", "/check-runs");
    assert!(asked >= 1, "looked up when it started waiting");
    previewd.passes(3).await;
    assert_eq!(
        github.count("GET", "/check-runs"),
        asked,
        "never once per pass"
    );
    github.clear_faults();
    github.check_run(HEAD, "build-image", "completed", Some("success"));
    previewd.resync.pass().await.unwrap();
    previewd.passes(2).await;
    assert!(rendered(&app).1, "the resync's look-up found the success");
}

#[tokio::test]
async fn a_commit_status_and_a_workflow_run_count_by_their_names() {
    let (app, _github, previewd) = setup_with(
        "[[repos]]\nname = \"codertocat/hello-world\"\nimage = \"ghcr.io/codertocat/hello-world\"\n\
         app_chart = \"deploy/chart\"\nwait_for = [\"default\", \"test\"]\n",
    )
    .await;
    previewd.open(&app).await;
    // The recorded status is `default`/success on 6113728: moved to the PR's head.
    let status = Delivery::fixture("status").edit(|body| body["sha"] = json!(HEAD));
    assert_eq!(app.send(&status).await.0, 202);
    previewd.pass().await;
    assert_eq!(observed(&app).await, "waiting_for_ci", "test still runs");
    // The recorded run of workflow `test` on 3484a3f, of octo-org/octo-repo: moved here.
    let run = Delivery::fixture("workflow_run.completed.with-pull-requests").edit(|body| {
        body["workflow_run"]["head_sha"] = json!(HEAD);
        body["repository"]["full_name"] = json!("Codertocat/Hello-World");
    });
    assert_eq!(app.send(&run).await.0, 202);
    previewd.pass().await;
    assert!(rendered(&app).1);
}

#[tokio::test]
async fn a_completed_check_suite_has_the_previews_at_its_head_look_again() {
    let (app, github, previewd) = waiting_setup().await;
    previewd.open(&app).await;
    previewd.pass().await;
    let before = github.count("GET", "/check-runs");
    github.check_run(HEAD, "build-image", "completed", Some("success"));
    assert_eq!(
        app.send(&Delivery::fixture("check_suite.completed"))
            .await
            .0,
        202
    );
    previewd.passes(2).await;
    assert_eq!(github.count("GET", "/check-runs"), before + 1);
    assert!(rendered(&app).1);
}

#[tokio::test]
async fn a_writer_deploys_past_a_failed_check_recorded_with_the_actor_and_a_push_resets_it() {
    let (app, github, previewd) = waiting_setup().await;
    github.grant("maintainer", "write");
    previewd.open(&app).await;
    app.send(&check_run(
        "build-image",
        HEAD,
        Some("failure"),
        "2019-05-15T15:25:00Z",
        "w1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(observed(&app).await, "ci_failed");
    app.send(&command("/preview deploy", "maintainer", "MEMBER", 801))
        .await;
    previewd.passes(2).await;
    assert!(rendered(&app).1, "the override deploys the image");
    let actor: String = app
        .scalar("SELECT actor FROM history WHERE what = 'command' AND reason = '/preview deploy'")
        .await;
    assert_eq!(actor, "maintainer");

    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(
        observed(&app).await,
        "waiting_for_ci",
        "a new push waits again"
    );
}
