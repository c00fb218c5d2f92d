//! `previewd config check`: the effective configuration, each value with where it came
//! from (the embedded default, the file, or a `PREVIEWD_*` variable), secrets masked. Pure:
//! it reads what `Config::load` read, and prints nothing itself.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use super::keys::{Fallback, KEYS, env_name, is_secret};
use super::raw::Raw;
use super::{Config, ConfigError, DEFAULT_FILE};

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    File,
    Env(String),
}

/// One scalar key as previewd will use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// `defaults.ttl`, or `repos[acme/shop].ttl` for a repository's own policy.
    pub key: String,
    /// As written (secrets masked), or the declared default (or what happens without one).
    pub value: String,
    pub source: Source,
}

/// The configuration `config check` found valid, and how it was made.
#[derive(Debug)]
pub struct Explained {
    pub config: Config,
    /// The file read, if any (`None`: the embedded defaults alone).
    pub file: Option<std::path::PathBuf>,
    pub settings: Vec<Setting>,
}

impl Explained {
    /// Loads like `Config::load`, keeping what each value's source was.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        let config = Config::load(path, env.iter().cloned())?;
        let file = match path {
            Some(path) => Some(path.to_path_buf()),
            None => Path::new(DEFAULT_FILE)
                .exists()
                .then(|| DEFAULT_FILE.into()),
        };
        // Read again only to learn the sources: the load above has validated the same text.
        let text = match &file {
            Some(path) => std::fs::read_to_string(path).unwrap_or_default(),
            None => String::new(),
        };
        let mut raw = Raw::from_file(&text).unwrap_or_default();
        let mut from_env = BTreeSet::new();
        for (name, value) in env {
            if let Ok(Some(key)) = raw.set_from_env(&name, value) {
                from_env.insert(key);
            }
        }
        let settings = settings(&raw, &from_env);
        Ok(Self {
            config,
            file,
            settings,
        })
    }

    /// The report: one aligned line per key, then the clusters and repositories.
    pub fn text(&self) -> String {
        let mut out = match &self.file {
            Some(path) => format!("configuration: {} (valid)\n", path.display()),
            None => "configuration: the embedded defaults (no file; valid)\n".to_owned(),
        };
        let width = self.settings.iter().map(|s| s.key.len()).max().unwrap_or(0);
        let value_width = self
            .settings
            .iter()
            .map(|s| s.value.chars().count())
            .max()
            .unwrap_or(0)
            .min(48);
        for s in &self.settings {
            let source = match &s.source {
                Source::Default => "default".to_owned(),
                Source::File => "file".to_owned(),
                Source::Env(name) => format!("env {name}"),
            };
            let line = format!("  {:<width$}  {:<value_width$}  {source}", s.key, s.value);
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let _ = writeln!(out, "clusters: {}", self.config.clusters.len());
        for c in &self.config.clusters {
            let sealing = match (&c.sealing_cert, c.local_sealing) {
                (Some(path), _) => format!("sealing_cert {}", path.display()),
                (None, true) => "sealed with a local key pair beside the state".to_owned(),
                (None, false) => "no sealing_cert".to_owned(),
            };
            let _ = writeln!(out, "  {}  {}  {sealing}", c.name, c.server);
        }
        let _ = writeln!(out, "repos: {}", self.config.repos.len());
        if self.config.repos.is_empty() {
            let _ = writeln!(
                out,
                "  (none listed: every repository sending deliveries gets previews)"
            );
        }
        for r in &self.config.repos {
            let _ = writeln!(out, "  {}", r.name);
        }
        out
    }
}

/// Every declared key, then each repository's own policy keys, with their sources.
fn settings(raw: &Raw, from_env: &BTreeSet<String>) -> Vec<Setting> {
    let mut out = Vec::new();
    for key in KEYS {
        let set = raw.values.shown(key.name);
        let (value, source) = match set {
            Some(value) => {
                let source = if from_env.contains(key.name) {
                    Source::Env(env_name(key.name))
                } else {
                    Source::File
                };
                (mask(key.name, value), source)
            }
            None => (
                match key.fallback {
                    Fallback::Is(value) => value.to_owned(),
                    Fallback::Says(text) => format!("({})", first_clause(text)),
                },
                Source::Default,
            ),
        };
        out.push(Setting {
            key: key.name.to_owned(),
            value,
            source,
        });
    }
    for repo in &raw.repos {
        for (name, value) in repo.policy.all_shown() {
            let field = name.trim_start_matches("defaults.");
            out.push(Setting {
                key: format!("repos[{}].{field}", repo.name),
                value,
                source: Source::File,
            });
        }
    }
    out
}

/// What a default without a plain value means, up to its first aside: `none: allowed only
/// on a loopback listen`.
fn first_clause(text: &str) -> String {
    let end = text.find(['(', ';']).unwrap_or(text.len());
    text[..end]
        .trim_end()
        .trim_end_matches(',')
        .replace('`', "")
}

fn mask(key: &str, value: String) -> String {
    if key == "state" {
        // A PostgreSQL URL may hold a password; a file's path is shown as it is.
        super::store::shown(&value)
    } else if is_secret(key) {
        "(set; hidden)".to_owned()
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explained(toml: &str, env: &[(&str, &str)]) -> Explained {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), toml).unwrap();
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        Explained::load(Some(file.path()), env).unwrap()
    }

    fn setting<'a>(explained: &'a Explained, key: &str) -> &'a Setting {
        explained
            .settings
            .iter()
            .find(|s| s.key == key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", explained.settings))
    }

    #[test]
    fn each_value_says_whether_it_came_from_the_default_the_file_or_the_environment() {
        let e = explained(
            "[defaults]\nttl = \"2d\"\ndomain = \"file.example.com\"\n\
             [[repos]]\nname = \"acme/shop\"\nttl = \"5h\"\n",
            &[("PREVIEWD_DEFAULTS_DOMAIN", "env.example.com")],
        );
        let ttl = setting(&e, "defaults.ttl");
        assert_eq!((ttl.value.as_str(), &ttl.source), ("2d", &Source::File));
        let domain = setting(&e, "defaults.domain");
        assert_eq!(domain.value, "env.example.com");
        assert_eq!(
            domain.source,
            Source::Env("PREVIEWD_DEFAULTS_DOMAIN".into())
        );
        let warn = setting(&e, "defaults.warn_before");
        assert_eq!(
            (warn.value.as_str(), &warn.source),
            ("24h", &Source::Default)
        );
        let repo_ttl = setting(&e, "repos[acme/shop].ttl");
        assert_eq!(
            (repo_ttl.value.as_str(), &repo_ttl.source),
            ("5h", &Source::File)
        );
        let text = e.text();
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == [
                        "defaults.domain",
                        "env.example.com",
                        "env",
                        "PREVIEWD_DEFAULTS_DOMAIN"
                    ]),
            "{text}"
        );
    }

    #[test]
    fn no_secret_is_ever_printed_whether_from_the_file_or_the_environment() {
        let e = explained(
            "api.token = \"file-api-token-4f1c\"\n[github]\ntoken = \"ghp_filetoken9d2e\"\n\
             [login]\nclient_id = \"Iv1.0123\"\nclient_secret = \"oauth-client-secret-5c3b\"\n",
            &[
                ("PREVIEWD_GITHUB_WEBHOOK_SECRET", "env-webhook-secret-77aa"),
                (
                    "PREVIEWD_LOGIN_SESSION_SECRET",
                    "env-session-secret-of-32-bytes-9e1d",
                ),
            ],
        );
        let text = e.text();
        for secret in [
            "file-api-token-4f1c",
            "ghp_filetoken9d2e",
            "env-webhook-secret-77aa",
            "oauth-client-secret-5c3b",
            "env-session-secret-of-32-bytes-9e1d",
        ] {
            assert!(!text.contains(secret), "{secret} printed:\n{text}");
        }
        for key in super::super::keys::SECRETS {
            assert_eq!(setting(&e, key).value, "(set; hidden)");
        }
        assert_eq!(
            setting(&e, "github.webhook_secret").source,
            Source::Env("PREVIEWD_GITHUB_WEBHOOK_SECRET".into())
        );
    }

    #[test]
    fn every_key_holding_a_secret_value_is_masked() {
        // A new key named like a secret must be added to SECRETS (a file or a Secret's
        // name, such as `webhook_secret_file` or `admin_secret`, is not one).
        for key in KEYS {
            let named_secret = ["secret", "token", "password"]
                .iter()
                .any(|word| key.name.contains(word))
                && !key.name.ends_with("_file")
                && !key.name.ends_with(".admin_secret");
            assert_eq!(is_secret(key.name), named_secret, "{}", key.name);
        }
    }

    #[test]
    fn an_invalid_value_is_the_same_error_serve_gives() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "[defaults]\nttl = \"soon\"\n").unwrap();
        let check = Explained::load(Some(file.path()), Vec::new()).unwrap_err();
        let serve = Config::load(Some(file.path()), Vec::new()).unwrap_err();
        assert_eq!(check.to_string(), serve.to_string());
        assert!(check.to_string().contains("defaults.ttl"), "{check}");
    }
}
