//! `previewd config check`: exit 0 on a configuration `serve` accepts, 2 on one it refuses,
//! and with `--reach`, 1 when GitHub's API does not answer.

use super::*;
use common::github::{BOT, FakeGitHub};

fn check(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .current_dir(dir)
        .args(["config", "check"])
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_check_with_reach_asks_github_as_the_configured_token() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let github = runtime.block_on(FakeGitHub::start());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("previewd.toml"),
        format!("[github]\napi_url = {:?}\n", github.url),
    )
    .unwrap();
    let env = [("PREVIEWD_GITHUB_TOKEN", "ghp_kept-out-of-sight")];
    let (code, text) = check(dir.path(), &["--reach"], &env);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("reached GitHub's API at"), "{text}");
    assert!(text.contains(&format!("acting as {BOT}")), "{text}");
    assert!(!text.contains("ghp_kept-out-of-sight"), "{text}");
    assert_eq!(github.count("GET", "/meta"), 1);
}

#[test]
fn a_check_with_reach_fails_when_github_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let closed = format!("http://127.0.0.1:{}", free_port());
    std::fs::write(
        dir.path().join("previewd.toml"),
        format!("[github]\napi_url = {closed:?}\n"),
    )
    .unwrap();
    let (code, text) = check(dir.path(), &["--reach"], &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains(&format!("cannot reach GitHub's API at {closed}")),
        "{text}"
    );
    // Without --reach the same file is valid.
    let (code, text) = check(dir.path(), &[], &[]);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn a_check_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("previewd.toml"),
        "listen = \"0.0.0.0:8080\"\n",
    )
    .unwrap();
    let (code, text) = check(dir.path(), &[], &[]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("`previewd serve` would refuse to start"),
        "{text}"
    );
    assert!(text.contains("api.token"), "{text}");
    let (code, text) = check(dir.path(), &[], &[("PREVIEWD_API_TOKEN", "t0ken")]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = check(dir.path(), &[], &[("PREVIEWD_DEFAULTS_TTL", "soon")]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("defaults.ttl` (from PREVIEWD_DEFAULTS_TTL)"),
        "{text}"
    );
}

#[test]
fn a_check_reads_what_serve_reads_at_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.pem"), "not a key").unwrap();
    let cases = [
        (
            "[github]\napp_id = 12\nprivate_key_path = \"app.pem\"\n",
            "the GitHub App's private key",
        ),
        (
            "[tls]\nmode = \"sealed\"\nca_cert = \"/nonexistent/ca.pem\"\nca_key = \"/nonexistent/ca.key\"\n",
            "the preview CA",
        ),
        (
            "[metrics]\nlisten = \"0.0.0.0:8080\"\n",
            "`metrics.listen`: 0.0.0.0:8080 takes the port of listen",
        ),
    ];
    for (toml, text) in cases {
        std::fs::write(dir.path().join("previewd.toml"), toml).unwrap();
        let (code, out) = check(dir.path(), &[], &[]);
        assert_eq!(code, 2, "{toml}: {out}");
        assert!(out.contains(text), "{toml}: {out}");
    }
}
