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
        sleeping_since: None,
        woke_at: None,
        version: 0,
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
        public_url: Some("https://previewd.example.com"),
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

#[test]
fn a_share_lasts_what_was_asked_within_a_week_and_the_previews_life() {
    let config = defaults();
    let row = PreviewRow {
        expires_at: 2 * HOUR + 30 * 24 * HOUR,
        ..preview()
    };
    let (effects, outcome) = decide(asked("/preview share", &row, &config));
    assert!(
        effects.is_empty(),
        "a share is a row of its own, made in finish"
    );
    assert_eq!(
        outcome,
        Outcome::Shared {
            until: 2 * HOUR + 24 * HOUR,
            now: 2 * HOUR,
            cap: None,
            preview: &row.key,
            public_url: Some("https://previewd.example.com"),
        }
    );
    let (_, outcome) = decide(asked("/preview share 30d", &row, &config));
    assert!(matches!(
        outcome,
        Outcome::Shared { until, cap: Some(command::ShareCap::Longest), .. } if until == 2 * HOUR + 7 * 24 * HOUR
    ));
    // The fixture preview expires at 2h, when the command runs: no link outlives it.
    let due = preview();
    let (effects, outcome) = decide(asked("/preview share 2d", &due, &config));
    assert!(effects.is_empty());
    assert_eq!(outcome, Outcome::ShareExpiring);
    let soon = PreviewRow {
        expires_at: 3 * HOUR,
        ..preview()
    };
    let (_, outcome) = decide(asked("/preview share 2d", &soon, &config));
    assert!(matches!(
        outcome,
        Outcome::Shared { until, cap: Some(command::ShareCap::PreviewExpiry), .. } if until == 3 * HOUR
    ));
}

#[test]
fn sharing_an_ended_or_unknown_preview_makes_nothing() {
    let config = defaults();
    let ended = PreviewRow {
        desired: Desired::Absent,
        end_reason: Some(EndReason::Destroyed),
        expires_at: 100 * HOUR,
        ..preview()
    };
    for line in ["/preview share", "/preview unshare"] {
        let (effects, outcome) = decide(asked(line, &ended, &config));
        assert!(effects.is_empty());
        assert_eq!(outcome, Outcome::NoPreview, "{line}");
        let none = decide(Asked {
            preview: None,
            ..asked(line, &ended, &config)
        });
        assert_eq!(none.1, Outcome::NoPreview, "{line}");
    }
    let live = preview();
    let (effects, outcome) = decide(asked("/preview unshare", &live, &config));
    assert!(effects.is_empty());
    assert_eq!(
        outcome,
        Outcome::Unshared { revoked: 0 },
        "counted in finish"
    );
}
