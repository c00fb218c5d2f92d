//! The `[[repos]]` gates as the merge applies them: trigger, labels, authors and paths.

use super::*;

const LABEL: &str =
    "[github]\ntoken = \"t\"\n[[repos]]\nname = \"octo/app\"\ntrigger = \"label\"\n";
const COMMENT: &str = "[[repos]]\nname = \"octo/app\"\ntrigger = \"comment\"\n";
const BOTS: &str = "[[repos]]\nname = \"octo/app\"\nignore_authors = [\"dependabot[bot]\"]\n";
const PATHS: &str =
    "[github]\ntoken = \"t\"\n[[repos]]\nname = \"octo/app\"\npaths = [\"services/api/**\"]\n";

/// `action` at `at`, the PR then carrying `labels`; a label event gives or takes the
/// last of them, or `preview` when there are none.
fn labeled(action: PrAction, at: i64, labels: &[&str]) -> PullRequestEvent {
    let label = matches!(action, PrAction::Labeled | PrAction::Unlabeled)
        .then(|| labels.last().copied().unwrap_or("preview").to_string());
    PullRequestEvent {
        labels: labels.iter().map(|l| l.to_string()).collect(),
        label,
        ..event(action, at)
    }
}

#[test]
fn a_pr_without_the_trigger_label_is_tracked_with_no_preview() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["bug"]));
    let new = merge(None, None, &opened, NOW).unwrap();
    assert_eq!(new.desired, Desired::OptedOut);
    assert!(!new.labeled);
}

#[test]
fn adding_the_trigger_label_deploys_with_a_fresh_clock() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &[]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    let label = change_under(LABEL, labeled(PrAction::Labeled, 1_100, &["preview"]));
    let new = merge(Some(&old), None, &label, NOW).unwrap();
    assert_eq!(new.desired, Desired::Deployed);
    assert!(new.labeled);
    assert_eq!(new.expires_at, NOW + TTL);
}

#[test]
fn another_label_on_a_labeled_preview_does_not_restart_its_clock() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["preview"]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    let other = change_under(
        LABEL,
        labeled(PrAction::Labeled, 1_100, &["preview", "bug"]),
    );
    let new = merge(Some(&old), None, &other, NOW).unwrap();
    assert_eq!(new.desired, Desired::Deployed);
    assert_eq!(new.expires_at, old.expires_at);
}

#[test]
fn removing_the_trigger_label_tears_the_preview_down_saying_why() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["preview"]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    assert_eq!(old.desired, Desired::Deployed);
    let unlabel = change_under(LABEL, labeled(PrAction::Unlabeled, 1_100, &[]));
    let new = merge(Some(&old), None, &unlabel, NOW).unwrap();
    assert_eq!(new.desired, Desired::Absent);
    assert_eq!(new.end_reason, Some(EndReason::Unlabeled));
}

#[test]
fn a_push_to_a_pr_whose_label_went_away_unheard_tears_its_preview_down() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["preview"]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    let push = change_under(LABEL, labeled(PrAction::Synchronize, 1_100, &[]));
    assert_eq!(
        merge(Some(&old), None, &push, NOW).unwrap().desired,
        Desired::Absent
    );
}

/// A preview being torn down (`Absent`) has no preview to keep, but still has Applications
/// to delete: a push without the label, or an unlabeled event replayed, while it goes must
/// not make it `OptedOut`, which the reconciler reads as nothing to tear down (helper-13).
#[test]
fn a_push_without_the_label_while_the_preview_is_torn_down_keeps_it_ending() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["preview"]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    let unlabel = change_under(LABEL, labeled(PrAction::Unlabeled, 1_100, &[]));
    let ending = merge(Some(&old), None, &unlabel, 3_000).unwrap();
    for later in [
        labeled(PrAction::Synchronize, 1_200, &[]),
        labeled(PrAction::Unlabeled, 1_200, &[]),
        labeled(PrAction::Reopened, 1_200, &["bug"]),
    ] {
        let new = merge(Some(&ending), None, &change_under(LABEL, later), NOW).unwrap();
        assert_eq!(
            (new.desired, new.end_reason),
            (Desired::Absent, Some(EndReason::Unlabeled))
        );
    }
    // The label back before the teardown finished: the preview comes back.
    let relabel = change_under(LABEL, labeled(PrAction::Labeled, 1_200, &["preview"]));
    assert_eq!(
        merge(Some(&ending), None, &relabel, NOW).unwrap().desired,
        Desired::Deployed
    );
}

#[test]
fn a_comment_triggered_repository_gives_no_preview_until_a_writer_deploys() {
    let opened = change_under(COMMENT, event(PrAction::Opened, 1_000));
    let old = merge(None, None, &opened, 2_000).unwrap();
    assert_eq!(old.desired, Desired::OptedOut);
    // `/preview deploy` (db::command_effect) records the writer and deploys; pushes keep it.
    let deployed = StoredPr {
        desired: Desired::Deployed,
        deploy_by: Some("maintainer".into()),
        ..old
    };
    let push = change_under(COMMENT, event(PrAction::Synchronize, 1_100));
    assert_eq!(
        merge(Some(&deployed), None, &push, NOW).unwrap().desired,
        Desired::Deployed
    );
}

#[test]
fn an_ignored_authors_pr_gets_no_preview_of_its_own_accord() {
    let bot = PullRequestEvent {
        author: "Dependabot[bot]".into(),
        ..event(PrAction::Opened, 1_000)
    };
    let new = merge(None, None, &change_under(BOTS, bot), NOW).unwrap();
    assert_eq!(new.desired, Desired::OptedOut);
    let human = change_under(BOTS, event(PrAction::Opened, 1_000));
    assert_eq!(
        merge(None, None, &human, NOW).unwrap().desired,
        Desired::Deployed
    );
}

#[test]
fn a_paths_repository_waits_for_the_prs_files_and_keeps_a_preview_once_they_matched() {
    let opened = change_under(PATHS, event(PrAction::Opened, 1_000));
    let old = merge(None, None, &opened, 2_000).unwrap();
    assert_eq!(old.desired, Desired::OptedOut, "until its files are listed");
    // The look-up found services/api/main.rs (db::record_paths): deployed.
    let matched = StoredPr {
        desired: Desired::Deployed,
        paths_file: Some("services/api/main.rs".into()),
        ..old.clone()
    };
    let push = change_under(PATHS, event(PrAction::Synchronize, 1_100));
    assert_eq!(
        merge(Some(&matched), None, &push, NOW).unwrap().desired,
        Desired::Deployed,
        "a push that no longer touches paths keeps the preview"
    );
    assert_eq!(
        merge(Some(&old), None, &push, NOW).unwrap().desired,
        Desired::OptedOut,
        "a PR that never matched stays without one"
    );
}

#[test]
fn a_gate_changed_in_the_file_leaves_a_live_preview_be() {
    let live = merge(None, None, &change(PrAction::Opened, 1_000), 2_000).unwrap();
    let push = change_under(COMMENT, event(PrAction::Synchronize, 1_100));
    assert_eq!(
        merge(Some(&live), None, &push, NOW).unwrap().desired,
        Desired::Deployed
    );
}

#[test]
fn a_draft_behind_a_label_is_a_draft_once_labeled() {
    let draft = labeled(PrAction::Opened, 1_000, &["preview"]);
    let draft = PullRequestEvent {
        draft: true,
        ..draft
    };
    let new = merge(None, None, &change_under(LABEL, draft), NOW).unwrap();
    assert_eq!(new.desired, Desired::Draft);
}

#[test]
fn a_label_on_a_closed_pr_or_another_label_is_only_a_detail() {
    let closed = PullRequestEvent {
        open: false,
        ..labeled(PrAction::Labeled, 1_100, &["preview"])
    };
    let change = change_under(LABEL, closed);
    assert!(!change.create && change.desired.is_none(), "{change:?}");
    let bug = change_under(
        LABEL,
        labeled(PrAction::Labeled, 1_100, &["preview", "bug"]),
    );
    assert!(!bug.create && bug.desired.is_none(), "{bug:?}");
}

#[test]
fn a_pr_labeled_days_after_it_opened_gets_a_whole_lifetime_from_then() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &[]));
    let old = merge(None, None, &opened, 2_000).unwrap();
    let later = NOW + 20 * 86_400;
    let label = change_under(LABEL, labeled(PrAction::Labeled, 1_100, &["preview"]));
    let label = PrChange {
        expires_at: Some(later + TTL),
        ..label
    };
    let new = merge(Some(&old), None, &label, later).unwrap();
    assert_eq!(new.desired, Desired::Deployed);
    assert_eq!(
        new.created_at, later,
        "its lifetime starts when it gets a preview"
    );
    assert_eq!(new.expires_at, later + TTL);
}

#[test]
fn taking_the_label_away_ends_a_preview_a_writer_opted_in_too() {
    let opened = change_under(LABEL, labeled(PrAction::Opened, 1_000, &["preview"]));
    let old = StoredPr {
        deploy_by: Some("maintainer".into()),
        ..merge(None, None, &opened, 2_000).unwrap()
    };
    let unlabel = change_under(LABEL, labeled(PrAction::Unlabeled, 1_100, &[]));
    assert_eq!(
        merge(Some(&old), None, &unlabel, NOW).unwrap().desired,
        Desired::Absent
    );
}
