//! What a verified delivery means for previewd's state: a pure decision from the event,
//! the policy and the time, written down later by `intake` in one transaction.

use crate::config::{Config, Gates, Policy, Trigger};
use crate::naming::Names;
use crate::preview::{Desired, EndReason, HistoryKind, PreviewKey};
use crate::webhook::{
    CheckEvent, CommandComment, Delivery, Event, InstallationChange, PrAction, PullRequestEvent,
};

/// How the delivery is recorded and answered: `Accepted` is 202, the others 200.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Ignored,
    Refused,
    /// Only ever stored, never decided here: a delivery whose write failed, to be retried.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Ignored => "ignored",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Accepted, Self::Ignored, Self::Refused, Self::Failed]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    pub outcome: Outcome,
    /// Why, in a few words; stored with the delivery and sent back to GitHub.
    pub detail: String,
    pub change: Change,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Nothing,
    /// A repository outside `[[repos]]`: only a history row.
    Refusal {
        key: PreviewKey,
        actor: String,
    },
    PullRequest(Box<PrChange>),
    Command(CommandComment),
    /// A command for a repository dropped from `[[repos]]`: queued only when the PR has a
    /// live preview (its commands still work, design.md), refused otherwise.
    FrozenCommand(CommandComment),
    Installation(InstallationChange),
    /// A CI result on a commit of a repository in `[[repos]]`, for its `wait_for`.
    Check(CheckEvent),
    /// A push to the default branch of a repository with `database_template`: its template
    /// is rebuilt from `sha` (at most every `template_refresh`).
    TemplateBase {
        repo: crate::preview::RepoName,
        sha: crate::preview::Sha,
        pushed_at: i64,
        by: String,
    },
}

/// The new state of one PR's preview. Applied only if the event is not older than what is
/// already recorded (GitHub does not promise ordering).
#[derive(Debug, Clone, PartialEq)]
pub struct PrChange {
    pub pr: PullRequestEvent,
    /// `None`: only refresh what the PR looks like (title, base), never its preview.
    pub desired: Option<Desired>,
    /// Create the preview row when there is none (false for close, edit, label).
    pub create: bool,
    /// The names a new row records (a live preview keeps its own).
    pub names: Names,
    pub end_reason: Option<EndReason>,
    /// New expiry (Unix seconds) when this event restarts the clock (a push).
    pub expires_at: Option<i64>,
    /// Cap on any expiry: the preview's creation + `max_lifetime`.
    pub max_lifetime_secs: i64,
    /// The event's time, or now when the payload has none.
    pub pr_updated_at: i64,
    /// The history row written when the change applies: what and why.
    pub what: HistoryKind,
    pub reason: String,
    /// The PR carries the repository's `trigger_label`.
    pub labeled: bool,
    /// Why the PR gets no preview of its own accord, as far as the event tells (the stored
    /// row adds a writer's `/preview deploy` and what its files matched: `merge`).
    pub opt_out: Option<OptOut>,
    /// The repository's `paths` decide too: no preview until a listed file matches.
    pub needs_paths: bool,
    /// A label given or taken under `trigger = "label"`: it restarts the clock only of a
    /// preview that did not carry the label.
    pub label_event: bool,
    /// `database_template`: the PR's base commit, which the repository's first template
    /// generation is built from when it has none yet (#16).
    pub template_base: Option<crate::preview::Sha>,
}

/// Why a PR gets no preview of its own accord (`[[repos]]` gates); a writer's `/preview
/// deploy` opts it in past every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptOut {
    /// Its author is in `ignore_authors`.
    Author,
    /// `trigger = "label"`, and the PR does not carry `trigger_label`.
    Label,
    /// `trigger = "comment"`.
    Comment,
    /// `paths` is set and no file of the PR has matched (or its files are not listed yet).
    Paths,
}

impl OptOut {
    /// What the event alone says: the author and the trigger.
    pub fn of(gates: &Gates, author: &str, labeled: bool) -> Option<Self> {
        if gates.ignores(author) {
            return Some(Self::Author);
        }
        match gates.trigger {
            Trigger::Label if !labeled => Some(Self::Label),
            Trigger::Comment => Some(Self::Comment),
            _ => None,
        }
    }

    /// Why a stored PR has no preview of its own accord: the event's reasons, then `paths`
    /// while none of its files matched; none once a writer opted it in.
    pub fn of_stored(
        gates: &Gates,
        author: &str,
        labeled: bool,
        opted_in: bool,
        matched: bool,
    ) -> Option<Self> {
        if opted_in {
            return None;
        }
        Self::of(gates, author, labeled)
            .or((gates.paths.is_some() && !matched).then_some(Self::Paths))
    }
}

pub fn decide(delivery: &Delivery, config: &Config, now: i64) -> Intent {
    let intent = |outcome, detail: String, change| Intent {
        outcome,
        detail,
        change,
    };
    match &delivery.payload {
        Event::Ping => intent(Outcome::Ignored, "pong".into(), Change::Nothing),
        Event::Ignored(why) => intent(Outcome::Ignored, why.clone(), Change::Nothing),
        Event::Installation(change) => intent(
            Outcome::Accepted,
            "installation recorded".into(),
            Change::Installation(change.clone()),
        ),
        Event::PullRequest(pr) => match config.policy_for(&pr.key.repo) {
            // A repository dropped from `[[repos]]` gets no new preview and no new rendering,
            // but its close still tears down what it has (design.md).
            None if matches!(pr.action, PrAction::Closed { .. }) => {
                pull_request(pr, &config.defaults, now)
            }
            None => refuse(&pr.key, &pr.sender),
            Some(policy) => {
                let mut intent = pull_request(pr, policy, now);
                if let Change::PullRequest(change) = &mut intent.change {
                    if config.template_for(&pr.key.repo).is_some() {
                        change.template_base = pr.base_sha.clone();
                    }
                }
                intent
            }
        },
        Event::Push(push) => match (config.template_for(&push.repo), &push.sha) {
            (Some(_), Some(sha)) if push.default_branch => intent(
                Outcome::Accepted,
                "the template database's base moved".into(),
                Change::TemplateBase {
                    repo: push.repo.clone(),
                    sha: sha.clone(),
                    pushed_at: push.pushed_at,
                    by: push.sender.clone(),
                },
            ),
            (Some(_), _) => intent(
                Outcome::Ignored,
                "not a new head of the default branch".into(),
                Change::Nothing,
            ),
            (None, _) => intent(
                Outcome::Ignored,
                format!("{} keeps no template database", push.repo),
                Change::Nothing,
            ),
        },
        Event::Command(command) => match config.policy_for(&command.key.repo) {
            None => intent(
                Outcome::Accepted,
                "command queued for a frozen preview".into(),
                Change::FrozenCommand(command.clone()),
            ),
            Some(_) => intent(
                Outcome::Accepted,
                "command queued".into(),
                Change::Command(command.clone()),
            ),
        },
        // No history row outside `[[repos]]`: CI reports arrive for every job of every repo.
        Event::Check(check) => match config.policy_for(&check.repo) {
            None => intent(
                Outcome::Ignored,
                format!("{} is not in the [[repos]] allow-list", check.repo),
                Change::Nothing,
            ),
            Some(policy) if policy.gates.wait_for.is_empty() => intent(
                Outcome::Ignored,
                format!("{} waits for no check (wait_for)", check.repo),
                Change::Nothing,
            ),
            // Only the names `wait_for` asks for are kept: a repository's other jobs (lint,
            // a matrix of tests) cost one answer, never a row.
            Some(policy)
                if check
                    .report
                    .as_ref()
                    .is_some_and(|r| !policy.gates.wait_for.contains(&r.name)) =>
            {
                intent(
                    Outcome::Ignored,
                    "not a check wait_for names".into(),
                    Change::Nothing,
                )
            }
            Some(_) => intent(
                Outcome::Accepted,
                "check recorded".into(),
                Change::Check(check.clone()),
            ),
        },
    }
}

/// A verified `pull_request` delivery of `pr`, as the server hands it to `decide` (tests).
#[cfg(test)]
fn pr_delivery(pr: PullRequestEvent) -> Delivery {
    Delivery {
        hook_id: String::new(),
        guid: "g".into(),
        event: "pull_request".into(),
        action: None,
        payload: Event::PullRequest(pr),
    }
}

fn refuse(key: &PreviewKey, actor: &str) -> Intent {
    Intent {
        outcome: Outcome::Refused,
        detail: format!("{} is not in the [[repos]] allow-list", key.repo),
        change: Change::Refusal {
            key: key.clone(),
            actor: actor.to_owned(),
        },
    }
}

/// The gate every "deploy this" passes: forks wait for approval (of exactly their head),
/// drafts for review.
pub fn base_gate(fork: bool, approved_head: bool, draft: bool, policy: &Policy) -> Desired {
    if fork && !approved_head {
        Desired::AwaitingApproval
    } else if draft && !policy.deploy_drafts {
        Desired::Draft
    } else {
        Desired::Deployed
    }
}

fn wanted(pr: &PullRequestEvent, policy: &Policy) -> (Desired, String) {
    let short = pr.head_sha.short();
    // Whether a fork's head is the approved one is the stored row's to say (`merge`).
    let gate = base_gate(pr.fork, false, pr.draft, policy);
    let reason = match gate {
        Desired::AwaitingApproval => {
            format!("fork PR at {short}: waits for `/preview approve` from a maintainer")
        }
        Desired::Draft => format!("draft at {short}: deploys when ready for review"),
        _ => format!("deploy {short}"),
    };
    (gate, reason)
}

/// The history row's reason for `change` once merged, the PR then wanting `now_wants`: the
/// gate's word when a gate decided, the event's otherwise.
pub fn history_reason(change: &PrChange, now_wants: Desired) -> String {
    let short = change.pr.head_sha.short();
    match now_wants {
        Desired::OptedOut => {
            let why = match change.opt_out.unwrap_or(OptOut::Paths) {
                OptOut::Author => "its author is in ignore_authors",
                OptOut::Label => "it does not carry the trigger label",
                OptOut::Comment => "trigger = comment: a writer's /preview deploy starts it",
                OptOut::Paths => "paths decide, once its files are listed",
            };
            format!("no preview at {short}: {why}")
        }
        Desired::Absent if change.desired != Some(Desired::Absent) => {
            format!("the trigger label was removed at {short}: tear down")
        }
        _ => change.reason.clone(),
    }
}

fn pull_request(pr: &PullRequestEvent, policy: &Policy, now: i64) -> Intent {
    let secs = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let (gate, gate_reason) = wanted(pr, policy);
    let gates = &policy.gates;
    let labeled = pr.labels.contains(&gates.trigger_label);
    let mut change = PrChange {
        pr: pr.clone(),
        desired: Some(gate),
        create: true,
        names: Names::of(&pr.key, &policy.domain),
        end_reason: None,
        // A push (or a PR coming back) restarts the preview's clock.
        expires_at: Some(now.saturating_add(secs(policy.ttl))),
        max_lifetime_secs: secs(policy.max_lifetime),
        pr_updated_at: pr.updated_at.unwrap_or(now),
        // Each action below names what happened.
        what: HistoryKind::Edited,
        reason: gate_reason,
        labeled,
        opt_out: OptOut::of(gates, &pr.author, labeled),
        needs_paths: gates.paths.is_some(),
        label_event: false,
        template_base: None,
    };
    match pr.action {
        PrAction::Opened => change.what = HistoryKind::Opened,
        PrAction::Reopened => change.what = HistoryKind::Reopened,
        PrAction::Synchronize => change.what = HistoryKind::Pushed,
        PrAction::ReadyForReview => change.what = HistoryKind::ReadyForReview,
        PrAction::ConvertedToDraft => {
            change.what = HistoryKind::ConvertedToDraft;
            change.expires_at = None;
        }
        PrAction::Closed { merged } => {
            let why = if merged {
                EndReason::Merged
            } else {
                EndReason::Closed
            };
            change.what = HistoryKind::Closed;
            change.desired = Some(Desired::Absent);
            change.end_reason = Some(why);
            change.create = false;
            change.expires_at = None;
            change.reason = format!("PR {why}: tear down");
        }
        // Under `trigger = "label"` the trigger label asks for (or ends) a preview, and only
        // on an open PR (GitHub labels closed ones too); other labels are details.
        PrAction::Labeled | PrAction::Unlabeled
            if gates.trigger == Trigger::Label
                && pr.open
                && pr.label.as_deref() == Some(gates.trigger_label.as_str()) =>
        {
            change.label_event = true;
            if pr.action == PrAction::Labeled {
                change.what = HistoryKind::Labeled;
            } else {
                change.what = HistoryKind::Unlabeled;
                change.expires_at = None;
            }
        }
        PrAction::Labeled | PrAction::Unlabeled | PrAction::Edited => {
            change.what = HistoryKind::Edited;
            change.desired = None;
            change.create = false;
            change.expires_at = None;
            change.reason = String::new();
        }
    }
    Intent {
        outcome: Outcome::Accepted,
        detail: format!("{}: {}", change.what, asks_for(change.desired)),
        change: Change::PullRequest(Box::new(change)),
    }
}

/// What the answer to GitHub (and the delivery record) says the PR now asks for, in words.
fn asks_for(desired: Option<Desired>) -> &'static str {
    match desired {
        Some(Desired::Deployed) => "a preview at the head commit",
        Some(Desired::AwaitingApproval) => {
            "no preview until a writer approves this fork's head commit"
        }
        Some(Desired::Draft) => "no preview while a draft",
        Some(Desired::OptedOut) => "no preview until one is asked for",
        Some(Desired::Absent) => "the preview torn down",
        None => "details refreshed",
    }
}

mod merge;
pub use merge::{Ended, StoredPr, admitted, merge};

#[cfg(test)]
mod tests;
