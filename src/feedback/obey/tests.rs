//! The command decision, as sentences: what each command does to a preview, and the reply.

use super::*;
use crate::config::Config;

const HOUR: i64 = 3600;

fn defaults() -> Config {
    Config::from_toml("", Vec::new()).unwrap()
}

/// A deployed preview of a fork's PR created at 0, its head pushed at `HOUR`.
fn preview() -> PreviewRow {
    PreviewRow {
        id: 7,
        key: PreviewKey::new("octo/app".parse().unwrap(), 12),
        title: "Add a thing".into(),
        author: "mallory".into(),
        head_sha: "c0ffee0123456789c0ffee0123456789c0ffee01".into(),
        fork: true,
        approved_sha: None,
        desired: Desired::Deployed,
        observed: ObservedState::Ready,
        end_reason: None,
        last_error: None,
        cluster: None,
        applied_hash: None,
        teardown_started_at: None,
        seed_generation: 0,
        expires_at: 2 * HOUR,
        installation_id: None,
        keep: false,
        redeploy_generation: 0,
        created_at: 0,
        head_changed_at: HOUR,
        names: None,
        draft: false,
        labeled: false,
        deploy_by: None,
        paths_file: None,
        paths_sha: None,
        wait_override_sha: None,
        template_generation: None,
        template_seed: None,
    }
}

fn asked<'a>(command: &str, row: &'a PreviewRow, config: &'a Config) -> Asked<'a> {
    Asked {
        command: command::parse(command).unwrap(),
        actor: "maintainer",
        seen_at: 2 * HOUR,
        now: 2 * HOUR,
        preview: Some(row),
        policy: &config.defaults,
        template: false,
        template_base_known: false,
        status: None,
    }
}

#[test]
fn an_extension_ends_at_the_lifetime_cap() {
    let (config, row) = (defaults(), preview());
    let cap = i64::try_from(config.defaults.max_lifetime.as_secs()).unwrap();
    let (effects, outcome) = decide(asked("/preview extend 365d", &row, &config));
    assert_eq!(effects, vec![Effect::ExpireAt(cap)]);
    assert!(matches!(outcome, Outcome::Extended { until, capped: true, .. } if until == cap));
}

#[test]
fn a_forks_approval_names_the_head_the_approver_saw() {
    let (config, row) = (defaults(), preview());
    let (effects, outcome) = decide(asked("/preview approve", &row, &config));
    assert!(effects.is_empty());
    assert!(matches!(outcome, Outcome::ApprovalNeedsCommit { .. }));

    let (effects, _) = decide(asked("/preview approve c0ffee0", &row, &config));
    assert_eq!(
        effects,
        vec![Effect::Approve {
            sha: &row.head_sha,
            seen_at: 2 * HOUR
        }]
    );

    let before_the_push = Asked {
        seen_at: HOUR,
        ..asked("/preview approve c0ffee0", &row, &config)
    };
    let (effects, outcome) = decide(before_the_push);
    assert!(effects.is_empty(), "a tie with the push is refused too");
    assert_eq!(outcome, Outcome::ChangedSinceApproval);
}

#[test]
fn only_a_destroyed_preview_comes_back_on_deploy_not_a_closed_ones() {
    let config = defaults();
    let gone = |reason: EndReason| PreviewRow {
        desired: Desired::Absent,
        fork: false,
        end_reason: Some(reason),
        ..preview()
    };
    let closed = gone(EndReason::Closed);
    let (effects, outcome) = decide(asked("/preview deploy", &closed, &config));
    assert!(effects.is_empty());
    assert_eq!(outcome, Outcome::NoPreview);

    let destroyed = gone(EndReason::Destroyed);
    let (effects, outcome) = decide(asked("/preview deploy", &destroyed, &config));
    assert_eq!(outcome, Outcome::Deploying);
    assert!(matches!(
        effects[0],
        Effect::Deploy {
            by: "maintainer",
            ..
        }
    ));
}

#[test]
fn without_a_preview_status_says_so_and_destroy_is_already_done() {
    let (config, row) = (defaults(), preview());
    let none = |command: &str| {
        decide(Asked {
            preview: None,
            ..asked(command, &row, &config)
        })
        .1
    };
    assert_eq!(none("/preview destroy"), Outcome::AlreadyGone);
    assert_eq!(
        none("/preview status"),
        Outcome::Status(comment::no_preview_status())
    );
    assert_eq!(none("/preview extend 1d"), Outcome::NoPreview);
}
