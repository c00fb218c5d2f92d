//! The operator's view through the real binary: the dashboard in headless Chromium
//! (Debian's `chromium`, which scripts/test installs), with screenshots kept as CI
//! artifacts in target/ci-artifacts/, and `previewd list/show/destroy` and `sweep --dry-run`
//! on the same state.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Delivery;
use common::http::request;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";

/// `previewd serve` with the directory sink and a few previews in its state.
struct Server {
    running: common::process::Server,
    dir: tempfile::TempDir,
}

impl Server {
    fn with_previews() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let running = common::process::Server::start(
            dir.path(),
            &[
                ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
                ("PREVIEWD_DEFAULTS_DOMAIN", "preview.example.com"),
            ],
        );
        let server = Self { running, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        let prs = [
            (2, "Codertocat", "Add the new landing page"),
            (3, "octocat", "<script>alert('x')</script> Fix & tidy"),
            (4, "hubot", "Bump dependencies"),
        ];
        for (number, author, title) in prs {
            let delivery = Delivery::fixture("pull_request.opened")
                .number(number)
                .edit(|b| {
                    b["pull_request"]["user"]["login"] = json!(author);
                    b["pull_request"]["title"] = json!(title);
                })
                .guid(&format!("browser-{number}"));
            let headers = delivery.headers();
            let answer = request(
                &server.running.addr,
                "POST",
                "/webhooks/github",
                &headers,
                &delivery.body,
            )
            .unwrap();
            assert_eq!(answer.status, 202, "{}", answer.body);
        }
        // Applied by the reconciler (directory sink): every preview leaves `pending`.
        while server.previews().iter().any(|p| p["observed"] != "applied") {
            assert!(Instant::now() < deadline, "previews were not applied");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn previews(&self) -> Vec<Value> {
        let body = request(&self.running.addr, "GET", "/api/previews", &[], b"")
            .unwrap()
            .body;
        serde_json::from_str::<Value>(&body).unwrap()["previews"]
            .as_array()
            .unwrap()
            .clone()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_previewd"))
            .args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PREVIEWD_DEFAULTS_DOMAIN", "preview.example.com")
            .output()
            .unwrap()
    }
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ci-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Headless Chromium with the flags a closed network needs; `args` say what to do.
fn chromium(args: &[&str]) -> Output {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: scripts/test installs Debian's chromium package"
    );
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn a_person_sees_the_live_previews_with_links_and_time_left() {
    let server = Server::with_previews();
    let url = format!("http://{}/", server.running.addr);
    let dom = String::from_utf8(chromium(&["--dump-dom", &url]).stdout).unwrap();
    // What the page shows once a browser has parsed it.
    assert_eq!(
        dom.matches("<tr>").count(),
        1 + 3,
        "a header row and one row per preview"
    );
    for (number, author) in [(2, "Codertocat"), (3, "octocat"), (4, "hubot")] {
        assert!(
            dom.contains(&format!(
                "href=\"https://github.com/codertocat/hello-world/pull/{number}\""
            )),
            "PR link #{number}"
        );
        assert!(dom.contains(author), "{author}");
    }
    assert!(dom.contains(
        "href=\"https://pv-codertocat-hello-world-4d960c3af87af320-pr-2.preview.example.com\""
    ));
    assert!(
        dom.contains("2d 23h") || dom.contains("3d"),
        "time left: {dom}"
    );
    assert!(
        !dom.contains("<script>alert")
            && dom.contains("&lt;script&gt;alert('x')&lt;/script&gt; Fix &amp; tidy"),
        "the title is text, not a script"
    );
    let dir = artifacts();
    for (name, size) in [
        ("dashboard.png", "1280,800"),
        ("dashboard-phone.png", "390,844"),
    ] {
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        chromium(&[
            &format!("--screenshot={}", path.display()),
            &format!("--window-size={size}"),
            &url,
        ]);
        let png = std::fs::read(&path).unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 5_000,
            "{name} is a real screenshot"
        );
    }

    // The page per preview, followed from the list.
    let detail = String::from_utf8(
        chromium(&[
            "--dump-dom",
            &format!(
                "http://{}/previews/codertocat/hello-world/2",
                server.running.addr
            ),
        ])
        .stdout,
    )
    .unwrap();
    assert!(detail.contains("Ledger") && detail.contains("History") && detail.contains("opened"));
}

#[test]
fn operators_list_show_and_destroy_from_the_command_line() {
    let server = Server::with_previews();
    let listed = server.cli(&["list", "--json"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let json: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(json["previews"].as_array().unwrap().len(), 3);
    let table = String::from_utf8(server.cli(&["list"]).stdout).unwrap();
    assert!(
        table.starts_with("PREVIEW") && table.contains("codertocat/hello-world#4"),
        "{table}"
    );

    let shown = server.cli(&["show", "codertocat/hello-world#3"]);
    let text = String::from_utf8(shown.stdout).unwrap();
    assert!(
        text.contains("octocat") && text.contains("history:") && text.contains("opened"),
        "{text}"
    );

    let destroyed = server.cli(&[
        "destroy",
        "codertocat/hello-world#3",
        "--as",
        "alice",
        "--no-wait",
    ]);
    assert!(
        destroyed.status.success(),
        "{}",
        String::from_utf8_lossy(&destroyed.stderr)
    );
    assert!(String::from_utf8_lossy(&destroyed.stdout).contains("teardown recorded (by alice)"));
    let after =
        String::from_utf8(server.cli(&["show", "codertocat/hello-world#3"]).stdout).unwrap();
    assert!(
        after.contains("destroy_requested") && after.contains("alice"),
        "{after}"
    );

    let dry = server.cli(&["sweep", "--dry-run"]);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let plan = String::from_utf8(dry.stdout).unwrap();
    assert!(
        plan.contains("would prune delivery records received before"),
        "{plan}"
    );
    assert!(!plan.contains("would expire"), "nothing is due yet: {plan}");

    let unknown = server.cli(&["show", "codertocat/hello-world#99"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no record"));
    let bad = server.cli(&["destroy", "not a preview"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("OWNER/REPO#N"));
}
