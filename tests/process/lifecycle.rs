//! The binary's life: it starts on embedded defaults, refuses a bad config naming the key,
//! survives a kill, and takes a PR from opened to closed.

use super::*;

fn count(state: &Path, sql: &str) -> i64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = previewd::db::open(state).await.unwrap();
        let n = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap();
        pool.close().await;
        n
    })
}

#[test]
fn serve_starts_on_embedded_defaults_without_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    assert_eq!(
        request(&server.addr, "GET", "/readyz", &[], b"")
            .unwrap()
            .status,
        200
    );
    assert!(
        dir.path().join("previewd.db").exists(),
        "state is created in the working directory"
    );
    // No webhook secret configured: deliveries are refused, and the answer says why.
    let refused = server.deliver(&Delivery::fixture("ping"));
    assert_eq!(refused.status, 401);
    for names in ["github.webhook_secret", "PREVIEWD_GITHUB_WEBHOOK_SECRET"] {
        assert!(refused.body.contains(names), "{}", refused.body);
    }
    assert!(server.terminate().success(), "SIGTERM is a clean stop");
}

#[test]
fn an_accepted_delivery_survives_a_kill_and_its_redelivery_stays_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state/previewd.db");
    let env = [
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
        ("PREVIEWD_STATE", state.to_str().unwrap()),
    ];
    let delivery = Delivery::fixture("pull_request.opened");

    let server = Server::start(dir.path(), &env);
    assert_eq!(server.deliver(&delivery).status, 202);
    server.kill();
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM previews WHERE desired = 'deployed'"
        ),
        1
    );

    let server = Server::start(dir.path(), &env);
    let again = server.deliver(&delivery);
    assert_eq!(again.status, 200);
    assert!(again.body.contains("duplicate"), "{}", again.body);
    assert!(server.terminate().success());
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM history WHERE what = 'opened'"),
        1
    );
    assert_eq!(count(&state, "SELECT COUNT(*) FROM deliveries"), 1);
}

/// A log collector (kubelet, journald, a file) is not a terminal: colour codes there are
/// noise in every line, and formatting them is work on the thread that serves deliveries.
#[test]
fn a_log_that_is_not_a_terminal_gets_plain_lines() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("previewd.log");
    let env = [("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET)];
    let server = Server::start_logging(dir.path(), &env, std::fs::File::create(&log).unwrap());
    assert_eq!(
        server
            .deliver(&Delivery::fixture("pull_request.opened"))
            .status,
        202
    );
    assert!(server.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("delivery recorded"), "{text}");
    // The first start makes the local sealing pair; the line says what to do, then names
    // the files as fields of their own.
    let pair = text
        .lines()
        .find(|l| l.contains("created a local sealing key pair"))
        .unwrap_or_else(|| panic!("{text}"));
    let (message, fields) = pair.split_once("(kubeseal --fetch-cert).").unwrap();
    assert!(
        message.contains("give key_file to its sealed-secrets controller"),
        "{pair}"
    );
    let fields: Vec<&str> = fields.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{pair}");
    assert_eq!(fields[0], "cluster=in-cluster", "{pair}");
    assert!(
        fields[1].starts_with("key_file=") && fields[1].ends_with(".key"),
        "{pair}"
    );
    assert!(
        fields[2].starts_with("cert_file=") && fields[2].ends_with(".crt"),
        "{pair}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "an escape code in the log: {text:?}"
    );
}

/// An unsigned flood writes one line, not one per request, and the rest of the minute one
/// summary line (at its end, or at a stop before it); a malformed delivery signed with the
/// secret is logged on its own.
#[test]
fn a_flood_of_unsigned_deliveries_is_one_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("previewd.log");
    let env = [("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET)];
    let server = Server::start_logging(dir.path(), &env, std::fs::File::create(&log).unwrap());
    let unsigned = Delivery::fixture("ping").without("X-Hub-Signature-256");
    for _ in 0..50 {
        assert_eq!(server.deliver(&unsigned).status, 401);
    }
    let malformed = Delivery::raw("pull_request", br#"{"action":"opened"}"#.to_vec());
    assert_eq!(server.deliver(&malformed).status, 400);
    assert!(server.terminate().success());
    let text = std::fs::read_to_string(&log).unwrap();
    let rejected: Vec<&str> = text.lines().filter(|l| l.contains("rejected")).collect();
    assert_eq!(rejected.len(), 3, "{text}");
    assert!(rejected[0].contains("X-Hub-Signature-256"), "{text}");
    assert!(rejected[1].contains("payload"), "{text}");
    assert!(
        rejected[2].contains("49 more") && rejected[2].contains("401 ×49"),
        "{text}"
    );
}

#[test]
fn an_invalid_value_is_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("serve")
        .current_dir(dir.path())
        .env_clear()
        .env("PREVIEWD_DEFAULTS_TTL", "soon")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`defaults.ttl` (from PREVIEWD_DEFAULTS_TTL)")
            && stderr.contains("30s, 5m"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("previewd.db").exists(),
        "nothing is created on a bad config"
    );
}

#[test]
fn a_named_config_file_must_exist() {
    let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(["--config", "/nonexistent/previewd.toml", "serve"])
        .env_clear()
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/previewd.toml"));
}

#[test]
fn a_pr_opened_pushed_and_closed_through_the_binary_leaves_only_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("previewd.db");
    let env = [
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", common::SECRET),
        ("PREVIEWD_STATE", state.to_str().unwrap()),
    ];
    let server = Server::start(dir.path(), &env);
    let file = dir
        .path()
        .join("rendered/pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml");
    let contains =
        |text: &str| std::fs::read_to_string(&file).is_ok_and(|yaml| yaml.contains(text));

    assert_eq!(
        server
            .deliver(&Delivery::fixture("pull_request.opened"))
            .status,
        202
    );
    eventually("the Application file", || {
        contains("ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    });

    let new_head = "2222222222222222222222222222222222222222";
    let push = Delivery::push(new_head, "2019-05-15T16:00:00Z");
    assert_eq!(server.deliver(&push).status, 202);
    eventually("the new head in the file", || contains(new_head));

    let close =
        Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z");
    assert_eq!(server.deliver(&close).status, 202);
    eventually("the file to go", || !file.exists());
    eventually("the preview row to be removed", || {
        count(&state, "SELECT COUNT(*) FROM previews") == 0
    });
    assert!(server.terminate().success());
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM ledger")
            + count(&state, "SELECT COUNT(*) FROM sealed_secrets"),
        0
    );
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM history WHERE what = 'destroyed'"
        ),
        1
    );
    assert!(count(&state, "SELECT COUNT(*) FROM history") >= 7);
}
