//! The README's walk, with what ships: one PR opened, extended by its author, pushed and
//! closed, each delivery sent by `previewd deliver` from `examples/lifecycle/`, each step
//! read back with `previewd list` and `show`.

use super::*;

const SECRET: &str = "dev-secret-at-least-16-bytes";

/// `previewd ARGS` run beside `server`, as the README runs it; its standard output.
fn previewd(dir: &Path, server: &Server, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .current_dir(dir)
        .args(args)
        .env_clear()
        .env("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)
        .env("PREVIEWD_LISTEN", &server.addr)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "previewd {args:?}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn deliver(dir: &Path, server: &Server, event: &str, example: &str) -> String {
    let file = format!(
        "{}/examples/lifecycle/{example}",
        env!("CARGO_MANIFEST_DIR")
    );
    previewd(dir, server, &["deliver", event, &file])
}

#[test]
fn one_pull_request_from_opened_to_closed_with_what_ships() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("previewd.log");
    let server = Server::start_logging(
        dir.path(),
        &[("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)],
        std::fs::File::create(&log).unwrap(),
    );
    let d = dir.path();
    let show = || previewd(d, &server, &["show", "codertocat/hello-world#2"]);

    let answer = deliver(d, &server, "pull_request", "1-opened.json");
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert!(
        answer.contains("opened: a preview at the head commit"),
        "{answer}"
    );
    // The directory sink writes the helper Application; nothing there reports its
    // health, so the preview says `rendered`, never `deploying` for ever.
    eventually("the preview rendered", || {
        show().contains("state      rendered")
    });
    let list = previewd(d, &server, &["list"]);
    assert!(
        list.contains("codertocat/hello-world#2  Codertocat  rendered"),
        "{list}"
    );
    assert!(list.contains("3d"), "{list}");
    let helpers = d.join("rendered/pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml");
    assert!(helpers.exists());

    let answer = deliver(d, &server, "issue_comment", "2-extend.json");
    assert!(answer.contains("command queued"), "{answer}");
    eventually("the extension", || show().contains("time left  5d"));
    assert!(
        show().contains("extended; the preview now expires"),
        "{}",
        show()
    );

    let answer = deliver(d, &server, "pull_request", "3-pushed.json");
    assert!(
        answer.contains("pushed: a preview at the head commit"),
        "{answer}"
    );
    eventually("the push applied", || {
        show().contains("commit     9a6c1b5c8f0e4a3d2b1c0d9e8f7a6b5c4d3e2f10")
            && show().contains("applied at 9a6c1b5")
    });

    let answer = deliver(d, &server, "pull_request", "4-closed.json");
    assert!(answer.contains("closed: the preview torn down"), "{answer}");
    eventually("the teardown", || {
        show().contains("(destroyed; its history remains)")
    });
    assert!(!helpers.exists());
    assert!(server.terminate().success());
    // The preview's look can be followed in the log: each line of it names the preview.
    let log = std::fs::read_to_string(&log).unwrap();
    let applied = log
        .lines()
        .find(|line| line.contains(" applied "))
        .unwrap_or_else(|| panic!("no apply in the log:\n{log}"));
    assert!(
        applied.contains("reconcile{preview=codertocat/hello-world#2}"),
        "{applied}"
    );
    assert!(
        log.lines().any(
            |line| line.contains("reconcile{preview=codertocat/hello-world#2}")
                && line.contains("preview destroyed")
        ),
        "{log}"
    );
}

#[test]
fn deliver_refuses_without_the_secret_and_says_which_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .current_dir(dir.path())
        .args(["deliver", "pull_request", "payload.json"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PREVIEWD_GITHUB_WEBHOOK_SECRET"),
        "{stderr}"
    );
}

#[test]
fn deliver_refuses_a_payload_previewd_would_not_take_before_sending_it() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.json");
    std::fs::write(&big, format!("{{\"x\":\"{}\"}}", "a".repeat(6 << 20))).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .current_dir(dir.path())
        .args(["deliver", "ping", big.to_str().unwrap()])
        .env_clear()
        .env("PREVIEWD_GITHUB_WEBHOOK_SECRET", SECRET)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("previewd takes deliveries of at most 5242880 bytes"),
        "{stderr}"
    );
}
