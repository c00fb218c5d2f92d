//! What a preview gets besides its database, as the chart's values: a mail catcher
//! (`helpers-chart/templates/mail.yaml`) and a vhost and user of its own on the broker
//! (`messaging-shared.yaml` or `messaging-operator.yaml`), and what the app's own chart is
//! told about them. Pure.

use serde_json::{Value, json};

use crate::config::{AppConfig, Config, MailPolicy, MessagingMode};
use crate::naming::Names;
use crate::preview::Preview;
use crate::render::{SealedSecret, SecretNames};

/// Where the catcher's inbox is served on the preview's host (Mailpit's webroot), behind
/// the preview's login like the app.
pub const INBOX_PATH: &str = "/__mail/";

/// The chart's `mail` values, for a repository with `mail = true`; `None` otherwise, so a
/// preview without mail renders, and hashes, as before there was any.
pub(super) fn mail(app: &AppConfig, config: &Config, names: &Names) -> Option<Value> {
    let policy = app.mail.as_ref()?;
    let mut mail = json!({
        "enabled": true,
        "name": names.mail_service(),
        "secret": SecretNames::of(names).mail,
        "image": config.mail.image,
        "maxMessages": config.mail.max_messages,
        "webroot": INBOX_PATH.trim_matches('/'),
        "ingressNamespace": config.mail.ingress_namespace,
    });
    if let (Some(relay), Some(allowed)) = (&config.mail.relay, allowed_recipients(policy)) {
        mail["relay"] = json!({
            "host": relay.host,
            "port": relay.port,
            "starttls": relay.starttls,
            "allowedRecipients": allowed,
        });
    }
    Some(mail)
}

/// The inbox's address on a preview reached at `url` (`https://<host>`): for a repository
/// with mail whose previews have their edge (the Ingress publishes the inbox beside the
/// app); `None` otherwise.
pub fn inbox_url(config: &Config, app: &AppConfig, url: &str) -> Option<String> {
    let published = app.mail.is_some() && super::edge::ingress(app, config).is_some();
    published.then(|| format!("{}{INBOX_PATH}", url.trim_end_matches('/')))
}

/// The recipients a repository allows, as the one pattern the catcher matches whole
/// addresses against (Go's RE2: the addresses are escaped, so nothing in them is a pattern);
/// `None` when it names none, and then nothing is ever relayed.
pub fn allowed_recipients(policy: &MailPolicy) -> Option<String> {
    if policy.relay_to.is_empty() {
        return None;
    }
    let escaped: Vec<String> = policy.relay_to.iter().map(|a| escape(a)).collect();
    Some(format!("^({})$", escaped.join("|")))
}

/// `text` as an RE2 literal: every punctuation character escaped (RE2 accepts `\` before
/// any of them).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for c in text.chars() {
        if c.is_ascii_punctuation() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The chart's `messaging` values, for a repository with `messaging = "rabbitmq"`: the
/// vhost and user are the slug (its hash of the full repository name keeps two
/// repositories apart), with the bounds of `[messaging]`, in the preview's `mode`
/// (`broker_of`).
pub(super) fn messaging(
    kept: Option<Broker>,
    config: &Config,
    names: &Names,
    preview: &Preview,
) -> Option<Value> {
    let Broker { mode, namespace } = kept?;
    let broker = &config.messaging;
    let secrets = SecretNames::of(names);
    let mut values = json!({
        "vhost": names.slug,
        "user": names.slug,
        "preview": preview.key.to_string(),
        "maxConnections": broker.max_connections,
        "maxQueues": broker.max_queues,
        "maxQueueBytes": broker.max_queue_bytes,
        "maxQueueMessages": broker.max_queue_messages,
        "maxChannels": broker.max_channels,
        "secret": secrets.amqp,
    });
    match mode {
        MessagingMode::Shared => {
            values["mode"] = json!("shared");
            values["shared"] = json!({
                "namespace": namespace,
                "adminSecret": broker.admin_secret,
                "hashSecret": secrets.amqp_hash,
                "image": broker.image,
            });
        }
        MessagingMode::Operator => {
            values["mode"] = json!("operator");
            values["operator"] = json!({
                "namespace": namespace,
                "cluster": broker.cluster,
                "credentialsSecret": secrets.amqp_user,
            });
        }
    }
    Some(values)
}

/// How a preview has its vhost and user, and the namespace their maker works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub mode: MessagingMode,
    /// The provisioner namespace (shared: the Jobs, the hash) or the RabbitmqCluster's
    /// (operator: the topology objects, their credentials).
    pub namespace: String,
}

/// How a preview has its vhost and user: as its sealed credentials say once it has them
/// (the hash for the shared mode's Job, or the operator's Secret, each where it was sealed),
/// else as its repository asks. A preview keeps what it was made with until it ends, so
/// that its teardown deletes what is there, whatever the configuration says by then: a
/// repository turning messaging off, or `messaging.mode` or its namespace changed, would
/// otherwise drop the delete hook or move it where nothing it needs is, and leave a vhost
/// and a user whose password the PR's code has read.
pub fn broker_of(
    app: &AppConfig,
    config: &Config,
    names: &Names,
    sealed: &[SealedSecret],
) -> Option<Broker> {
    let secrets = SecretNames::of(names);
    let stored = |name: &str| sealed.iter().find(|s| s.name == name);
    let kept = |mode, secret: &SealedSecret| Broker {
        mode,
        namespace: secret.namespace.clone(),
    };
    if let Some(hash) = stored(&secrets.amqp_hash) {
        Some(kept(MessagingMode::Shared, hash))
    } else if let Some(user) = stored(&secrets.amqp_user) {
        Some(kept(MessagingMode::Operator, user))
    } else {
        app.messaging.then(|| Broker {
            mode: config.messaging.mode,
            namespace: config.messaging.namespace.clone(),
        })
    }
}

/// What the app's chart is told: the Secrets holding SMTP_* and AMQP_*, for a repository
/// that has them (absent otherwise, so its values stay as they were).
pub(super) fn app_values(app: &AppConfig, names: &Names, preview: &mut Value) {
    let secrets = SecretNames::of(names);
    if app.mail.is_some() {
        preview["mailSecret"] = json!(secrets.mail);
    }
    if app.messaging {
        preview["messagingSecret"] = json!(secrets.amqp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(to: &[&str]) -> MailPolicy {
        MailPolicy {
            relay_to: to.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn no_named_recipient_means_no_relay_pattern() {
        assert_eq!(allowed_recipients(&policy(&[])), None);
    }

    /// The same pattern, read by Python's `re` (which agrees with RE2 on escaped literals
    /// and alternation), is what tests/mail.rs checks addresses against.
    #[test]
    fn the_relay_pattern_matches_the_named_addresses_whole_and_nothing_else() {
        let pattern = allowed_recipients(&policy(&["qa@example.com", "a.b+c@x-y.org"])).unwrap();
        assert_eq!(pattern, r"^(qa\@example\.com|a\.b\+c\@x\-y\.org)$");
    }
}
