//! What previewd reads of a PR to decide whether its preview may run, asked of the fake
//! GitHub over HTTP by the production client: the files a PR touches.

use previewd::config::GithubCredentials;
use previewd::github::GitHub;
use previewd::preview::RepoName;

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
