//! The decisions of one step, as sentences.

use super::*;
use crate::checks::Wait;

fn ready(hash: &str, ready: Option<bool>) -> Observed {
    Observed::Present {
        hash: Some(hash.into()),
        health: ready.map(|r| {
            if r {
                Health::Ready
            } else {
                Health::Progressing
            }
        }),
    }
}

#[test]
fn the_app_waits_until_the_helpers_are_ready_at_the_current_rendering() {
    let app = Observed::Missing;
    let plan = |helper: &Observed| plan_app(Desired::Deployed, Some("h2"), helper, Some("a"), &app);
    assert_eq!(plan(&Observed::Missing), Action::Wait);
    assert_eq!(plan(&ready("h2", Some(false))), Action::Wait);
    assert_eq!(
        plan(&ready("h1", Some(true))),
        Action::Wait,
        "status of the previous push"
    );
    assert_eq!(plan(&ready("h2", Some(true))), Action::Apply);
    assert_eq!(
        plan(&ready("h2", None)),
        Action::Apply,
        "directory: no one reports health"
    );
}

#[test]
fn a_failed_migration_keeps_the_app_where_it_was() {
    let failed = Observed::Present {
        hash: Some("h2".into()),
        health: Some(Health::Failed("hook Job x-migrate failed".into())),
    };
    assert_eq!(
        plan_app(
            Desired::Deployed,
            Some("h2"),
            &failed,
            Some("a2"),
            &ready("a1", Some(true))
        ),
        Action::Wait
    );
}

#[test]
fn a_running_app_is_left_alone_while_the_helpers_resync() {
    assert_eq!(
        plan_app(
            Desired::Deployed,
            Some("h2"),
            &ready("h2", Some(false)),
            Some("a2"),
            &ready("a1", Some(true))
        ),
        Action::Wait
    );
}

#[test]
fn teardown_removes_the_app_first_then_the_helpers() {
    let present = ready("h", Some(true));
    assert_eq!(plan_teardown(&present, &present), Teardown::DeleteApp);
    assert_eq!(plan_teardown(&Observed::Deleting, &present), Teardown::Wait);
    assert_eq!(
        plan_teardown(&Observed::Missing, &present),
        Teardown::DeleteHelper
    );
    assert_eq!(
        plan_teardown(&Observed::Missing, &Observed::Deleting),
        Teardown::Wait
    );
    assert_eq!(
        plan_teardown(&Observed::Missing, &Observed::Missing),
        Teardown::Confirm
    );
}

#[test]
fn another_previews_application_of_the_same_name_is_a_conflict_never_written_or_deleted() {
    let foreign = Observed::Foreign {
        owner: "repo \"acme.other\"".into(),
    };
    assert_eq!(
        plan(Desired::Deployed, Some("h"), &foreign),
        Action::Conflict
    );
    assert_eq!(plan(Desired::Absent, None, &foreign), Action::Conflict);
    assert_eq!(plan_teardown(&foreign, &foreign), Teardown::Confirm);
    assert_eq!(
        plan_teardown(&foreign, &present("h")),
        Teardown::DeleteHelper,
        "only ours is deleted"
    );
}

fn present(hash: &str) -> Observed {
    Observed::Present {
        hash: Some(hash.into()),
        health: None,
    }
}

#[test]
fn a_new_preview_is_applied() {
    assert_eq!(
        plan(Desired::Deployed, Some("a"), &Observed::Missing),
        Action::Apply
    );
}

#[test]
fn unchanged_input_makes_no_write() {
    assert_eq!(
        plan(Desired::Deployed, Some("a"), &present("a")),
        Action::Nothing
    );
}

#[test]
fn a_new_push_is_applied() {
    assert_eq!(
        plan(Desired::Deployed, Some("b"), &present("a")),
        Action::Apply
    );
    assert_eq!(
        plan(
            Desired::Deployed,
            Some("b"),
            &Observed::Present {
                hash: None,
                health: None
            }
        ),
        Action::Apply
    );
}

#[test]
fn a_closed_pr_is_deleted_then_forgotten_once_gone() {
    assert_eq!(plan(Desired::Absent, None, &present("a")), Action::Delete);
    assert_eq!(
        plan(Desired::Absent, None, &Observed::Deleting),
        Action::Wait
    );
    assert_eq!(
        plan(Desired::Absent, None, &Observed::Missing),
        Action::Forget
    );
}

#[test]
fn reopened_during_teardown_waits_then_deploys_again() {
    assert_eq!(
        plan(Desired::Deployed, Some("a"), &Observed::Deleting),
        Action::Wait
    );
    assert_eq!(
        plan(Desired::Deployed, Some("a"), &Observed::Missing),
        Action::Apply
    );
}

#[test]
fn unapproved_pushes_and_drafts_change_nothing_on_the_cluster() {
    for desired in [Desired::AwaitingApproval, Desired::Draft] {
        assert_eq!(plan(desired, None, &present("a")), Action::Nothing);
        assert_eq!(plan(desired, None, &Observed::Missing), Action::Nothing);
    }
}

fn needs_sync(hash: &str) -> Observed {
    Observed::Present {
        hash: Some(hash.into()),
        health: Some(Health::NeedsSync),
    }
}

fn act(action: Action) -> Act {
    Act {
        action,
        sync: false,
    }
}

#[test]
fn a_new_rendering_is_applied_and_followed_while_argo_cd_syncs_it() {
    let step = step(
        Desired::Deployed,
        Some("h"),
        &Observed::Missing,
        None,
        true,
        &Wait::Passed,
    );
    assert_eq!(step.helper, act(Action::Apply));
    assert_eq!((step.state, step.requeue), (ObservedState::Syncing, true));
}

#[test]
fn on_a_directory_both_applications_are_written_in_one_step_and_settle_as_applied() {
    let missing = Observed::Missing;
    let step = step(
        Desired::Deployed,
        Some("h"),
        &missing,
        Some(("a", &missing)),
        false,
        &Wait::Passed,
    );
    assert_eq!(
        (step.helper, step.app),
        (act(Action::Apply), Some(act(Action::Apply)))
    );
    assert_eq!((step.state, step.requeue), (ObservedState::Syncing, true));
    let applied = step_of_directory(&present("h"), &present("a"));
    assert_eq!(
        (applied.state, applied.requeue),
        (ObservedState::Applied, false)
    );
}

fn step_of_directory(helper: &Observed, app: &Observed) -> Step {
    step(
        Desired::Deployed,
        Some("h"),
        helper,
        Some(("a", app)),
        false,
        &Wait::Passed,
    )
}

#[test]
fn a_rendering_argo_cd_will_not_sync_on_its_own_is_asked_for() {
    let step = step(
        Desired::Deployed,
        Some("h"),
        &needs_sync("h"),
        None,
        true,
        &Wait::Passed,
    );
    assert_eq!(
        step.helper,
        Act {
            action: Action::Nothing,
            sync: true
        }
    );
    assert_eq!((step.state, step.requeue), (ObservedState::Syncing, true));
}

#[test]
fn the_app_is_applied_once_the_helpers_are_ready_and_the_preview_is_ready_once_both_are() {
    let helpers = ready("h", Some(true));
    let waiting = step(
        Desired::Deployed,
        Some("h"),
        &helpers,
        Some(("a", &Observed::Missing)),
        true,
        &Wait::Passed,
    );
    assert_eq!(waiting.app, Some(act(Action::Apply)));
    assert_eq!(waiting.state, ObservedState::Syncing);
    let done = step(
        Desired::Deployed,
        Some("h"),
        &helpers,
        Some(("a", &ready("a", Some(true)))),
        true,
        &Wait::Passed,
    );
    assert_eq!(
        (done.helper, done.app),
        (act(Action::Nothing), Some(act(Action::Nothing)))
    );
    assert_eq!((done.state, done.requeue), (ObservedState::Ready, false));
}

#[test]
fn a_failed_app_fails_the_preview_with_its_message_and_is_looked_at_again() {
    let failed = Observed::Present {
        hash: Some("a".into()),
        health: Some(Health::Failed("pod crashed".into())),
    };
    let step = step(
        Desired::Deployed,
        Some("h"),
        &ready("h", Some(true)),
        Some(("a", &failed)),
        true,
        &Wait::Passed,
    );
    assert_eq!(step.state, ObservedState::Failed);
    assert_eq!(step.message.as_deref(), Some("pod crashed"));
    assert!(step.requeue);
}

#[test]
fn unapproved_forks_and_drafts_settle_in_their_own_state_writing_nothing() {
    for (desired, state) in [
        (Desired::AwaitingApproval, ObservedState::AwaitingApproval),
        (Desired::Draft, ObservedState::Draft),
    ] {
        let step = step(
            desired,
            None,
            &ready("h", Some(true)),
            None,
            true,
            &Wait::Passed,
        );
        assert_eq!(step.helper, act(Action::Nothing));
        assert_eq!(
            (step.state, step.message, step.requeue),
            (state, None, false)
        );
    }
}

#[test]
fn an_application_name_held_by_another_is_a_conflict_in_the_step() {
    let foreign = Observed::Foreign {
        owner: "repo \"acme.other\"".into(),
    };
    let helper = step(
        Desired::Deployed,
        Some("h"),
        &foreign,
        None,
        true,
        &Wait::Passed,
    );
    assert_eq!(helper.helper.action, Action::Conflict);
    let app = step(
        Desired::Deployed,
        Some("h"),
        &ready("h", Some(true)),
        Some(("a", &foreign)),
        true,
        &Wait::Passed,
    );
    assert_eq!(app.app.map(|a| a.action), Some(Action::Conflict));
}

#[test]
fn only_a_ready_preview_already_recorded_ready_changes_nothing() {
    let on_kube = |helper: &Observed, app: &Observed| {
        step(
            Desired::Deployed,
            Some("h"),
            helper,
            Some(("a", app)),
            true,
            &Wait::Passed,
        )
    };
    let settled = on_kube(&ready("h", Some(true)), &ready("a", Some(true)));
    assert!(settled.changes_nothing(ObservedState::Ready, None));
    assert!(
        !settled.changes_nothing(ObservedState::Syncing, None),
        "ready is news to record"
    );
    let cases = [
        (ready("h", Some(false)), ready("a", Some(true)), "syncing"),
        (
            ready("h0", Some(true)),
            ready("a", Some(true)),
            "a new rendering",
        ),
        (
            ready("h", Some(true)),
            Observed::Missing,
            "the app to apply",
        ),
        (needs_sync("h"), ready("a", Some(true)), "a sync to ask for"),
    ];
    for (helper, app, what) in cases {
        let step = on_kube(&helper, &app);
        assert!(
            !step.changes_nothing(ObservedState::Ready, None),
            "{what}: {step:?}"
        );
    }
}

fn recorded(state: ObservedState, error: Option<&str>) -> Recorded<'_> {
    Recorded {
        state,
        error,
        seed_generation: 3,
    }
}

fn on_kube(helper: &Observed, wait: &Wait) -> Step {
    step(Desired::Deployed, Some("h"), helper, None, true, wait)
}

#[test]
fn a_state_already_recorded_is_not_observed_again() {
    let syncing = on_kube(&ready("h", Some(false)), &Wait::Passed);
    assert_eq!(
        syncing.observation(recorded(ObservedState::Syncing, None)),
        None
    );
}

#[test]
fn a_preview_ready_now_is_ready_at_its_seed_generation_with_no_history() {
    let ready_now = on_kube(&ready("h", Some(true)), &Wait::Passed);
    assert_eq!(
        ready_now.observation(recorded(ObservedState::Syncing, None)),
        Some(Observation {
            state: ObservedState::Ready,
            message: None,
            history: None,
            ready_at_seed: Some(3),
        })
    );
}

#[test]
fn a_failure_goes_to_the_history_once_per_distinct_message() {
    let failed = Observed::Present {
        hash: Some("h".into()),
        health: Some(Health::Failed("hook Job x-migrate failed".into())),
    };
    let step = on_kube(&failed, &Wait::Passed);
    let seen = step.observation(recorded(ObservedState::Syncing, None));
    assert_eq!(seen.and_then(|s| s.history), Some(HistoryKind::Failed));
    assert_eq!(seen.and_then(|s| s.ready_at_seed), None);
    assert_eq!(
        step.observation(recorded(
            ObservedState::Failed,
            Some("hook Job x-migrate failed")
        )),
        None,
        "the same failure, seen again"
    );
    let other = step.observation(recorded(ObservedState::Failed, Some("an older failure")));
    assert_eq!(
        other.and_then(|s| s.history),
        Some(HistoryKind::Failed),
        "a new one"
    );
}

#[test]
fn a_failed_check_is_history_of_its_own_kind() {
    let ci = Wait::Failed {
        name: "build".into(),
        conclusion: "failure".into(),
        url: None,
    };
    let step = on_kube(&ready("h", Some(true)), &ci);
    let seen = step.observation(recorded(ObservedState::WaitingForCi, None));
    assert_eq!(
        seen.map(|s| (s.state, s.history)),
        Some((ObservedState::CiFailed, Some(HistoryKind::CiFailed)))
    );
    assert_eq!(
        seen.and_then(|s| s.message),
        Some("check build ended failure")
    );
}

#[test]
fn a_step_writes_when_either_application_is_applied() {
    let app = |observed: &Observed| {
        step(
            Desired::Deployed,
            Some("h"),
            &ready("h", Some(true)),
            Some(("a", observed)),
            true,
            &Wait::Passed,
        )
    };
    assert!(
        on_kube(&Observed::Missing, &Wait::Passed).writes(),
        "the helpers"
    );
    assert!(app(&Observed::Missing).writes(), "the app");
    assert!(!app(&ready("a", Some(true))).writes(), "neither");
}

#[test]
fn a_sleep_applies_both_applications_at_once_and_settles_as_sleeping() {
    // The helpers were ready awake; the sleep renders both anew.
    let step = step(
        Desired::Deployed,
        Some("h-asleep"),
        &ready("h", Some(true)),
        Some(("a-asleep", &ready("a", Some(true)))),
        true,
        &Wait::Passed,
    )
    .asleep(true);
    assert_eq!(step.helper, act(Action::Apply));
    assert_eq!(
        step.app.unwrap(),
        act(Action::Apply),
        "a sleep runs no hook: the app need not wait for the helpers"
    );
    assert_eq!(step.state, ObservedState::Syncing);
    let settled = super::step(
        Desired::Deployed,
        Some("h-asleep"),
        &ready("h-asleep", Some(true)),
        Some(("a-asleep", &ready("a-asleep", Some(true)))),
        true,
        &Wait::Passed,
    )
    .asleep(true);
    assert_eq!(
        (settled.state, settled.requeue),
        (ObservedState::Sleeping, false)
    );
}

#[test]
fn a_push_to_a_sleeping_preview_makes_the_app_wait_for_the_helpers_again() {
    // Rendered awake at a new head: the migration must run before the app.
    let step = step(
        Desired::Deployed,
        Some("h2"),
        &ready("h1-asleep", Some(true)),
        Some(("a2", &ready("a1-asleep", Some(true)))),
        true,
        &Wait::Passed,
    );
    assert_eq!(step.helper, act(Action::Apply));
    assert_eq!(step.app.unwrap().action, Action::Wait);
}
