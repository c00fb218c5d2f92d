//! Each case the writer's merge of a PR change handles, as a sentence.

use super::*;
use crate::config::Config;
use crate::intent::{Change, decide};
use crate::preview::Sha;
use crate::webhook::{PrAction, PullRequestEvent};

const NOW: i64 = 50_000;
const HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
const NEXT: &str = "1111111111111111111111111111111111111111";
const TTL: i64 = 72 * 3600;
const LIFETIME: i64 = 14 * 86_400;

fn event(action: PrAction, at: i64) -> PullRequestEvent {
    PullRequestEvent {
        action,
        key: "octo/app#7".parse().unwrap(),
        repo_id: 1,
        installation_id: Some(9),
        title: "Add search".into(),
        author: "alice".into(),
        head_sha: HEAD.parse::<Sha>().unwrap(),
        head_ref: "search".into(),
        base_ref: "main".into(),
        base_sha: None,
        fork: false,
        draft: false,
        labels: vec![],
        label: None,
        open: true,
        updated_at: Some(at),
        sender: "alice".into(),
    }
}

/// The change intake decides for `pr`, as the server makes it.
fn change_of(pr: PullRequestEvent) -> PrChange {
    change_under("", pr)
}

/// The same, under the configuration `toml`.
fn change_under(toml: &str, pr: PullRequestEvent) -> PrChange {
    let config = Config::from_toml(toml, Vec::new()).unwrap();
    match decide(&crate::intent::pr_delivery(pr), &config, NOW).change {
        Change::PullRequest(change) => *change,
        other => panic!("expected a PR change, got {other:?}"),
    }
}

fn change(action: PrAction, at: i64) -> PrChange {
    change_of(event(action, at))
}

/// A preview opened at event time 1000 (and previewd's time 2000).
fn stored() -> StoredPr {
    merge(None, None, &change(PrAction::Opened, 1_000), 2_000).unwrap()
}

#[test]
fn an_opened_pr_creates_its_preview_with_its_names_and_a_fresh_clock() {
    let opened = change(PrAction::Opened, 1_000);
    let new = merge(None, None, &opened, NOW).unwrap();
    assert_eq!(new.desired, Desired::Deployed);
    assert_eq!((new.repo_id, new.installation_id), (1, Some(9)));
    assert_eq!((new.created_at, new.updated_at), (NOW, NOW));
    assert_eq!((new.pr_updated_at, new.head_changed_at), (1_000, 1_000));
    assert_eq!(new.expires_at, NOW + TTL);
    assert_eq!(new.names, Some(opened.names.to_json()));
    assert_eq!((new.approved_sha, new.end_reason), (None, None));
}

#[test]
fn a_new_draft_without_a_clock_expires_at_the_end_of_its_lifetime() {
    let draft = change(PrAction::ConvertedToDraft, 1_000);
    assert_eq!(draft.expires_at, None);
    assert_eq!(
        merge(None, None, &draft, NOW).unwrap().expires_at,
        NOW + LIFETIME
    );
}

#[test]
fn an_event_older_than_the_one_recorded_changes_nothing() {
    let old = stored();
    assert_eq!(
        merge(Some(&old), None, &change(PrAction::Synchronize, 999), NOW),
        None
    );
    let closed = change(PrAction::Closed { merged: false }, 999);
    assert_eq!(merge(Some(&old), None, &closed, NOW), None);
    let same_time = change(PrAction::Synchronize, 1_000);
    assert!(merge(Some(&old), None, &same_time, NOW).is_some());
}

#[test]
fn a_change_that_only_updates_finds_nothing_without_a_preview() {
    for action in [PrAction::Closed { merged: true }, PrAction::Edited] {
        assert_eq!(merge(None, None, &change(action, 1_000), NOW), None);
    }
}

#[test]
fn a_close_newer_than_the_event_forbids_creating_or_refreshing_the_preview() {
    let closed = Ended {
        closed_at: 1_500,
        ended_at: None,
    };
    let replay = change(PrAction::Opened, 1_200);
    assert_eq!(merge(None, Some(&closed), &replay, NOW), None);
    assert_eq!(merge(Some(&stored()), Some(&closed), &replay, NOW), None);
    let reopened = change(PrAction::Reopened, 1_500);
    assert!(merge(None, Some(&closed), &reopened, NOW).is_some());
}

#[test]
fn an_end_on_purpose_not_older_than_the_event_keeps_the_preview_ended() {
    let destroyed = Ended {
        closed_at: 0,
        ended_at: Some(1_000),
    };
    let replay = change(PrAction::Opened, 1_000);
    assert_eq!(merge(None, Some(&destroyed), &replay, NOW), None);
    let push = change(PrAction::Synchronize, 1_001);
    assert!(merge(None, Some(&destroyed), &push, NOW).is_some());
}

#[test]
fn a_forks_push_of_the_approved_head_stays_deployed_and_any_other_head_waits() {
    let fork = |sha: &str| {
        change_of(PullRequestEvent {
            fork: true,
            head_sha: sha.parse().unwrap(),
            ..event(PrAction::Synchronize, 1_100)
        })
    };
    let approved = StoredPr {
        approved_sha: Some(HEAD.into()),
        ..stored()
    };
    let same = merge(Some(&approved), None, &fork(HEAD), NOW).unwrap();
    assert_eq!(same.desired, Desired::Deployed);
    let other = merge(Some(&approved), None, &fork(NEXT), NOW).unwrap();
    assert_eq!(other.desired, Desired::AwaitingApproval);
    assert_eq!(other.approved_sha.as_deref(), Some(HEAD), "kept, not moved");
    let new = merge(None, None, &fork(HEAD), NOW).unwrap();
    assert_eq!(
        new.desired,
        Desired::AwaitingApproval,
        "nobody approved yet"
    );
}

#[test]
fn a_push_restarts_the_clock_but_never_shortens_a_later_expiry_nor_passes_the_lifetime() {
    let old = StoredPr {
        expires_at: 3_000,
        ..stored()
    };
    let push = change(PrAction::Synchronize, 1_100);
    assert_eq!(
        merge(Some(&old), None, &push, NOW).unwrap().expires_at,
        NOW + TTL
    );
    let extended = StoredPr {
        expires_at: NOW + 2 * TTL,
        ..old.clone()
    };
    assert_eq!(
        merge(Some(&extended), None, &push, NOW).unwrap().expires_at,
        NOW + 2 * TTL
    );
    let late_push = PrChange {
        expires_at: Some(old.created_at + LIFETIME + 100),
        ..push
    };
    let capped = merge(Some(&old), None, &late_push, NOW).unwrap();
    assert_eq!(capped.expires_at, old.created_at + LIFETIME);
    let draft = change_of(PullRequestEvent {
        draft: true,
        ..event(PrAction::ConvertedToDraft, 1_100)
    });
    let kept = merge(Some(&old), None, &draft, NOW).unwrap();
    assert_eq!(
        (kept.desired, kept.expires_at),
        (Desired::Draft, old.expires_at)
    );
}

#[test]
fn a_live_preview_keeps_its_names_and_creation_and_moves_its_head_clock_only_on_a_new_head() {
    let old = StoredPr {
        names: Some("recorded".into()),
        ..stored()
    };
    let same_head = merge(Some(&old), None, &change(PrAction::Reopened, 1_100), NOW).unwrap();
    assert_eq!(same_head.names.as_deref(), Some("recorded"));
    assert_eq!(same_head.created_at, old.created_at);
    assert_eq!(same_head.head_changed_at, 1_000);
    let push = change_of(PullRequestEvent {
        head_sha: NEXT.parse().unwrap(),
        ..event(PrAction::Synchronize, 1_200)
    });
    let moved = merge(Some(&old), None, &push, NOW).unwrap();
    assert_eq!(
        (moved.head_sha.as_str(), moved.head_changed_at),
        (NEXT, 1_200)
    );
}

#[test]
fn an_event_without_an_installation_keeps_the_one_recorded() {
    let push = change_of(PullRequestEvent {
        installation_id: None,
        ..event(PrAction::Synchronize, 1_100)
    });
    let merged = merge(Some(&stored()), None, &push, NOW).unwrap();
    assert_eq!(merged.installation_id, Some(9));
}

#[test]
fn a_close_records_its_reason_and_its_time() {
    let closed = change(PrAction::Closed { merged: true }, 1_100);
    let ended = merge(Some(&stored()), None, &closed, NOW).unwrap();
    assert_eq!(ended.desired, Desired::Absent);
    assert_eq!(ended.end_reason, Some(EndReason::Merged));
    assert_eq!((ended.pr_updated_at, ended.updated_at), (1_100, NOW));
    assert_eq!(ended.expires_at, stored().expires_at, "no clock restarts");
}

#[test]
fn an_edit_refreshes_the_details_but_neither_the_state_nor_the_event_clock() {
    let old = StoredPr {
        desired: Desired::Absent,
        end_reason: Some(EndReason::Closed),
        ..stored()
    };
    let edit = change_of(PullRequestEvent {
        title: "Search, faster".into(),
        draft: true,
        ..event(PrAction::Edited, 1_300)
    });
    let edited = merge(Some(&old), None, &edit, NOW).unwrap();
    assert_eq!(
        (edited.title.as_str(), edited.draft),
        ("Search, faster", true)
    );
    assert_eq!(edited.desired, Desired::Absent);
    assert_eq!(edited.end_reason, Some(EndReason::Closed));
    assert_eq!(edited.pr_updated_at, 1_000, "an older close still applies");
    let older_close = change(PrAction::Closed { merged: false }, 1_200);
    assert!(merge(Some(&edited), None, &older_close, NOW).is_some());
}

#[test]
fn only_a_change_that_creates_moves_the_repository_id() {
    let old = StoredPr {
        repo_id: 5,
        ..stored()
    };
    let push = change(PrAction::Synchronize, 1_100);
    assert_eq!(merge(Some(&old), None, &push, NOW).unwrap().repo_id, 1);
    let edit = change(PrAction::Edited, 1_100);
    assert_eq!(merge(Some(&old), None, &edit, NOW).unwrap().repo_id, 5);
}

mod gates;

#[test]
fn the_recorded_event_delivered_again_restarts_no_clock() {
    let old = stored();
    assert_eq!(
        merge(Some(&old), None, &change(PrAction::Opened, 1_000), NOW),
        Some(old.clone()),
        "later, the opening again"
    );
    let push = change(PrAction::Synchronize, 1_100);
    let pushed = merge(Some(&old), None, &push, NOW).unwrap();
    assert_eq!(pushed.expires_at, NOW + TTL, "a newer event restarts it");
    let expiring = StoredPr {
        expires_at: 3_000,
        ..pushed.clone()
    };
    assert_eq!(
        merge(Some(&expiring), None, &push, NOW + 3_600),
        Some(expiring.clone()),
        "the same push replayed an hour later"
    );
    // At the same event time, what does move is still written, with a fresh clock.
    let new_head = change_of(PullRequestEvent {
        head_sha: NEXT.parse().unwrap(),
        ..event(PrAction::Synchronize, 1_100)
    });
    let moved = merge(Some(&expiring), None, &new_head, NOW + 3_600).unwrap();
    assert_eq!(
        (moved.head_sha.as_str(), moved.expires_at),
        (NEXT, NOW + TTL)
    );
}
