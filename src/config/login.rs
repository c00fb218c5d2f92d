//! Validation of signing in to previews: `[login]`, `github.web_url`, and per repository
//! who may enter (`access`) and the Service the preview's Ingress sends them to
//! (`app_service`).

use secrecy::ExposeSecret;

use super::raw::Raw;
use super::validate::Validator;
use super::*;

/// Bytes of `login.session_secret`: an AES-256 key's worth.
const MIN_SESSION_KEY: usize = 32;

impl Validator {
    pub(super) fn login(
        &self,
        raw: &Raw,
        public_url: Option<&str>,
    ) -> Result<LoginConfig, ConfigError> {
        let id = raw.values.text("login.client_id");
        let secret = self.secret(
            "login.client_secret",
            raw.values.text("login.client_secret"),
        )?;
        let client = match (id, secret) {
            (None, None) => None,
            (Some(id), Some(secret)) => {
                if id.is_empty()
                    || !id
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
                {
                    return Err(self.invalid(
                        "login.client_id",
                        format!("{id:?} is not a client ID"),
                        "the Client ID from the OAuth App's (or GitHub App's) settings page",
                    ));
                }
                Some(OAuthClient { id, secret })
            }
            (Some(_), None) => {
                return Err(self.invalid(
                    "login.client_secret",
                    "login.client_id is set without it".into(),
                    "the client's secret (PREVIEWD_LOGIN_CLIENT_SECRET, from a Secret)",
                ));
            }
            (None, Some(_)) => {
                return Err(self.invalid(
                    "login.client_id",
                    "login.client_secret is set without it".into(),
                    "the client's ID",
                ));
            }
        };
        if client.is_some() {
            // The session cookie is `Secure`, and GitHub sends the code to this URL.
            match public_url {
                Some(url) if url.starts_with("https://") || super::github::is_loopback_url(url) => {
                }
                _ => {
                    return Err(self.invalid(
                        "public_url",
                        "sign-in needs it, and it is not an https URL (plain http is for \
                         loopback only)"
                            .into(),
                        "where people reach previewd, like https://previewd.example.com",
                    ));
                }
            }
        }
        let session_key = self.secret(
            "login.session_secret",
            raw.values.text("login.session_secret"),
        )?;
        if let Some(key) = &session_key
            && key.expose_secret().len() < MIN_SESSION_KEY
        {
            return Err(self.invalid(
                "login.session_secret",
                format!("the key is {} bytes long", key.expose_secret().len()),
                "at least 32 bytes (e.g. `openssl rand -hex 32`)",
            ));
        }
        Ok(LoginConfig {
            client,
            session_key,
            session_ttl: self.duration_of(raw, "login.session_ttl")?,
            access_cache: self.duration_of(raw, "login.access_cache")?,
        })
    }

    /// `access`, in `[defaults]` or a `[[repos]]` entry (`key` names it).
    pub(super) fn access(&self, key: &str, text: &str) -> Result<Access, ConfigError> {
        match text {
            "repo" => Ok(Access::Repo),
            "org" => Ok(Access::Org),
            "public" => Ok(Access::Public),
            other => Err(self.invalid(
                key,
                format!("{other:?} is not an access rule"),
                "repo, org or public",
            )),
        }
    }

    /// `[[repos]] app_service`: `NAME:PORT`, a Service name and a port number or name.
    pub(super) fn app_service(&self, key: &str, text: &str) -> Result<AppService, ConfigError> {
        let invalid = |why: &str| {
            self.invalid(
                key,
                format!("{text:?} {why}"),
                "NAME:PORT, a Service of the app's chart and its port number or name, like web:8080 or web:http",
            )
        };
        let (name, port) = text
            .split_once(':')
            .ok_or_else(|| invalid("has no :PORT"))?;
        if !is_dns_label(name) {
            return Err(invalid("does not start with a Service name"));
        }
        let port = match port.parse::<u16>() {
            Ok(0) => return Err(invalid("names port 0")),
            Ok(n) => ServicePort::Number(n),
            // A Service port's name is an IANA_SVC_NAME: at most 15 characters, lower-case
            // letters, digits and inner hyphens, with a letter.
            Err(_)
                if port.len() <= 15
                    && is_dns_label(port)
                    && port.chars().any(|c| c.is_ascii_lowercase()) =>
            {
                ServicePort::Name(port.to_owned())
            }
            Err(_) => return Err(invalid("does not end with a port number or name")),
        };
        Ok(AppService {
            name: name.to_owned(),
            port,
        })
    }
}
