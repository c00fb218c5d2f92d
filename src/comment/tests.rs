//! The words reviewers read, snapshot-tested.

use super::*;

const NOW: i64 = 1_780_000_000; // 2026-05-28 20:26:40 UTC
const SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

fn view(shown: Shown) -> StatusView<'static> {
    StatusView {
        shown,
        url: "https://pv-codertocat-hello-world-4d960c3af87af320-pr-2.preview.example.com".into(),
        head_sha: SHA,
        cluster: Some("eu-1"),
        expires_at: Some(NOW + 2 * 86_400 + 3 * 3600),
        keep: false,
        last_error: None,
        dashboard: Some("https://previewd.example.com/previews/Codertocat/Hello-World/2".into()),
        end_reason: None,
        position: None,
        opt_out: None,
        ci: None,
        access: Some((Access::Repo, "codertocat/hello-world")),
        inbox: None,
        sleeping_since: None,
    }
}

#[test]
fn a_sleeping_preview_says_since_when_and_how_to_wake_it() {
    let view = StatusView {
        sleeping_since: Some(NOW - 3600),
        ..view(Shown::Sleeping)
    };
    insta::assert_snapshot!(status(&view));
}

#[test]
fn ready_status_shows_url_commit_cluster_expiry_and_how_to_extend() {
    insta::assert_snapshot!(status(&view(Shown::Ready)));
}

/// The error's text is internal (a hook's output, addresses, user names): the PR is told
/// what failed and where an operator finds the rest.
#[test]
fn failed_status_says_what_failed_and_links_the_dashboard_not_the_error() {
    let mut failed = view(Shown::Failed);
    let error = "hook Job/pr-2-migrate failed: Job has reached the specified backoff limit \
                 (psql: connection to 10.3.0.7:5432 failed: password authentication failed for user \"pr_2\") \
                 (Argo CD: one or more synchronization tasks completed unsuccessfully)";
    failed.last_error = Some(error);
    let body = status(&failed);
    for secret in ["10.3.0.7", "pr_2", "psql", "backoff", "Job/"] {
        assert!(!body.contains(secret), "{secret} leaked: {body}");
    }
    assert!(body.contains("the migrations hook failed"), "{body}");
    insta::assert_snapshot!(body);
    failed.dashboard = None;
    assert!(status(&failed).contains("`previewd show`"));
}

#[test]
fn every_failure_is_named_by_its_kind_and_never_quoted() {
    let cases = [
        (
            "hook Job/pr-2-migrate failed: x",
            "the migrations hook failed",
        ),
        (
            "hook Job/pr-2-seed failed: x",
            "the seed hook (loading the seed data) failed",
        ),
        (
            "hook Job/pr-2-db-ready failed: x",
            "the database setup hook failed",
        ),
        ("hook Job/app-smoke-test failed: x", "a sync hook failed"),
        (
            "resource Deployment/web failed: admission webhook denied: x",
            "Argo CD could not sync one of the preview's resources",
        ),
        (
            "InvalidSpecError: application repo https://github.com/o/r.git is not permitted",
            "Argo CD refused the preview's Application",
        ),
        (
            "ComparisonError: rpc error: helm template failed",
            "Argo CD could not render the preview's manifests",
        ),
        (
            "Deployment/web is degraded: Deployment exceeded its progress deadline",
            "the preview deployed, but its app is unhealthy",
        ),
        (
            "applying pr-2-helpers: ApiError: connection refused 10.0.0.1:6443",
            "the deployment failed",
        ),
        ("", "the deployment failed"),
    ];
    for (error, said) in cases {
        assert_eq!(what_failed(error), said, "{error}");
        let detailed = format!("{error} (internal-detail-42)");
        assert_eq!(what_failed(&detailed), said, "{detailed}");
        let mut failed = view(Shown::Failed);
        failed.last_error = Some(&detailed);
        let body = status(&failed);
        assert!(!body.contains("internal-detail-42"), "{body}");
    }
}

#[test]
fn fork_status_says_how_to_approve() {
    insta::assert_snapshot!(status(&view(Shown::AwaitingApproval)));
}

#[test]
fn destroyed_status_says_why_and_how_to_get_a_new_one() {
    let mut gone = view(Shown::Destroyed);
    gone.end_reason = Some(EndReason::Merged);
    insta::assert_snapshot!(status(&gone));
}

#[test]
fn every_status_carries_the_marker() {
    for shown in [
        Shown::Queued,
        Shown::AwaitingApproval,
        Shown::Draft,
        Shown::Deploying,
        Shown::Ready,
        Shown::Failed,
        Shown::TearingDown,
        Shown::Destroyed,
    ] {
        assert!(status(&view(shown)).starts_with(MARKER), "{shown:?}");
    }
}

#[test]
fn replies_read_well() {
    let replies = [
        reply(
            &Outcome::Extended {
                until: NOW + 86_400,
                capped: false,
                now: NOW,
            },
            "alice",
        ),
        reply(
            &Outcome::Extended {
                until: NOW + 86_400,
                capped: true,
                now: NOW,
            },
            "alice",
        ),
        reply(
            &Outcome::Refused {
                actor: "mallory",
                command: Command::Destroy,
            },
            "mallory",
        ),
        reply(
            &Outcome::Refused {
                actor: "mallory",
                command: Command::Approve(None),
            },
            "mallory",
        ),
        reply(&Outcome::Approved { sha: SHA }, "maintainer"),
        reply(&Outcome::ApprovalNeedsCommit { head: SHA }, "maintainer"),
        reply(
            &Outcome::NotTheHead {
                named: crate::command::ShaPrefix::parse("5555555").unwrap(),
                head: SHA,
            },
            "maintainer",
        ),
        reply(
            &Outcome::Invalid(crate::command::parse("/preview destory").unwrap_err()),
            "alice",
        ),
        reply(&Outcome::NoPreview, "alice"),
    ];
    insta::assert_snapshot!(replies.join("\n---\n"));
}

fn hello() -> PreviewKey {
    PreviewKey::new("codertocat/hello-world".parse().unwrap(), 2)
}

/// A share's reply says a link was made, until when and where a writer gets it; never a
/// link (none is given to `reply` at all: it cannot leak one).
#[test]
fn share_replies_say_until_when_and_where_the_link_is_never_the_link() {
    let key = hello();
    let replies = [
        reply(
            &Outcome::Shared {
                until: NOW + 86_400,
                now: NOW,
                cap: None,
                preview: &key,
                public_url: Some("https://previewd.example.com"),
            },
            "writer",
        ),
        reply(
            &Outcome::Shared {
                until: NOW + 7 * 86_400,
                now: NOW,
                cap: Some(ShareCap::Longest),
                preview: &key,
                public_url: None,
            },
            "writer",
        ),
        reply(
            &Outcome::Shared {
                until: NOW + 3600,
                now: NOW,
                cap: Some(ShareCap::PreviewExpiry),
                preview: &key,
                public_url: Some("https://previewd.example.com/"),
            },
            "writer",
        ),
        reply(&Outcome::TooManyShares { max: 20 }, "writer"),
        reply(&Outcome::ShareExpiring, "writer"),
        reply(&Outcome::Unshared { revoked: 0 }, "writer"),
        reply(&Outcome::Unshared { revoked: 1 }, "writer"),
        reply(&Outcome::Unshared { revoked: 3 }, "writer"),
        reply(
            &Outcome::Refused {
                actor: "reader",
                command: Command::Share(crate::command::SHARE_DEFAULT),
            },
            "reader",
        ),
    ];
    for text in &replies {
        assert!(!text.contains("__previewd"), "{text}");
        assert_eq!(crate::command::find_line(text), None, "{text}");
    }
    assert!(
        replies[0].contains("valid until 2026-05-29 20:26 UTC (in 1d)")
            && replies[0].contains(
                "`GET https://previewd.example.com/api/previews/codertocat/hello-world/2/shares`"
            )
            && replies[0]
                .contains("(https://previewd.example.com/previews/codertocat/hello-world/2)"),
        "{}",
        replies[0]
    );
    assert!(
        replies[2].contains("`GET https://previewd.example.com/api/previews/"),
        "one slash: {}",
        replies[2]
    );
    insta::assert_snapshot!(replies.join("\n---\n"));
}

#[test]
fn the_way_in_follows_the_repositorys_access_rule() {
    let repo = "octo-org/app_1";
    assert_eq!(
        way_in(Access::Repo, repo),
        "Sign in with GitHub (people who can read octo-org/app\\_1), or ask a writer for a share link: `/preview share 24h`"
    );
    assert_eq!(
        way_in(Access::Org, repo),
        "Sign in with GitHub (members of the octo-org organisation), or ask a writer for a share link: `/preview share 24h`"
    );
    assert_eq!(way_in(Access::Public, repo), "Open to anyone, no sign-in");
    let mut public = view(Shown::Ready);
    public.access = Some((Access::Public, repo));
    let body = status(&public);
    assert!(
        body.contains("| URL | https://pv-codertocat-hello-world-4d960c3af87af320-pr-2.preview.example.com |\n| Access | Open to anyone, no sign-in |\n"),
        "{body}"
    );
    assert_eq!(
        crate::command::find_line(&status(&view(Shown::Ready))),
        None,
        "the example command in the table runs nothing"
    );
    // No address, no way in: a preview still waiting says nothing of either.
    assert!(!status(&view(Shown::AwaitingApproval)).contains("| Access |"));
}

#[test]
fn help_lists_every_verb() {
    let help = help();
    for verb in crate::command::VERBS {
        assert!(help.contains(verb), "{verb}");
    }
}

#[test]
fn user_text_cannot_inject_markup_or_mentions() {
    assert_eq!(
        escape("<script>x</script>"),
        "&lt;script&gt;x&lt;/script&gt;"
    );
    assert_eq!(escape("a|b*c"), "a\\|b\\*c");
    assert_eq!(escape("evil\u{0007}\u{001b}[31m"), "evil\\[31m");
}

#[test]
fn times_are_absolute_and_relative() {
    assert_eq!(when(NOW + 90, NOW), "2026-05-28 20:28 UTC (in 2m)");
    assert_eq!(
        when(NOW + 2 * 86_400 + 3 * 3600 + 5, NOW),
        "2026-05-30 23:26 UTC (in 2d 3h)"
    );
    assert_eq!(when(NOW - 5, NOW), "2026-05-28 20:26 UTC (due now)");
}

#[test]
fn states_map_to_deployment_statuses() {
    assert_eq!(
        Shown::of(Desired::Deployed, ObservedState::Ready),
        Shown::Ready
    );
    assert_eq!(
        Shown::of(Desired::Deployed, ObservedState::Syncing),
        Shown::Deploying
    );
    assert_eq!(
        Shown::of(Desired::Deployed, ObservedState::Error),
        Shown::Failed
    );
    assert_eq!(
        Shown::of(Desired::Absent, ObservedState::Ready),
        Shown::TearingDown
    );
    assert_eq!(Shown::Ready.deployment_state(), Some("success"));
    assert_eq!(Shown::Destroyed.deployment_state(), Some("inactive"));
    assert_eq!(Shown::AwaitingApproval.deployment_state(), None);
}

#[test]
fn a_queued_preview_shows_its_place_and_warnings_carry_the_extend_command() {
    let mut queued = view(Shown::Queued);
    queued.position = Some(3);
    assert!(status(&queued).contains("| Queue | position 3 |"));
    let warning = expiry_warning("alice", NOW + 3600, NOW, false);
    assert!(
        warning.contains("@alice") && warning.contains("/preview extend 2d"),
        "{warning}"
    );
    assert_eq!(
        crate::command::find_line(&warning),
        None,
        "the example is in a code block: quoting it runs nothing"
    );
}

#[test]
fn a_pr_behind_a_label_is_told_how_to_get_a_preview() {
    let view = StatusView {
        opt_out: Some((OptOut::Label, "preview".into())),
        ..view(Shown::OptedOut)
    };
    insta::assert_snapshot!(status(&view));
}

#[test]
fn every_reason_for_no_preview_says_how_to_get_one() {
    for why in [
        OptOut::Label,
        OptOut::Comment,
        OptOut::Author,
        OptOut::Paths,
    ] {
        assert!(
            opted_out(why, "preview").contains("/preview deploy"),
            "{why:?}"
        );
    }
    assert!(opted_out(OptOut::Label, "needs *review*").contains(r"needs \*review\*"));
}

#[test]
fn waiting_for_ci_names_the_checks_and_since_when() {
    let wait = Wait::Waiting {
        pending: vec!["build-image".into(), "test".into()],
    };
    let view = StatusView {
        ci: Some((wait, NOW - 600)),
        ..view(Shown::WaitingForCi)
    };
    insta::assert_snapshot!(status(&view));
}

#[test]
fn a_failed_check_is_named_with_a_link_and_what_to_do() {
    let wait = Wait::Failed {
        name: "build-image".into(),
        conclusion: "failure".into(),
        url: Some("https://github.com/octo/app/actions/runs/42".into()),
    };
    let view = StatusView {
        ci: Some((wait, NOW - 600)),
        ..view(Shown::CiFailed)
    };
    insta::assert_snapshot!(status(&view));
}

/// Check names and links come from workflow files, which a PR's author writes.
#[test]
fn a_check_name_or_link_from_a_workflow_cannot_inject_markdown() {
    let wait = Wait::Failed {
        name: "build](https://evil.example)[x".into(),
        conclusion: "failure".into(),
        url: Some("javascript:alert(1)".into()),
    };
    let view = StatusView {
        ci: Some((wait, NOW)),
        ..view(Shown::CiFailed)
    };
    let body = status(&view);
    // Escaped, the brackets are text: no link to evil.example.
    assert!(
        body.contains(r"**build\](https://evil.example)\[x**"),
        "{body}"
    );
    assert!(!body.contains("javascript:"), "{body}");
}

#[test]
fn a_preview_the_directory_sink_wrote_is_rendered_and_the_pr_says_previewd_cannot_see_it() {
    assert_eq!(
        Shown::of(Desired::Deployed, ObservedState::Applied),
        Shown::Rendered
    );
    let text = status(&view(Shown::Rendered));
    assert!(
        text.contains("rendered to previewd's directory, where previewd cannot see how it runs"),
        "{text}"
    );
    assert_eq!(Shown::Rendered.deployment_state(), Some("in_progress"));
}

#[test]
fn a_preview_with_mail_links_its_inbox_behind_the_same_sign_in() {
    let mut ready = view(Shown::Ready);
    ready.inbox = Some(format!("{}/__mail/", ready.url));
    insta::assert_snapshot!(status(&ready));
}
