//! A repository with `trigger = "label"`, `paths` and `wait_for`, end to end through the
//! binary: GitHub's stand-in lists the PR's files and takes the sticky comment; the
//! directory sink shows what is applied, and when the PR's image first appears in it.

use super::*;
use common::github::FakeGitHub;

const HELPERS: &str = "rendered/pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml";
const IMAGE: &str = "ghcr.io/codertocat/hello-world:ec26c3e57ca3a959ca5aad62de7213c562f8c821";

fn label_event(action: &str, labels: &[&str], at: &str) -> Delivery {
    Delivery::fixture(&format!("pull_request.{action}"))
        .edit(|body| {
            // The recorded label object, renamed: GitHub sends every field.
            let mut label = body["label"].clone();
            label["name"] = "preview".into();
            body["pull_request"]["labels"] = labels
                .iter()
                .map(|name| {
                    let mut each = label.clone();
                    each["name"] = (*name).into();
                    each
                })
                .collect();
            body["label"] = label;
        })
        .updated_at(at)
}

#[test]
fn a_labeled_pr_touching_a_watched_path_deploys_its_image_only_after_its_build() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let github = runtime.block_on(FakeGitHub::start());
    github.set_files(2, vec!["README.md".into(), "services/api/main.rs".into()]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("previewd.toml"),
        format!(
            "[github]\ntoken = \"test-token\"\napi_url = {:?}\n\
             [[repos]]\nname = \"codertocat/hello-world\"\nimage = \"ghcr.io/codertocat/hello-world\"\n\
             migrate_command = [\"./migrate\"]\ntrigger = \"label\"\npaths = [\"services/api/**\"]\n\
             wait_for = [\"build-image\"]\n",
            github.url
        ),
    )
    .unwrap();
    let server = Server::start(dir.path(), &secret_env());
    let helpers = dir.path().join(HELPERS);
    let rendered = || std::fs::read_to_string(&helpers).unwrap_or_default();
    let sticky = || {
        github
            .comment_bodies()
            .into_iter()
            .find(|b| b.starts_with("<!-- previewd:status -->"))
            .unwrap_or_default()
    };

    // No label: nothing applied, and the PR is told how to get a preview.
    assert_eq!(
        server
            .deliver(&Delivery::fixture("pull_request.opened"))
            .status,
        202
    );
    eventually("the sticky comment", || sticky().contains("add the label"));
    assert!(!helpers.exists());
    assert_eq!(
        github.count("GET", "/files"),
        0,
        "files are listed only once the label is there"
    );

    // Labeled: its files are listed, one matches, the helpers are applied; the image waits.
    let labeled = label_event("labeled", &["bug", "preview"], "2019-05-15T15:21:00Z");
    assert_eq!(server.deliver(&labeled).status, 202);
    eventually("the helpers applied", || {
        rendered().contains("kind: Application")
    });
    eventually("the sticky comment to wait for CI", || {
        sticky().contains("build-image")
    });
    assert!(
        !rendered().contains(IMAGE),
        "no Job runs the PR's image before its build"
    );

    // The build succeeds: the migration runs the image.
    let built = Delivery::fixture("check_run.completed").edit(|body| {
        body["check_run"]["name"] = "build-image".into();
    });
    assert_eq!(server.deliver(&built).status, 202);
    eventually("the image in the helpers", || rendered().contains(IMAGE));

    // The label goes: so does the preview.
    let unlabeled = label_event("unlabeled", &["bug"], "2019-05-15T15:30:00Z");
    assert_eq!(server.deliver(&unlabeled).status, 202);
    eventually("the helpers removed", || !helpers.exists());
    assert!(server.terminate().success());
}
