//! Mail and messaging: `[mail]`, `[messaging]` and each repository's `mail`, `mail_relay` and
//! `messaging`, read or refused at start naming the key.

use super::*;

const REPO: &str = "[[repos]]\nname = \"o/r\"\n";

#[test]
fn repositories_get_neither_mail_nor_messaging_unless_they_ask() {
    let config = Config::from_toml(REPO, env(&[])).unwrap();
    assert_eq!(config.repos[0].app.mail, None);
    assert!(!config.repos[0].app.messaging);
    assert_eq!(
        config.mail.relay, None,
        "nothing leaves a preview by default"
    );
    assert_eq!(config.messaging.mode, MessagingMode::Shared);
    assert_eq!(config.messaging.host, "rabbitmq.previewd-system.svc");
    assert_eq!(config.messaging.max_queue_bytes, 16 << 20);
}

#[test]
fn mail_and_messaging_are_read_per_repository() {
    let config = Config::from_toml(
        &format!(
            "[mail]\nrelay_host = \"relay.mail.svc\"\nrelay_port = 25\nrelay_starttls = false\n\
             [messaging]\nmode = \"operator\"\ncluster = \"broker\"\nmax_queue_size = \"2MiB\"\n\
             {REPO}mail = true\nmail_relay = [\"QA@Example.com\", \"qa@example.com\", \"dev@example.org\"]\n\
             messaging = \"rabbitmq\"\n"
        ),
        env(&[]),
    )
    .unwrap();
    let app = &config.repos[0].app;
    assert_eq!(
        app.mail.as_ref().unwrap().relay_to,
        ["qa@example.com", "dev@example.org"],
        "lower-cased, each once"
    );
    assert!(app.messaging);
    assert_eq!(
        config.mail.relay,
        Some(MailRelay {
            host: "relay.mail.svc".into(),
            port: 25,
            starttls: false
        })
    );
    assert_eq!(config.messaging.mode, MessagingMode::Operator);
    assert_eq!(
        config.messaging.namespace, "rabbitmq",
        "the operator's default"
    );
    assert_eq!(config.messaging.cluster, "broker");
    assert_eq!(config.messaging.max_queue_bytes, 2 << 20);
}

#[test]
fn bad_mail_and_messaging_settings_are_refused_naming_the_key() {
    for (text, key) in [
        (
            format!("{REPO}mail_relay = [\"a@b.com\"]\n"),
            "repos[0].mail_relay",
        ),
        (
            format!("{REPO}mail = true\nmail_relay = [\"a@b.com\"]\n"),
            "repos[0].mail_relay",
        ),
        (
            format!(
                "[mail]\nrelay_host = \"r.svc\"\n{REPO}mail = true\nmail_relay = [\"Al <a@b.com>\"]\n"
            ),
            "repos[0].mail_relay",
        ),
        (
            format!(
                "[mail]\nrelay_host = \"r.svc\"\n{REPO}mail = true\nmail_relay = [\".*@b.com\"]\n"
            ),
            "repos[0].mail_relay",
        ),
        (
            format!(
                "[mail]\nrelay_host = \"r.svc\"\n{REPO}mail = true\nmail_relay = [\"a@localhost\"]\n"
            ),
            "repos[0].mail_relay",
        ),
        (
            format!("{REPO}messaging = \"kafka\"\n"),
            "repos[0].messaging",
        ),
        (
            "[mail]\nrelay_host = \"smtp://x\"\n".into(),
            "mail.relay_host",
        ),
        ("[mail]\nrelay_port = 0\n".into(), "mail.relay_port"),
        ("[mail]\nmax_messages = 0\n".into(), "mail.max_messages"),
        ("[mail]\nimage = \"\"\n".into(), "mail.image"),
        (
            "[mail]\ningress_namespace = \"a b\"\n".into(),
            "mail.ingress_namespace",
        ),
        ("[messaging]\nmode = \"kafka\"\n".into(), "messaging.mode"),
        (
            "[messaging]\nnamespace = \"Broker\"\n".into(),
            "messaging.namespace",
        ),
        ("[messaging]\nhost = \"a@b\"\n".into(), "messaging.host"),
        (
            "[messaging]\nmax_queues = 0\n".into(),
            "messaging.max_queues",
        ),
        (
            "[messaging]\nmax_queue_size = \"1KiB\"\n".into(),
            "messaging.max_queue_size",
        ),
    ] {
        let e = match Config::from_toml(&text, env(&[])) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn messaging_is_set_from_the_environment_too() {
    let config = Config::from_toml(
        "",
        env(&[
            ("PREVIEWD_MESSAGING_MODE", "operator"),
            ("PREVIEWD_MESSAGING_MAX_CONNECTIONS", "3"),
        ]),
    )
    .unwrap();
    assert_eq!(config.messaging.mode, MessagingMode::Operator);
    assert_eq!(config.messaging.max_connections, 3);
}
