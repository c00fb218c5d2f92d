//! GitHub webhook deliveries at the edge: the signature check and the conversion of
//! octocrab's payload types into previewd's own events. Pure: no I/O, no clock.

use octocrab::models::webhook_events::{WebhookEvent, verification};
use serde::Deserialize;

use crate::checks::CheckReport;
use crate::preview::{MAX_LABELS, PreviewKey, RepoName, Sha};
use secrecy::{ExposeSecret, SecretString};

/// Why a delivery was turned away. Every variant is the sender's problem (4xx).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Rejection {
    #[error(
        "no webhook secret is configured (set github.webhook_secret, or the environment variable \
         PREVIEWD_GITHUB_WEBHOOK_SECRET), so no delivery can be verified"
    )]
    NoSecret,
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("header {0} is not valid: {1}")]
    BadHeader(&'static str, &'static str),
    #[error("signature does not verify: {0}")]
    BadSignature(String),
    #[error("content type {0:?} is not JSON; set the webhook's content type to application/json")]
    NotJson(String),
    #[error("body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("{event} payload does not have the expected shape: {message}")]
    Malformed { event: String, message: String },
}

/// The delivery headers previewd reads, as sent.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    pub event: Option<&'a str>,
    pub guid: Option<&'a str>,
    pub hook_id: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

/// A delivery that passed the checks: who sent it (for dedup) and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    /// `X-GitHub-Hook-ID`, empty when absent; a repo hook and an App may share a GUID.
    pub hook_id: String,
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub payload: Event,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    PullRequest(PullRequestEvent),
    Command(CommandComment),
    Ping,
    Installation(InstallationChange),
    /// A CI result on a commit (`check_run`, `check_suite`, `status`, `workflow_run`).
    Check(CheckEvent),
    /// A push: a new head of a branch (#16 rebuilds templates from the default branch's).
    Push(push::PushEvent),
    /// Verified and understood, but nothing for previewd to do; the text says why.
    Ignored(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrAction {
    Opened,
    Reopened,
    Synchronize,
    ReadyForReview,
    ConvertedToDraft,
    Closed { merged: bool },
    Labeled,
    Unlabeled,
    Edited,
}

/// What a `pull_request` delivery says about the PR, in previewd's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct PullRequestEvent {
    pub action: PrAction,
    pub key: PreviewKey,
    pub repo_id: u64,
    pub installation_id: Option<u64>,
    pub title: String,
    pub author: String,
    pub head_sha: Sha,
    pub head_ref: String,
    pub base_ref: String,
    /// The base branch's commit (`pull_request.base.sha`) when the base is the repository's
    /// default branch: what a repository's first template generation is built from (#16).
    pub base_sha: Option<Sha>,
    /// Head repository differs from the base, or is gone: untrusted code.
    pub fork: bool,
    pub draft: bool,
    /// The PR's labels once this event's own label change is applied (`[[repos]] trigger =
    /// "label"`); at most [`MAX_LABELS`].
    pub labels: Vec<String>,
    /// The label a `labeled` or `unlabeled` delivery gives or takes.
    pub label: Option<String>,
    /// `pull_request.state` is open (GitHub labels and edits closed PRs too).
    pub open: bool,
    /// `pull_request.updated_at` (Unix seconds), to drop deliveries that arrive out of order.
    pub updated_at: Option<i64>,
    pub sender: String,
}

/// `labels` as a `labeled` or `unlabeled` delivery leaves them: the event's own label
/// counts over the list beside it (recorded payloads disagree on whether the list already
/// shows the change).
pub fn labels_after(mut labels: Vec<String>, action: PrAction, label: Option<&str>) -> Vec<String> {
    match (action, label) {
        (PrAction::Labeled, Some(label)) if !labels.iter().any(|l| l == label) => {
            labels.push(label.to_owned());
        }
        (PrAction::Unlabeled, Some(label)) => labels.retain(|l| l != label),
        _ => {}
    }
    labels.truncate(MAX_LABELS);
    labels
}

impl PullRequestEvent {
    /// The preview this PR would have on `cluster`.
    pub fn preview(&self, cluster: &str) -> crate::preview::Preview {
        crate::preview::Preview {
            key: self.key.clone(),
            head_sha: self.head_sha.clone(),
            author: self.author.clone(),
            title: self.title.clone(),
            fork: self.fork,
            approved_sha: None,
            cluster: cluster.to_owned(),
            seed_generation: 1,
            redeploy_generation: 0,
            image_ready: true,
            template: None,
            asleep: false,
        }
    }
}

/// What a CI delivery says about one commit. It names no PR (a status never does): the
/// commit is matched with the PRs whose head it is.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckEvent {
    pub repo: RepoName,
    pub installation_id: Option<u64>,
    pub sha: Sha,
    /// None: a check suite completed — look the commit's checks up (a suite names no check)
    pub report: Option<CheckReport>,
}

/// A new PR comment holding a `/preview` command line (parsed later, by the reconciler).
#[derive(Debug, Clone, PartialEq)]
pub struct CommandComment {
    pub key: PreviewKey,
    pub installation_id: Option<u64>,
    pub comment_id: u64,
    /// `comment.created_at` (Unix seconds, GitHub's clock).
    pub commented_at: Option<i64>,
    pub actor: String,
    pub association: String,
    pub line: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InstallationChange {
    /// Created, unsuspended or accepted new permissions: the installation serves these repos.
    Present {
        id: u64,
        account: String,
        repos: Vec<RepoName>,
    },
    /// Deleted or suspended: it serves nothing.
    Gone {
        id: u64,
    },
    ReposAdded {
        id: u64,
        account: String,
        repos: Vec<RepoName>,
    },
    ReposRemoved {
        id: u64,
        repos: Vec<RepoName>,
    },
}

const MAX_GUID: usize = 100;

/// The checks the headers alone decide, made before the body is read: no secret, a
/// missing event, delivery or signature header, a malformed GUID or hook ID.
pub fn screen<'a>(
    secret: Option<&'a SecretString>,
    headers: Headers<'a>,
) -> Result<Screened<'a>, Rejection> {
    // With no secret nothing can be verified: every delivery is a 401, whatever else is wrong.
    let secret = secret.ok_or(Rejection::NoSecret)?;
    let event = headers
        .event
        .ok_or(Rejection::MissingHeader("X-GitHub-Event"))?;
    let guid = headers
        .guid
        .ok_or(Rejection::MissingHeader("X-GitHub-Delivery"))?;
    if guid.is_empty() || guid.len() > MAX_GUID || !guid.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Rejection::BadHeader(
            "X-GitHub-Delivery",
            "expected a GUID of printable ASCII",
        ));
    }
    let hook_id = headers.hook_id.unwrap_or("");
    if hook_id.len() > 20 || !hook_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Rejection::BadHeader(
            "X-GitHub-Hook-ID",
            "expected a number",
        ));
    }
    let signature = headers
        .signature
        .ok_or(Rejection::MissingHeader("X-Hub-Signature-256"))?;
    Ok(Screened {
        secret,
        event,
        guid,
        hook_id,
        signature,
    })
}

/// What [`screen`] let through: the secret and the headers that must be present.
#[derive(Debug, Clone, Copy)]
pub struct Screened<'a> {
    secret: &'a SecretString,
    event: &'a str,
    guid: &'a str,
    hook_id: &'a str,
    signature: &'a str,
}

/// Checks headers and signature, then parses. `secret == None` refuses everything.
pub fn receive(
    secret: Option<&SecretString>,
    headers: Headers<'_>,
    body: &[u8],
) -> Result<Delivery, Rejection> {
    let Screened {
        secret,
        event,
        guid,
        hook_id,
        signature,
    } = screen(secret, headers)?;
    verify(secret, signature, body)?;
    if let Some(content_type) = headers.content_type {
        let essence = content_type.split(';').next().unwrap_or("").trim();
        if !essence.eq_ignore_ascii_case("application/json") {
            return Err(Rejection::NotJson(content_type.to_owned()));
        }
    }
    let (action, payload) = parse(event, body)?;
    Ok(Delivery {
        hook_id: hook_id.to_owned(),
        guid: guid.to_owned(),
        event: event.to_owned(),
        action,
        payload,
    })
}

/// HMAC-SHA256 of the raw body against `sha256=<hex>`, in constant time.
pub fn verify(secret: &SecretString, signature: &str, body: &[u8]) -> Result<(), Rejection> {
    verification::verify_signature(signature, secret.expose_secret(), body)
        .map_err(|e| Rejection::BadSignature(e.to_string()))
}

/// Just enough of any payload to route it: `action`, when there is one.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    action: Option<std::borrow::Cow<'a, str>>,
}

/// Parses a verified body. Events and actions previewd does not act on are `Ignored`
/// without a full parse, so a new action string from GitHub never breaks intake.
pub fn parse(event: &str, body: &[u8]) -> Result<(Option<String>, Event), Rejection> {
    // Most deliveries are pull requests: their minimal type reads `action` too, so a
    // well-formed one is read once. Anything else (a new action, a malformed payload) takes
    // the general path below, which decides between `Ignored` and a rejection.
    if event == "pull_request" {
        if let Ok((action, payload)) = pull::pull_request(body) {
            return Ok((Some(action), payload));
        }
    }
    let envelope: Envelope<'_> =
        serde_json::from_slice(body).map_err(|e| Rejection::InvalidJson(e.to_string()))?;
    let action = envelope.action.map(|a| a.into_owned());
    let known = match (event, action.as_deref()) {
        ("ping", _) => true,
        ("push", _) => true,
        ("pull_request", Some(a)) => matches!(
            a,
            "opened"
                | "reopened"
                | "synchronize"
                | "ready_for_review"
                | "converted_to_draft"
                | "closed"
                | "labeled"
                | "unlabeled"
                | "edited"
        ),
        ("issue_comment", Some(a)) => a == "created",
        ("installation", Some(a)) => matches!(
            a,
            "created" | "deleted" | "suspend" | "unsuspend" | "new_permissions_accepted"
        ),
        ("installation_repositories", Some(a)) => matches!(a, "added" | "removed"),
        // The actions that carry a new state of the run. `rerequested` leaves the run as it
        // was (the owning App answers with a new run, which arrives as `created`) and reaches
        // only that App; `requested_action` is a button of the App's own.
        ("check_run", Some(a)) => matches!(a, "created" | "completed"),
        // Only a completed suite says anything: then its runs are looked up. `requested` and
        // `rerequested` ask the suite's App to start runs.
        ("check_suite", Some(a)) => a == "completed",
        // Statuses have no action: each delivery is a new state of one context.
        ("status", _) => true,
        ("workflow_run", Some(a)) => matches!(a, "requested" | "in_progress" | "completed"),
        _ => false,
    };
    if !known {
        let what = action
            .as_deref()
            .map_or(event.to_owned(), |a| format!("{event}.{a}"));
        return Ok((
            action,
            Event::Ignored(format!("previewd does not act on {what}")),
        ));
    }
    let malformed = |message: String| Rejection::Malformed {
        event: event.to_owned(),
        message,
    };
    if matches!(
        event,
        "check_run" | "check_suite" | "status" | "workflow_run"
    ) {
        let check = ci::convert(event, body).map_err(malformed)?;
        return Ok((action, Event::Check(check)));
    }
    match event {
        "push" => return Ok((action, Event::Push(push::parse(body).map_err(malformed)?))),
        "pull_request" => {
            let (_, payload) = pull::pull_request(body).map_err(malformed)?;
            return Ok((action, payload));
        }
        "issue_comment" => return Ok((action, pull::issue_comment(body).map_err(malformed)?)),
        _ => {}
    }
    let parsed = WebhookEvent::try_from_header_and_body(event, body)
        .map_err(|e| malformed(e.to_string()))?;
    let payload = convert(parsed).map_err(malformed)?;
    Ok((action, payload))
}

mod ci;
mod convert;
mod pull;
pub mod push;
use convert::convert;

#[cfg(test)]
mod tests;
