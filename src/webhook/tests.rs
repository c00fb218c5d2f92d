//! Signature checks and payload conversion, against GitHub's test vector and recorded payloads.

use super::*;
use crate::checks::{CheckState, Source};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/github/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn event_of(name: &str) -> Event {
    let header = name.split('.').next().unwrap();
    parse(header, &fixture(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .1
}

fn secret(s: &str) -> SecretString {
    crate::config::Config::from_toml(&format!("[github]\nwebhook_secret = {s:?}\n"), Vec::new())
        .unwrap()
        .github
        .webhook_secret
        .unwrap()
}

#[test]
fn githubs_published_signature_test_vector_verifies() {
    let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    assert_eq!(
        verify(
            &secret("It's a Secret to Everybody"),
            signature,
            b"Hello, World!"
        ),
        Ok(())
    );
}

#[test]
fn altered_bodies_secrets_and_signatures_fail() {
    let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let s = secret("It's a Secret to Everybody");
    assert!(verify(&s, good, b"Hello, World?").is_err());
    assert!(verify(&secret("another secret, as long"), good, b"Hello, World!").is_err());
    assert!(verify(&s, &good.replace("757", "758"), b"Hello, World!").is_err());
    assert!(verify(&s, &good.replace("sha256=", ""), b"Hello, World!").is_err());
    assert!(
        verify(
            &s,
            "sha1=0123456789abcdef0123456789abcdef01234567",
            b"Hello, World!"
        )
        .is_err()
    );
    assert!(verify(&s, "sha256=zz", b"Hello, World!").is_err());
}

#[test]
fn opened_pr_becomes_a_pull_request_event() {
    let Event::PullRequest(pr) = event_of("pull_request.opened") else {
        panic!("not a PR")
    };
    assert_eq!(pr.action, PrAction::Opened);
    assert_eq!(pr.key.to_string(), "codertocat/hello-world#2");
    assert_eq!(
        pr.head_sha.as_str(),
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    assert_eq!(
        (pr.head_ref.as_str(), pr.base_ref.as_str()),
        ("changes", "master")
    );
    assert_eq!(
        (pr.author.as_str(), pr.sender.as_str()),
        ("Codertocat", "Codertocat")
    );
    assert_eq!(pr.installation_id, Some(1));
    assert!(!pr.fork && !pr.draft);
    assert_eq!(pr.updated_at, Some(1_557_933_633));
}

#[test]
fn forks_are_told_by_repository_id_not_by_the_fork_flag() {
    let Event::PullRequest(fork) = event_of("pull_request.synchronize.fork") else {
        panic!()
    };
    assert!(fork.fork);
    // Both sides of this PR have `fork: true`, yet head and base repositories differ.
    let Event::PullRequest(merged) = event_of("pull_request.closed.merged.fork") else {
        panic!()
    };
    assert!(merged.fork);
    assert_eq!(merged.action, PrAction::Closed { merged: true });
    let Event::PullRequest(same_repo) = event_of("pull_request.synchronize") else {
        panic!()
    };
    assert!(!same_repo.fork);
}

#[test]
fn a_deleted_head_repository_counts_as_a_fork() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.synchronize")).unwrap();
    json["pull_request"]["head"]["repo"] = serde_json::Value::Null;
    let Event::PullRequest(pr) = parse("pull_request", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert!(pr.fork);
}

#[test]
fn every_pull_request_action_previewd_knows_is_converted() {
    let cases = [
        ("pull_request.reopened", PrAction::Reopened),
        ("pull_request.synchronize", PrAction::Synchronize),
        ("pull_request.ready_for_review", PrAction::ReadyForReview),
        (
            "pull_request.converted_to_draft",
            PrAction::ConvertedToDraft,
        ),
        (
            "pull_request.closed.unmerged",
            PrAction::Closed { merged: false },
        ),
        ("pull_request.labeled", PrAction::Labeled),
        ("pull_request.unlabeled", PrAction::Unlabeled),
        ("pull_request.edited", PrAction::Edited),
        ("pull_request.opened.with-null-body", PrAction::Opened),
    ];
    for (name, action) in cases {
        let Event::PullRequest(pr) = event_of(name) else {
            panic!("{name}")
        };
        assert_eq!(pr.action, action, "{name}");
    }
    let Event::PullRequest(draft) = event_of("pull_request.converted_to_draft") else {
        panic!()
    };
    assert!(draft.draft);
}

#[test]
fn a_preview_command_on_a_pr_is_queued_with_its_author() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("issue_comment.created.pull_request")).unwrap();
    json["comment"]["body"] = "LGTM!\r\n  /preview extend 2d  \nthanks".into();
    let Event::Command(command) = parse("issue_comment", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert_eq!(command.key.to_string(), "chhsia0/knative-route-demo#3");
    assert_eq!(command.line, "/preview extend 2d");
    assert_eq!(command.actor, "chhsia0");
    assert_eq!(command.association, "OWNER");
}

#[test]
fn comments_that_are_not_commands_are_ignored() {
    // The recorded comment says `/build`, not `/preview`.
    assert!(matches!(
        event_of("issue_comment.created.pull_request"),
        Event::Ignored(_)
    ));
    for name in [
        "issue_comment.created.issue",
        "issue_comment.created.issue.with-installation",
        "issue_comment.edited.pull_request",
        "issue_comment.edited.pull_request.bot-sticky",
        "issue_comment.deleted.pull_request",
        "issue_comment.edited.issue",
        "issue_comment.deleted.issue",
    ] {
        assert!(matches!(event_of(name), Event::Ignored(_)), "{name}");
    }
}

#[test]
fn bots_cannot_issue_commands() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("issue_comment.created.pull_request")).unwrap();
    json["comment"]["body"] = "/preview destroy".into();
    json["comment"]["user"]["type"] = "Bot".into();
    let (_, event) = parse("issue_comment", json.to_string().as_bytes()).unwrap();
    assert!(matches!(event, Event::Ignored(why) if why.contains("bot")));
}

#[test]
fn command_lines_must_start_with_the_word_preview_and_are_bounded() {
    assert_eq!(
        crate::command::find_line("/preview"),
        Some("/preview".into())
    );
    assert_eq!(
        crate::command::find_line("/preview   help"),
        Some("/preview   help".into())
    );
    assert_eq!(crate::command::find_line("/previews please"), None);
    assert_eq!(crate::command::find_line("please /preview destroy"), None);
    assert_eq!(
        crate::command::find_line(&format!("/preview {}", "x".repeat(500)))
            .unwrap()
            .chars()
            .count(),
        200
    );
    assert_eq!(
        crate::command::find_line(&format!("/preview {}", "é".repeat(300)))
            .unwrap()
            .chars()
            .count(),
        200
    );
}

#[test]
fn installations_list_the_repositories_they_serve() {
    let Event::Installation(InstallationChange::Present { id, account, repos }) =
        event_of("installation.created")
    else {
        panic!()
    };
    assert_eq!((id, account.as_str()), (957_387, "Codertocat"));
    assert_eq!(repos[0].as_str(), "codertocat/hello-world");
    assert_eq!(
        event_of("installation.deleted"),
        Event::Installation(InstallationChange::Gone { id: 2 })
    );
    assert!(matches!(
        event_of("installation_repositories.added"),
        Event::Installation(InstallationChange::ReposAdded { .. })
    ));
    assert!(matches!(
        event_of("installation_repositories.removed"),
        Event::Installation(InstallationChange::ReposRemoved { .. })
    ));
    assert_eq!(event_of("ping"), Event::Ping);
    assert_eq!(event_of("ping.with-app_id"), Event::Ping);
}

#[test]
fn unknown_events_and_new_actions_are_ignored_not_rejected() {
    assert!(matches!(event_of("push"), Event::Ignored(_)));
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
    json["action"] = "teleported".into();
    let (action, event) = parse("pull_request", json.to_string().as_bytes()).unwrap();
    assert_eq!(action.as_deref(), Some("teleported"));
    assert!(matches!(event, Event::Ignored(why) if why.contains("pull_request.teleported")));
}

#[test]
fn wrong_types_and_broken_json_are_rejected() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
    json["pull_request"]["head"]["sha"] = 42.into();
    assert!(matches!(
        parse("pull_request", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    json["pull_request"]["head"]["sha"] = "not-a-sha".into();
    assert!(matches!(
        parse("pull_request", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    let body = fixture("pull_request.opened");
    assert!(matches!(
        parse("pull_request", &body[..body.len() / 2]),
        Err(Rejection::InvalidJson(_))
    ));
    assert!(matches!(
        parse("pull_request", b"payload=%7B%7D"),
        Err(Rejection::InvalidJson(_))
    ));
}

#[test]
fn receive_checks_headers_before_the_body() {
    let s = secret("It's a Secret to Everybody");
    let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let headers = Headers {
        event: Some("ping"),
        guid: Some("g-1"),
        hook_id: Some("7"),
        signature: Some(signature),
        content_type: Some("application/json"),
    };
    assert_eq!(
        receive(None, headers, b"Hello, World!"),
        Err(Rejection::NoSecret)
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                event: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-GitHub-Event"))
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                guid: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-GitHub-Delivery"))
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                signature: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-Hub-Signature-256"))
    );
    assert!(matches!(
        receive(
            Some(&s),
            Headers {
                hook_id: Some("x; drop"),
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::BadHeader(..))
    ));
    assert!(matches!(
        receive(
            Some(&s),
            Headers {
                content_type: Some("application/x-www-form-urlencoded"),
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::NotJson(_))
    ));
    // Signature and headers fine, body not JSON.
    assert!(matches!(
        receive(Some(&s), headers, b"Hello, World!"),
        Err(Rejection::InvalidJson(_))
    ));
}

fn json_of(name: &str) -> serde_json::Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}

/// `json` as delivered under `event`, which must be a CI event.
fn check_of(event: &str, json: &serde_json::Value) -> CheckEvent {
    match parse(event, json.to_string().as_bytes()) {
        Ok((_, Event::Check(check))) => check,
        other => panic!("{event}: expected a check, got {other:?}"),
    }
}

fn report_of(event: &str, json: &serde_json::Value) -> CheckReport {
    check_of(event, json).report.expect("a report")
}

#[test]
fn a_completed_check_run_reports_its_name_and_conclusion_on_its_head_sha() {
    let Event::Check(check) = event_of("check_run.completed") else {
        panic!("not a check")
    };
    assert_eq!(check.repo.as_str(), "codertocat/hello-world");
    assert_eq!(check.installation_id, None);
    assert_eq!(
        check.sha.as_str(),
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    assert_eq!(
        check.report,
        Some(CheckReport {
            source: Source::CheckRun,
            name: "Octocoders-linter".into(),
            state: CheckState::Succeeded,
            conclusion: "success".into(),
            url: Some("https://github.com/Codertocat/Hello-World/runs/128620228".into()),
            // completed_at 2019-05-15T15:21:12Z
            at: 1_557_933_672,
        })
    );
}

#[test]
fn a_completed_check_suite_names_only_its_commit_for_its_checks_to_be_looked_up() {
    let Event::Check(check) = event_of("check_suite.completed") else {
        panic!("not a check")
    };
    assert_eq!(check.repo.as_str(), "codertocat/hello-world");
    assert_eq!(
        check.sha.as_str(),
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    assert_eq!(check.report, None);
}

#[test]
fn a_commit_status_reports_its_context_and_state_on_its_sha() {
    let Event::Check(check) = event_of("status") else {
        panic!("not a check")
    };
    assert_eq!(check.repo.as_str(), "codertocat/hello-world");
    assert_eq!(
        check.sha.as_str(),
        "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
    );
    assert_eq!(
        check.report,
        Some(CheckReport {
            source: Source::Status,
            name: "default".into(),
            state: CheckState::Succeeded,
            conclusion: "success".into(),
            // The recorded status has `target_url: null`.
            url: None,
            // updated_at 2019-05-15T15:20:55+00:00
            at: 1_557_933_655,
        })
    );
}

#[test]
fn a_workflow_run_reports_under_its_workflows_name_when_the_run_has_none() {
    // The recorded run's `name` is empty; its workflow is called "test".
    let Event::Check(check) = event_of("workflow_run.completed.with-pull-requests") else {
        panic!("not a check")
    };
    assert_eq!(check.repo.as_str(), "octo-org/octo-repo");
    assert_eq!(
        check.sha.as_str(),
        "3484a3fb816e0859fd6e1cea078d76385ff50625"
    );
    assert_eq!(
        check.report,
        Some(CheckReport {
            source: Source::Workflow,
            name: "test".into(),
            state: CheckState::Succeeded,
            conclusion: "success".into(),
            url: Some("https://github.com/octo-org/octo-repo/actions/runs/289782451".into()),
            // workflow_run.updated_at 2020-10-05T16:33:49Z
            at: 1_601_915_629,
        })
    );
}

#[test]
fn a_workflow_whose_name_is_empty_falls_back_to_the_runs_name() {
    let mut json = json_of("workflow_run.completed.with-pull-requests");
    json["workflow"]["name"] = "".into();
    json["workflow_run"]["name"] = "CI".into();
    assert_eq!(report_of("workflow_run", &json).name, "CI");
    json["workflow"] = serde_json::Value::Null;
    assert_eq!(report_of("workflow_run", &json).name, "CI");
    // The workflow's own name, when it has one, is the name `wait_for` says.
    json["workflow"] = serde_json::json!({ "name": "test" });
    assert_eq!(report_of("workflow_run", &json).name, "test");
}

#[test]
fn a_workflow_run_in_progress_is_pending() {
    let mut json = json_of("workflow_run.completed.with-pull-requests");
    json["action"] = "in_progress".into();
    json["workflow_run"]["status"] = "in_progress".into();
    json["workflow_run"]["conclusion"] = serde_json::Value::Null;
    let report = report_of("workflow_run", &json);
    assert_eq!(report.state, CheckState::Pending);
    assert_eq!(report.conclusion, "in_progress");
}

#[test]
fn a_check_run_created_in_progress_is_pending_as_of_its_start() {
    let mut json = json_of("check_run.completed");
    json["action"] = "created".into();
    json["check_run"]["status"] = "in_progress".into();
    json["check_run"]["conclusion"] = serde_json::Value::Null;
    json["check_run"]["completed_at"] = serde_json::Value::Null;
    json["check_run"]["started_at"] = "2019-05-15T15:21:02Z".into();
    let report = report_of("check_run", &json);
    assert_eq!(report.state, CheckState::Pending);
    assert_eq!(report.conclusion, "in_progress");
    assert_eq!(report.at, 1_557_933_662);
}

#[test]
fn a_failed_check_run_is_failed_with_githubs_word() {
    let mut json = json_of("check_run.completed");
    json["check_run"]["conclusion"] = "timed_out".into();
    let report = report_of("check_run", &json);
    assert_eq!(report.state, CheckState::Failed);
    assert_eq!(report.conclusion, "timed_out");
}

#[test]
fn check_actions_that_carry_no_new_state_are_ignored() {
    for (event, fixture, action) in [
        ("check_suite", "check_suite.completed", "requested"),
        ("check_suite", "check_suite.completed", "rerequested"),
        ("check_run", "check_run.completed", "rerequested"),
        ("check_run", "check_run.completed", "requested_action"),
        (
            "workflow_run",
            "workflow_run.completed.with-pull-requests",
            "teleported",
        ),
    ] {
        let mut json = json_of(fixture);
        json["action"] = action.into();
        let (got, event) = parse(event, json.to_string().as_bytes()).unwrap();
        assert_eq!(got.as_deref(), Some(action));
        assert!(
            matches!(&event, Event::Ignored(why) if why.contains(action)),
            "{action}: {event:?}"
        );
    }
}

#[test]
fn a_pending_status_is_pending_and_an_error_is_failed() {
    let mut json = json_of("status");
    json["state"] = "pending".into();
    assert_eq!(report_of("status", &json).state, CheckState::Pending);
    json["state"] = "error".into();
    json["target_url"] = "https://ci.example.com/builds/7".into();
    let report = report_of("status", &json);
    assert_eq!(report.state, CheckState::Failed);
    assert_eq!(report.conclusion, "error");
    assert_eq!(
        report.url.as_deref(),
        Some("https://ci.example.com/builds/7")
    );
}

#[test]
fn a_check_delivered_to_an_app_carries_its_installation() {
    let mut json = json_of("check_run.completed");
    json["installation"] = serde_json::json!({ "id": 42, "node_id": "x" });
    assert_eq!(check_of("check_run", &json).installation_id, Some(42));
}

#[test]
fn a_check_payload_without_its_head_sha_or_another_required_field_is_malformed() {
    for (event, fixture, object, field) in [
        ("check_run", "check_run.completed", "check_run", "head_sha"),
        (
            "check_suite",
            "check_suite.completed",
            "check_suite",
            "head_sha",
        ),
        (
            "workflow_run",
            "workflow_run.completed.with-pull-requests",
            "workflow_run",
            "head_sha",
        ),
        ("check_run", "check_run.completed", "check_run", "name"),
        ("check_run", "check_run.completed", "check_run", "status"),
    ] {
        let mut json = json_of(fixture);
        json[object].as_object_mut().unwrap().remove(field);
        match parse(event, json.to_string().as_bytes()) {
            Err(Rejection::Malformed { event: e, message }) => {
                assert_eq!(e, event);
                assert!(message.contains(field), "{message}");
            }
            other => panic!("{object}.{field}: {other:?}"),
        }
    }
    let mut status = json_of("status");
    status.as_object_mut().unwrap().remove("sha");
    assert!(matches!(
        parse("status", status.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
}

#[test]
fn bad_shas_repositories_and_times_in_checks_are_malformed() {
    let malformed = |json: &serde_json::Value| {
        matches!(
            parse("check_run", json.to_string().as_bytes()),
            Err(Rejection::Malformed { .. })
        )
    };
    let good = json_of("check_run.completed");
    let mut json = good.clone();
    json["check_run"]["head_sha"] = "not-a-sha".into();
    assert!(malformed(&json));
    let mut json = good.clone();
    json["repository"]["full_name"] = "no-slash".into();
    assert!(malformed(&json));
    let mut json = good.clone();
    json.as_object_mut().unwrap().remove("repository");
    assert!(malformed(&json));
    let mut json = good.clone();
    json["check_run"]["completed_at"] = "yesterday".into();
    assert!(malformed(&json));
    let mut json = good;
    json["check_run"]["completed_at"] = serde_json::Value::Null;
    json["check_run"]["started_at"] = serde_json::Value::Null;
    assert!(malformed(&json));
}

#[test]
fn overlong_names_are_malformed_and_overlong_links_dropped() {
    let mut json = json_of("check_run.completed");
    json["check_run"]["name"] = "x".repeat(200).into();
    assert_eq!(report_of("check_run", &json).name.len(), 200);
    json["check_run"]["name"] = "x".repeat(201).into();
    assert!(matches!(
        parse("check_run", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    let mut json = json_of("status");
    json["context"] = "".into();
    assert!(matches!(
        parse("status", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    json["context"] = "ci/build".into();
    json["target_url"] = format!("https://ci.example.com/{}", "x".repeat(2_000)).into();
    let report = report_of("status", &json);
    assert_eq!(report.url, None, "a cut link would point elsewhere");
    assert_eq!(report.name, "ci/build");
}

#[test]
fn escaped_names_are_read_whole() {
    // Borrowing from the body is only an optimisation: an escaped string is copied.
    let body = String::from_utf8(fixture("check_run.completed"))
        .unwrap()
        .replace("\"Octocoders-linter\"", "\"lint \\\"strict\\\" \\u00e9\"");
    let (_, Event::Check(check)) = parse("check_run", body.as_bytes()).unwrap() else {
        panic!()
    };
    assert_eq!(check.report.unwrap().name, "lint \"strict\" é");
}
