//! What the fake serves of a PR's files, shaped as GitHub's REST API answers.
//!
//! Tests set the files of PR `number` with `FakeGitHub::set_files` (each `modified`) and
//! add renames with `FakeGitHub::rename`; `Hub::files` holds the entries as GitHub sends
//! them, for anything else.

use axum::extract::{Path, Query, State};
use serde_json::{Value, json};

use super::{FakeGitHub, Params, Shared, page};

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
