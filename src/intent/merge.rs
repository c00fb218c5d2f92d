//! How a PR change merges into the preview stored for it, pure: every case the writer meets
//! (replays, closes, a fork's approved head, drafts, a push restarting the clock) is a unit
//! test here, and `db::apply_pr_change` reads, merges and writes in the writer's one
//! transaction.

use super::{OptOut, PrChange};
use crate::preview::{Desired, EndReason};

/// The columns of a PR's stored preview that a PR change reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPr {
    pub repo_id: i64,
    pub installation_id: Option<i64>,
    pub title: String,
    pub author: String,
    pub head_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    pub fork: bool,
    pub draft: bool,
    pub desired: Desired,
    pub end_reason: Option<EndReason>,
    /// Read only: a fork's approved head (set by `/preview approve`).
    pub approved_sha: Option<String>,
    /// GitHub's time of the newest event that moved the preview's state.
    pub pr_updated_at: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub expires_at: i64,
    /// The event time at which the head SHA last changed.
    pub head_changed_at: i64,
    /// Written only with a new row: a live preview keeps the names it was created with.
    pub names: Option<String>,
    /// The PR carries `trigger_label`.
    pub labeled: bool,
    /// Read only: the writer whose `/preview deploy` opted the PR in past every gate.
    pub deploy_by: Option<String>,
    /// Read only: the first of the PR's files `paths` matched (then it keeps its preview).
    pub paths_file: Option<String>,
}

impl StoredPr {
    /// Whether this merged state is news to the reconciler after `before`: anything but the
    /// event's time, the row's write time and a restarted clock. GitHub's `synchronize` of a
    /// head already known changes only those, and costs the reconciler nothing; the new
    /// expiry reaches it at its next full pass (`reconcile::RESYNC`). A redelivery changes
    /// none of them (`merge`).
    pub fn moves_preview(&self, before: Option<&StoredPr>) -> bool {
        let Some(before) = before else {
            return true;
        };
        let unmoved = StoredPr {
            pr_updated_at: self.pr_updated_at,
            updated_at: self.updated_at,
            expires_at: self.expires_at,
            ..before.clone()
        };
        unmoved != *self
    }

    /// Whether the PR has a preview, running or paused (a draft, a fork's unapproved push),
    /// as opposed to none yet or one ending.
    fn has_preview(&self) -> bool {
        Self::wants_one(self.desired)
    }

    fn wants_one(desired: Desired) -> bool {
        matches!(
            desired,
            Desired::Deployed | Desired::AwaitingApproval | Desired::Draft
        )
    }
}

/// What a PR that would be `base` (forks and drafts decided) wants once the repository's
/// gates have their say, and why it ends if it does. A writer's `/preview deploy` opts it in
/// for good; otherwise a gate keeps a PR without a preview from getting one, but only the
/// label takes one away (`trigger = "label"`: the preview lives while the label does): a push
/// that stops touching `paths`, or a trigger changed in the file, leaves a live preview be.
pub fn admitted(
    base: Desired,
    change: &PrChange,
    old: Option<&StoredPr>,
) -> (Desired, Option<EndReason>) {
    let opted_in = old.is_some_and(|o| o.deploy_by.is_some());
    let matched = old.is_some_and(|o| o.paths_file.is_some());
    let why = match change.opt_out {
        _ if opted_in => None,
        Some(why) => Some(why),
        None => (change.needs_paths && !matched).then_some(OptOut::Paths),
    };
    let has_preview = old.is_some_and(StoredPr::has_preview);
    // The trigger label taken away ends the preview, whoever opted it in.
    let unlabeled = change.label_event && !change.labeled && old.is_some_and(|o| o.labeled);
    if unlabeled && has_preview {
        return (Desired::Absent, Some(EndReason::Unlabeled));
    }
    // One being torn down has no preview to keep but Applications still to delete: it stays
    // ending (`OptedOut` would tell the reconciler there is nothing to tear down).
    let ending = old.is_some_and(|o| o.desired == Desired::Absent);
    match why {
        None => (base, None),
        Some(OptOut::Label) if has_preview => (Desired::Absent, Some(EndReason::Unlabeled)),
        Some(_) if has_preview => (base, None),
        Some(_) if ending => (Desired::Absent, None),
        Some(_) => (Desired::OptedOut, None),
    }
}

/// A PR's end as `closed_prs` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// The event time of the newest close (0 when only an end on purpose is recorded).
    pub closed_at: i64,
    /// The event time its preview was last ended on purpose (destroyed, expired, evicted).
    pub ended_at: Option<i64>,
}

/// The stored preview after `change`, or `None` when the change does not apply: an older
/// event than the one recorded, a change that only updates with nothing to update, or a
/// preview to create that a newer close (or an end on purpose not older than the event)
/// forbids. `stored` is the row as it is; `ended` the PR's `closed_prs` record.
pub fn merge(
    stored: Option<&StoredPr>,
    ended: Option<&Ended>,
    change: &PrChange,
    now: i64,
) -> Option<StoredPr> {
    let new = if change.create {
        created(stored, ended, change, now)
    } else {
        updated(stored?, change, now)
    }?;
    // The recorded event again, bringing nothing new: GitHub's redelivery, or a replay of
    // a captured delivery under a fresh id (the signature does not cover the delivery's
    // id). It restarts no clock: a replay must not keep a preview from expiring, nor from
    // being the first evicted (the earliest expiry, `db::eviction_victim`).
    match stored {
        Some(old) if change.pr_updated_at <= old.pr_updated_at && !new.moves_preview(Some(old)) => {
            Some(old.clone())
        }
        _ => Some(new),
    }
}

/// A change that (re)creates the preview (opened, reopened, pushed, ready, draft).
fn created(
    stored: Option<&StoredPr>,
    ended: Option<&Ended>,
    change: &PrChange,
    now: i64,
) -> Option<StoredPr> {
    let at = change.pr_updated_at;
    // Not over a newer close, nor over an end on purpose that is not older than the event:
    // deliveries carry no signed time of their own, so a replay is only ever as new as the
    // PR it captured.
    if ended.is_some_and(|e| e.closed_at > at || e.ended_at.is_some_and(|end| end >= at)) {
        return None;
    }
    // A change that creates always says what it wants (`intent::pull_request`).
    let wanted = change.desired?;
    let pr = &change.pr;
    let head_sha = pr.head_sha.as_str();
    let Some(old) = stored else {
        let (desired, end_reason) = admitted(wanted, change, None);
        return Some(StoredPr {
            repo_id: pr.repo_id as i64,
            installation_id: pr.installation_id.map(|id| id as i64),
            title: pr.title.clone(),
            author: pr.author.clone(),
            head_sha: head_sha.to_owned(),
            head_ref: pr.head_ref.clone(),
            base_ref: pr.base_ref.clone(),
            fork: pr.fork,
            draft: pr.draft,
            desired,
            end_reason: change.end_reason.or(end_reason),
            approved_sha: None,
            pr_updated_at: at,
            created_at: now,
            updated_at: now,
            expires_at: change
                .expires_at
                .unwrap_or(now.saturating_add(change.max_lifetime_secs)),
            head_changed_at: at,
            names: Some(change.names.to_json()),
            labeled: change.labeled,
            deploy_by: None,
            paths_file: None,
        });
    };
    if at < old.pr_updated_at {
        return None;
    }
    // A fork PR whose new head is the approved one stays deployable.
    let base =
        if wanted == Desired::AwaitingApproval && old.approved_sha.as_deref() == Some(head_sha) {
            Desired::Deployed
        } else {
            wanted
        };
    let (desired, end_reason) = admitted(base, change, Some(old));
    // A PR that gets its preview only now (a label, a ready draft of an opted-in PR) is a
    // new preview: its lifetime starts now, not when previewd first heard of the PR.
    let born = old.desired == Desired::OptedOut && StoredPr::wants_one(desired);
    let created_at = if born { now } else { old.created_at };
    // A push restarts the clock but never shortens a later expiry (a keep, an extend), nor
    // goes past the preview's lifetime; a label restarts it only when it is the new one.
    let restart = change
        .expires_at
        .filter(|_| !(change.label_event && old.labeled));
    let lifetime_end = created_at.saturating_add(change.max_lifetime_secs);
    let expires_at = match restart {
        Some(new) if born => new.min(lifetime_end),
        Some(new) => old.expires_at.max(new.min(lifetime_end)),
        None if born => lifetime_end,
        None => old.expires_at,
    };
    // Still ending: why it ends stays what it was.
    let end_reason = match change.end_reason.or(end_reason) {
        None if desired == Desired::Absent => old.end_reason,
        why => why,
    };
    Some(StoredPr {
        repo_id: pr.repo_id as i64,
        desired,
        end_reason,
        pr_updated_at: at,
        expires_at,
        created_at,
        ..details(old, change, now)
    })
}

/// A change to a preview that only updates it (a close, an edit, a label).
fn updated(old: &StoredPr, change: &PrChange, now: i64) -> Option<StoredPr> {
    if old.pr_updated_at > change.pr_updated_at {
        return None;
    }
    let mut new = details(old, change, now);
    // Details alone (an edit, a label) do not move the event clock: an older state change
    // that arrives after them must still apply.
    if let Some(desired) = change.desired {
        new.desired = desired;
        new.end_reason = change.end_reason;
        new.pr_updated_at = change.pr_updated_at;
    }
    Some(new)
}

/// What every applied change refreshes: what the PR looks like now.
fn details(old: &StoredPr, change: &PrChange, now: i64) -> StoredPr {
    let pr = &change.pr;
    let head_sha = pr.head_sha.as_str();
    StoredPr {
        installation_id: pr
            .installation_id
            .map(|id| id as i64)
            .or(old.installation_id),
        title: pr.title.clone(),
        author: pr.author.clone(),
        head_changed_at: if head_sha != old.head_sha {
            change.pr_updated_at
        } else {
            old.head_changed_at
        },
        head_sha: head_sha.to_owned(),
        head_ref: pr.head_ref.clone(),
        base_ref: pr.base_ref.clone(),
        fork: pr.fork,
        draft: pr.draft,
        labeled: change.labeled,
        updated_at: now,
        ..old.clone()
    }
}

#[cfg(test)]
mod tests;
