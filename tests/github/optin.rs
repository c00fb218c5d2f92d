//! Which PRs get a preview: `trigger` (label, comment), `paths` and `ignore_authors`,
//! through the router with the recorded `pull_request.labeled`/`unlabeled` payloads and the
//! GitHub stand-in listing a PR's files.

use super::*;

const REPO: &str = "[[repos]]\nname = \"codertocat/hello-world\"\n";

fn history_of(what: &str) -> String {
    format!("SELECT reason FROM history WHERE what = '{what}' ORDER BY id DESC LIMIT 1")
}

#[tokio::test]
async fn a_preview_lives_while_the_pr_carries_the_trigger_label() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    assert_eq!(desired(&app).await, "opted_out");
    assert_eq!(rendered_files(&app), 0);
    let body = sticky_body(&github);
    assert!(body.contains("add the label **preview**"), "{body}");

    app.send(&label_event(
        "labeled",
        "preview",
        &["bug", "preview"],
        "2019-05-15T15:21:00Z",
        "l1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(rendered_files(&app), 1);

    app.send(&label_event(
        "unlabeled",
        "preview",
        &["bug"],
        "2019-05-15T15:22:00Z",
        "l2",
    ))
    .await;
    previewd.passes(2).await;
    assert_eq!(rendered_files(&app), 0, "removing the label tears it down");
    let why: String = app.scalar(&history_of("unlabeled")).await;
    assert!(
        why.contains("trigger label was removed"),
        "history says why: {why}"
    );
}

/// Found by helper-13: a push without the label (or the unlabeled event replayed) before
/// the teardown ran made the ending preview `opted_out`, which has nothing to tear down:
/// its Applications stayed until the PR closed.
#[tokio::test]
async fn a_push_without_the_label_before_the_teardown_runs_does_not_keep_the_preview() {
    let (app, _github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    app.send(&label_event(
        "labeled",
        "preview",
        &["preview"],
        "2019-05-15T15:21:00Z",
        "t1",
    ))
    .await;
    previewd.pass().await;
    assert_eq!(rendered_files(&app), 1);
    app.send(&label_event(
        "unlabeled",
        "preview",
        &[],
        "2019-05-15T15:22:00Z",
        "t2",
    ))
    .await;
    app.send(&Delivery::push(
        "1111111111111111111111111111111111111111",
        "2019-05-15T15:23:00Z",
    ))
    .await;
    assert_eq!(desired(&app).await, "absent");
    previewd.passes(2).await;
    assert_eq!(rendered_files(&app), 0, "torn down all the same");
}

#[tokio::test]
async fn a_pr_without_a_preview_is_told_how_to_get_one_once() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"label\"\n")).await;
    previewd.open(&app).await;
    app.send(&label_event(
        "labeled",
        "bug",
        &["bug"],
        "2019-05-15T15:21:00Z",
        "o1",
    ))
    .await;
    app.send(&Delivery::fixture("pull_request.edited")).await;
    previewd.passes(3).await;
    assert_eq!(sticky(&github).len(), 1);
    assert_eq!(github.count("PATCH", "/issues/comments"), 0, "never edited");
    assert_eq!(
        github.hub().deployments.len(),
        0,
        "no deployment for no preview"
    );
}

#[tokio::test]
async fn a_comment_triggered_pr_deploys_on_a_writers_command_and_keeps_its_preview() {
    let (app, github, previewd) = setup_with(&format!("{REPO}trigger = \"comment\"\n")).await;
    github.grant("maintainer", "write");
    previewd.open(&app).await;
    assert_eq!(desired(&app).await, "opted_out");
    assert!(sticky_body(&github).contains("`/preview deploy`"));

    // Someone without write access cannot opt it in.
    app.send(&command("/preview deploy", "stranger", "NONE", 601))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "opted_out");

    app.send(&command("/preview deploy", "maintainer", "MEMBER", 602))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(rendered_files(&app), 1);
    let by: String = app.scalar("SELECT deploy_by FROM previews").await;
    assert_eq!(by, "maintainer");

    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(
        desired(&app).await,
        "deployed",
        "a push keeps the opted-in preview"
    );
}

#[tokio::test]
async fn a_pr_gets_a_preview_only_once_it_touches_a_watched_path() {
    let (app, github, previewd) = setup_with(&format!(
        "{REPO}paths = [\"services/api/**\", \"charts/api/**\"]\n"
    ))
    .await;
    let web: Vec<String> = (0..250).map(|i| format!("services/web/{i}.ts")).collect();
    github.set_files(2, web.clone());
    previewd.open(&app).await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "opted_out");
    assert_eq!(rendered_files(&app), 0);
    assert_eq!(
        github.count("GET", "/pulls/2/files"),
        3,
        "250 files: three pages of 100"
    );
    assert!(sticky_body(&github).contains("`paths`"));

    // A push that touches the API, on the last page.
    let mut touched = web;
    touched.push("services/api/src/main.rs".into());
    github.set_files(2, touched);
    push_new_head(&app).await;
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(rendered_files(&app), 1);
    let why: String = app.scalar(&history_of("paths_matched")).await;
    assert!(why.contains("services/api/src/main.rs"), "{why}");

    // It keeps the preview when a later push no longer touches the API.
    github.set_files(2, vec!["README.md".into()]);
    app.send(&Delivery::push(
        "5555555555555555555555555555555555555555",
        "2019-05-15T17:00:00Z",
    ))
    .await;
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed");
}

#[tokio::test]
async fn a_bots_pr_gets_no_preview_until_a_writer_deploys_it() {
    let (app, github, previewd) = setup_with(&format!(
        "{REPO}ignore_authors = [\"dependabot[bot]\", \"renovate[bot]\"]\n"
    ))
    .await;
    github.grant("maintainer", "admin");
    let bump = Delivery::fixture("pull_request.opened")
        .edit(|body| body["pull_request"]["user"]["login"] = json!("dependabot[bot]"));
    app.send(&bump).await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "opted_out");
    assert_eq!(rendered_files(&app), 0);
    assert!(sticky_body(&github).contains("ignore_authors"));

    app.send(&command("/preview deploy", "maintainer", "MEMBER", 603))
        .await;
    previewd.pass().await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(rendered_files(&app), 1);
}

/// Look-ups go 50 a pass: PRs that wait for their label must not be the 50 every pass
/// takes, or a labeled PR behind them would never have its files listed.
#[tokio::test]
async fn a_labeled_prs_files_are_listed_however_many_prs_wait_without_the_label() {
    let (app, github, previewd) = setup_with(&format!(
        "{REPO}trigger = \"label\"\npaths = [\"services/api/**\"]\n"
    ))
    .await;
    for number in 100..160 {
        app.send(&Delivery::fixture("pull_request.opened").number(number))
            .await;
    }
    github.set_files(2, vec!["services/api/main.rs".into()]);
    app.send(&label_event(
        "labeled",
        "preview",
        &["preview"],
        "2019-05-15T15:21:00Z",
        "l1",
    ))
    .await;
    previewd.passes(2).await;
    assert_eq!(desired(&app).await, "deployed");
    assert_eq!(
        github.count("GET", "/files"),
        1,
        "only the labeled PR's files are listed"
    );
}
