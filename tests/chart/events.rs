//! `previewd render` on recorded PR events: each renders valid objects, what is not a
//! pull_request event is refused, and every change that must rerun the hooks changes an
//! ordinary object.

use super::*;
use std::process::Command;

#[test]
fn the_binary_renders_every_recorded_pr_event_into_valid_objects() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "previewd.toml",
        "[defaults]\ndomain = \"preview.example.com\"\n",
    );
    for event in [
        "pull_request.opened",
        "pull_request.synchronize",
        "pull_request.reopened",
        "pull_request.ready_for_review",
        "pull_request.opened.with-null-body",
    ] {
        let out = dir.path().join(event);
        let status = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "render",
                "--out",
                out.to_str().unwrap(),
                "--event",
            ])
            .arg(format!("{ROOT}/tests/fixtures/github/{event}.json"))
            .env_clear()
            .status()
            .unwrap();
        assert!(status.success(), "{event}");
        let app = out.join("pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml");
        // No [[repos]] entry: no migrations or seed; the default cluster has no ingress
        // target: no DNS record. Left: the Application, Namespace, rendering ConfigMap,
        // ResourceQuota, LimitRange, Certificate, and the database's two ConfigMaps, create
        // and drop Jobs and guard CronJob.
        let (ok, output) = check(&[&chart(), "--application", app.to_str().unwrap()]);
        assert!(
            ok && output
                .trim_end()
                .ends_with("validated 11 objects, 0 failed"),
            "{event}: {output}"
        );
    }
}

/// The ordinary (non-hook) objects of a rendering: all that Argo CD compares.
fn ordinary(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| annotation(o, "argocd.argoproj.io/hook").is_none())
        .collect()
}

/// Argo CD splits hooks out of its diff and auto-syncs only an OutOfSync Application
/// (argo-cd controller/appcontroller.go autoSync, gitops-engine pkg/sync/reconcile.go
/// splitHooks): whatever must run the hooks again has to change an ordinary object.
#[test]
fn a_push_a_reseed_a_redeploy_and_a_hook_only_change_each_change_an_ordinary_object() {
    let base = Preview::test().on("eu-1");
    let first = assert_valid(FULL, &base, &[], 15);
    let mut reseeded = base.clone();
    reseeded.seed_generation += 1;
    let mut redeployed = base.clone();
    redeployed.redeploy_generation += 1;
    let other_command = FULL.replace("[\"bin/migrate\"]", "[\"bin/migrate\", \"--all\"]");
    for (what, config, preview) in [
        (
            "push",
            FULL,
            base.clone()
                .at_sha("1111111111111111111111111111111111111111"),
        ),
        ("reseed", FULL, reseeded),
        ("redeploy", FULL, redeployed),
        (
            "a new migrate_command",
            other_command.as_str(),
            base.clone(),
        ),
    ] {
        let next = assert_valid(config, &preview, &[], 15);
        assert_ne!(
            ordinary(&first),
            ordinary(&next),
            "{what} changes only hooks"
        );
    }
    let again = assert_valid(FULL, &base, &[], 15);
    assert_eq!(
        ordinary(&first),
        ordinary(&again),
        "the same input renders the same"
    );
}

#[test]
fn render_refuses_what_is_not_a_pull_request_event() {
    for event in ["issue_comment.created.pull_request", "ping", "push"] {
        let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .args(["render", "--event"])
            .arg(format!("{ROOT}/tests/fixtures/github/{event}.json"))
            .env_clear()
            .current_dir(tempfile::tempdir().unwrap().path())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{event}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("not a pull_request event"), "{stderr}");
    }
}
