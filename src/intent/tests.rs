//! What intake decides for each delivery, as sentences: PR intents, gates, refusals and
//! checks.

use super::*;
use crate::preview::Sha;

fn pr(action: PrAction) -> PullRequestEvent {
    PullRequestEvent {
        action,
        key: "octo/app#7".parse().unwrap(),
        repo_id: 1,
        installation_id: None,
        title: "Add search".into(),
        author: "alice".into(),
        head_sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
            .parse::<Sha>()
            .unwrap(),
        head_ref: "search".into(),
        base_ref: "main".into(),
        base_sha: None,
        fork: false,
        draft: false,
        labels: vec![],
        label: None,
        open: true,
        updated_at: Some(1_000),
        sender: "alice".into(),
    }
}

fn decide_pr(pr: PullRequestEvent, config_toml: &str) -> Intent {
    let config = Config::from_toml(config_toml, Vec::new()).unwrap();
    decide(&pr_delivery(pr), &config, 10_000)
}

fn change(intent: &Intent) -> &PrChange {
    match &intent.change {
        Change::PullRequest(change) => change,
        other => panic!("expected a PR change, got {other:?}"),
    }
}

#[test]
fn opened_pr_is_deployed_and_expires_after_the_ttl() {
    let intent = decide_pr(pr(PrAction::Opened), "");
    let change = change(&intent);
    assert_eq!(intent.outcome, Outcome::Accepted);
    assert_eq!(change.desired, Some(Desired::Deployed));
    assert!(change.create);
    assert_eq!(change.expires_at, Some(10_000 + 72 * 3600));
    assert_eq!(change.max_lifetime_secs, 14 * 86_400);
}

#[test]
fn the_answer_says_in_words_what_the_pr_now_asks_for() {
    let detail = |pr| decide_pr(pr, "").detail;
    assert_eq!(
        detail(pr(PrAction::Opened)),
        "opened: a preview at the head commit"
    );
    assert_eq!(
        detail(PullRequestEvent {
            open: false,
            ..pr(PrAction::Closed { merged: false })
        }),
        "closed: the preview torn down"
    );
    assert_eq!(
        detail(PullRequestEvent {
            fork: true,
            ..pr(PrAction::Opened)
        }),
        "opened: no preview until a writer approves this fork's head commit"
    );
}

#[test]
fn fork_pr_awaits_approval() {
    let intent = decide_pr(
        PullRequestEvent {
            fork: true,
            ..pr(PrAction::Synchronize)
        },
        "",
    );
    assert_eq!(change(&intent).desired, Some(Desired::AwaitingApproval));
    assert!(change(&intent).reason.contains("/preview approve"));
}

#[test]
fn drafts_wait_unless_the_policy_deploys_them() {
    let draft = PullRequestEvent {
        draft: true,
        ..pr(PrAction::Opened)
    };
    assert_eq!(
        change(&decide_pr(draft.clone(), "")).desired,
        Some(Desired::Draft)
    );
    let deploying = decide_pr(draft, "[defaults]\ndeploy_drafts = true\n");
    assert_eq!(change(&deploying).desired, Some(Desired::Deployed));
}

#[test]
fn closed_pr_is_absent_with_its_reason_and_never_created() {
    let merged = decide_pr(pr(PrAction::Closed { merged: true }), "");
    assert_eq!(change(&merged).desired, Some(Desired::Absent));
    assert_eq!(change(&merged).end_reason, Some(EndReason::Merged));
    assert!(!change(&merged).create);
    let closed = decide_pr(pr(PrAction::Closed { merged: false }), "");
    assert_eq!(change(&closed).end_reason, Some(EndReason::Closed));
}

#[test]
fn edits_and_labels_refresh_details_only() {
    for action in [PrAction::Edited, PrAction::Labeled, PrAction::Unlabeled] {
        let intent = decide_pr(pr(action), "");
        assert_eq!(change(&intent).desired, None);
        assert!(!change(&intent).create);
    }
}

#[test]
fn repos_outside_the_allow_list_are_refused() {
    let intent = decide_pr(pr(PrAction::Opened), "[[repos]]\nname = \"octo/other\"\n");
    assert_eq!(intent.outcome, Outcome::Refused);
    assert!(matches!(intent.change, Change::Refusal { .. }));
}

#[test]
fn a_repository_dropped_from_the_allow_list_still_closes_its_previews() {
    let closed = decide_pr(
        pr(PrAction::Closed { merged: false }),
        "[[repos]]\nname = \"octo/other\"\n",
    );
    assert_eq!(closed.outcome, Outcome::Accepted);
    assert_eq!(change(&closed).desired, Some(Desired::Absent));
    assert!(!change(&closed).create, "a close never creates");
    let pushed = decide_pr(
        pr(PrAction::Synchronize),
        "[[repos]]\nname = \"octo/other\"\n",
    );
    assert_eq!(pushed.outcome, Outcome::Refused, "no new rendering");
}

#[test]
fn a_check_for_a_repository_outside_the_allow_list_is_ignored_without_history() {
    let config = Config::from_toml(
        "[github]\ntoken = \"t\"\n[[repos]]\nname = \"octo/other\"\nwait_for = [\"build\"]\n",
        Vec::new(),
    )
    .unwrap();
    let check = |repo: &str| Delivery {
        hook_id: String::new(),
        guid: "g".into(),
        event: "check_suite".into(),
        action: Some("completed".into()),
        payload: Event::Check(CheckEvent {
            repo: repo.parse().unwrap(),
            installation_id: None,
            sha: "ec26c3e57ca3a959ca5aad62de7213c562f8c821".parse().unwrap(),
            report: None,
        }),
    };
    let outside = decide(&check("octo/app"), &config, 10_000);
    assert_eq!(outside.outcome, Outcome::Ignored);
    assert_eq!(outside.change, Change::Nothing, "no history row");
    assert!(outside.detail.contains("allow-list"), "{}", outside.detail);
    let listed = decide(&check("octo/other"), &config, 10_000);
    assert_eq!(listed.outcome, Outcome::Accepted);
    assert!(matches!(listed.change, Change::Check(_)));
}

#[test]
fn new_previews_record_the_names_of_their_policys_domain() {
    let intent = decide_pr(
        pr(PrAction::Opened),
        "[defaults]\ndomain = \"pr.example.com\"\n",
    );
    let names = &change(&intent).names;
    assert!(names.host.ends_with(".pr.example.com"), "{}", names.host);
    assert!(names.slug.starts_with(crate::naming::PREFIX));
}
