//! Validation of `[github]`: the webhook secret (from the file, the environment or a file it
//! names), the REST base, and the credentials (a token, or an App's ID and key).

use secrecy::{ExposeSecret, SecretString};

use super::raw::Raw;
use super::validate::Validator;
use super::*;

/// Bytes; GitHub's docs ask for "a random string with high entropy".
const MIN_WEBHOOK_SECRET: usize = 16;

/// Whether a URL's authority (what follows `http://`) names this host only: `localhost`,
/// `127.0.0.0/8` or `[::1]`, with or without a port. Userinfo (`localhost@elsewhere`) is
/// never taken for the host.
fn is_loopback_authority(rest: &str) -> bool {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return false;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, port)) if port.is_empty() || port.starts_with(':') => host,
            _ => return false,
        },
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `http://` to this host only.
pub(super) fn is_loopback_url(url: &str) -> bool {
    url.strip_prefix("http://")
        .is_some_and(is_loopback_authority)
}

impl Validator {
    /// An HMAC key short enough to guess offline from one signed delivery is no key.
    fn webhook_secret(
        &self,
        key: &str,
        raw: Option<String>,
    ) -> Result<Option<SecretString>, ConfigError> {
        let secret = self.secret(key, raw)?;
        match &secret {
            Some(s) if s.expose_secret().len() < MIN_WEBHOOK_SECRET => Err(self.invalid(
                key,
                format!("the secret is {} bytes long", s.expose_secret().len()),
                "at least 16 bytes (e.g. `openssl rand -hex 32`)",
            )),
            _ => Ok(secret),
        }
    }

    pub(super) fn github(&self, raw: &Raw) -> Result<GithubConfig, ConfigError> {
        let webhook_secret = match (
            raw.values.text("github.webhook_secret"),
            self.path(
                "github.webhook_secret_file",
                raw.values.text("github.webhook_secret_file"),
            )?,
        ) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "github.webhook_secret_file",
                    "both webhook_secret and webhook_secret_file are set".into(),
                    "only one of them",
                ));
            }
            (secret, None) => self.webhook_secret("github.webhook_secret", secret)?,
            (None, Some(path)) => {
                // The path is not repeated: a secret typed where its path belongs would be.
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    self.invalid(
                        "github.webhook_secret_file",
                        format!("cannot read the file it names: {e}"),
                        "a readable file holding the secret",
                    )
                })?;
                self.webhook_secret(
                    "github.webhook_secret_file",
                    Some(text.trim_end_matches(['\n', '\r']).to_owned()),
                )?
            }
        };
        let api_url = raw.values.text_or_default("github.api_url");
        let plain = api_url.strip_prefix("http://");
        if api_url.parse::<http::Uri>().is_err() {
            return Err(self.invalid(
                "github.api_url",
                format!("{api_url:?} is not a URL"),
                "a URL like https://api.github.com or https://ghe.example.com/api/v3",
            ));
        }
        if !(api_url.starts_with("https://") || plain.is_some_and(is_loopback_authority)) {
            // Plain HTTP would carry the token and every answer readable and forgeable on
            // the way; only a test server on this host may be spoken to without TLS.
            return Err(self.invalid(
                "github.api_url",
                format!("{api_url:?} is not an https URL (plain http is for loopback only)"),
                "a URL like https://api.github.com or https://ghe.example.com/api/v3",
            ));
        }
        let token = self.secret("github.token", raw.values.text("github.token"))?;
        let app_id = raw
            .values
            .text("github.app_id")
            .map(|id| {
                id.parse::<u64>().map_err(|_| {
                    self.invalid(
                        "github.app_id",
                        format!("{id:?} is not a number"),
                        "the numeric App ID from the App's settings page",
                    )
                })
            })
            .transpose()?;
        let key_path = self.path(
            "github.private_key_path",
            raw.values.text("github.private_key_path"),
        )?;
        let credentials = match (token, app_id, key_path) {
            (None, None, None) => None,
            (Some(token), None, None) => Some(GithubCredentials::Token(token)),
            (None, Some(app_id), Some(path)) => Some(GithubCredentials::App {
                app_id,
                private_key_path: path.into(),
            }),
            (Some(_), _, _) => {
                return Err(self.invalid(
                    "github.token",
                    "both a token and App credentials are set".into(),
                    "either github.token or github.app_id + github.private_key_path",
                ));
            }
            (None, Some(_), None) => {
                return Err(self.invalid(
                    "github.private_key_path",
                    "github.app_id is set without it".into(),
                    "the path of the App's PEM private key",
                ));
            }
            (None, None, Some(_)) => {
                return Err(self.invalid(
                    "github.app_id",
                    "github.private_key_path is set without it".into(),
                    "the numeric App ID",
                ));
            }
        };
        let web_url = raw.values.text_or_default("github.web_url");
        if web_url.parse::<http::Uri>().is_err()
            || !(web_url.starts_with("https://") || is_loopback_url(&web_url))
        {
            // The OAuth code and client secret travel to it.
            return Err(self.invalid(
                "github.web_url",
                format!("{web_url:?} is not an https URL (plain http is for loopback only)"),
                "GitHub's web root, like https://github.com or https://ghe.example.com",
            ));
        }
        Ok(GithubConfig {
            webhook_secret,
            api_url: api_url.trim_end_matches('/').to_owned(),
            web_url: web_url.trim_end_matches('/').to_owned(),
            credentials,
            resync_interval: self.duration_of(raw, "github.resync_interval")?,
        })
    }
}
