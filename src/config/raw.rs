//! The config file and environment as written: every field optional, unknown keys and
//! unknown `PREVIEWD_*` variables refused.

use serde::Deserialize;

use super::ConfigError;
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) listen: Option<String>,
    pub(super) state: Option<String>,
    pub(super) log: Option<String>,
    pub(super) public_url: Option<String>,
    #[serde(default)]
    pub(super) github: RawGithub,
    #[serde(default)]
    pub(super) sink: RawSink,
    #[serde(default)]
    pub(super) defaults: RawPolicy,
    #[serde(default)]
    pub(super) sweep: RawSweep,
    #[serde(default)]
    pub(super) api: RawApi,
    #[serde(default)]
    pub(super) metrics: RawMetrics,
    #[serde(default)]
    pub(super) clusters: Vec<RawCluster>,
    #[serde(default)]
    pub(super) repos: Vec<RawRepo>,
    #[serde(default)]
    pub(super) chart: RawChart,
    #[serde(default)]
    pub(super) database: RawDatabase,
    #[serde(default)]
    pub(super) tls: RawTls,
    #[serde(default)]
    pub(super) dns: RawDns,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChart {
    pub(super) repo_url: Option<String>,
    pub(super) path: Option<String>,
    pub(super) revision: Option<String>,
    pub(super) project: Option<String>,
    pub(super) apps_project: Option<String>,
    pub(super) legacy_names: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) mode: Option<String>,
    pub(super) namespace: Option<String>,
    pub(super) admin_secret: Option<String>,
    pub(super) host: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    pub(super) port: Option<String>,
    pub(super) image: Option<String>,
    pub(super) cnpg_cluster: Option<String>,
    pub(super) drop_on_delete: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) mode: Option<String>,
    pub(super) issuer: Option<String>,
    pub(super) issuer_kind: Option<String>,
    pub(super) ca_cert: Option<String>,
    pub(super) ca_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDns {
    pub(super) enabled: Option<bool>,
    pub(super) ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGithub {
    pub(super) webhook_secret: Option<String>,
    /// a file holding the secret, so it stays out of the config file and the environment
    pub(super) webhook_secret_file: Option<String>,
    pub(super) api_url: Option<String>,
    pub(super) token: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    pub(super) app_id: Option<String>,
    pub(super) private_key_path: Option<String>,
    pub(super) resync_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSink {
    pub(super) kind: Option<String>,
    pub(super) directory: Option<String>,
    pub(super) argocd_namespace: Option<String>,
    pub(super) stuck_after: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPolicy {
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSweep {
    pub(super) interval: Option<String>,
    pub(super) delivery_retention: Option<String>,
    pub(super) remove_orphans: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    pub(super) token: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) listen: Option<String>,
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

/// Every scalar key, as written in the file; its variable is `PREVIEWD_` + the key upper-cased
/// with `.` as `_` (`defaults.ttl` -> `PREVIEWD_DEFAULTS_TTL`).
pub const KEYS: &[&str] = &[
    "listen",
    "state",
    "log",
    "public_url",
    "github.webhook_secret",
    "github.webhook_secret_file",
    "github.api_url",
    "github.token",
    "github.app_id",
    "github.private_key_path",
    "github.resync_interval",
    "sink.kind",
    "sink.directory",
    "sink.argocd_namespace",
    "sink.stuck_after",
    "defaults.ttl",
    "defaults.domain",
    "defaults.warn_before",
    "defaults.max_lifetime",
    "defaults.deploy_drafts",
    "defaults.allow_keep",
    "defaults.keep_for",
    "defaults.max_per_repo",
    "defaults.max_per_author",
    "defaults.at_cap",
    "sweep.interval",
    "sweep.delivery_retention",
    "sweep.remove_orphans",
    "api.token",
    "metrics.listen",
    "chart.repo_url",
    "chart.path",
    "chart.revision",
    "chart.project",
    "chart.apps_project",
    "chart.legacy_names",
    "database.mode",
    "database.namespace",
    "database.admin_secret",
    "database.host",
    "database.port",
    "database.image",
    "database.cnpg_cluster",
    "database.drop_on_delete",
    "tls.mode",
    "tls.issuer",
    "tls.issuer_kind",
    "tls.ca_cert",
    "tls.ca_key",
    "dns.enabled",
    "dns.ttl",
];

pub fn env_name(key: &str) -> String {
    format!("PREVIEWD_{}", key.replace('.', "_").to_ascii_uppercase())
}

impl Raw {
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
        let Some(key) = KEYS.iter().find(|key| env_name(key) == name) else {
            return Err(ConfigError::UnknownVariable(name.to_owned()));
        };
        if let Some(slot) = self.bool_slot(key) {
            *slot = Some(match value.as_str() {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => {
                    return Err(ConfigError::Invalid {
                        key: (*key).into(),
                        source_note: format!(" (from {name})"),
                        problem: format!("{value:?} is not a boolean"),
                        expected: "true or false".into(),
                    });
                }
            });
        } else if let Some(slot) = self.text_slot(key) {
            *slot = Some(value);
        }
        Ok(Some((*key).to_owned()))
    }

    fn bool_slot(&mut self, key: &str) -> Option<&mut Option<bool>> {
        Some(match key {
            "defaults.deploy_drafts" => &mut self.defaults.deploy_drafts,
            "defaults.allow_keep" => &mut self.defaults.allow_keep,
            "sweep.remove_orphans" => &mut self.sweep.remove_orphans,
            "chart.legacy_names" => &mut self.chart.legacy_names,
            "database.drop_on_delete" => &mut self.database.drop_on_delete,
            "dns.enabled" => &mut self.dns.enabled,
            _ => return None,
        })
    }

    fn text_slot(&mut self, key: &str) -> Option<&mut Option<String>> {
        Some(match key {
            "listen" => &mut self.listen,
            "state" => &mut self.state,
            "log" => &mut self.log,
            "public_url" => &mut self.public_url,
            "github.webhook_secret" => &mut self.github.webhook_secret,
            "github.webhook_secret_file" => &mut self.github.webhook_secret_file,
            "github.api_url" => &mut self.github.api_url,
            "github.token" => &mut self.github.token,
            "github.app_id" => &mut self.github.app_id,
            "github.private_key_path" => &mut self.github.private_key_path,
            "github.resync_interval" => &mut self.github.resync_interval,
            "sink.kind" => &mut self.sink.kind,
            "sink.directory" => &mut self.sink.directory,
            "sink.argocd_namespace" => &mut self.sink.argocd_namespace,
            "sink.stuck_after" => &mut self.sink.stuck_after,
            "defaults.ttl" => &mut self.defaults.ttl,
            "defaults.domain" => &mut self.defaults.domain,
            "defaults.warn_before" => &mut self.defaults.warn_before,
            "defaults.max_lifetime" => &mut self.defaults.max_lifetime,
            "sweep.interval" => &mut self.sweep.interval,
            "sweep.delivery_retention" => &mut self.sweep.delivery_retention,
            "defaults.keep_for" => &mut self.defaults.keep_for,
            "defaults.max_per_repo" => &mut self.defaults.max_per_repo,
            "defaults.max_per_author" => &mut self.defaults.max_per_author,
            "defaults.at_cap" => &mut self.defaults.at_cap,
            "api.token" => &mut self.api.token,
            "metrics.listen" => &mut self.metrics.listen,
            "chart.repo_url" => &mut self.chart.repo_url,
            "chart.path" => &mut self.chart.path,
            "chart.revision" => &mut self.chart.revision,
            "chart.project" => &mut self.chart.project,
            "chart.apps_project" => &mut self.chart.apps_project,
            "database.mode" => &mut self.database.mode,
            "database.namespace" => &mut self.database.namespace,
            "database.admin_secret" => &mut self.database.admin_secret,
            "database.host" => &mut self.database.host,
            "database.port" => &mut self.database.port,
            "database.image" => &mut self.database.image,
            "database.cnpg_cluster" => &mut self.database.cnpg_cluster,
            "tls.mode" => &mut self.tls.mode,
            "tls.issuer" => &mut self.tls.issuer,
            "tls.issuer_kind" => &mut self.tls.issuer_kind,
            "tls.ca_cert" => &mut self.tls.ca_cert,
            "tls.ca_key" => &mut self.tls.ca_key,
            "dns.ttl" => &mut self.dns.ttl,
            _ => return None,
        })
    }
}
