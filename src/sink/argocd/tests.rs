//! Argo CD's verdict read from the statuses real Argo CD v3.5 writes (shapes from
//! `controller/appcontroller.go` and gitops-engine's `sync_context.go`, as the faithful twin
//! in `../shared/tools/argocd_twin.py` reproduces them).

use serde_json::{Value, json};

use super::*;

const SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
const REVISION: &str = "8d1f4c2e0a9b7c6d5e4f3a2b1c0d9e8f7a6b5c4d";

fn source(generation: u32) -> Value {
    json!({"repoURL": "https://github.com/previewd/previewd.git", "path": "helpers-chart",
           "targetRevision": "v0.1.0",
           "helm": {"releaseName": "pr-2", "valuesObject": {"seed": {"generation": generation, "files": {}}}}})
}

/// The operation previewd asks for `rendering` (as `sync_request` writes it).
fn asked(rendering: &str) -> Value {
    json!({"sync": {"prune": true}, "initiatedBy": {"username": "previewd"},
           "info": [{"name": RENDERING_INFO, "value": rendering}]})
}

/// An Application previewd applied at rendering `rendering` with source `spec`, and the
/// status Argo CD wrote: compared at `compared`, its last operation `operation` (asked for
/// `asked_for`, None: Argo CD's own), ended in `phase` on source `operated`.
struct Status {
    rendering: &'static str,
    spec: Value,
    compared: Value,
    operated: Value,
    asked_for: Option<&'static str>,
    phase: &'static str,
    health: &'static str,
    extra: Value,
}

impl Status {
    fn ready() -> Self {
        Self {
            rendering: "r1",
            spec: source(1),
            compared: source(1),
            operated: source(1),
            asked_for: Some("r1"),
            phase: "Succeeded",
            health: "Healthy",
            extra: json!({}),
        }
    }

    fn app(self) -> Application {
        let operation = match self.asked_for {
            Some(rendering) => asked(rendering),
            None => json!({"sync": {"prune": true}, "initiatedBy": {"automated": true}}),
        };
        let mut status = json!({
            "sync": {"status": "Synced", "revision": REVISION, "comparedTo": {"source": self.compared}},
            "health": {"status": self.health},
            "operationState": {"phase": self.phase, "message": "successfully synced (all tasks run)",
                               "operation": operation,
                               "syncResult": {"revision": REVISION, "source": self.operated}},
        });
        for (k, v) in self.extra.as_object().unwrap() {
            status[k] = v.clone();
        }
        serde_json::from_value(json!({
            "metadata": {"name": "a", "annotations": {APPLIED_HASH: self.rendering}},
            "spec": {"source": self.spec}, "status": status}))
        .unwrap()
    }
}

fn failed_migration() -> Value {
    json!({"phase": "Failed",
           "message": "one or more synchronization tasks completed unsuccessfully",
           "operation": asked("r1"),
           "syncResult": {"revision": REVISION, "source": source(1),
             "resources": [
               {"group": "", "kind": "Namespace", "name": "pr-2", "status": "Synced", "hookPhase": "Succeeded", "syncPhase": "Sync"},
               {"group": "batch", "kind": "Job", "namespace": "pr-2", "name": "pr-2-migrate", "hookType": "Sync",
                "status": "Synced", "hookPhase": "Failed", "syncPhase": "Sync",
                "message": "Job has reached the specified backoff limit"}]}})
}

#[test]
fn the_sync_asked_for_this_rendering_succeeded_synced_and_healthy_is_ready() {
    assert_eq!(verdict(&Status::ready().app()), Health::Ready);
}

#[test]
fn a_status_left_over_from_the_previous_push_is_not_ready() {
    // previewd applied rendering r2 (generation 2); Argo CD still shows r1.
    let stale = Status {
        rendering: "r2",
        spec: source(2),
        ..Status::ready()
    };
    assert_ne!(verdict(&stale.app()), Health::Ready);
}

/// Argo CD syncs on its own only what is OutOfSync (appcontroller.go autoSync): a rendering
/// that changes no ordinary object — a chart revision bump, a push only the app chart's
/// hooks see, a redeploy — gets no operation unless previewd asks.
#[test]
fn a_new_rendering_argo_cd_sees_nothing_to_sync_for_needs_previewd_to_ask() {
    let bumped = Status {
        rendering: "r2",
        spec: source(2),
        compared: source(2),
        ..Status::ready()
    };
    assert_eq!(verdict(&bumped.app()), Health::NeedsSync);
    // Nor does an auto-sync or a selective self-heal count: previewd did not ask for them.
    let automated = Status {
        asked_for: None,
        ..Status::ready()
    };
    assert_eq!(verdict(&automated.app()), Health::NeedsSync);
}

#[test]
fn a_sync_running_or_requested_is_progress() {
    let running = Status {
        phase: "Running",
        ..Status::ready()
    };
    assert_eq!(verdict(&running.app()), Health::Progressing);
    let mut requested = Status {
        rendering: "r2",
        spec: source(2),
        compared: source(2),
        ..Status::ready()
    }
    .app();
    requested.rest.insert("operation".into(), asked("r2"));
    assert_eq!(verdict(&requested), Health::Progressing);
}

#[test]
fn out_of_sync_after_the_asked_sync_is_progress_not_ready() {
    let mut app = Status::ready().app();
    app.rest.get_mut("status").unwrap()["sync"]["status"] = json!("OutOfSync");
    assert_eq!(verdict(&app), Health::Progressing);
}

#[test]
fn a_failed_migration_hook_is_a_failed_preview_naming_the_job() {
    let failed = Status {
        phase: "Failed",
        extra: json!({"operationState": failed_migration()}),
        ..Status::ready()
    };
    let Health::Failed(message) = verdict(&failed.app()) else {
        panic!("not failed")
    };
    assert!(
        message.starts_with(
            "hook Job/pr-2-migrate failed: Job has reached the specified backoff limit"
        ),
        "{message}"
    );
    assert!(message.contains("completed unsuccessfully"), "{message}");
}

#[test]
fn a_failed_attempt_waiting_for_argo_cds_retry_is_already_failed() {
    let mut operation = failed_migration();
    operation["phase"] = json!("Running");
    operation["retryCount"] = json!(1);
    operation["finishedAt"] = json!("2026-12-01T10:00:00Z");
    operation["message"] = json!(
        "one or more synchronization tasks completed unsuccessfully. Retrying attempt #1 at 10:00AM."
    );
    let retrying = Status {
        extra: json!({"operationState": operation}),
        ..Status::ready()
    };
    assert!(
        matches!(verdict(&retrying.app()), Health::Failed(m) if m.contains("Retrying attempt #1"))
    );
}

/// A redeploy is a new rendering of the same source: the failure of the old one is history,
/// and previewd asks for a sync of the new one, which Argo CD alone would never run.
#[test]
fn after_a_failure_a_redeploy_asks_for_a_new_sync() {
    let redeployed = Status {
        rendering: "r2",
        extra: json!({"operationState": failed_migration()}),
        ..Status::ready()
    };
    assert_eq!(verdict(&redeployed.app()), Health::NeedsSync);
}

#[test]
fn a_project_that_refuses_the_application_is_a_failure() {
    let refused = Status {
        extra: json!({"conditions": [{"type": "InvalidSpecError",
            "message": "application repo https://github.com/o/r.git is not permitted in project 'previews'"}]}),
        ..Status::ready()
    };
    assert!(
        matches!(verdict(&refused.app()), Health::Failed(m) if m.contains("not permitted in project"))
    );
}

#[test]
fn degraded_after_a_successful_sync_is_a_failure() {
    let degraded = Status {
        health: "Degraded",
        extra: json!({"resources": [{"kind": "Deployment", "name": "web",
            "health": {"status": "Degraded", "message": "Deployment exceeded its progress deadline"}}]}),
        ..Status::ready()
    };
    assert!(matches!(verdict(&degraded.app()), Health::Failed(m) if m.contains("web is degraded")));
}

#[test]
fn a_database_past_its_bound_fails_the_preview_saying_so() {
    // Argo CD's CronJob health (resource_customizations/batch/CronJob/health.lua) once the
    // chart's size guard failed its last run.
    let guarded = Status {
        health: "Degraded",
        extra: json!({"resources": [{"kind": "CronJob", "name": "pv-octo-app-609ddd1d069bc4c5-pr-7-size",
            "namespace": "previewd-system",
            "health": {"status": "Degraded", "message": "CronJob has not completed its last execution successfully"}}]}),
        ..Status::ready()
    };
    assert!(matches!(verdict(&guarded.app()),
        Health::Failed(m) if m.contains("grew past database.max_size") && m.contains("/preview destroy")));
}

#[test]
fn an_app_synced_at_another_commit_is_not_ready() {
    let pinned =
        json!({"repoURL": "https://github.com/o/r.git", "path": "chart", "targetRevision": SHA});
    let at = |revision: &str| -> Application {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "annotations": {APPLIED_HASH: "r1"}},
            "spec": {"source": pinned},
            "status": {"sync": {"status": "Synced", "revision": revision, "comparedTo": {"source": pinned}},
                       "health": {"status": "Healthy"},
                       "operationState": {"phase": "Succeeded", "operation": asked("r1"),
                                          "syncResult": {"revision": revision, "source": pinned}}},
        }))
        .unwrap()
    };
    assert_eq!(verdict(&at(SHA)), Health::Ready);
    assert_eq!(
        verdict(&at("0000000000000000000000000000000000000000")),
        Health::Progressing
    );
}

#[test]
fn the_sync_request_names_the_rendering_and_keeps_the_applications_options() {
    let manifest = json!({"metadata": {"annotations": {APPLIED_HASH: "r9"}},
        "spec": {"syncPolicy": {"syncOptions": ["ServerSideApply=true"], "retry": {"limit": 2}}}});
    let operation = sync_request(&manifest, Replacing::Nothing).unwrap();
    assert!(asked_for(&operation, "r9"));
    assert_eq!(
        operation["sync"]["syncOptions"],
        json!(["ServerSideApply=true"])
    );
    assert_eq!(operation["retry"], json!({"limit": 2}));
    assert_eq!(
        operation["sync"]["syncStrategy"],
        json!({"hook": {}}),
        "hooks run"
    );
    assert!(
        sync_request(&json!({"metadata": {}}), Replacing::Nothing).is_none(),
        "no rendering, no request"
    );
}

#[test]
fn a_sleep_or_a_wake_is_synced_without_hooks_and_a_push_with_them() {
    let strategy = |rendering: &str, replacing: Replacing<'_>| {
        let manifest = json!({"metadata": {"annotations": {APPLIED_HASH: rendering}}});
        sync_request(&manifest, replacing).unwrap()["sync"]["syncStrategy"].clone()
    };
    let (apply, hook) = (json!({"apply": {}}), json!({"hook": {}}));
    let from = Replacing::Rendering;
    assert_eq!(strategy("r1-asleep", from("r1")), apply, "a sleep");
    assert_eq!(strategy("r1", from("r1-asleep")), apply, "a wake");
    assert_eq!(
        strategy("r1-asleep", Replacing::Itself),
        apply,
        "asleep, synced again"
    );
    assert_eq!(
        strategy("r2", from("r1-asleep")),
        hook,
        "a push to a sleeping preview"
    );
    assert_eq!(strategy("r2", from("r1")), hook, "a push");
    assert_eq!(
        strategy("r2-asleep", from("r1-asleep")),
        hook,
        "a reseed or a redeploy while asleep: its hooks run now or never"
    );
    assert_eq!(
        strategy("r1", Replacing::Nothing),
        hook,
        "a new Application"
    );
    assert_eq!(
        strategy("r1-asleep", Replacing::Nothing),
        hook,
        "a new Application made asleep (slept waiting for CI, reopened asleep): nothing ran yet"
    );
    assert_eq!(
        strategy("r1", Replacing::Itself),
        hook,
        "awake, synced again"
    );
}

#[test]
fn sources_echoed_without_their_empty_fields_are_the_same() {
    let sent =
        json!({"repoURL": "u", "path": "p", "helm": {"valueFiles": [], "valuesObject": {"a": 1}}});
    let echoed = json!({"repoURL": "u", "path": "p", "helm": {"valuesObject": {"a": 1}}});
    assert!(same_source(&echoed, &sent));
    assert!(!same_source(&json!({"repoURL": "u", "path": "q"}), &sent));
    assert!(
        !same_source(&Value::Null, &Value::Null),
        "no source is nobody's"
    );
}

#[test]
fn an_application_reads_its_metadata_typed_and_keeps_everything_else_as_sent() {
    let sent = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "resourceVersion": "7",
                     "labels": {"previewd.dev/instance": "i"}, "deletionTimestamp": "2026-12-02T10:00:00Z"},
        "spec": {"source": source(1)}, "status": {"health": {"status": "Healthy"}},
    });
    let app: Application = serde_json::from_str(&sent.to_string()).unwrap();
    assert_eq!(app.metadata.name.as_deref(), Some("a"));
    assert_eq!(app.metadata.resource_version.as_deref(), Some("7"));
    assert!(app.metadata.deletion_timestamp.is_some());
    assert!(!app.rest.contains_key("metadata"));
    assert_eq!(app.rest["spec"], json!({"source": source(1)}));
    // Written back, it is what was sent.
    assert_eq!(serde_json::to_value(&app).unwrap(), sent);
}

#[test]
fn an_application_without_metadata_or_with_malformed_metadata_is_refused() {
    let missing = serde_json::from_str::<Application>(r#"{"kind": "Application"}"#).unwrap_err();
    assert!(
        missing.to_string().contains("missing field `metadata`"),
        "{missing}"
    );
    let malformed =
        serde_json::from_str::<Application>(r#"{"metadata": {"labels": 3}}"#).unwrap_err();
    assert!(
        malformed.to_string().contains("invalid type"),
        "{malformed}"
    );
}

/// What `same_source` compared before it compared in place: both sides copied without
/// their empty values.
fn normalized(value: &Value) -> Value {
    let empty = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    };
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

#[test]
fn sources_compared_in_place_agree_with_comparing_their_copies_without_empty_values() {
    let values = [
        json!(null),
        json!(false),
        json!(true),
        json!(0),
        json!(""),
        json!("a"),
        json!([]),
        json!([null]),
        json!([{}]),
        json!([{"x": ""}]),
        json!([{"x": "a"}]),
        json!({}),
        json!({"x": null}),
        json!({"x": {"y": [], "z": false}}),
        json!({"x": {"y": [1]}}),
        json!({"x": "a", "y": ""}),
        json!({"x": "a"}),
        json!({"y": "a"}),
        json!({"x": {"y": {"z": ""}}, "w": 1}),
        json!({"w": 1}),
    ];
    for a in &values {
        for b in &values {
            let expected = !a.is_null() && normalized(a) == normalized(b);
            assert_eq!(same_source(a, b), expected, "{a} against {b}");
        }
    }
    let sent = source(1);
    let mut echoed = sent.clone();
    echoed["helm"]["valueFiles"] = json!([]);
    echoed["directory"] = json!({"recurse": false, "jsonnet": {}});
    assert!(same_source(&echoed, &sent) && same_source(&sent, &echoed));
}

/// What previewd never reads (`UNREAD`) is passed over: the API server's managedFields and
/// Argo CD's revision history. A key of the same name anywhere else (the chart's values, a
/// status field's own fields) is kept, and the rest stays in the order sent.
#[test]
fn a_read_passes_over_managed_fields_and_argo_cds_history_and_keeps_the_rest() {
    let held = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "uid": "u1", "annotations": {APPLIED_HASH: "r1"},
                     "managedFields": [{"manager": "previewd", "operation": "Apply",
                                        "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"source": {"helm": {"valuesObject": {"history": [1], "managedFields": "kept"}}}},
        "status": {"health": {"status": "Healthy"},
                   "history": [{"id": 0, "revision": REVISION, "source": source(1)}],
                   "sync": {"status": "Synced", "history": "kept"}},
    });
    let read: Application = serde_json::from_slice(&serde_json::to_vec(&held).unwrap()).unwrap();
    assert_eq!(read.metadata.managed_fields, None);
    assert_eq!(read.metadata.uid.as_deref(), Some("u1"));
    assert_eq!(read.rest["spec"], held["spec"]);
    assert_eq!(
        read.rest["status"],
        json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "history": "kept"}})
    );
    let keys: Vec<&str> = read.rest.keys().map(String::as_str).collect();
    assert_eq!(keys, ["apiVersion", "kind", "spec", "status"]);
    // From a Value (the tests' way) as from bytes (kube's).
    let from_value: Application = serde_json::from_value(held).unwrap();
    assert_eq!(
        serde_json::to_value(&from_value).unwrap(),
        serde_json::to_value(&read).unwrap()
    );
}

#[test]
fn an_application_read_with_its_history_and_managed_fields_has_the_same_verdict() {
    for status in [
        Status::ready(),
        Status {
            phase: "Running",
            ..Status::ready()
        },
    ] {
        let app = status.app();
        let mut held = serde_json::to_value(&app).unwrap();
        held["metadata"]["managedFields"] = json!([{"manager": "argocd-application-controller",
            "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]);
        held["status"]["history"] = json!([{"id": 0, "revision": REVISION, "source": source(1)}]);
        let read: Application = serde_json::from_value(held).unwrap();
        assert_eq!(verdict(&read), verdict(&app));
    }
}

#[test]
fn a_status_of_another_shape_is_read_as_sent_and_an_application_must_be_an_object() {
    for status in ["null", "[]", "1", r#""x""#, "true"] {
        let app: Application = serde_json::from_str(&format!(
            r#"{{"metadata": {{"name": "a"}}, "spec": null, "status": {status}}}"#
        ))
        .unwrap();
        assert_eq!(
            app.rest["status"],
            serde_json::from_str::<Value>(status).unwrap()
        );
        assert_eq!(verdict(&app), Health::Progressing);
    }
    for wrong in [
        r#"[]"#,
        r#""a""#,
        r#"null"#,
        r#"{"spec": {}}"#,
        r#"{"metadata": 1}"#,
    ] {
        assert!(
            serde_json::from_str::<Application>(wrong).is_err(),
            "{wrong}"
        );
    }
}

#[test]
fn a_writes_answer_is_read_for_the_object_and_version_it_made_alone() {
    let answer = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u1", "resourceVersion": "42",
                     "labels": {"previewd.dev/instance": "i"},
                     "managedFields": [{"manager": "previewd", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"source": source(1)},
        "status": {"history": [{"id": 0, "source": source(1)}]},
    });
    let read: Written = serde_json::from_slice(&serde_json::to_vec(&answer).unwrap()).unwrap();
    assert_eq!(
        (
            read.metadata.name,
            read.metadata.uid,
            read.metadata.resource_version
        ),
        (Some("a".into()), Some("u1".into()), Some("42".into()))
    );
    assert_eq!(read.metadata.labels, None, "nothing else is built");
    assert!(serde_json::from_str::<Written>(r#"{"spec": {}}"#).is_err());
    assert!(serde_json::from_str::<Written>(r#"{"metadata": 1}"#).is_err());
}

/// What a sleep alone may replace without hooks: a rendering Argo CD synced, whoever ran the
/// last sync (a self-heal since, too); not one whose sync has not run or failed.
#[test]
fn a_rendering_is_synced_once_its_sync_succeeded_at_its_source_whoever_ran_it_last() {
    assert!(synced(&Status::ready().app()));
    let healed = Status {
        asked_for: None,
        ..Status::ready()
    };
    assert!(synced(&healed.app()), "a self-heal since");
    let pushed = Status {
        spec: source(2),
        ..Status::ready()
    };
    assert!(!synced(&pushed.app()), "a push whose sync has not run");
    let failed = Status {
        phase: "Failed",
        ..Status::ready()
    };
    assert!(!synced(&failed.app()), "a sync that failed in a hook");
}
