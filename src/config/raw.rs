//! The config file and environment as written: scalar keys by their declared name (see
//! `keys`), the array tables as structs; unknown keys and unknown `PREVIEWD_*` variables refused.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use super::keys::{self, Kind, env_name};

/// A scalar key's value as set.
#[derive(Debug)]
enum Value {
    Text(String),
    Flag(bool),
}

impl Value {
    fn shown(&self) -> String {
        match self {
            Value::Text(text) => text.clone(),
            Value::Flag(flag) => flag.to_string(),
        }
    }
}

/// Scalar keys as set, by declared name (`defaults.ttl`).
#[derive(Debug, Default)]
pub(super) struct Values(BTreeMap<&'static str, Value>);

#[derive(Debug, Default)]
pub(super) struct Raw {
    /// The file's values, then the environment's over them.
    pub(super) values: Values,
    pub(super) clusters: Vec<RawCluster>,
    pub(super) repos: Vec<RawRepo>,
}

/// The file: the array tables read by their structs, every other entry kept for `KEYS`.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    clusters: Vec<RawCluster>,
    #[serde(default)]
    repos: Vec<RawRepo>,
    #[serde(flatten)]
    rest: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub(super) name: String,
    pub(super) server: String,
    pub(super) sealing_cert: Option<String>,
    pub(super) capacity: Option<u32>,
    pub(super) ingress_target: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(super) struct RawRepo {
    pub(super) name: String,
    pub(super) image: Option<String>,
    pub(super) image_tag: Option<String>,
    #[serde(default)]
    pub(super) migrate_command: Vec<String>,
    pub(super) seed: Option<String>,
    #[serde(default)]
    pub(super) seed_command: Vec<String>,
    pub(super) app_chart: Option<String>,
    pub(super) app_repo_url: Option<String>,
    pub(super) app_service: Option<String>,
    pub(super) trigger: Option<String>,
    pub(super) trigger_label: Option<String>,
    #[serde(default)]
    pub(super) paths: Vec<String>,
    #[serde(default)]
    pub(super) ignore_authors: Vec<String>,
    #[serde(default)]
    pub(super) wait_for: Vec<String>,
    pub(super) database_template: Option<bool>,
    pub(super) template_refresh: Option<String>,
    pub(super) template_idle: Option<String>,
    pub(super) template_spares: Option<i64>,
    pub(super) mail: Option<bool>,
    #[serde(default)]
    pub(super) mail_relay: Vec<String>,
    pub(super) messaging: Option<String>,
    /// Every other entry: the keys of `[defaults]` (anything else is refused).
    #[serde(flatten)]
    rest: toml::Table,
    /// `rest` by the names of `[defaults]` (`defaults.ttl`).
    #[serde(skip)]
    pub(super) policy: Values,
}

impl Raw {
    /// `text` as TOML; a key that is not declared, or a value of another type, is refused.
    pub(super) fn from_file(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| parse_error(text, &e))?;
        let mut raw = Raw {
            values: Values::default(),
            clusters: file.clusters,
            repos: file.repos,
        };
        for (name, value) in file.rest {
            match value {
                toml::Value::Table(section) if keys::is_section(&name) => {
                    for (field, value) in section {
                        let name = format!("{name}.{field}");
                        raw.values.set_from_file(&name, &name, value)?;
                    }
                }
                // `"github.token" = …` is one key whose name holds a dot, not `token` in
                // `[github]`: read as such, a tool that reads sections (the chart's checks
                // for secrets) would not see it.
                _ if name.contains('.') => {
                    let (section, field) = name.split_once('.').unwrap_or_default();
                    return Err(format!(
                        "the top-level key `\"{name}\"` is quoted with a dot; write `{field}` \
                         under `[{section}]`"
                    ));
                }
                value => raw.values.set_from_file(&name, &name, value)?,
            }
        }
        for (i, repo) in raw.repos.iter_mut().enumerate() {
            for (field, value) in std::mem::take(&mut repo.rest) {
                let shown = format!("repos[{i}].{field}");
                repo.policy
                    .set_from_file(&format!("defaults.{field}"), &shown, value)?;
            }
        }
        Ok(raw)
    }

    /// Applies one environment variable; returns the key it set, `None` for variables that
    /// are not previewd's.
    pub(super) fn set_from_env(
        &mut self,
        name: &str,
        value: String,
    ) -> Result<Option<String>, ConfigError> {
        if !name.starts_with("PREVIEWD_") {
            return Ok(None);
        }
        let Some(key) = keys::KEYS.iter().find(|key| env_name(key.name) == name) else {
            return Err(ConfigError::UnknownVariable(name.to_owned()));
        };
        let value = match (key.kind, value.as_str()) {
            (Kind::Flag, "true" | "1") => Value::Flag(true),
            (Kind::Flag, "false" | "0") => Value::Flag(false),
            (Kind::Flag, _) => {
                return Err(ConfigError::Invalid {
                    key: key.name.into(),
                    source_note: format!(" (from {name})"),
                    problem: format!("{value:?} is not a boolean"),
                    expected: "true or false".into(),
                });
            }
            (Kind::Text | Kind::Number, _) => Value::Text(value),
        };
        self.values.0.insert(key.name, value);
        Ok(Some(key.name.to_owned()))
    }
}

impl Values {
    /// `name` (`shown` in errors) as written in the file, if it is declared with that type.
    fn set_from_file(&mut self, name: &str, shown: &str, value: toml::Value) -> Result<(), String> {
        let Some(key) = keys::find(name) else {
            return Err(format!(
                "unknown key `{shown}`; docs/configuration.md lists every key"
            ));
        };
        let value = match (key.kind, value) {
            (Kind::Flag, toml::Value::Boolean(b)) => Value::Flag(b),
            (Kind::Text | Kind::Number, toml::Value::String(s)) => Value::Text(s),
            (Kind::Number, toml::Value::Integer(n)) if n >= 0 => Value::Text(n.to_string()),
            (kind, other) => {
                let expected = match kind {
                    Kind::Flag => "true or false",
                    Kind::Text => "a string",
                    Kind::Number => "a whole number",
                };
                // A secret's value stays out of the message, whatever its type.
                let value = if keys::is_secret(key.name) {
                    String::new()
                } else {
                    format!(" {other}")
                };
                return Err(format!(
                    "`{shown}` is {}{value}; expected {expected}",
                    other.type_str()
                ));
            }
        };
        self.0.insert(key.name, value);
        Ok(())
    }

    /// `name` as set, whatever its kind (for `config check`).
    pub(super) fn shown(&self, name: &str) -> Option<String> {
        self.0.get(name).map(Value::shown)
    }

    /// Every key set, by declared name, as `shown` gives it.
    pub(super) fn all_shown(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        self.0.iter().map(|(name, value)| (*name, value.shown()))
    }

    /// The text of `name`, if set.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        let key = declared(name, &[Kind::Text, Kind::Number]);
        match self.0.get(key) {
            Some(Value::Text(text)) => Some(text.clone()),
            _ => None,
        }
    }

    /// The text of `name`, or its declared default.
    pub(super) fn text_or_default(&self, name: &str) -> String {
        self.text(name)
            .unwrap_or_else(|| keys::default_of(name).to_owned())
    }

    /// The flag `name`, if set.
    pub(super) fn flag(&self, name: &str) -> Option<bool> {
        let key = declared(name, &[Kind::Flag]);
        match self.0.get(key) {
            Some(Value::Flag(flag)) => Some(*flag),
            _ => None,
        }
    }

    /// The flag `name`, or its declared default.
    pub(super) fn flag_or_default(&self, name: &str) -> bool {
        self.flag(name)
            .unwrap_or_else(|| keys::default_of(name) == "true")
    }
}

/// Where the file stops being TOML, and why, without quoting the line: it may hold a
/// secret (`webhook_secret = "a\qb"` is an invalid escape).
fn parse_error(text: &str, error: &toml::de::Error) -> String {
    let message = error.message().trim_end();
    match error.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
            format!("TOML parse error at line {line}, column {column}: {message}")
        }
        None => format!("TOML parse error: {message}"),
    }
}

/// `name` as declared. Panics when it is not declared with one of `kinds`: a misspelling in
/// validation, which any test loading a configuration finds.
fn declared(name: &str, kinds: &[Kind]) -> &'static str {
    match keys::find(name) {
        Some(key) if kinds.contains(&key.kind) => key.name,
        other => panic!("config key {name} is not declared as {kinds:?}: {other:?}"),
    }
}
