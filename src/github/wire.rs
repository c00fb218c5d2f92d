//! GitHub's answers read at the edge: rate-limit headers, error messages, the few fields
//! previewd uses of each answer (small structs, so an answer of another shape is an error
//! naming the request), and the query encoding previewd's requests need.

use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CommentInfo, GitHubError, PullInfo};
use crate::checks::{CheckReport, Source, state_of};

/// How long GitHub asks us to wait, if this answer is a rate limit: `retry-after`, else the
/// primary limit's reset time, else a minute for a secondary limit without headers.
pub(super) fn rate_limit_wait(
    status: u16,
    headers: &http::HeaderMap,
    text: &str,
) -> Option<Duration> {
    if status != 403 && status != 429 {
        return None;
    }
    if let Some(seconds) = header_number(headers, "retry-after") {
        return Some(Duration::from_secs(seconds.max(0) as u64));
    }
    if header_number(headers, "x-ratelimit-remaining") == Some(0) {
        let reset = header_number(headers, "x-ratelimit-reset").unwrap_or(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        return Some(Duration::from_secs((reset - now).max(1) as u64));
    }
    (status == 429 || text.contains("rate limit")).then_some(Duration::from_secs(60))
}

pub(super) fn header_number(headers: &http::HeaderMap, name: &str) -> Option<i64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

pub(super) fn message_of(text: &str) -> String {
    #[derive(Deserialize)]
    struct Message {
        message: String,
    }
    serde_json::from_str::<Message>(text)
        .map(|m| m.message)
        .unwrap_or_else(|_| text.chars().take(200).collect())
}

/// What GitHub created or found (an installation, a comment, a deployment): its id.
#[derive(Debug, Deserialize)]
pub(super) struct Id {
    pub(super) id: u64,
}

/// `GET /user` (and a comment's or a pull request's author).
#[derive(Debug, Deserialize)]
pub(super) struct User {
    pub(super) login: String,
}

/// `GET /app`.
#[derive(Debug, Deserialize)]
pub(super) struct App {
    pub(super) slug: String,
}

/// `GET /repos/{repo}/collaborators/{login}/permission`.
#[derive(Debug, Deserialize)]
pub(super) struct CollaboratorPermission {
    pub(super) permission: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Comment {
    id: u64,
    user: User,
    body: Option<String>,
}

impl From<Comment> for CommentInfo {
    fn from(c: Comment) -> Self {
        Self {
            id: c.id,
            author: c.user.login,
            body: c.body.unwrap_or_default(),
        }
    }
}

/// A pull request (`GET /repos/{repo}/pulls/{number}`, and each of a listing).
#[derive(Debug, Deserialize)]
pub(super) struct Pull {
    number: u32,
    state: String,
    title: Option<String>,
    user: User,
    head: Head,
    base: Base,
    draft: Option<bool>,
    merged_at: Option<String>,
    updated_at: Option<String>,
    #[serde(default)]
    labels: Vec<Label>,
}

#[derive(Debug, Deserialize)]
struct Label {
    name: String,
}

#[derive(Debug, Deserialize)]
struct Head {
    sha: String,
    #[serde(rename = "ref")]
    branch: Option<String>,
    /// `null` once the fork is deleted.
    repo: Option<HeadRepo>,
}

#[derive(Debug, Deserialize)]
struct HeadRepo {
    id: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Base {
    #[serde(rename = "ref")]
    branch: Option<String>,
    repo: Id,
}

impl From<Pull> for PullInfo {
    fn from(pull: Pull) -> Self {
        let head_repo = pull.head.repo.and_then(|r| r.id);
        Self {
            number: pull.number,
            open: pull.state == "open",
            title: pull.title.unwrap_or_default(),
            author: pull.user.login,
            head_sha: pull.head.sha,
            head_ref: pull.head.branch.unwrap_or_default(),
            base_ref: pull.base.branch.unwrap_or_default(),
            // A deleted fork (`head.repo: null`) is still someone else's code.
            fork: head_repo != Some(pull.base.repo.id),
            draft: pull.draft.unwrap_or(false),
            merged: pull.merged_at.is_some(),
            labels: pull
                .labels
                .into_iter()
                .take(crate::preview::MAX_LABELS)
                .map(|l| l.name)
                .collect(),
            updated_at: pull.updated_at.as_deref().and_then(unix_seconds),
            repo_id: pull.base.repo.id,
        }
    }
}

/// One file of a PR (`GET /repos/{repo}/pulls/{number}/files`): its path, and the path it
/// had before when it was renamed (`status: renamed`).
#[derive(Debug, Deserialize)]
pub(super) struct PullFile {
    pub(super) filename: String,
    pub(super) previous_filename: Option<String>,
}

/// A check run of `GET /repos/{repo}/commits/{sha}/check-runs` (`check_runs`). `status` is
/// `queued`, `in_progress`, `completed`, `waiting`, `requested` or `pending`; the rest may
/// be `null` until the run completes.
#[derive(Debug, Deserialize)]
pub(super) struct CheckRun {
    name: String,
    status: Option<String>,
    conclusion: Option<String>,
    html_url: Option<String>,
    started_at: Option<String>,
    completed_at: Option<String>,
}

/// A commit status of `GET /repos/{repo}/commits/{sha}/status` (`statuses`): `state` is
/// `error`, `failure`, `pending` or `success`.
#[derive(Debug, Deserialize)]
pub(super) struct CommitStatus {
    context: String,
    state: String,
    target_url: Option<String>,
    updated_at: Option<String>,
}

/// A workflow run of `GET /repos/{repo}/actions/runs` (`workflow_runs`): `name`, `status`
/// and `conclusion` may be `null`.
#[derive(Debug, Deserialize)]
pub(super) struct WorkflowRun {
    name: Option<String>,
    status: Option<String>,
    conclusion: Option<String>,
    html_url: Option<String>,
    updated_at: Option<String>,
}

/// A report's time: GitHub's `at`, or 0 (older than any) when it sent none.
fn report_time(at: Option<&str>) -> i64 {
    at.and_then(unix_seconds).unwrap_or(0)
}

impl From<CheckRun> for CheckReport {
    fn from(run: CheckRun) -> Self {
        let status = run.status.unwrap_or_default();
        Self {
            source: Source::CheckRun,
            state: state_of(&status, run.conclusion.as_deref()),
            conclusion: run.conclusion.unwrap_or(status),
            name: run.name,
            url: run.html_url,
            at: report_time(run.completed_at.or(run.started_at).as_deref()),
        }
    }
}

impl From<CommitStatus> for CheckReport {
    fn from(status: CommitStatus) -> Self {
        Self {
            source: Source::Status,
            state: state_of(&status.state, None),
            conclusion: status.state,
            name: status.context,
            url: status.target_url,
            at: report_time(status.updated_at.as_deref()),
        }
    }
}

impl From<WorkflowRun> for CheckReport {
    fn from(run: WorkflowRun) -> Self {
        let status = run.status.unwrap_or_default();
        Self {
            source: Source::Workflow,
            state: state_of(&status, run.conclusion.as_deref()),
            conclusion: run.conclusion.unwrap_or(status),
            name: run.name.unwrap_or_default(),
            url: run.html_url,
            at: report_time(run.updated_at.as_deref()),
        }
    }
}

/// `answer` (to `path`) as `T`; another shape is an error naming the request.
pub(super) fn read<T: DeserializeOwned>(path: &str, answer: Value) -> Result<T, GitHubError> {
    serde_json::from_value(answer).map_err(|e| shape(path, &e.to_string()))
}

/// `2019-05-15T15:20:33Z` as Unix seconds.
fn unix_seconds(text: &str) -> Option<i64> {
    let format = time::format_description::well_known::Rfc3339;
    Some(
        time::OffsetDateTime::parse(text, &format)
            .ok()?
            .unix_timestamp(),
    )
}

pub(super) fn shape(path: &str, message: &str) -> GitHubError {
    GitHubError::Shape {
        path: path.into(),
        message: message.into(),
    }
}

/// What a query value keeps as it is: RFC 3986's unreserved characters. Everything else is
/// escaped, `/`, `&`, `=`, `+` and `#` included, so that an environment name stays one value.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a query value (environment names contain `/`).
pub(super) fn encode(text: &str) -> String {
    utf8_percent_encode(text, QUERY_VALUE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn retry_after_wins_then_the_primary_reset_then_a_minute() {
        let wait = |status, pairs: &[(&'static str, &str)], text| {
            rate_limit_wait(status, &headers(pairs), text)
        };
        assert_eq!(
            wait(403, &[("retry-after", "7")], ""),
            Some(Duration::from_secs(7))
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let reset = (now + 30).to_string();
        let primary = wait(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset),
            ],
            "",
        )
        .unwrap();
        assert!((29..=30).contains(&primary.as_secs()), "{primary:?}");
        assert_eq!(
            wait(403, &[], "You have exceeded a secondary rate limit"),
            Some(Duration::from_secs(60))
        );
        assert_eq!(wait(429, &[], ""), Some(Duration::from_secs(60)));
        assert_eq!(
            wait(403, &[], "Resource not accessible by integration"),
            None
        );
        assert_eq!(wait(500, &[("retry-after", "1")], ""), None);
    }

    #[test]
    fn a_deleted_fork_is_still_a_fork() {
        let pull = serde_json::json!({
            "number": 3, "state": "open", "user": {"login": "a"},
            "head": {"sha": "abc", "repo": null}, "base": {"repo": {"id": 1}},
            "updated_at": "2019-05-15T15:20:33Z",
        });
        let info = PullInfo::from(read::<Pull>("/pulls/3", pull).unwrap());
        assert!(info.fork);
        assert_eq!(info.updated_at, Some(1_557_933_633));
    }

    /// A webhook's `pull_request` is the object `GET /pulls/{number}` answers.
    fn recorded(name: &str) -> Value {
        let path = format!(
            "{}/tests/fixtures/github/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn a_recorded_pull_request_reads_into_what_previewd_uses() {
        let event = recorded("pull_request.opened");
        let info = PullInfo::from(read::<Pull>("/pulls/2", event["pull_request"].clone()).unwrap());
        assert_eq!(info.number, 2);
        assert!(info.open && !info.fork && !info.merged && !info.draft);
        assert_eq!(info.author, "Codertocat");
        assert_eq!(info.head_sha, event["pull_request"]["head"]["sha"]);
        assert_eq!(info.head_ref, "changes");
        assert_eq!(info.base_ref, "master");
        assert_eq!(info.repo_id, event["repository"]["id"].as_u64().unwrap());
        let merged = recorded("pull_request.closed.merged.fork");
        let info =
            PullInfo::from(read::<Pull>("/pulls/1", merged["pull_request"].clone()).unwrap());
        assert!(!info.open && info.merged && info.fork);
    }

    #[test]
    fn a_recorded_comment_reads_into_id_author_and_body() {
        let event = recorded("issue_comment.created.pull_request");
        let comment: Comment = read("/comments", event["comment"].clone()).unwrap();
        let info = CommentInfo::from(comment);
        assert_eq!(info.id, event["comment"]["id"].as_u64().unwrap());
        assert_eq!(info.author, event["comment"]["user"]["login"]);
    }

    #[test]
    fn recorded_ci_reports_read_into_check_reports() {
        use crate::checks::CheckState;
        let run = recorded("check_run.completed")["check_run"].clone();
        let report = CheckReport::from(read::<CheckRun>("/check-runs", run).unwrap());
        assert_eq!(report.source, Source::CheckRun);
        assert_eq!(report.name, "Octocoders-linter");
        assert_eq!(
            (report.state, report.conclusion.as_str()),
            (CheckState::Succeeded, "success")
        );
        assert_eq!(report.at, 1_557_933_672); // completed_at 2019-05-15T15:21:12Z
        let status = recorded("status");
        let report = CheckReport::from(read::<CommitStatus>("/status", status).unwrap());
        assert_eq!(
            (report.source, report.name.as_str()),
            (Source::Status, "default")
        );
        assert_eq!(report.state, CheckState::Succeeded);
        assert_eq!(report.at, 1_557_933_655); // updated_at 2019-05-15T15:20:55+00:00
        let run = recorded("workflow_run.completed.with-pull-requests")["workflow_run"].clone();
        let report = CheckReport::from(read::<WorkflowRun>("/actions/runs", run).unwrap());
        assert_eq!(report.source, Source::Workflow);
        assert_eq!(report.state, CheckState::Succeeded);
        assert!(report.url.unwrap().ends_with("/actions/runs/289782451"));
    }

    #[test]
    fn a_check_run_still_queued_has_nulls_and_is_pending() {
        let queued = serde_json::json!({
            "name": "build-image", "status": "queued", "conclusion": null,
            "html_url": null, "started_at": null, "completed_at": null,
        });
        let report = CheckReport::from(read::<CheckRun>("/check-runs", queued).unwrap());
        assert_eq!(report.state, crate::checks::CheckState::Pending);
        assert_eq!((report.conclusion.as_str(), report.at), ("queued", 0));
        let unnamed = serde_json::json!({"name": null, "status": null, "conclusion": null,
                                         "html_url": "h", "updated_at": "2020-10-05T16:33:49Z"});
        let report = CheckReport::from(read::<WorkflowRun>("/actions/runs", unnamed).unwrap());
        assert_eq!(report.state, crate::checks::CheckState::Pending);
    }

    #[test]
    fn an_answer_of_another_shape_is_an_error_naming_the_request_never_an_empty_list() {
        let message = serde_json::json!({"message": "Moved Permanently"});
        let err = read::<Vec<Id>>("/repos/o/r/deployments", message).unwrap_err();
        assert!(err.to_string().contains("/repos/o/r/deployments"), "{err}");
        assert!(read::<Pull>("/pulls/1", serde_json::json!({"number": 1})).is_err());
    }

    #[test]
    fn environments_are_percent_encoded() {
        assert_eq!(encode("preview/pr-7"), "preview%2Fpr-7");
    }

    #[test]
    fn unreserved_characters_stay_and_everything_else_is_escaped_byte_by_byte() {
        assert_eq!(encode("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(encode("a b+c&d=e#f"), "a%20b%2Bc%26d%3De%23f");
        assert_eq!(encode("prévu"), "pr%C3%A9vu");
    }
}
