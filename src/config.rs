//! Configuration: the TOML file, `PREVIEWD_<SECTION>_<KEY>` environment overrides and the
//! embedded defaults from design.md, validated once at start. Nothing else reads the environment.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;

use crate::preview::RepoName;
use raw::Raw;
pub use resources::{Cpu, Memory, Resources};
pub use store::Store;
use validate::Validator;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub state: Store,
    /// tracing filter, e.g. `info` or `previewd=debug`
    pub log: String,
    /// Where people reach previewd's dashboard (`https://previewd.example.com`): the
    /// Deployment statuses link a preview's page there. `None`: no link.
    pub public_url: Option<String>,
    /// `public_url` as configured, never guessed: where a cluster's Jobs can reach previewd
    /// (a template generation's size report). The loopback guess is this host's own.
    pub reachable_url: Option<String>,
    pub github: GithubConfig,
    pub sink: SinkConfig,
    pub defaults: Policy,
    pub sweep_interval: Duration,
    /// Delivery records older than this are pruned (redelivery works for 3 days on github.com).
    pub delivery_retention: Duration,
    /// Remove helper Applications that have no preview (otherwise they are only reported).
    pub remove_orphans: bool,
    pub api_token: Option<SecretString>,
    /// A listener of its own for `/metrics`, open (for Prometheus, which a NetworkPolicy
    /// admits); without it `/metrics` is on `listen`, behind `api.token` off loopback.
    pub metrics_listen: Option<SocketAddr>,
    pub clusters: Vec<Cluster>,
    pub repos: Vec<RepoConfig>,
    pub chart: ChartConfig,
    pub database: DatabaseConfig,
    pub tls: TlsConfig,
    pub dns: DnsConfig,
    pub login: LoginConfig,
    pub mail: MailConfig,
    pub messaging: MessagingConfig,
    pub lease: LeaseConfig,
}

/// Signing in to previews (`[login]`): GitHub's OAuth web flow, completed on `public_url`.
#[derive(Debug, Clone)]
pub struct LoginConfig {
    /// The OAuth client; `None`: sign-in is off (public previews and share links still open).
    pub client: Option<OAuthClient>,
    /// Seals sessions, hand-off codes and share links; `None`: made beside the state.
    pub session_key: Option<SecretString>,
    pub session_ttl: Duration,
    /// A person's access to a repository is asked of GitHub at most this often.
    pub access_cache: Duration,
}

#[derive(Debug, Clone)]
pub struct OAuthClient {
    pub id: String,
    pub secret: SecretString,
}

/// Who may open a repository's previews (`access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// People GitHub says can read the repository.
    Repo,
    /// Members of the organisation owning the repository.
    Org,
    /// Anyone, without signing in.
    Public,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Repo => "repo",
            Access::Org => "org",
            Access::Public => "public",
        }
    }
}

/// The app's Service a preview's Ingress sends people to (`[[repos]] app_service`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppService {
    pub name: String,
    pub port: ServicePort,
}

/// An Ingress backend's port: a number or the Service port's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServicePort {
    Number(u16),
    Name(String),
}

/// Where Argo CD finds `helpers-chart/`: this repository, pinned to a revision.
#[derive(Debug, Clone)]
pub struct ChartConfig {
    pub repo_url: String,
    pub path: String,
    pub revision: String,
    /// The AppProject that restricts helper Applications to what the chart provisions.
    pub project: String,
    /// The AppProject of the apps' own Applications: PR code, confined to preview namespaces.
    pub apps_project: String,
    /// The AppProjects also admit the namespaces of previews created before names were
    /// recorded (`Names::legacy`), while such previews live after an upgrade.
    pub legacy_names: bool,
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
    /// Bytes a preview's database may hold (`database.max_size`), enforced on the server.
    pub max_bytes: u64,
    /// Sessions a preview's role may hold (`database.max_connections`).
    pub max_connections: u32,
    /// Bytes the server's databases may take together before no more template spares are
    /// made (`database.server_size`).
    pub server_bytes: Option<u64>,
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
    pub webhook_secret: Option<SecretString>,
    pub api_url: String,
    /// GitHub's web root (`github.web_url`): where the OAuth web flow lives.
    pub web_url: String,
    pub credentials: Option<GithubCredentials>,
    /// How often the open PRs of each repository are listed, to heal lost webhooks.
    pub resync_interval: Duration,
}

#[derive(Debug, Clone)]
pub enum GithubCredentials {
    Token(SecretString),
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
    /// A teardown still waiting for Argo CD after this long is reported (once), never forced.
    pub stuck_after: Duration,
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
    /// `/preview keep` is allowed, pinning a preview for at most `keep_for` (and never past
    /// `max_lifetime`).
    pub allow_keep: bool,
    pub keep_for: Duration,
    /// Live previews allowed per repository and per PR author (`None`: no cap).
    pub max_per_repo: Option<u32>,
    pub max_per_author: Option<u32>,
    pub at_cap: AtCap,
    /// Who may open the previews.
    pub access: Access,
    /// A preview no request reached for this long sleeps (`None`: never).
    pub sleep_after: Option<Duration>,
    /// What one preview namespace may hold (its ResourceQuota and LimitRange).
    pub resources: Resources,
    /// Which PRs get a preview, and when their image may run (`[[repos]]` only).
    pub gates: Gates,
}

/// `[[repos]]` `trigger`, `trigger_label`, `paths`, `ignore_authors`, `wait_for`; the
/// defaults let every PR in at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gates {
    pub trigger: Trigger,
    pub trigger_label: String,
    /// Only PRs changing a matching file get a preview (`None`: every PR).
    pub paths: Option<crate::paths::Paths>,
    /// Lower-cased logins whose PRs get a preview only on a writer's `/preview deploy`.
    pub ignore_authors: Vec<String>,
    /// Checks that must succeed on the head before anything runs the PR's image.
    pub wait_for: Vec<String>,
}

impl Default for Gates {
    fn default() -> Self {
        Self {
            trigger: Trigger::Auto,
            trigger_label: "preview".into(),
            paths: None,
            ignore_authors: Vec::new(),
            wait_for: Vec::new(),
        }
    }
}

impl Gates {
    pub fn ignores(&self, author: &str) -> bool {
        self.ignore_authors
            .iter()
            .any(|login| login.eq_ignore_ascii_case(author))
    }
}

/// Which PRs get a preview of their own accord.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// Every PR.
    Auto,
    /// Only while the PR carries `trigger_label`; removing it tears the preview down.
    Label,
    /// Only after a writer's `/preview deploy`.
    Comment,
}

/// What a new preview does when its repository or author is at the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtCap {
    /// Waits, visibly, in first-come order.
    Queue,
    /// Replaces the least recently active unpinned preview (which is told why).
    Evict,
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
    /// Image repository; previews run the tag `image_tag` renders (the head SHA by default).
    pub image: Option<String>,
    pub image_tag: crate::config::image_tag::ImageTag,
    pub migrate_command: Vec<String>,
    /// A seed set shipped with previewd (see `seeds/`).
    pub seed: Option<String>,
    /// Or a seed command run in the app image.
    pub seed_command: Vec<String>,
    /// The app's own chart: previewd creates its Application once the helpers are ready.
    pub chart: Option<AppChart>,
    /// `database_template`: previews' databases are cloned from a per-repository template.
    pub template: Option<TemplatePolicy>,
    /// Where the preview's Ingress sends people; `None`: no Ingress.
    pub service: Option<AppService>,
    /// `mail = true`: a mail catcher per preview; `None`: no mail settings.
    pub mail: Option<MailPolicy>,
    /// `messaging = "rabbitmq"`: a vhost and user of the preview's own on the broker.
    pub messaging: bool,
}

/// A repository's mail (`[[repos]] mail = true`, `mail_relay`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailPolicy {
    /// The only addresses the catcher relays to, through `[mail] relay_host`; empty: none.
    pub relay_to: Vec<String>,
}

/// `[mail]`: the catcher previews with `mail = true` get.
#[derive(Debug, Clone)]
pub struct MailConfig {
    pub image: String,
    /// Messages the catcher keeps (the oldest go first).
    pub max_messages: u32,
    /// The ingress controller's namespace, the only one that reaches an inbox.
    pub ingress_namespace: String,
    /// Where allowed recipients' mail is relayed; `None`: nothing leaves a preview.
    pub relay: Option<MailRelay>,
}

/// The operator's SMTP relay (`mail.relay_host`), which must accept mail unauthenticated
/// from the preview namespaces (no credential is put where PR code runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailRelay {
    pub host: String,
    pub port: u16,
    pub starttls: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessagingMode {
    /// A vhost and user on a shared RabbitMQ, made by Jobs through its management API.
    Shared,
    /// The messaging-topology-operator's `Vhost`, `User` and `Permission`.
    Operator,
}

/// `[messaging]`: the broker previews with `messaging = "rabbitmq"` get a vhost on.
#[derive(Debug, Clone)]
pub struct MessagingConfig {
    pub mode: MessagingMode,
    /// shared: the provisioner namespace (admin credentials, Jobs); operator: the
    /// RabbitmqCluster's, where the topology objects live.
    pub namespace: String,
    /// shared: the Secret with RABBITMQ_MANAGEMENT_URL, RABBITMQ_ADMIN_USER and _PASSWORD.
    pub admin_secret: String,
    /// The broker as previews reach it (AMQP).
    pub host: String,
    pub port: u16,
    /// shared: the Jobs' image (sh and curl).
    pub image: String,
    /// operator: the RabbitmqCluster.
    pub cluster: String,
    /// Connections a preview's vhost may hold.
    pub max_connections: u32,
    /// Channels a preview's user may hold (the connection limit alone leaves 2047 each).
    pub max_channels: u32,
    /// Queues a preview's vhost may hold.
    pub max_queues: u32,
    /// Messages each of its queues may hold: `max_queue_bytes` counts bodies, not headers.
    pub max_queue_messages: u32,
    /// Bytes each of its queues may hold (an operator policy the preview cannot change).
    pub max_queue_bytes: u64,
    /// Some `messaging.*` key is set: the broker is meant to be used, so the helpers'
    /// AppProject reaches its namespace even while no repository asks for messaging (the
    /// previews made with it keep it until they end).
    pub configured: bool,
}

/// How a repository's template database is kept (`[[repos]] database_template = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplatePolicy {
    /// A push to the default branch builds a new generation at most this often.
    pub refresh: std::time::Duration,
    /// A template no preview has used for this long is dropped.
    pub idle: std::time::Duration,
    /// Spare clones each ready generation keeps made ahead of time: a preview claims one
    /// (a rename) instead of waiting for a copy.
    pub spares: u32,
}

/// Where the app's chart lives; previews deploy it at the PR's head SHA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppChart {
    pub repo_url: String,
    /// Path of the chart inside that repository.
    pub path: String,
}

impl Config {
    /// What `serve` needs beyond a valid file: off loopback, the dashboard and the API show
    /// every private repository's titles, history and errors to whoever reaches them
    /// (preview namespaces run PR code), so they must be behind `api.token`.
    pub fn check_serving(&self) -> Result<(), ConfigError> {
        if self.lease.enabled && self.lease.namespace.is_empty() {
            return Err(ConfigError::Invalid {
                key: "lease.namespace".into(),
                source_note: String::new(),
                problem: format!(
                    "it is not set, and {} cannot be read (not in a pod?)",
                    lease::POD_NAMESPACE
                ),
                expected: "the namespace to hold the Lease in, like previewd-system".into(),
            });
        }
        if self.listen.ip().is_loopback() || self.api_token.is_some() {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "api.token".into(),
            source_note: String::new(),
            problem: format!(
                "it is not set, and listen ({}) is not a loopback address",
                self.listen
            ),
            expected:
                "a bearer token (PREVIEWD_API_TOKEN, from a Secret) whenever previewd listens \
                       beyond this host"
                    .into(),
        })
    }

    /// The app settings of `repo` (empty when it has no `[[repos]]` entry).
    pub fn app_for(&self, repo: &RepoName) -> AppConfig {
        self.repos
            .iter()
            .find(|r| &r.name == repo)
            .map(|r| r.app.clone())
            .unwrap_or_default()
    }

    /// `repo`'s `database_template`, when it is listed with one.
    pub fn template_for(&self, repo: &RepoName) -> Option<TemplatePolicy> {
        self.repos
            .iter()
            .find(|r| &r.name == repo)
            .and_then(|r| r.app.template)
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
        let mut raw = Raw::from_file(text).map_err(|message| ConfigError::File {
            path: PathBuf::new(),
            message,
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
        "unknown environment variable {0}; previewd reads PREVIEWD_<SECTION>_<KEY> for the keys docs/configuration.md lists"
    )]
    UnknownVariable(String),
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

mod explain;
mod gates;
mod github;
pub mod image_tag;
mod keys;
mod lease;
mod login;
mod raw;
mod repos;
mod resources;
mod services;
mod store;
mod validate;

pub use explain::{Explained, Setting, Source};
pub use keys::is_secret;
pub use keys::{KEYS, Key, env_name, readme_table};
pub use lease::LeaseConfig;

#[cfg(test)]
mod tests;
