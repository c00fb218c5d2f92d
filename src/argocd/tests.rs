//! Argo CD's verdict read from the statuses real Argo CD v3.5 writes (shapes from
//! `controller/appcontroller.go` and gitops-engine's `sync_context.go`, as the faithful twin
//! in `../shared/tools/argocd_twin.py` reproduces them).

use serde_json::{Value, json};

use super::*;

const SHA: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

fn source(generation: u32) -> Value {
    json!({"repoURL": "https://github.com/previewd/previewd.git", "path": "helpers-chart",
           "targetRevision": "v0.1.0",
           "helm": {"releaseName": "pr-2", "valuesObject": {"seed": {"generation": generation, "files": {}}}}})
}

/// An Application whose spec is at `spec` and whose status Argo CD wrote for `synced`.
struct Status {
    spec: Value,
    compared: Value,
    operated: Value,
    phase: &'static str,
    health: &'static str,
    extra: Value,
}

impl Status {
    fn ready() -> Self {
        Self {
            spec: source(1),
            compared: source(1),
            operated: source(1),
            phase: "Succeeded",
            health: "Healthy",
            extra: json!({}),
        }
    }

    fn app(self) -> Application {
        let revision = "8d1f4c2e0a9b7c6d5e4f3a2b1c0d9e8f7a6b5c4d";
        let mut status = json!({
            "sync": {"status": "Synced", "revision": revision, "comparedTo": {"source": self.compared}},
            "health": {"status": self.health},
            "operationState": {"phase": self.phase, "message": "successfully synced (all tasks run)",
                               "syncResult": {"revision": revision, "source": self.operated}},
        });
        for (k, v) in self.extra.as_object().unwrap() {
            status[k] = v.clone();
        }
        serde_json::from_value(
            json!({"metadata": {"name": "a"}, "spec": {"source": self.spec}, "status": status}),
        )
        .unwrap()
    }
}

fn failed_migration() -> Value {
    json!({"phase": "Failed",
           "message": "one or more synchronization tasks completed unsuccessfully",
           "syncResult": {"revision": "8d1f4c2e0a9b7c6d5e4f3a2b1c0d9e8f7a6b5c4d", "source": source(1),
             "resources": [
               {"group": "", "kind": "Namespace", "name": "pr-2", "status": "Synced", "hookPhase": "Succeeded", "syncPhase": "Sync"},
               {"group": "batch", "kind": "Job", "namespace": "pr-2", "name": "pr-2-migrate", "hookType": "Sync",
                "status": "Synced", "hookPhase": "Failed", "syncPhase": "Sync",
                "message": "Job has reached the specified backoff limit"}]}})
}

#[test]
fn synced_healthy_and_succeeded_at_the_applied_source_is_ready() {
    assert_eq!(verdict(&Status::ready().app()), Health::Ready);
}

#[test]
fn a_status_left_over_from_the_previous_push_is_not_ready() {
    // previewd applied generation 2; Argo CD still shows its comparison and sync of 1.
    let stale = Status {
        spec: source(2),
        ..Status::ready()
    };
    assert_eq!(verdict(&stale.app()), Health::Progressing);
}

#[test]
fn out_of_sync_at_the_new_source_is_progress_until_its_sync_succeeds() {
    let mut app = Status {
        spec: source(2),
        compared: source(2),
        ..Status::ready()
    }
    .app();
    app.rest.get_mut("status").unwrap()["sync"]["status"] = json!("OutOfSync");
    assert_eq!(verdict(&app), Health::Progressing);
    // Argo CD's auto-sync has set the operation but not started it yet.
    app.rest.get_mut("status").unwrap()["sync"]["status"] = json!("Synced");
    app.rest
        .insert("operation".into(), json!({"sync": {"source": source(2)}}));
    assert_eq!(verdict(&app), Health::Progressing);
}

/// Argo CD syncs only what is OutOfSync (appcontroller.go autoSync): a new source that
/// renders the same objects — a chart revision bump that changed no template — gets no
/// operation at all, and waiting for one would wait forever.
#[test]
fn a_new_source_that_renders_the_same_objects_is_ready_without_a_sync() {
    let bumped = Status {
        spec: source(2),
        compared: source(2),
        ..Status::ready()
    };
    assert_eq!(verdict(&bumped.app()), Health::Ready);
}

/// ... but when the last sync failed, nothing will run its hooks again until the rendering
/// changes: that is a failure, not progress.
#[test]
fn a_failed_last_sync_with_nothing_left_to_sync_stays_failed() {
    let after_failure = Status {
        spec: source(2),
        compared: source(2),
        extra: json!({"operationState": failed_migration()}),
        ..Status::ready()
    };
    assert!(
        matches!(verdict(&after_failure.app()), Health::Failed(m) if m.contains("-migrate failed"))
    );
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

#[test]
fn a_failure_of_an_older_source_is_history_once_the_new_one_syncs() {
    let mut operation = failed_migration();
    operation["syncResult"]["source"] = source(1);
    let mut moved_on = Status {
        spec: source(2),
        compared: source(2),
        extra: json!({"operationState": operation}),
        ..Status::ready()
    }
    .app();
    // Argo CD found the new rendering OutOfSync and is about to sync it.
    moved_on.rest.get_mut("status").unwrap()["sync"]["status"] = json!("OutOfSync");
    assert_eq!(verdict(&moved_on), Health::Progressing);
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
fn a_running_operation_is_progress_even_at_the_applied_source() {
    let running = Status {
        phase: "Running",
        ..Status::ready()
    };
    assert_eq!(verdict(&running.app()), Health::Progressing);
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
fn an_app_synced_at_another_commit_is_not_ready() {
    let pinned =
        json!({"repoURL": "https://github.com/o/r.git", "path": "chart", "targetRevision": SHA});
    let at = |revision: &str| -> Application {
        serde_json::from_value(json!({
            "metadata": {"name": "a"},
            "spec": {"source": pinned},
            "status": {"sync": {"status": "Synced", "revision": revision, "comparedTo": {"source": pinned}},
                       "health": {"status": "Healthy"},
                       "operationState": {"phase": "Succeeded", "syncResult": {"revision": revision, "source": pinned}}},
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
