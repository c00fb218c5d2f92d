//! GitHub's answers read at the edge: rate-limit headers, error messages, pull requests as
//! previewd's `PullInfo`, and the query encoding previewd's requests need.

use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Deserialize;
use serde_json::Value;

use super::{GitHubError, PullInfo};

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

pub(super) fn pull_info(pull: &Value) -> Option<PullInfo> {
    let head_repo = pull["head"]["repo"]["id"].as_u64();
    let base_repo = pull["base"]["repo"]["id"].as_u64()?;
    Some(PullInfo {
        number: u32::try_from(pull["number"].as_u64()?).ok()?,
        open: pull["state"].as_str()? == "open",
        title: pull["title"].as_str().unwrap_or_default().to_owned(),
        author: pull["user"]["login"].as_str()?.to_owned(),
        head_sha: pull["head"]["sha"].as_str()?.to_owned(),
        head_ref: pull["head"]["ref"].as_str().unwrap_or_default().to_owned(),
        base_ref: pull["base"]["ref"].as_str().unwrap_or_default().to_owned(),
        // A deleted fork (`head.repo: null`) is still someone else's code.
        fork: head_repo != Some(base_repo),
        draft: pull["draft"].as_bool().unwrap_or(false),
        merged: pull["merged_at"].is_string(),
        updated_at: pull["updated_at"].as_str().and_then(unix_seconds),
        repo_id: base_repo,
    })
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

pub(super) fn text(value: &Value, field: &str, path: &str) -> Result<String, GitHubError> {
    value[field]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| shape(path, &format!("no {field}")))
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
        let info = pull_info(&pull).unwrap();
        assert!(info.fork);
        assert_eq!(info.updated_at, Some(1_557_933_633));
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
