//! What the fake serves of a PR's files and of the CI reports on a commit, shaped as
//! GitHub's REST API answers, paged by `per_page` and `page`.
//!
//! Tests set the files of PR `number` with `FakeGitHub::set_files` (each `modified`) and
//! add renames with `FakeGitHub::rename`. They report CI on a commit with
//! `FakeGitHub::check_run`, `commit_status` and `workflow_run`, each stamped a second after
//! the one before. `Hub::files`, `Hub::check_runs`, `Hub::commit_statuses` and
//! `Hub::workflow_runs` hold the entries as GitHub sends them, for anything else.

use std::collections::HashSet;

use axum::extract::{Path, Query, State};
use serde_json::{Value, json};

use super::{FakeGitHub, Hub, Params, Shared, next_id, page};

const REPO: &str = "codertocat/hello-world";

/// GitHub lists at most this many files of a PR ("Responses include a maximum of 3000
/// files"); the rest are never served, whatever page is asked for.
pub const FILE_CAP: usize = 3000;

impl FakeGitHub {
    /// PR `number` touches `files` (each `modified`), replacing what it touched before.
    pub fn set_files(&self, number: u64, files: Vec<String>) {
        let entries = files
            .iter()
            .map(|name| file_entry(name, "modified", None))
            .collect();
        self.hub().files.insert(number, entries);
    }

    /// PR `number` also renames `from` to `to`.
    pub fn rename(&self, number: u64, from: &str, to: &str) {
        let entry = file_entry(to, "renamed", Some(from));
        self.hub().files.entry(number).or_default().push(entry);
    }

    /// A check run `name` on `sha`: `status` `queued`, `in_progress` or `completed` (with a
    /// `conclusion`); completed when it starts if it is completed. Its id.
    pub fn check_run(&self, sha: &str, name: &str, status: &str, conclusion: Option<&str>) -> u64 {
        let mut hub = self.hub();
        let (id, at) = stamp(&mut hub);
        let done = status == "completed";
        let run = json!({
            "id": id,
            "head_sha": sha,
            "node_id": format!("CR_{id}"),
            "external_id": "",
            "url": format!("https://api.github.com/repos/{REPO}/check-runs/{id}"),
            "html_url": format!("https://github.com/{REPO}/runs/{id}"),
            "details_url": format!("https://github.com/{REPO}/runs/{id}"),
            "status": status,
            "conclusion": conclusion,
            "started_at": at,
            "completed_at": if done { json!(at) } else { Value::Null },
            "output": {"title": null, "summary": null, "text": null, "annotations_count": 0,
                       "annotations_url": format!("https://api.github.com/repos/{REPO}/check-runs/{id}/annotations")},
            "name": name,
            "check_suite": {"id": id + 5},
            "app": {"id": 15368, "slug": "github-actions", "name": "GitHub Actions"},
            "pull_requests": [],
        });
        hub.check_runs.entry(sha.into()).or_default().push(run);
        id
    }

    /// A commit status `context` on `sha`: `state` `error`, `failure`, `pending` or
    /// `success`. Its id.
    pub fn commit_status(&self, sha: &str, context: &str, state: &str) -> u64 {
        let mut hub = self.hub();
        let (id, at) = stamp(&mut hub);
        let status = json!({
            "url": format!("https://api.github.com/repos/{REPO}/statuses/{sha}"),
            "avatar_url": "https://github.com/images/error/hubot_happy.gif",
            "id": id,
            "node_id": format!("SC_{id}"),
            "state": state,
            "description": format!("{context} says {state}"),
            "target_url": format!("https://ci.example.com/{REPO}/{id}"),
            "context": context,
            "created_at": at,
            "updated_at": at,
        });
        hub.commit_statuses
            .entry(sha.into())
            .or_default()
            .push(status);
        id
    }

    /// A run of the workflow `name` on `sha`: `status` `queued`, `in_progress` or
    /// `completed` (with a `conclusion`). Its id.
    pub fn workflow_run(
        &self,
        sha: &str,
        name: &str,
        status: &str,
        conclusion: Option<&str>,
    ) -> u64 {
        let mut hub = self.hub();
        let (id, at) = stamp(&mut hub);
        let run = json!({
            "id": id,
            "name": name,
            "node_id": format!("WFR_{id}"),
            "head_branch": "changes",
            "head_sha": sha,
            "path": ".github/workflows/ci.yml",
            "display_title": "Update the README",
            "run_number": id - 1000,
            "event": "pull_request",
            "status": status,
            "conclusion": conclusion,
            "workflow_id": 161335,
            "url": format!("https://api.github.com/repos/{REPO}/actions/runs/{id}"),
            "html_url": format!("https://github.com/{REPO}/actions/runs/{id}"),
            "pull_requests": [],
            "created_at": at,
            "updated_at": at,
            "run_attempt": 1,
            "run_started_at": at,
        });
        hub.workflow_runs.push(run);
        id
    }
}

/// The next id, and the time of entry `id`: 2026-11-29T12:00:00Z and `id - 1000` seconds
/// (`stamped_at` in Unix seconds), so each entry is a second newer than the one before.
fn stamp(hub: &mut Hub) -> (u64, String) {
    let id = next_id(hub);
    let k = id - 1000;
    let at = format!(
        "2026-11-29T{:02}:{:02}:{:02}Z",
        12 + k / 3600,
        k / 60 % 60,
        k % 60
    );
    (id, at)
}

/// The time (Unix seconds) the fake gives the entry it numbered `id`.
pub fn stamped_at(id: u64) -> i64 {
    1_795_910_400 + 12 * 3600 + (id as i64 - 1000)
}

/// The last (newest) of `items` for each value of `key`, oldest first.
fn latest_by(items: &[Value], key: &str) -> Vec<Value> {
    let mut seen = HashSet::new();
    let mut latest: Vec<Value> = items
        .iter()
        .rev()
        .filter(|item| seen.insert(item[key].to_string()))
        .cloned()
        .collect();
    latest.reverse();
    latest
}

/// One entry of "List pull requests files", as GitHub sends it.
pub fn file_entry(filename: &str, status: &str, previous: Option<&str>) -> Value {
    let raw = format!("https://github.com/codertocat/hello-world/raw/ec26c3e/{filename}");
    let mut entry = json!({
        "sha": "bbcd538c8e72b8c175046e27cc8f907076331401",
        "filename": filename,
        "status": status,
        "additions": 103,
        "deletions": 21,
        "changes": 124,
        "blob_url": raw.replace("/raw/", "/blob/"),
        "raw_url": raw,
        "contents_url": format!("https://api.github.com/repos/codertocat/hello-world/contents/{filename}?ref=ec26c3e"),
        "patch": "@@ -132,7 +132,7 @@ module Test @@ -1000,7 +1000,7 @@ module Test",
    });
    if let Some(previous) = previous {
        entry["previous_filename"] = json!(previous);
    }
    entry
}

/// REST: pulls/pulls#list-pull-requests-files: a list, 30 a page unless `per_page` says.
pub(super) async fn list_files(
    State(hub): State<Shared>,
    Path((_, _, number)): Path<(String, String, u64)>,
    Query(params): Params,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let mut files = hub.files.get(&number).cloned().unwrap_or_default();
    files.truncate(FILE_CAP);
    axum::Json(Value::Array(page(files, &params)))
}

/// REST: checks/runs#list-check-runs-for-a-git-reference. `filter=latest` (the default)
/// lists the newest run of each name, `filter=all` every run.
pub(super) async fn list_check_runs(
    State(hub): State<Shared>,
    Path((_, _, sha)): Path<(String, String, String)>,
    Query(params): Params,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let runs = hub.check_runs.get(&sha).cloned().unwrap_or_default();
    let runs = match params.get("filter").map(String::as_str) {
        Some("all") => runs,
        _ => latest_by(&runs, "name"),
    };
    axum::Json(json!({"total_count": runs.len(), "check_runs": page(runs, &params)}))
}

/// REST: commits/statuses#get-the-combined-status-for-a-specific-reference: the newest
/// status of each context, and their combined `state`.
pub(super) async fn combined_status(
    State(hub): State<Shared>,
    Path((owner, repo, sha)): Path<(String, String, String)>,
    Query(params): Params,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let statuses = latest_by(
        hub.commit_statuses.get(&sha).map_or(&[], Vec::as_slice),
        "context",
    );
    let any = |states: &[&str]| {
        statuses
            .iter()
            .any(|s| states.contains(&s["state"].as_str().unwrap_or_default()))
    };
    let state = if any(&["error", "failure"]) {
        "failure"
    } else if statuses.is_empty() || any(&["pending"]) {
        "pending"
    } else {
        "success"
    };
    axum::Json(json!({
        "state": state,
        "sha": sha,
        "total_count": statuses.len(),
        "statuses": page(statuses, &params),
        "repository": {"id": 1296269, "full_name": format!("{owner}/{repo}"), "private": false},
        "commit_url": format!("https://api.github.com/repos/{owner}/{repo}/commits/{sha}"),
        "url": format!("https://api.github.com/repos/{owner}/{repo}/commits/{sha}/status"),
    }))
}

/// REST: actions/workflow-runs#list-workflow-runs-for-a-repository, `head_sha` filtering.
pub(super) async fn list_workflow_runs(
    State(hub): State<Shared>,
    Query(params): Params,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let runs: Vec<Value> = hub
        .workflow_runs
        .iter()
        .rev() // newest first, as GitHub lists them
        .filter(|r| {
            params
                .get("head_sha")
                .is_none_or(|sha| r["head_sha"] == sha.as_str())
        })
        .cloned()
        .collect();
    axum::Json(json!({"total_count": runs.len(), "workflow_runs": page(runs, &params)}))
}
