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

#[derive(Debug, Default)]
pub(super) struct Raw {
    /// By key name (`defaults.ttl`): the file's values, then the environment's over them.
    values: BTreeMap<&'static str, Value>,
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

/// A policy as written: `[defaults]`, or the same keys in a `[[repos]]` entry.
#[derive(Debug, Default)]
pub(super) struct RawPolicy {
    pub(super) ttl: Option<String>,
    pub(super) domain: Option<String>,
    pub(super) warn_before: Option<String>,
    pub(super) max_lifetime: Option<String>,
    pub(super) deploy_drafts: Option<bool>,
    pub(super) allow_keep: Option<bool>,
    pub(super) keep_for: Option<String>,
    pub(super) max_per_repo: Option<String>,
    pub(super) max_per_author: Option<String>,
    pub(super) at_cap: Option<String>,
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
#[serde(deny_unknown_fields)]
pub(super) struct RawRepo {
    pub(super) name: String,
    pub(super) ttl: Option<String>,
    pub(super) domain: Option<String>,
    pub(super) warn_before: Option<String>,
    pub(super) max_lifetime: Option<String>,
    pub(super) deploy_drafts: Option<bool>,
    pub(super) allow_keep: Option<bool>,
    pub(super) keep_for: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    pub(super) max_per_repo: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    pub(super) max_per_author: Option<String>,
    pub(super) at_cap: Option<String>,
    pub(super) image: Option<String>,
    #[serde(default)]
    pub(super) migrate_command: Vec<String>,
    pub(super) seed: Option<String>,
    #[serde(default)]
    pub(super) seed_command: Vec<String>,
    pub(super) app_chart: Option<String>,
    pub(super) app_repo_url: Option<String>,
}

/// `app_id = 12345` and `app_id = "12345"` both work; validation parses the text.
fn string_or_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Number(u64),
        Text(String),
    }
    Ok(Option::<Either>::deserialize(d)?.map(|e| match e {
        Either::Number(n) => n.to_string(),
        Either::Text(t) => t,
    }))
}

impl Raw {
    /// `text` as TOML; a key that is not declared, or a value of another type, is refused.
    pub(super) fn from_file(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut raw = Raw {
            values: BTreeMap::new(),
            clusters: file.clusters,
            repos: file.repos,
        };
        for (name, value) in file.rest {
            match value {
                toml::Value::Table(section) if keys::is_section(&name) => {
                    for (field, value) in section {
                        raw.set_from_file(&format!("{name}.{field}"), value)?;
                    }
                }
                value => raw.set_from_file(&name, value)?,
            }
        }
        Ok(raw)
    }

    fn set_from_file(&mut self, name: &str, value: toml::Value) -> Result<(), String> {
        let Some(key) = keys::find(name) else {
            return Err(format!(
                "unknown key `{name}`; the README's configuration table lists every key"
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
                return Err(format!(
                    "`{name}` is {} {other}; expected {expected}",
                    other.type_str()
                ));
            }
        };
        self.values.insert(key.name, value);
        Ok(())
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
        self.values.insert(key.name, value);
        Ok(Some(key.name.to_owned()))
    }

    /// The text of `name`, if set.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        let key = declared(name, &[Kind::Text, Kind::Number]);
        match self.values.get(key) {
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
        match self.values.get(key) {
            Some(Value::Flag(flag)) => Some(*flag),
            _ => None,
        }
    }

    /// The flag `name`, or its declared default.
    pub(super) fn flag_or_default(&self, name: &str) -> bool {
        self.flag(name)
            .unwrap_or_else(|| keys::default_of(name) == "true")
    }

    /// `[defaults]`.
    pub(super) fn defaults(&self) -> RawPolicy {
        RawPolicy {
            ttl: self.text("defaults.ttl"),
            domain: self.text("defaults.domain"),
            warn_before: self.text("defaults.warn_before"),
            max_lifetime: self.text("defaults.max_lifetime"),
            deploy_drafts: self.flag("defaults.deploy_drafts"),
            allow_keep: self.flag("defaults.allow_keep"),
            keep_for: self.text("defaults.keep_for"),
            max_per_repo: self.text("defaults.max_per_repo"),
            max_per_author: self.text("defaults.max_per_author"),
            at_cap: self.text("defaults.at_cap"),
        }
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
