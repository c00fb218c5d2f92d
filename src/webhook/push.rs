//! `push` deliveries, read with minimal borrowed types: a push payload carries every commit
//! (up to 2,048 of them), and previewd needs four fields.

use std::borrow::Cow;

use serde::Deserialize;

use crate::preview::{RepoName, Sha};

/// What a push says, in previewd's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushEvent {
    pub repo: RepoName,
    /// The branch's new head; `None` when the push deleted the branch.
    pub sha: Option<Sha>,
    /// The push moved the repository's default branch.
    pub default_branch: bool,
    /// `repository.pushed_at` (Unix seconds in push payloads): orders pushes, whose
    /// deliveries GitHub does not promise in order.
    pub pushed_at: i64,
    pub sender: String,
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(borrow, rename = "ref")]
    ref_: Cow<'a, str>,
    #[serde(borrow)]
    after: Cow<'a, str>,
    #[serde(default)]
    deleted: bool,
    #[serde(borrow)]
    repository: Repository<'a>,
    #[serde(borrow)]
    sender: Option<Login<'a>>,
}

#[derive(Deserialize)]
struct Repository<'a> {
    #[serde(borrow)]
    full_name: Cow<'a, str>,
    #[serde(borrow)]
    default_branch: Option<Cow<'a, str>>,
    #[serde(default)]
    pushed_at: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Login<'a> {
    #[serde(borrow)]
    login: Cow<'a, str>,
}

pub fn parse(body: &[u8]) -> Result<PushEvent, String> {
    let p: Payload<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let repo: RepoName = p
        .repository
        .full_name
        .parse()
        .map_err(|e| format!("repository.full_name: {e}"))?;
    let default_branch = p
        .repository
        .default_branch
        .as_deref()
        .is_some_and(|branch| p.ref_.strip_prefix("refs/heads/") == Some(branch));
    let sha = if p.deleted {
        None
    } else {
        Some(p.after.parse().map_err(|e| format!("after: {e}"))?)
    };
    // A number in push payloads (other events spell it as a timestamp string).
    let pushed_at = match &p.repository.pushed_at {
        Some(serde_json::Value::Number(n)) => n.as_i64(),
        Some(serde_json::Value::String(text)) => {
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
                .ok()
                .map(time::OffsetDateTime::unix_timestamp)
        }
        _ => None,
    }
    .ok_or("repository.pushed_at is missing")?;
    Ok(PushEvent {
        repo,
        sha,
        default_branch,
        pushed_at,
        sender: p.sender.map(|s| s.login.into_owned()).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORDED: &str = include_str!("../../tests/fixtures/github/push.json");

    #[test]
    fn a_recorded_push_to_the_default_branch_names_its_new_head() {
        let push = parse(RECORDED.as_bytes()).unwrap();
        assert_eq!(push.repo.as_str(), "codertocat/hello-world");
        assert!(push.default_branch);
        assert_eq!(
            push.sha.unwrap().as_str(),
            "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
        );
        assert_eq!(push.sender, "Codertocat");
        assert_eq!(push.pushed_at, 1_557_933_657);
    }

    #[test]
    fn a_push_to_another_branch_or_a_tag_or_a_deletion_moves_no_default_branch() {
        let mut payload: serde_json::Value = serde_json::from_str(RECORDED).unwrap();
        payload["ref"] = "refs/heads/feature".into();
        assert!(
            !parse(payload.to_string().as_bytes())
                .unwrap()
                .default_branch
        );
        payload["ref"] = "refs/tags/master".into();
        assert!(
            !parse(payload.to_string().as_bytes())
                .unwrap()
                .default_branch
        );
        payload["ref"] = "refs/heads/master".into();
        payload["deleted"] = true.into();
        payload["after"] = "0000000000000000000000000000000000000000".into();
        assert_eq!(parse(payload.to_string().as_bytes()).unwrap().sha, None);
        payload["after"] = "not a sha".into();
        payload["deleted"] = false.into();
        assert!(parse(payload.to_string().as_bytes()).is_err());
    }
}
