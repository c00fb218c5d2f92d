use std::time::Duration;

use super::*;

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

fn policy() -> Option<TemplatePolicy> {
    Some(TemplatePolicy {
        refresh: Duration::from_secs(24 * 3600),
        idle: Duration::from_secs(14 * 24 * 3600),
        spares: 2,
    })
}

fn wanted(sha: &str, refresh: i64) -> Wanted {
    Wanted {
        base_sha: sha.into(),
        refresh,
        destroy: None,
        last_used_at: 0,
    }
}

fn built(generation: i64, sha: &str, state: GenState, created_at: i64) -> Gen {
    Gen {
        id: generation * 10,
        generation,
        base_sha: sha.into(),
        state,
        created_at,
        clones_pending: 0,
    }
}

#[test]
fn the_first_preview_builds_generation_one_at_the_base_it_named() {
    let plan = plan(policy(), Some(&wanted("a", 0)), &[], 1, 0);
    assert_eq!(plan.build, Some((1, "a".into())));
    assert!(plan.retire.is_empty() && plan.destroy.is_none());
}

#[test]
fn a_push_builds_the_next_generation_only_once_template_refresh_has_passed() {
    let gens = [built(1, "a", GenState::Ready, 0)];
    let early = plan(policy(), Some(&wanted("b", 1)), &gens, 1, DAY - 1);
    assert_eq!(early.build, None);
    let due = plan(policy(), Some(&wanted("b", 1)), &gens, 1, DAY);
    assert_eq!(due.build, Some((2, "b".into())));
    // The same base again builds nothing, however late.
    let same = plan(policy(), Some(&wanted("a", 1)), &gens, 1, 10 * DAY);
    assert_eq!(same.build, None);
}

#[test]
fn a_writers_refresh_builds_at_once_even_at_the_same_base() {
    let gens = [built(1, "a", GenState::Ready, 0)];
    let plan = plan(policy(), Some(&wanted("a", 2)), &gens, 1, 1);
    assert_eq!(plan.build, Some((2, "a".into())));
}

#[test]
fn no_push_builds_while_a_generation_is_building_nor_times_it_out_early() {
    // A push waits for the build in progress (a writer's refresh starts over instead:
    // a_writers_refresh_starts_over_a_generation_stuck_building_for_days).
    let gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Building, DAY),
    ];
    let plan = plan(policy(), Some(&wanted("c", 1)), &gens, 1, DAY + 2 * HOUR);
    assert_eq!(plan.build, None);
    assert!(plan.retire.is_empty(), "{plan:?}");
    assert!(plan.time_out.is_empty(), "{plan:?}");
}

#[test]
fn a_build_past_its_deadline_fails_and_the_next_push_builds_again() {
    let gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Building, DAY),
    ];
    let plan = plan(policy(), Some(&wanted("c", 1)), &gens, 1, 2 * DAY);
    assert_eq!(plan.time_out, [20]);
    assert_eq!(plan.build, Some((3, "c".into())));
    // Failed now; it goes once the newer one exists (the next pass).
    let next = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Failed, DAY),
        built(3, "c", GenState::Building, 2 * DAY),
    ];
    let after = super::plan(policy(), Some(&wanted("c", 0)), &next, 1, 2 * DAY);
    assert_eq!(after.retire, [20]);
}

#[test]
fn a_ready_generation_retires_the_one_before_once_its_clones_are_done() {
    let mut gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Ready, DAY),
    ];
    gens[0].clones_pending = 1;
    let waiting = plan(policy(), Some(&wanted("b", 0)), &gens, 2, 2 * DAY);
    assert!(waiting.retire.is_empty(), "{waiting:?}");
    gens[0].clones_pending = 0;
    let done = plan(policy(), Some(&wanted("b", 0)), &gens, 2, 2 * DAY);
    assert_eq!(done.retire, [10]);
}

#[test]
fn a_failed_build_keeps_the_current_generation_and_stays_to_say_why() {
    let gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Failed, DAY),
    ];
    let plan = plan(policy(), Some(&wanted("b", 0)), &gens, 1, 2 * DAY);
    assert_eq!(current(&gens).map(|g| g.generation), Some(1));
    assert!(plan.retire.is_empty(), "{plan:?}");
    assert_eq!(plan.build, None);
    // The next push past template_refresh tries again; the failed one goes once it exists.
    let later = [
        gens[0].clone(),
        gens[1].clone(),
        built(3, "c", GenState::Building, 3 * DAY),
    ];
    let after = super::plan(policy(), Some(&wanted("c", 0)), &later, 1, 3 * DAY);
    assert_eq!(after.retire, [20]);
}

#[test]
fn the_last_preview_leaving_keeps_the_template_until_template_idle() {
    let mut w = wanted("a", 0);
    w.last_used_at = 0;
    let gens = [built(1, "a", GenState::Ready, 0)];
    let kept = plan(policy(), Some(&w), &gens, 0, 14 * DAY - 1);
    assert_eq!((kept.destroy, kept.retire.len()), (None, 0));
    let idle = plan(policy(), Some(&w), &gens, 0, 14 * DAY);
    assert_eq!(idle.destroy, Some("idle"));
    assert_eq!(idle.retire, [10]);
    // A live preview keeps it however long nothing was cloned.
    let used = plan(policy(), Some(&w), &gens, 1, 100 * DAY);
    assert_eq!(used.destroy, None);
}

#[test]
fn a_repository_leaving_the_configuration_or_destroyed_loses_every_generation() {
    let gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Building, DAY),
    ];
    let left = plan(None, Some(&wanted("b", 0)), &gens, 3, DAY);
    assert_eq!(left.destroy, Some("unlisted"));
    assert_eq!(left.retire, [10, 20]);
    assert_eq!(left.build, None);
    let mut w = wanted("b", 2);
    w.destroy = Some("destroyed".into());
    let mut pending = gens.clone();
    pending[0].clones_pending = 2;
    let destroyed = plan(policy(), Some(&w), &pending, 3, DAY);
    assert_eq!(destroyed.retire, [10, 20]);
    assert_eq!((destroyed.build, destroyed.destroy), (None, None));
}

#[test]
fn a_writers_refresh_starts_over_a_generation_stuck_building_for_days() {
    // Generation 2's Application never finishes (a Job waiting on a Secret that never
    // unseals: Argo CD's sync has no deadline by default); generation 1 is current.
    let gens = [
        built(1, "a", GenState::Ready, 0),
        built(2, "b", GenState::Building, DAY),
    ];
    let plan = plan(policy(), Some(&wanted("c", 2)), &gens, 1, 30 * DAY);
    assert!(
        plan.build.is_some() || plan.retire.contains(&20),
        "a month on, /preview refresh-template (answered \"building the next generation\") \
         builds nothing and nothing ever will: {plan:?}"
    );
}
