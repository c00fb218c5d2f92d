//! A preview's mail over real SMTP: the app logs in to its catcher with what the mail
//! Secret gives it, the catcher keeps every message, and only the repository's named
//! recipients get mail through the operator's relay.
//!
//! Mailpit cannot run here (no Go toolchain), so the catcher is a stand-in,
//! tests/mail/smtp.py: a port of Mailpit v1.30.5's SMTP session, login and auto-relay,
//! configured only from the environment helpers-chart/templates/mail.yaml gives Mailpit.
//! The Secret is `previewd::secrets::mail`'s, its MP_SMTP_AUTH rendered by
//! `previewd::seal::template` as the sealed-secrets controller renders it, and the relay
//! pattern is `previewd::render::services::allowed_recipients`'s. The app is Python's
//! smtplib; the operator's relay is a second stand-in that records what reaches it.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use previewd::config::Config;
use previewd::naming::Names;
use previewd::render::services::{INBOX_PATH, allowed_recipients};
use previewd::seal::{SecretSpec, template};
use serde_json::Value;

const SENDER: &str = "signup@octo-app.example";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mail/smtp.py");

fn python() -> String {
    std::env::var("PREVIEWD_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// One of smtp.py's servers, stopped when dropped; what it keeps is a JSON-lines file.
struct Server {
    child: Child,
    port: u16,
    store: PathBuf,
    log: PathBuf,
}

impl Server {
    /// Starts `smtp.py <role>` with exactly `env`, and waits for its `listening <port>`.
    fn start(role: &str, dir: &Path, store: PathBuf, env: &[(String, String)]) -> Self {
        let log = dir.join(format!("{role}.log"));
        let mut child = Command::new(python())
            .args([SCRIPT, role])
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("running python");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(port) = line.strip_prefix("listening ") else {
            let _ = child.wait();
            panic!(
                "{role} did not start:\n{}",
                std::fs::read_to_string(&log).unwrap()
            );
        };
        let port = port.trim().parse().unwrap();
        Self {
            child,
            port,
            store,
            log,
        }
    }

    /// What it has kept, oldest first: written before it answered 250.
    fn kept(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.store)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The catcher's environment, as mail.yaml's Deployment sets it from the chart's values
/// (`render::services::mail` makes them; it is not public, so its one condition, relay
/// values only with a relay host and named recipients, is repeated here).
fn deployment_env(config: &Config, secret: &SecretSpec, database: &Path) -> Vec<(String, String)> {
    let policy = config.app_for(&"octo/app".parse().unwrap()).mail.unwrap();
    let auth = template::render(&secret.templates["MP_SMTP_AUTH"], &secret.data).unwrap();
    let mut env = vec![
        ("MP_SMTP_AUTH", String::from_utf8(auth).unwrap()),
        ("MP_SMTP_AUTH_ALLOW_INSECURE", "true".into()),
        ("MP_MAX_MESSAGES", config.mail.max_messages.to_string()),
        ("MP_WEBROOT", INBOX_PATH.trim_matches('/').into()),
        // /data/mailpit.db in the pod; here the stand-in's JSON-lines store.
        ("MP_DATABASE", database.display().to_string()),
    ];
    if let (Some(relay), Some(allowed)) = (&config.mail.relay, allowed_recipients(&policy)) {
        env.extend([
            ("MP_SMTP_RELAY_HOST", relay.host.clone()),
            ("MP_SMTP_RELAY_PORT", relay.port.to_string()),
            ("MP_SMTP_RELAY_STARTTLS", relay.starttls.to_string()),
            ("MP_SMTP_RELAY_AUTH", "none".into()),
            ("MP_SMTP_RELAY_ALLOWED_RECIPIENTS", allowed.clone()),
            ("MP_SMTP_RELAY_MATCHING", allowed),
        ]);
    }
    env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// A preview of octo/app with `mail = true` (and `mail_relay = relay_to` when given), its
/// catcher, and the operator's relay at `mail.relay_host`.
struct Preview {
    _dir: tempfile::TempDir,
    secret: SecretSpec,
    env: Vec<(String, String)>,
    catcher: Server,
    relay: Server,
}

impl Preview {
    fn new(relay_to: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let relay_store = dir.path().join("relay.jsonl");
        let relay = Server::start(
            "relay",
            dir.path(),
            relay_store.clone(),
            &[("RELAY_STORE".into(), relay_store.display().to_string())],
        );
        let named = if relay_to.is_empty() {
            String::new()
        } else {
            format!("mail_relay = {relay_to:?}\n")
        };
        let config = Config::from_toml(
            &format!(
                "[mail]\nrelay_host = \"127.0.0.1\"\nrelay_port = {}\nrelay_starttls = false\n\
                 [[repos]]\nname = \"octo/app\"\nmail = true\n{named}",
                relay.port
            ),
            Vec::new(),
        )
        .unwrap();
        let app = config.app_for(&"octo/app".parse().unwrap());
        let names = Names::of(&"octo/app#7".parse().unwrap(), "preview.example.com");
        let secret = previewd::secrets::mail(&app, &names, &mut rand::thread_rng()).unwrap();
        let database = dir.path().join("mailpit.jsonl");
        let mut env = deployment_env(&config, &secret, &database);
        // Not in the Deployment: Mailpit listens on its default [::]:1025 there.
        env.push(("MP_SMTP_BIND_ADDR".into(), "127.0.0.1:0".into()));
        let catcher = Server::start("catcher", dir.path(), database, &env);
        Self {
            _dir: dir,
            secret,
            env,
            catcher,
            relay,
        }
    }

    fn has(&self, name: &str) -> bool {
        self.env.iter().any(|(k, _)| k == name)
    }

    /// The app sends its sign-up mail to `to` with smtplib, logging in as `args` say
    /// (`--auth plain|login|none`, `--password`); each command's reply, as JSON.
    fn send(&self, args: &[&str], to: &[&str]) -> Value {
        let public = &self.secret.public;
        // SMTP_HOST is `<slug>-mail.<slug>.svc`, the catcher's Service, which only the
        // cluster's DNS resolves; here the catcher is on 127.0.0.1 and a free port.
        assert_eq!(
            public["SMTP_HOST"],
            format!("{0}-mail.{0}.svc", self.slug())
        );
        assert_eq!(public["SMTP_PORT"], "1025");
        let password = String::from_utf8(self.secret.data["SMTP_PASSWORD"].clone()).unwrap();
        let output = Command::new(python())
            .args([SCRIPT, "send"])
            .args(args)
            .arg(SENDER)
            .args(to)
            .env("SMTP_HOST", "127.0.0.1")
            .env("SMTP_PORT", self.catcher.port.to_string())
            .env("SMTP_USERNAME", &public["SMTP_USERNAME"])
            .env("SMTP_PASSWORD", password)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "the app failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).unwrap()
    }

    fn slug(&self) -> &str {
        &self.secret.namespace
    }

    /// Sends one sign-up mail, logged in, and checks every command was accepted.
    fn send_ok(&self, to: &[&str]) {
        let replies = self.send(&[], to);
        assert_eq!(replies["data"][0], 250, "{replies}");
    }

    /// The envelope recipients of each message the relay got.
    fn relayed(&self) -> Vec<Vec<String>> {
        self.relay
            .kept()
            .iter()
            .map(|m| serde_json::from_value(m["to"].clone()).unwrap())
            .collect()
    }

    fn logs(&self) -> String {
        format!(
            "catcher:\n{}relay:\n{}",
            self.catcher.log(),
            self.relay.log()
        )
    }
}

fn recipients(message: &Value) -> Vec<String> {
    serde_json::from_value(message["to"].clone()).unwrap()
}

#[test]
fn the_stand_in_gets_every_variable_the_deployment_gives_mailpit() {
    let chart = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/helpers-chart/templates/mail.yaml"
    ))
    .unwrap();
    let in_chart: BTreeSet<&str> = chart
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .filter(|name| name.starts_with("MP_"))
        .collect();
    let preview = Preview::new(&["qa@example.com"]);
    let given: BTreeSet<&str> = preview
        .env
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| *k != "MP_SMTP_BIND_ADDR")
        .collect();
    assert_eq!(given, in_chart);
    // The Deployment reads MP_SMTP_AUTH from the Secret's key of that name.
    assert!(chart.contains("key: MP_SMTP_AUTH"));
    assert!(preview.secret.templates.contains_key("MP_SMTP_AUTH"));
}

#[test]
fn the_app_logs_in_with_the_secrets_settings_and_the_catcher_keeps_its_sign_up_mail() {
    let preview = Preview::new(&[]);
    for auth in ["plain", "login"] {
        let replies = preview.send(&["--auth", auth], &["new.user@example.org"]);
        assert_eq!(replies["ehlo_auth"], " PLAIN LOGIN", "no CRAM-MD5");
        assert_eq!(replies["auth"][0], 235, "{auth}: {replies}");
        assert_eq!(replies["mail"][0], 250);
        assert_eq!(replies["rcpt"][0][0], 250);
        assert_eq!(replies["data"][0], 250, "{replies}");
    }
    let kept = preview.catcher.kept();
    assert_eq!(kept.len(), 2, "{}", preview.logs());
    for message in &kept {
        assert_eq!(message["from"], SENDER);
        assert_eq!(recipients(message), ["new.user@example.org"]);
        assert_eq!(message["user"], "preview");
        let data = message["data"].as_str().unwrap();
        assert!(data.contains("Subject: Confirm your sign-up\r\n"), "{data}");
        assert!(data.contains("https://app.example/confirm/42"));
        assert!(data.contains(&format!("Return-Path: <{SENDER}>\r\n")));
    }
    assert!(preview.relayed().is_empty());
}

#[test]
fn a_wrong_password_or_no_login_is_refused_and_nothing_is_kept() {
    let preview = Preview::new(&["qa@example.com"]);
    let wrong = preview.send(&["--password", "not-the-secrets"], &["qa@example.com"]);
    assert_eq!(wrong["auth"][0], 535, "{wrong}");
    let anonymous = preview.send(&["--auth", "none"], &["qa@example.com"]);
    for replies in [&wrong, &anonymous] {
        assert_eq!(replies["mail"][0], 530, "{replies}");
        assert_eq!(replies["rcpt"][0][0], 530);
        assert_eq!(replies["data"][0], 530);
    }
    let right = preview.send(&["--auth", "login"], &["qa@example.com"]);
    assert_eq!(right["auth"][0], 235, "the right login still works");
    assert_eq!(preview.catcher.kept().len(), 1, "{}", preview.logs());
    assert_eq!(preview.relayed().len(), 1);
}

/// Mailpit refuses to start with credentials and no TLS unless told auth may go in the
/// clear (config.go VerifyConfig), so the Deployment's MP_SMTP_AUTH_ALLOW_INSECURE is needed.
#[test]
fn without_allow_insecure_the_catcher_does_not_start() {
    let preview = Preview::new(&[]);
    let env: Vec<_> = preview
        .env
        .iter()
        .filter(|(k, _)| k != "MP_SMTP_AUTH_ALLOW_INSECURE")
        .collect();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut catcher = Command::new(python())
        .args([SCRIPT, "catcher"])
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    // A catcher that starts serves until killed: give it time to refuse, no more.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(status) = catcher.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = catcher.kill();
            let _ = catcher.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.is_some_and(|s| !s.success()), "it started");
    assert!(
        std::fs::read_to_string(log.path())
            .unwrap()
            .contains("authentication requires STARTTLS or TLS encryption")
    );
}

#[test]
fn a_named_recipient_gets_the_mail_through_the_relay_and_no_one_else() {
    let preview = Preview::new(&["qa@example.com"]);
    preview.send_ok(&["qa@example.com", "customer@example.org"]);
    let kept = preview.catcher.kept();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        recipients(&kept[0]),
        ["qa@example.com", "customer@example.org"]
    );
    let relayed = preview.relay.kept();
    assert_eq!(
        preview.relayed(),
        [["qa@example.com"]],
        "{}",
        preview.logs()
    );
    assert_eq!(relayed[0]["from"], SENDER);
    // The message as the catcher kept it, its To header still naming both.
    assert_eq!(relayed[0]["data"], kept[0]["data"]);
}

/// Each is stored, as every message is, and relayed to nobody. qa@example.com before and
/// after shows the relay was there to receive the whole time.
#[test]
fn attacks_on_the_allow_list_are_relayed_to_nobody() {
    let preview = Preview::new(&["qa@example.com"]);
    let attacks: &[&[&str]] = &[
        &["qa@example.com.evil.org"],
        &["evil-qa@example.com"],
        &["xqa@example.com"],
        &["qa@example.co"],
        // The dot must be a literal dot, not "any character".
        &["qa@exampleXcom"],
        &["customer@example.org", "attacker@evil.org", "qa@evil.org"],
    ];
    preview.send_ok(&["qa@example.com"]);
    for to in attacks {
        preview.send_ok(to);
        assert_eq!(preview.relayed().len(), 1, "{to:?} was relayed");
    }
    preview.send_ok(&["qa@example.com"]);
    assert_eq!(
        preview.relayed(),
        [["qa@example.com"], ["qa@example.com"]],
        "{}",
        preview.logs()
    );
    assert_eq!(preview.catcher.kept().len(), attacks.len() + 2);
}

/// Config lower-cases `mail_relay`, and Mailpit matches the envelope address as sent, case
/// and all: mail to QA@example.com is kept but not relayed. Mail systems compare domains
/// without case, so this refuses a few addresses that would have been allowed, never the
/// other way round.
#[test]
fn a_named_recipient_in_other_case_is_not_relayed_the_safe_direction() {
    let preview = Preview::new(&["QA@Example.com"]);
    preview.send_ok(&["QA@example.com"]);
    preview.send_ok(&["qa@EXAMPLE.COM"]);
    assert!(preview.relayed().is_empty());
    preview.send_ok(&["qa@example.com"]);
    assert_eq!(
        preview.relayed(),
        [["qa@example.com"]],
        "{}",
        preview.logs()
    );
    assert_eq!(preview.catcher.kept().len(), 3);
}

/// The operator has a relay, but the repository names no one: the catcher is told nothing
/// of it, so no recipient can reach it.
#[test]
fn without_mail_relay_nothing_reaches_the_relay() {
    let preview = Preview::new(&[]);
    assert!(!preview.has("MP_SMTP_RELAY_HOST"));
    assert!(!preview.has("MP_SMTP_RELAY_MATCHING"));
    preview.send_ok(&["qa@example.com", "customer@example.org"]);
    preview.send_ok(&["ops@octo.example"]);
    assert_eq!(preview.catcher.kept().len(), 2);
    assert!(preview.relayed().is_empty(), "{}", preview.logs());
    // The relay was listening all along: the app reaching it directly gets through.
    let direct = Command::new(python())
        .args([SCRIPT, "send", "--auth", "none", SENDER, "qa@example.com"])
        .env("SMTP_HOST", "127.0.0.1")
        .env("SMTP_PORT", preview.relay.port.to_string())
        .env("SMTP_USERNAME", "-")
        .env("SMTP_PASSWORD", "-")
        .output()
        .unwrap();
    assert!(direct.status.success());
    assert_eq!(preview.relayed(), [["qa@example.com"]]);
}
