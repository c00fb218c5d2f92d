//! Configuration: the TOML file, `PREVIEWD_<SECTION>_<KEY>` environment overrides and the
//! embedded defaults from design.md, validated once at start. Nothing else reads the environment.

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::duration;
use crate::preview::RepoName;

/// A value that must never reach a log line or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub state: PathBuf,
    /// tracing filter, e.g. `info` or `previewd=debug`
    pub log: String,
    pub github: GithubConfig,
    pub sink: SinkConfig,
    pub defaults: Policy,
    pub sweep_interval: Duration,
    pub api_token: Option<Secret>,
    pub clusters: Vec<Cluster>,
    pub repos: Vec<RepoConfig>,
    pub chart: ChartConfig,
    pub database: DatabaseConfig,
    pub tls: TlsConfig,
    pub dns: DnsConfig,
}

/// Where Argo CD finds `helpers-chart/`: this repository, pinned to a revision.
#[derive(Debug, Clone)]
pub struct ChartConfig {
    pub repo_url: String,
    pub path: String,
    pub revision: String,
    /// The AppProject that restricts helper Applications to preview destinations.
    pub project: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseMode {
    /// A role and database on a shared PostgreSQL server, made by a Job in `namespace`.
    Shared,
    /// CloudNativePG `DatabaseRole` + `Database` in the shared Cluster's `namespace`.
    Cnpg,
    Off,
}

#[derive(Debug, Clone)]
pub struct DatabaseConfig {
    pub mode: DatabaseMode,
    /// shared: the provisioner namespace holding the admin credentials; cnpg: the Cluster's.
    pub namespace: String,
    pub admin_secret: String,
    /// The server as previews reach it (shared mode; cnpg uses `<cluster>-rw.<namespace>.svc`).
    pub host: String,
    pub port: u16,
    pub image: String,
    pub cnpg_cluster: String,
    pub drop_on_delete: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    CertManager,
    /// A `kubernetes.io/tls` SealedSecret from previewd's preview CA.
    Sealed,
    Off,
}

#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub mode: TlsMode,
    pub issuer: String,
    pub issuer_kind: String,
    /// The preview CA (sealed mode); without it, a CA is made beside the state.
    pub ca_cert: Option<PathBuf>,
    pub ca_key: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct DnsConfig {
    pub enabled: bool,
    pub ttl: Duration,
}

#[derive(Debug, Clone)]
pub struct GithubConfig {
    /// `None`: every delivery is refused with 401, and the log says why.
    pub webhook_secret: Option<Secret>,
    pub api_url: String,
    pub credentials: Option<GithubCredentials>,
}

#[derive(Debug, Clone)]
pub enum GithubCredentials {
    Token(Secret),
    App {
        app_id: u64,
        private_key_path: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    Directory,
    Kubernetes,
}

#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub kind: SinkKind,
    pub directory: PathBuf,
    pub argocd_namespace: String,
}

/// How previews of one repository live and end; `[defaults]` overridden per `[[repos]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub ttl: Duration,
    pub domain: String,
    pub warn_before: Duration,
    pub max_lifetime: Duration,
    /// Deploy draft PRs too; by default a draft waits until it is ready for review.
    pub deploy_drafts: bool,
}

#[derive(Debug, Clone)]
pub struct Cluster {
    pub name: String,
    pub server: String,
    pub sealing_cert: Option<PathBuf>,
    pub capacity: Option<u32>,
    /// Where the cluster's ingress answers: DNS records for its previews point here.
    pub ingress_target: Option<String>,
    /// The implicit default cluster: sealed with previewd's local key pair (beside the state).
    pub local_sealing: bool,
}

#[derive(Debug, Clone)]
pub struct RepoConfig {
    pub name: RepoName,
    pub policy: Policy,
    pub app: AppConfig,
}

/// What previewd knows of a repository's app: its image, migrations and seed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppConfig {
    /// Image repository; previews run the tag of the PR's head SHA.
    pub image: Option<String>,
    pub migrate_command: Vec<String>,
    /// A seed set shipped with previewd (see `seeds/`).
    pub seed: Option<String>,
    /// Or a seed command run in the app image.
    pub seed_command: Vec<String>,
}

impl Config {
    /// The app settings of `repo` (empty when it has no `[[repos]]` entry).
    pub fn app_for(&self, repo: &RepoName) -> AppConfig {
        self.repos
            .iter()
            .find(|r| &r.name == repo)
            .map(|r| r.app.clone())
            .unwrap_or_default()
    }

    /// The policy for `repo`, or `None` when `[[repos]]` is set and does not list it.
    pub fn policy_for(&self, repo: &RepoName) -> Option<&Policy> {
        if self.repos.is_empty() {
            return Some(&self.defaults);
        }
        self.repos
            .iter()
            .find(|r| &r.name == repo)
            .map(|r| &r.policy)
    }

    /// Loads `path` (when given, it must exist; the default `previewd.toml` may be absent),
    /// applies `PREVIEWD_*` variables from `env`, and validates every value.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let (text, origin) = match path {
            Some(path) => (
                std::fs::read_to_string(path).map_err(|e| ConfigError::File {
                    path: path.into(),
                    message: e.to_string(),
                })?,
                path.to_path_buf(),
            ),
            None => match std::fs::read_to_string(DEFAULT_FILE) {
                Ok(text) => (text, DEFAULT_FILE.into()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), "".into()),
                Err(e) => {
                    return Err(ConfigError::File {
                        path: DEFAULT_FILE.into(),
                        message: e.to_string(),
                    });
                }
            },
        };
        Self::from_toml(&text, env).map_err(|e| match e {
            ConfigError::File { message, .. } => ConfigError::File {
                path: origin,
                message,
            },
            other => other,
        })
    }

    /// The embedded defaults overridden by `text` and then by `env`.
    pub fn from_toml(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut raw: Raw = toml::from_str(text).map_err(|e| ConfigError::File {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        let mut from_env = BTreeSet::new();
        for (name, value) in env {
            if let Some(key) = raw.set_from_env(&name, value)? {
                from_env.insert(key);
            }
        }
        Validator { from_env }.config(raw)
    }
}

pub const DEFAULT_FILE: &str = "previewd.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot use config file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("config key `{key}`{source_note}: {problem}; expected {expected}")]
    Invalid {
        key: String,
        /// ` (from PREVIEWD_...)` when the value came from the environment
        source_note: String,
        problem: String,
        expected: String,
    },
    #[error(
        "unknown environment variable {0}; previewd reads PREVIEWD_<SECTION>_<KEY> for the keys in the README"
    )]
    UnknownVariable(String),
}

// ---- raw, as written: every field optional, unknown keys refused ----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: Option<String>,
    state: Option<String>,
    log: Option<String>,
    #[serde(default)]
    github: RawGithub,
    #[serde(default)]
    sink: RawSink,
    #[serde(default)]
    defaults: RawPolicy,
    #[serde(default)]
    sweep: RawSweep,
    #[serde(default)]
    api: RawApi,
    #[serde(default)]
    clusters: Vec<RawCluster>,
    #[serde(default)]
    repos: Vec<RawRepo>,
    #[serde(default)]
    chart: RawChart,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    tls: RawTls,
    #[serde(default)]
    dns: RawDns,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChart {
    repo_url: Option<String>,
    path: Option<String>,
    revision: Option<String>,
    project: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    mode: Option<String>,
    namespace: Option<String>,
    admin_secret: Option<String>,
    host: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    port: Option<String>,
    image: Option<String>,
    cnpg_cluster: Option<String>,
    drop_on_delete: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    mode: Option<String>,
    issuer: Option<String>,
    issuer_kind: Option<String>,
    ca_cert: Option<String>,
    ca_key: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDns {
    enabled: Option<bool>,
    ttl: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGithub {
    webhook_secret: Option<String>,
    /// a file holding the secret, so it stays out of the config file and the environment
    webhook_secret_file: Option<String>,
    api_url: Option<String>,
    token: Option<String>,
    #[serde(default, deserialize_with = "string_or_number")]
    app_id: Option<String>,
    private_key_path: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    kind: Option<String>,
    directory: Option<String>,
    argocd_namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    ttl: Option<String>,
    domain: Option<String>,
    warn_before: Option<String>,
    max_lifetime: Option<String>,
    deploy_drafts: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    name: String,
    server: String,
    sealing_cert: Option<String>,
    capacity: Option<u32>,
    ingress_target: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRepo {
    name: String,
    ttl: Option<String>,
    domain: Option<String>,
    warn_before: Option<String>,
    max_lifetime: Option<String>,
    deploy_drafts: Option<bool>,
    image: Option<String>,
    #[serde(default)]
    migrate_command: Vec<String>,
    seed: Option<String>,
    #[serde(default)]
    seed_command: Vec<String>,
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
    "github.webhook_secret",
    "github.webhook_secret_file",
    "github.api_url",
    "github.token",
    "github.app_id",
    "github.private_key_path",
    "sink.kind",
    "sink.directory",
    "sink.argocd_namespace",
    "defaults.ttl",
    "defaults.domain",
    "defaults.warn_before",
    "defaults.max_lifetime",
    "defaults.deploy_drafts",
    "sweep.interval",
    "api.token",
    "chart.repo_url",
    "chart.path",
    "chart.revision",
    "chart.project",
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
    fn set_from_env(&mut self, name: &str, value: String) -> Result<Option<String>, ConfigError> {
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
            "github.webhook_secret" => &mut self.github.webhook_secret,
            "github.webhook_secret_file" => &mut self.github.webhook_secret_file,
            "github.api_url" => &mut self.github.api_url,
            "github.token" => &mut self.github.token,
            "github.app_id" => &mut self.github.app_id,
            "github.private_key_path" => &mut self.github.private_key_path,
            "sink.kind" => &mut self.sink.kind,
            "sink.directory" => &mut self.sink.directory,
            "sink.argocd_namespace" => &mut self.sink.argocd_namespace,
            "defaults.ttl" => &mut self.defaults.ttl,
            "defaults.domain" => &mut self.defaults.domain,
            "defaults.warn_before" => &mut self.defaults.warn_before,
            "defaults.max_lifetime" => &mut self.defaults.max_lifetime,
            "sweep.interval" => &mut self.sweep.interval,
            "api.token" => &mut self.api.token,
            "chart.repo_url" => &mut self.chart.repo_url,
            "chart.path" => &mut self.chart.path,
            "chart.revision" => &mut self.chart.revision,
            "chart.project" => &mut self.chart.project,
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

// ---- validation: raw -> typed, each error naming its key and the accepted form ----

struct Validator {
    from_env: BTreeSet<String>,
}

impl Validator {
    fn invalid(&self, key: &str, problem: String, expected: &str) -> ConfigError {
        let source_note = if self.from_env.contains(key) {
            format!(" (from {})", env_name(key))
        } else {
            String::new()
        };
        ConfigError::Invalid {
            key: key.into(),
            source_note,
            problem,
            expected: expected.into(),
        }
    }

    fn duration(
        &self,
        key: &str,
        raw: Option<&str>,
        default: &str,
    ) -> Result<Duration, ConfigError> {
        let text = raw.unwrap_or(default);
        match duration::parse(text) {
            Ok(d) if !d.is_zero() => Ok(d),
            _ => Err(self.invalid(
                key,
                format!("{text:?} is not a positive duration"),
                duration::ACCEPTED_FORM,
            )),
        }
    }

    fn secret(&self, key: &str, raw: Option<String>) -> Result<Option<Secret>, ConfigError> {
        match raw {
            Some(s) if s.trim().is_empty() => Err(self.invalid(
                key,
                "the value is empty".into(),
                "a non-empty secret, or no key at all",
            )),
            other => Ok(other.map(Secret)),
        }
    }

    fn config(&self, raw: Raw) -> Result<Config, ConfigError> {
        let listen_text = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen = listen_text.parse().map_err(|_| {
            self.invalid(
                "listen",
                format!("{listen_text:?} is not a socket address"),
                "HOST:PORT, like 127.0.0.1:8080 or [::]:8080",
            )
        })?;
        let defaults = self.policy("defaults", &raw.defaults, None)?;
        let repos = raw
            .repos
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let name = r.name.parse().map_err(|e: crate::preview::BadRepoName| {
                    self.invalid(&format!("repos[{i}].name"), e.to_string(), "owner/repo")
                })?;
                let raw_policy = RawPolicy {
                    ttl: r.ttl.clone(),
                    domain: r.domain.clone(),
                    warn_before: r.warn_before.clone(),
                    max_lifetime: r.max_lifetime.clone(),
                    deploy_drafts: r.deploy_drafts,
                };
                let policy = self.policy(&format!("repos[{i}]"), &raw_policy, Some(&defaults))?;
                Ok(RepoConfig {
                    name,
                    policy,
                    app: self.app(i, r)?,
                })
            })
            .collect::<Result<Vec<_>, ConfigError>>()?;
        let clusters = if raw.clusters.is_empty() {
            vec![Cluster {
                name: "in-cluster".into(),
                server: "https://kubernetes.default.svc".into(),
                sealing_cert: None,
                capacity: None,
                ingress_target: None,
                local_sealing: true,
            }]
        } else {
            let mut seen = BTreeSet::new();
            raw.clusters
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    if !seen.insert(c.name.clone()) || !is_dns_label(&c.name) {
                        return Err(self.invalid(
                            &format!("clusters[{i}].name"),
                            format!("{:?} is empty, invalid or repeated", c.name),
                            "a unique lower-case DNS label",
                        ));
                    }
                    if let Some(target) = c.ingress_target.as_deref().filter(|t| !is_dns_name(t)) {
                        return Err(self.invalid(
                            &format!("clusters[{i}].ingress_target"),
                            format!("{target:?} is not a host name or IPv4 address"),
                            "a DNS name like ingress.example.com, or an IPv4 address",
                        ));
                    }
                    Ok(Cluster {
                        name: c.name,
                        server: c.server,
                        sealing_cert: c.sealing_cert.map(PathBuf::from),
                        capacity: c.capacity,
                        ingress_target: c.ingress_target,
                        local_sealing: false,
                    })
                })
                .collect::<Result<_, _>>()?
        };
        let log = raw.log.unwrap_or_else(|| "info".into());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log) {
            return Err(self.invalid(
                "log",
                format!("{log:?} is not a log filter ({e})"),
                "a level such as info or debug, or a filter like previewd=debug,info",
            ));
        }
        Ok(Config {
            listen,
            state: raw.state.unwrap_or_else(|| "previewd.db".into()).into(),
            log,
            github: self.github(raw.github)?,
            sink: self.sink(raw.sink)?,
            defaults,
            sweep_interval: self.duration("sweep.interval", raw.sweep.interval.as_deref(), "1m")?,
            api_token: self.secret("api.token", raw.api.token)?,
            clusters,
            repos,
            chart: self.chart(raw.chart)?,
            database: self.database(raw.database)?,
            tls: self.tls(raw.tls)?,
            dns: DnsConfig {
                enabled: raw.dns.enabled.unwrap_or(true),
                ttl: self.duration("dns.ttl", raw.dns.ttl.as_deref(), "5m")?,
            },
        })
    }

    fn app(&self, i: usize, r: &RawRepo) -> Result<AppConfig, ConfigError> {
        let key = |field: &str| format!("repos[{i}].{field}");
        if let Some(image) = r.image.as_deref().filter(|image| {
            image.is_empty() || image.contains(char::is_whitespace) || image.contains('@')
        }) {
            return Err(self.invalid(
                &key("image"),
                format!("{image:?} is not an image repository"),
                "a repository without tag, like ghcr.io/acme/shop",
            ));
        }
        if r.image.is_none() && !(r.migrate_command.is_empty() && r.seed_command.is_empty()) {
            return Err(self.invalid(
                &key("image"),
                "commands are set but no image runs them".into(),
                "the app's image repository",
            ));
        }
        if let Some(seed) = &r.seed {
            if !r.seed_command.is_empty() {
                return Err(self.invalid(
                    &key("seed"),
                    "both seed and seed_command are set".into(),
                    "one of them",
                ));
            }
            if crate::seeds::find(seed).is_none() {
                return Err(self.invalid(
                    &key("seed"),
                    format!("{seed:?} is not a seed set previewd ships"),
                    &crate::seeds::names().join(", "),
                ));
            }
        }
        Ok(AppConfig {
            image: r.image.clone(),
            migrate_command: r.migrate_command.clone(),
            seed: r.seed.clone(),
            seed_command: r.seed_command.clone(),
        })
    }

    fn chart(&self, raw: RawChart) -> Result<ChartConfig, ConfigError> {
        let revision = raw
            .revision
            .unwrap_or_else(|| format!("v{}", env!("CARGO_PKG_VERSION")));
        if revision.is_empty() || revision == "HEAD" {
            return Err(self.invalid(
                "chart.revision",
                format!("{revision:?} is not pinned"),
                "a tag or commit SHA, so that every preview renders the chart it was tested with",
            ));
        }
        let project = raw.project.unwrap_or_else(|| "previews".into());
        if !is_dns_label(&project) {
            return Err(self.invalid(
                "chart.project",
                format!("{project:?} is not an AppProject name"),
                "a lower-case RFC 1123 label",
            ));
        }
        Ok(ChartConfig {
            repo_url: raw
                .repo_url
                .unwrap_or_else(|| "https://github.com/previewd/previewd.git".into()),
            path: raw.path.unwrap_or_else(|| "helpers-chart".into()),
            revision,
            project,
        })
    }

    fn database(&self, raw: RawDatabase) -> Result<DatabaseConfig, ConfigError> {
        let mode = match raw.mode.as_deref().unwrap_or("shared") {
            "shared" => DatabaseMode::Shared,
            "cnpg" => DatabaseMode::Cnpg,
            "off" => DatabaseMode::Off,
            other => {
                return Err(self.invalid(
                    "database.mode",
                    format!("{other:?} is not a database mode"),
                    "shared, cnpg or off",
                ));
            }
        };
        let label =
            |key: &str, value: Option<String>, default: &str| -> Result<String, ConfigError> {
                let value = value.unwrap_or_else(|| default.into());
                if is_dns_label(&value) {
                    Ok(value)
                } else {
                    Err(self.invalid(
                        key,
                        format!("{value:?} is not a valid name"),
                        "a lower-case RFC 1123 label",
                    ))
                }
            };
        let namespace = label(
            "database.namespace",
            raw.namespace,
            if mode == DatabaseMode::Cnpg {
                "postgres"
            } else {
                "previewd-system"
            },
        )?;
        let port_text = raw.port.unwrap_or_else(|| "5432".into());
        let port = port_text.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            self.invalid(
                "database.port",
                format!("{port_text:?} is not a port"),
                "a number from 1 to 65535",
            )
        })?;
        Ok(DatabaseConfig {
            mode,
            admin_secret: label("database.admin_secret", raw.admin_secret, "postgres-admin")?,
            cnpg_cluster: label("database.cnpg_cluster", raw.cnpg_cluster, "shared-pg")?,
            host: raw
                .host
                .unwrap_or_else(|| format!("postgres.{namespace}.svc")),
            port,
            image: raw.image.unwrap_or_else(|| "postgres:17-alpine".into()),
            drop_on_delete: raw.drop_on_delete.unwrap_or(true),
            namespace,
        })
    }

    fn tls(&self, raw: RawTls) -> Result<TlsConfig, ConfigError> {
        let mode = match raw.mode.as_deref().unwrap_or("cert-manager") {
            "cert-manager" => TlsMode::CertManager,
            "sealed" => TlsMode::Sealed,
            "off" => TlsMode::Off,
            other => {
                return Err(self.invalid(
                    "tls.mode",
                    format!("{other:?} is not a TLS mode"),
                    "cert-manager, sealed or off",
                ));
            }
        };
        let issuer_kind = raw.issuer_kind.unwrap_or_else(|| "ClusterIssuer".into());
        if !matches!(issuer_kind.as_str(), "ClusterIssuer" | "Issuer") {
            return Err(self.invalid(
                "tls.issuer_kind",
                format!("{issuer_kind:?} is not an issuer kind"),
                "ClusterIssuer or Issuer",
            ));
        }
        if raw.ca_cert.is_some() != raw.ca_key.is_some() {
            return Err(self.invalid(
                "tls.ca_key",
                "only one of tls.ca_cert and tls.ca_key is set".into(),
                "both (the preview CA's certificate and key), or neither",
            ));
        }
        Ok(TlsConfig {
            mode,
            issuer: raw.issuer.unwrap_or_else(|| "previewd-previews".into()),
            issuer_kind,
            ca_cert: raw.ca_cert.map(PathBuf::from),
            ca_key: raw.ca_key.map(PathBuf::from),
        })
    }

    fn github(&self, raw: RawGithub) -> Result<GithubConfig, ConfigError> {
        let webhook_secret = match (raw.webhook_secret, raw.webhook_secret_file) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "github.webhook_secret_file",
                    "both webhook_secret and webhook_secret_file are set".into(),
                    "only one of them",
                ));
            }
            (secret, None) => self.secret("github.webhook_secret", secret)?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    self.invalid(
                        "github.webhook_secret_file",
                        format!("cannot read {path:?}: {e}"),
                        "a readable file holding the secret",
                    )
                })?;
                self.secret(
                    "github.webhook_secret_file",
                    Some(text.trim_end_matches(['\n', '\r']).to_owned()),
                )?
            }
        };
        let api_url = raw
            .api_url
            .unwrap_or_else(|| "https://api.github.com".into());
        if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
            return Err(self.invalid(
                "github.api_url",
                format!("{api_url:?} is not an http(s) URL"),
                "a URL like https://api.github.com or https://ghe.example.com/api/v3",
            ));
        }
        let token = self.secret("github.token", raw.token)?;
        let app_id = raw
            .app_id
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
        let credentials = match (token, app_id, raw.private_key_path) {
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
        Ok(GithubConfig {
            webhook_secret,
            api_url: api_url.trim_end_matches('/').to_owned(),
            credentials,
        })
    }

    fn sink(&self, raw: RawSink) -> Result<SinkConfig, ConfigError> {
        let kind = match raw.kind.as_deref().unwrap_or("directory") {
            "directory" => SinkKind::Directory,
            "kubernetes" => SinkKind::Kubernetes,
            other => {
                return Err(self.invalid(
                    "sink.kind",
                    format!("{other:?} is not a sink"),
                    "directory or kubernetes",
                ));
            }
        };
        let argocd_namespace = raw.argocd_namespace.unwrap_or_else(|| "argocd".into());
        if !is_dns_label(&argocd_namespace) {
            return Err(self.invalid(
                "sink.argocd_namespace",
                format!("{argocd_namespace:?} is not a namespace name"),
                "a lower-case RFC 1123 label",
            ));
        }
        Ok(SinkConfig {
            kind,
            directory: raw.directory.unwrap_or_else(|| "rendered".into()).into(),
            argocd_namespace,
        })
    }

    /// `base` is the `[defaults]` policy a `[[repos]]` entry inherits from.
    fn policy(
        &self,
        section: &str,
        raw: &RawPolicy,
        base: Option<&Policy>,
    ) -> Result<Policy, ConfigError> {
        let fallback = |field: &str, builtin: &'static str| -> String {
            base.map_or(builtin.into(), |b| match field {
                "ttl" => duration::format(b.ttl),
                "warn_before" => duration::format(b.warn_before),
                _ => duration::format(b.max_lifetime),
            })
        };
        let key = |field: &str| format!("{section}.{field}");
        let ttl = self.duration(&key("ttl"), raw.ttl.as_deref(), &fallback("ttl", "72h"))?;
        let warn_before = self.duration(
            &key("warn_before"),
            raw.warn_before.as_deref(),
            &fallback("warn_before", "24h"),
        )?;
        let max_lifetime = self.duration(
            &key("max_lifetime"),
            raw.max_lifetime.as_deref(),
            &fallback("max_lifetime", "14d"),
        )?;
        if ttl > max_lifetime {
            return Err(self.invalid(
                &key("ttl"),
                format!(
                    "{} is longer than max_lifetime {}",
                    duration::format(ttl),
                    duration::format(max_lifetime)
                ),
                "a ttl no longer than max_lifetime",
            ));
        }
        let domain = raw
            .domain
            .clone()
            .unwrap_or_else(|| base.map_or("preview.localhost".into(), |b| b.domain.clone()));
        if domain.len() > 200 || !is_dns_name(&domain) {
            return Err(self.invalid(
                &key("domain"),
                format!("{domain:?} is not a DNS name"),
                "a lower-case DNS name like preview.example.com",
            ));
        }
        Ok(Policy {
            ttl,
            domain,
            warn_before,
            max_lifetime,
            deploy_drafts: raw
                .deploy_drafts
                .or(base.map(|b| b.deploy_drafts))
                .unwrap_or(false),
        })
    }
}

/// A DNS name (labels separated by dots), which also covers IPv4 addresses.
pub fn is_dns_name(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// An RFC 1123 label: what Kubernetes accepts as a namespace and DNS as one name part.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests;
