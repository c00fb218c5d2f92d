//! `pull_request` and `issue_comment` deliveries as previewd's events, from minimal types.
//!
//! These are most of what GitHub sends (26–31 KB each). Only the fields previewd keeps are
//! read, borrowed from the body where they hold no escapes: octocrab's full models built
//! every nested object and parsed every URL, two thirds of the intake's parse time (issue
//! #17's profile). The test `minimal_types_read_what_octocrabs_models_read` holds the two to
//! the same answers on every recorded payload.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::IgnoredAny;

use super::{CommandComment, Event, PrAction, PullRequestEvent, labels_after};
use crate::preview::{MAX_LABELS, PreviewKey};

#[derive(Deserialize)]
struct Login<'a> {
    #[serde(borrow)]
    login: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Installation {
    id: u64,
}

#[derive(Deserialize)]
struct Repository<'a> {
    #[serde(borrow, default)]
    full_name: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct PullRequestPayload<'a> {
    #[serde(borrow)]
    action: Cow<'a, str>,
    number: u64,
    #[serde(borrow)]
    pull_request: PullRequest<'a>,
    #[serde(borrow, default)]
    label: Option<Label<'a>>,
    #[serde(borrow, default)]
    repository: Option<Repository<'a>>,
    #[serde(default)]
    installation: Option<Installation>,
    #[serde(borrow, default)]
    sender: Option<Login<'a>>,
}

#[derive(Deserialize)]
struct PullRequest<'a> {
    #[serde(borrow, default)]
    title: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    user: Option<Login<'a>>,
    #[serde(borrow)]
    head: Branch<'a>,
    #[serde(borrow)]
    base: Branch<'a>,
    #[serde(default)]
    draft: Option<bool>,
    #[serde(default)]
    merged: Option<bool>,
    #[serde(borrow, default)]
    labels: Option<Vec<Label<'a>>>,
    #[serde(borrow, default)]
    state: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    updated_at: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Branch<'a> {
    #[serde(borrow, rename = "ref")]
    ref_field: Cow<'a, str>,
    #[serde(borrow)]
    sha: Cow<'a, str>,
    #[serde(borrow, default)]
    repo: Option<BranchRepo<'a>>,
}

#[derive(Deserialize)]
struct BranchRepo<'a> {
    id: u64,
    #[serde(borrow, default)]
    full_name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    default_branch: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Label<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

/// Converts a `pull_request` delivery; also its action, as sent. An action previewd does not
/// act on is an error here ([`super::parse`] then answers `Ignored`).
pub(super) fn pull_request(body: &[u8]) -> Result<(String, Event), String> {
    let p: PullRequestPayload<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let pr = &p.pull_request;
    let action = match p.action.as_ref() {
        "opened" => PrAction::Opened,
        "reopened" => PrAction::Reopened,
        "synchronize" => PrAction::Synchronize,
        "ready_for_review" => PrAction::ReadyForReview,
        "converted_to_draft" => PrAction::ConvertedToDraft,
        "closed" => PrAction::Closed {
            merged: pr.merged.unwrap_or(false),
        },
        "labeled" => PrAction::Labeled,
        "unlabeled" => PrAction::Unlabeled,
        "edited" => PrAction::Edited,
        other => return Err(format!("unexpected action {other:?}")),
    };
    let base_repo = pr
        .base
        .repo
        .as_ref()
        .ok_or("pull_request.base.repo is missing")?;
    let full_name = p
        .repository
        .as_ref()
        .and_then(|r| r.full_name.as_deref())
        .or(base_repo.full_name.as_deref())
        .ok_or("repository.full_name is missing")?;
    let head_repo_id = pr.head.repo.as_ref().map(|r| r.id);
    let updated_at = pr
        .updated_at
        .as_deref()
        .map(|t| unix_seconds("pull_request.updated_at", t))
        .transpose()?;
    let label = p.label.as_ref().map(|l| l.name.as_ref());
    let event = Event::PullRequest(PullRequestEvent {
        action,
        key: PreviewKey::new(
            full_name.parse().map_err(|e| format!("{e}"))?,
            pr_number(p.number)?,
        ),
        repo_id: base_repo.id,
        installation_id: p.installation.as_ref().map(|i| i.id),
        title: pr.title.as_deref().unwrap_or_default().to_owned(),
        author: pr
            .user
            .as_ref()
            .map(|u| u.login.clone().into_owned())
            .unwrap_or_default(),
        head_sha: pr
            .head
            .sha
            .parse()
            .map_err(|e| format!("pull_request.head.sha: {e}"))?,
        head_ref: pr.head.ref_field.clone().into_owned(),
        base_ref: pr.base.ref_field.clone().into_owned(),
        // Only a PR into the default branch names its head: a PR into an old release
        // branch must not give the template (which every later preview clones) its base.
        base_sha: base_repo
            .default_branch
            .as_deref()
            .filter(|branch| *branch == pr.base.ref_field)
            .and_then(|_| pr.base.sha.parse().ok()),
        fork: head_repo_id != Some(base_repo.id),
        draft: pr.draft.unwrap_or(false),
        labels: labels_after(
            pr.labels
                .iter()
                .flatten()
                .take(MAX_LABELS)
                .map(|l| l.name.clone().into_owned())
                .collect(),
            action,
            label,
        ),
        label: label.map(str::to_owned),
        open: pr.state.as_deref() != Some("closed"),
        updated_at,
        sender: p.sender.map(|s| s.login.into_owned()).unwrap_or_default(),
    });
    Ok((p.action.into_owned(), event))
}

#[derive(Deserialize)]
struct IssueCommentPayload<'a> {
    issue: Issue,
    #[serde(borrow)]
    comment: Comment<'a>,
    #[serde(borrow, default)]
    repository: Option<Repository<'a>>,
    #[serde(default)]
    installation: Option<Installation>,
}

#[derive(Deserialize)]
struct Issue {
    number: u64,
    /// Present (an object) only when the issue is a pull request.
    #[serde(default)]
    pull_request: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Comment<'a> {
    id: u64,
    #[serde(borrow, default)]
    body: Option<Cow<'a, str>>,
    #[serde(borrow)]
    user: User<'a>,
    #[serde(borrow)]
    created_at: Cow<'a, str>,
    #[serde(borrow, default)]
    author_association: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct User<'a> {
    #[serde(borrow)]
    login: Cow<'a, str>,
    #[serde(borrow, rename = "type")]
    kind: Cow<'a, str>,
}

/// Converts an `issue_comment.created` delivery: a command, or why it is none.
pub(super) fn issue_comment(body: &[u8]) -> Result<Event, String> {
    let c: IssueCommentPayload<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if c.issue.pull_request.is_none() {
        return Ok(Event::Ignored(
            "comment on an issue, not a pull request".into(),
        ));
    }
    let text = c.comment.body.as_deref().unwrap_or("");
    // Bots (our App among them) and our own words (a token acts as a plain user).
    if c.comment.user.kind == "Bot" || text.contains("<!-- previewd:") {
        return Ok(Event::Ignored(format!(
            "comment by bot {}",
            c.comment.user.login
        )));
    }
    let Some(line) = crate::command::find_line(text) else {
        return Ok(Event::Ignored("comment holds no /preview command".into()));
    };
    let full_name = c
        .repository
        .as_ref()
        .and_then(|r| r.full_name.as_deref())
        .ok_or("repository.full_name is missing")?;
    Ok(Event::Command(CommandComment {
        key: PreviewKey::new(
            full_name.parse().map_err(|e| format!("{e}"))?,
            pr_number(c.issue.number)?,
        ),
        installation_id: c.installation.as_ref().map(|i| i.id),
        comment_id: c.comment.id,
        commented_at: Some(unix_seconds("comment.created_at", &c.comment.created_at)?),
        actor: c.comment.user.login.into_owned(),
        association: association(c.comment.author_association.as_deref()),
        line,
    }))
}

/// GitHub's `author_association` words; anything else reads as `NONE`, the least trusted,
/// so a word GitHub adds later never grants more than it should.
fn association(word: Option<&str>) -> String {
    const KNOWN: [&str; 8] = [
        "COLLABORATOR",
        "CONTRIBUTOR",
        "FIRST_TIMER",
        "FIRST_TIME_CONTRIBUTOR",
        "MANNEQUIN",
        "MEMBER",
        "NONE",
        "OWNER",
    ];
    word.filter(|w| KNOWN.contains(w))
        .unwrap_or("NONE")
        .to_owned()
}

pub(super) fn pr_number(number: u64) -> Result<u32, String> {
    u32::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{number} is not a pull request number"))
}

fn unix_seconds(field: &str, text: &str) -> Result<i64, String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(time::OffsetDateTime::unix_timestamp)
        .map_err(|e| format!("{field} {text:?} is not an RFC 3339 time: {e}"))
}
