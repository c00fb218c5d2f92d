//! What previewd reads of a PR to decide whether its preview may run, asked of the fake
//! GitHub over HTTP by the production client: the files a PR touches, and the CI reports
//! on its head commit.

use previewd::checks::{CheckReport, CheckState, Source};
use previewd::config::GithubCredentials;
use previewd::github::GitHub;
use previewd::preview::{RepoName, Sha};

use crate::common::github::lookups::stamped_at;
use crate::common::github::{FakeGitHub, Fault};

/// A token client against `github`, as `serve` builds one.
fn client(github: &FakeGitHub) -> GitHub {
    let token = GithubCredentials::Token("test-token".to_owned().into());
    GitHub::new(&github.url, &token).unwrap()
}

fn hello() -> RepoName {
    super::HELLO.parse().unwrap()
}

fn files(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}/{i}.rs")).collect()
}

/// The pages of `/pulls/{number}/files` asked for, in order.
fn file_pages(github: &FakeGitHub, number: u32) -> Vec<String> {
    let path = format!("/pulls/{number}/files?");
    let log = github.hub().log.clone();
    log.into_iter().filter(|l| l.contains(&path)).collect()
}

#[tokio::test]
async fn pull_files_follows_pages_until_a_short_one() {
    let github = FakeGitHub::start().await;
    github.set_files(7, files("services/api", 250));
    let found = client(&github).pull_files(&hello(), None, 7).await.unwrap();
    assert_eq!(found, files("services/api", 250));
    let pages = file_pages(&github, 7);
    assert_eq!(pages.len(), 3, "{pages:?}");
    assert!(pages[2].ends_with("per_page=100&page=3"), "{pages:?}");
}

#[tokio::test]
async fn a_pr_of_exactly_one_full_page_asks_once_more_to_see_the_end() {
    let github = FakeGitHub::start().await;
    github.set_files(7, files("web", 100));
    let found = client(&github).pull_files(&hello(), None, 7).await.unwrap();
    assert_eq!(found.len(), 100);
    assert_eq!(file_pages(&github, 7).len(), 2);
}

#[tokio::test]
async fn pull_files_stops_at_githubs_3000_file_cap() {
    let github = FakeGitHub::start().await;
    github.set_files(7, files("web", 3500));
    let found = client(&github).pull_files(&hello(), None, 7).await.unwrap();
    assert_eq!(found.len(), previewd::paths::GITHUB_FILE_CAP);
    let pages = file_pages(&github, 7);
    assert_eq!(pages.len(), 30, "GitHub's 30 pages of 100");
    assert!(
        pages.iter().all(|p| !p.ends_with("page=31")),
        "never page 31"
    );
}

#[tokio::test]
async fn a_rename_touches_both_the_old_path_and_the_new() {
    let github = FakeGitHub::start().await;
    github.set_files(7, vec!["README.md".into()]);
    github.rename(7, "services/api/main.rs", "services/core/main.rs");
    let found = client(&github).pull_files(&hello(), None, 7).await.unwrap();
    assert_eq!(
        found,
        ["README.md", "services/core/main.rs", "services/api/main.rs"]
    );
}

#[tokio::test]
async fn a_pr_touching_nothing_lists_no_files() {
    let github = FakeGitHub::start().await;
    let found = client(&github).pull_files(&hello(), None, 7).await.unwrap();
    assert!(found.is_empty());
    assert_eq!(file_pages(&github, 7).len(), 1);
}

#[tokio::test]
async fn a_failed_page_fails_the_whole_listing() {
    let github = FakeGitHub::start().await;
    github.set_files(7, files("web", 250));
    // Pages 1 and 2 answer; the third fails every time, retries included.
    github.fail(Fault::get("/pulls/7/files", 500, "Server Error").with_query("&page=3"));
    let err = client(&github)
        .pull_files(&hello(), None, 7)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/pulls/7/files"), "{err}");
    let pages = file_pages(&github, 7);
    assert!(pages[0].ends_with("&page=1") && pages[1].ends_with("&page=2"));
    assert!(
        pages[2..].iter().all(|p| p.ends_with("&page=3")),
        "{pages:?}"
    );
}

fn head() -> Sha {
    super::HEAD.parse().unwrap()
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test]
async fn commit_checks_finds_a_check_run_a_status_and_a_workflow_by_name() {
    let github = FakeGitHub::start().await;
    let run = github.check_run(super::HEAD, "build-image", "completed", Some("success"));
    let status = github.commit_status(super::HEAD, "ci/migrations", "failure");
    let workflow = github.workflow_run(super::HEAD, "e2e", "in_progress", None);
    let wanted = names(&["build-image", "ci/migrations", "e2e"]);
    let found = client(&github)
        .commit_checks(&hello(), None, &head(), &wanted)
        .await
        .unwrap();
    let base = "https://github.com/codertocat/hello-world";
    assert_eq!(
        found,
        [
            CheckReport {
                source: Source::CheckRun,
                name: "build-image".into(),
                state: CheckState::Succeeded,
                conclusion: "success".into(),
                url: Some(format!("{base}/runs/{run}")),
                at: stamped_at(run),
            },
            CheckReport {
                source: Source::Status,
                name: "ci/migrations".into(),
                state: CheckState::Failed,
                conclusion: "failure".into(),
                url: Some(format!(
                    "https://ci.example.com/codertocat/hello-world/{status}"
                )),
                at: stamped_at(status),
            },
            CheckReport {
                source: Source::Workflow,
                name: "e2e".into(),
                state: CheckState::Pending,
                conclusion: "in_progress".into(),
                url: Some(format!("{base}/actions/runs/{workflow}")),
                at: stamped_at(workflow),
            },
        ]
    );
    for listing in ["/check-runs?", "/status?", "/actions/runs?head_sha="] {
        assert_eq!(github.count("GET", listing), 1, "{listing}");
    }
}

#[tokio::test]
async fn commit_checks_ignores_names_not_waited_for() {
    let github = FakeGitHub::start().await;
    github.check_run(super::HEAD, "lint", "completed", Some("failure"));
    github.check_run(super::HEAD, "build-image-arm", "queued", None);
    github.commit_status(super::HEAD, "Build-Image", "error");
    github.workflow_run(super::HEAD, "build", "completed", Some("failure"));
    let other = "4444444444444444444444444444444444444444";
    github.check_run(other, "build-image", "completed", Some("failure"));
    github.workflow_run(other, "build-image", "completed", Some("failure"));
    let wanted = names(&["build-image"]);
    let found = client(&github)
        .commit_checks(&hello(), None, &head(), &wanted)
        .await
        .unwrap();
    assert_eq!(found, [], "exact names on this commit only");
}

#[tokio::test]
async fn nothing_waited_for_asks_github_nothing() {
    let github = FakeGitHub::start().await;
    github.check_run(super::HEAD, "build-image", "completed", Some("success"));
    let found = client(&github)
        .commit_checks(&hello(), None, &head(), &[])
        .await
        .unwrap();
    assert!(found.is_empty());
    assert!(github.hub().log.is_empty(), "{:?}", github.hub().log);
}

#[tokio::test]
async fn commit_checks_follows_the_pages_of_each_listing() {
    let github = FakeGitHub::start().await;
    for i in 0..120 {
        github.check_run(
            super::HEAD,
            &format!("job-{i}"),
            "completed",
            Some("success"),
        );
        github.commit_status(super::HEAD, &format!("ctx-{i}"), "pending");
        github.workflow_run(super::HEAD, &format!("wf-{i}"), "queued", None);
    }
    let wanted = names(&["job-119", "ctx-119", "wf-0"]);
    let found = client(&github)
        .commit_checks(&hello(), None, &head(), &wanted)
        .await
        .unwrap();
    let found: Vec<_> = found.iter().map(|r| (r.source, r.name.as_str())).collect();
    assert_eq!(
        found,
        [
            (Source::CheckRun, "job-119"),
            (Source::Status, "ctx-119"),
            (Source::Workflow, "wf-0"),
        ]
    );
    for listing in ["/check-runs?", "/status?", "/actions/runs?"] {
        assert_eq!(github.count("GET", listing), 2, "{listing}");
    }
}

#[tokio::test]
async fn a_rerun_and_a_newer_status_are_what_github_lists() {
    let github = FakeGitHub::start().await;
    github.check_run(super::HEAD, "build-image", "completed", Some("failure"));
    let rerun = github.check_run(super::HEAD, "build-image", "in_progress", None);
    github.commit_status(super::HEAD, "ci", "pending");
    let done = github.commit_status(super::HEAD, "ci", "success");
    let found = client(&github)
        .commit_checks(&hello(), None, &head(), &names(&["build-image", "ci"]))
        .await
        .unwrap();
    let found: Vec<_> = found.iter().map(|r| (r.state, r.at)).collect();
    assert_eq!(
        found,
        [
            (CheckState::Pending, stamped_at(rerun)),
            (CheckState::Succeeded, stamped_at(done)),
        ]
    );
}

#[tokio::test]
async fn a_failing_checks_api_fails_the_look_up() {
    let github = FakeGitHub::start().await;
    github.check_run(super::HEAD, "build-image", "completed", Some("success"));
    github.commit_status(super::HEAD, "ci", "success");
    github.fail(Fault::get("/check-runs", 500, "Server Error"));
    let err = client(&github)
        .commit_checks(&hello(), None, &head(), &names(&["build-image", "ci"]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/check-runs"), "{err}");
    assert_eq!(
        github.count("GET", "/status?"),
        0,
        "no look-up past a failure"
    );
}

#[tokio::test]
async fn any_failed_listing_fails_the_look_up_not_only_the_first() {
    for (path, query) in [
        ("/status", None),
        ("/actions/runs", None),
        ("/check-runs", Some("&page=2")),
    ] {
        let github = FakeGitHub::start().await;
        for i in 0..100 {
            github.check_run(
                super::HEAD,
                &format!("job-{i}"),
                "completed",
                Some("success"),
            );
        }
        github.commit_status(super::HEAD, "ci", "success");
        let mut fault = Fault::get(path, 403, "Resource not accessible by integration");
        if let Some(query) = query {
            fault = fault.with_query(query);
        }
        github.fail(fault);
        let err = client(&github)
            .commit_checks(&hello(), None, &head(), &names(&["job-1", "ci"]))
            .await
            .unwrap_err();
        assert!(
            err.is_permanent() && err.to_string().contains(path),
            "{err}"
        );
    }
}
