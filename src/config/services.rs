//! Validation of what previews get besides their database: mail (`[mail]`, `[[repos]] mail`,
//! `mail_relay`) and messaging (`[messaging]`, `[[repos]] messaging`).

use super::keys::default_of;
use super::raw::{Raw, RawRepo};
use super::validate::Validator;
use super::*;

/// The most addresses a repository may relay to: an allow-list names people, not a domain.
const MAX_RELAY_RECIPIENTS: usize = 50;

impl Validator {
    /// A repository's `mail`, `mail_relay` and `messaging`.
    pub(super) fn services(
        &self,
        i: usize,
        r: &RawRepo,
    ) -> Result<(Option<MailPolicy>, bool), ConfigError> {
        let key = |field: &str| format!("repos[{i}].{field}");
        let mail = r.mail.unwrap_or(false);
        if !mail && !r.mail_relay.is_empty() {
            return Err(self.invalid(
                &key("mail_relay"),
                "recipients are named but mail is off".into(),
                "mail = true beside it",
            ));
        }
        if r.mail_relay.len() > MAX_RELAY_RECIPIENTS {
            return Err(self.invalid(
                &key("mail_relay"),
                format!("{} recipients", r.mail_relay.len()),
                &format!("at most {MAX_RELAY_RECIPIENTS} addresses"),
            ));
        }
        let mut relay_to = Vec::new();
        for address in &r.mail_relay {
            if !is_plain_address(address) {
                return Err(self.invalid(
                    &key("mail_relay"),
                    format!("{address:?} is not a plain mail address"),
                    "addresses like qa@example.com (no names, brackets or wildcards)",
                ));
            }
            // Mail systems compare domains without case; the catcher's match is exact.
            let lowered = address.to_ascii_lowercase();
            if !relay_to.contains(&lowered) {
                relay_to.push(lowered);
            }
        }
        let messaging = match r.messaging.as_deref() {
            None | Some("off") => false,
            Some("rabbitmq") => true,
            Some(other) => {
                return Err(self.invalid(
                    &key("messaging"),
                    format!("{other:?} is not a broker previewd provisions"),
                    "\"rabbitmq\" (or \"off\")",
                ));
            }
        };
        Ok((mail.then_some(MailPolicy { relay_to }), messaging))
    }

    pub(super) fn mail(&self, raw: &Raw) -> Result<MailConfig, ConfigError> {
        let image = raw.values.text_or_default("mail.image");
        self.image("mail.image", &image)?;
        let relay_port = self.port(raw, "mail.relay_port")?;
        let relay = match raw.values.text("mail.relay_host") {
            None => None,
            Some(host) => {
                if host.is_empty()
                    || !host
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
                {
                    return Err(self.invalid(
                        "mail.relay_host",
                        format!("{host:?} is not a host name"),
                        "a DNS name or IPv4 address, like smtp-relay.mail.svc",
                    ));
                }
                Some(MailRelay {
                    host,
                    port: relay_port,
                    starttls: raw.values.flag_or_default("mail.relay_starttls"),
                })
            }
        };
        let ingress_namespace = raw.values.text_or_default("mail.ingress_namespace");
        if !is_dns_label(&ingress_namespace) {
            return Err(self.invalid(
                "mail.ingress_namespace",
                format!("{ingress_namespace:?} is not a namespace name"),
                "a lower-case RFC 1123 label, like ingress-nginx",
            ));
        }
        Ok(MailConfig {
            image,
            ingress_namespace,
            max_messages: self.count(raw, "mail.max_messages", 1..=100_000)?,
            relay,
        })
    }

    /// `mail_relay` names recipients only where there is a relay to send through.
    pub(super) fn relays_need_a_relay(
        &self,
        repos: &[RepoConfig],
        mail: &MailConfig,
    ) -> Result<(), ConfigError> {
        let named = repos
            .iter()
            .position(|r| r.app.mail.as_ref().is_some_and(|m| !m.relay_to.is_empty()));
        match named {
            Some(i) if mail.relay.is_none() => Err(self.invalid(
                &format!("repos[{i}].mail_relay"),
                "recipients are named but mail.relay_host is not set".into(),
                "mail.relay_host, the SMTP relay their mail goes through",
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn messaging(&self, raw: &Raw) -> Result<MessagingConfig, ConfigError> {
        let mode = match raw.values.text_or_default("messaging.mode").as_str() {
            "shared" => MessagingMode::Shared,
            "operator" => MessagingMode::Operator,
            other => {
                return Err(self.invalid(
                    "messaging.mode",
                    format!("{other:?} is not a messaging mode"),
                    "shared or operator",
                ));
            }
        };
        let label = |key: &str, default: &str| {
            self.label(key, raw.values.text(key).unwrap_or_else(|| default.into()))
        };
        let namespace = label(
            "messaging.namespace",
            match mode {
                MessagingMode::Shared => "previewd-system",
                MessagingMode::Operator => "rabbitmq",
            },
        )?;
        let image = raw.values.text_or_default("messaging.image");
        self.image("messaging.image", &image)?;
        let host = raw
            .values
            .text("messaging.host")
            .unwrap_or_else(|| format!("rabbitmq.{namespace}.svc"));
        // It lands in AMQP_URL as it is: a host name, nothing that needs escaping there.
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        {
            return Err(self.invalid(
                "messaging.host",
                format!("{host:?} is not a host name"),
                "a DNS name or IPv4 address, like rabbitmq.previewd-system.svc",
            ));
        }
        let configured = raw
            .values
            .all_shown()
            .any(|(name, _)| name.starts_with("messaging."));
        Ok(MessagingConfig {
            configured,
            mode,
            admin_secret: label(
                "messaging.admin_secret",
                default_of("messaging.admin_secret"),
            )?,
            cluster: label("messaging.cluster", default_of("messaging.cluster"))?,
            host,
            port: self.port(raw, "messaging.port")?,
            image,
            max_connections: self.count(raw, "messaging.max_connections", 1..=10_000)?,
            max_channels: self.count(raw, "messaging.max_channels", 1..=2047)?,
            max_queues: self.count(raw, "messaging.max_queues", 1..=10_000)?,
            max_queue_messages: self.count(raw, "messaging.max_queue_messages", 1..=10_000_000)?,
            max_queue_bytes: self.size_from(
                "messaging.max_queue_size",
                &raw.values.text_or_default("messaging.max_queue_size"),
                1,
            )?,
            namespace,
        })
    }

    fn image(&self, key: &str, image: &str) -> Result<(), ConfigError> {
        if image.is_empty() || image.contains(char::is_whitespace) {
            return Err(self.invalid(
                key,
                format!("{image:?} is not an image"),
                "an image reference, like docker.io/axllent/mailpit:v1.30.5",
            ));
        }
        Ok(())
    }

    fn port(&self, raw: &Raw, key: &str) -> Result<u16, ConfigError> {
        let text = raw.values.text_or_default(key);
        text.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            self.invalid(
                key,
                format!("{text:?} is not a port"),
                "a number from 1 to 65535",
            )
        })
    }

    fn count(
        &self,
        raw: &Raw,
        key: &str,
        range: std::ops::RangeInclusive<u32>,
    ) -> Result<u32, ConfigError> {
        let text = raw.values.text_or_default(key);
        text.parse()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                self.invalid(
                    key,
                    format!("{text:?} is out of range"),
                    &format!("a number from {} to {}", range.start(), range.end()),
                )
            })
    }
}

/// `local@domain` and nothing more: no display name, brackets, spaces or pattern characters
/// (the catcher's allow-list is built from these, escaped, and matched whole).
fn is_plain_address(address: &str) -> bool {
    let Some((local, domain)) = address.split_once('@') else {
        return false;
    };
    let local_ok = !local.is_empty()
        && local.len() <= 64
        && local
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._%+-".contains(&b));
    let domain_ok = domain.len() <= 253
        && domain.contains('.')
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    local_ok && domain_ok
}
