//! CI deliveries (`check_run`, `check_suite`, `status`, `workflow_run`) parsed from the
//! recorded payloads: what each reports, what is ignored, what is malformed.

use crate::checks::{CheckReport, CheckState, Source};
use crate::webhook::tests::{event_of, fixture};
use crate::webhook::{CheckEvent, Event, Rejection, parse};

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
