//! Validation: raw values to typed configuration, each error naming its key and the
//! accepted form.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;

use super::keys::default_of;
use super::raw::{Raw, RawCluster};
use super::*;
use crate::duration;

pub(super) struct Validator {
    pub(super) from_env: BTreeSet<String>,
}

impl Validator {
    pub(super) fn invalid(&self, key: &str, problem: String, expected: &str) -> ConfigError {
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

    pub(super) fn duration(
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

    /// A duration key, or its declared default.
    pub(super) fn duration_of(&self, raw: &Raw, key: &str) -> Result<Duration, ConfigError> {
        self.duration(key, raw.values.text(key).as_deref(), default_of(key))
    }

    pub(super) fn secret(
        &self,
        key: &str,
        raw: Option<String>,
    ) -> Result<Option<SecretString>, ConfigError> {
        match raw {
            Some(s) if s.trim().is_empty() => Err(self.invalid(
                key,
                "the value is empty".into(),
                "a non-empty secret, or no key at all",
            )),
            // Sent in a header (a token) or compared byte for byte (the webhook secret): a
            // line break copied from a file would crash the client or refuse every delivery.
            Some(s) if s.chars().any(char::is_control) => Err(self.invalid(
                key,
                "the value holds a control character (a line break copied from a file?)".into(),
                "the secret alone, without a trailing newline",
            )),
            other => Ok(other.map(SecretString::from)),
        }
    }

    /// A key naming a file: a value that holds a line break or a PEM header is a secret
    /// pasted where its path belongs, and is not repeated in the message.
    pub(super) fn path(
        &self,
        key: &str,
        raw: Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        match raw {
            Some(s) if s.contains('\n') || s.contains("-----BEGIN") => Err(self.invalid(
                key,
                "the value looks like a file's contents, not its path (not shown)".into(),
                "the path of the file",
            )),
            other => Ok(other),
        }
    }

    pub(super) fn config(&self, mut raw: Raw) -> Result<Config, ConfigError> {
        let (listen, metrics_listen) = self.listens(&raw)?;
        let defaults = self.policy("defaults", &raw.values, None)?;
        let repos = self.repos(&raw, &defaults)?;
        let clusters = self.clusters(std::mem::take(&mut raw.clusters))?;
        let log = raw.values.text_or_default("log");
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log) {
            return Err(self.invalid(
                "log",
                format!("{log:?} is not a log filter ({e})"),
                "a level such as info or debug, or a filter like previewd=debug,info",
            ));
        }
        let configured_url = raw.values.text("public_url").is_some();
        if let Some(i) = repos.iter().position(|r| r.app.service.is_some())
            && !configured_url
        {
            // The loopback guess is this host's own: no cluster's ingress reaches it.
            return Err(self.invalid(
                &format!("repos[{i}].app_service"),
                "public_url is not set, and the preview's Ingress asks previewd's check there"
                    .into(),
                "public_url = \"https://previewd.example.com\", reachable from every \
                 cluster's ingress controller",
            ));
        }
        let public_url = self.public_url(&raw, listen)?;
        let github = self.github(&raw)?;
        let login = self.login(&raw, public_url.as_deref())?;
        self.gates_can_ask(&repos, &github)?;
        let database = self.database(&raw)?;
        self.templates_need_a_database(&repos, &database)?;
        let mail = self.mail(&raw)?;
        self.relays_need_a_relay(&repos, &mail)?;
        let messaging = self.messaging(&raw)?;
        let state = self.store(&raw)?;
        let tls = self.tls(&raw)?;
        self.shared_state_needs_shared_keys(&state, &clusters, &login, &tls)?;
        let sink = self.sink(&raw)?;
        let lease = self.lease(&raw, sink.kind, state.is_shared())?;
        Ok(Config {
            listen,
            state,
            log,
            reachable_url: public_url.clone().filter(|_| configured_url),
            public_url,
            github,
            lease,
            sink,
            defaults,
            sweep_interval: self.duration_of(&raw, "sweep.interval")?,
            delivery_retention: self.duration_of(&raw, "sweep.delivery_retention")?,
            remove_orphans: raw.values.flag_or_default("sweep.remove_orphans"),
            api_token: self.secret("api.token", raw.values.text("api.token"))?,
            metrics_listen,
            clusters,
            repos,
            chart: self.chart(&raw)?,
            database,
            tls,
            dns: DnsConfig {
                enabled: raw.values.flag_or_default("dns.enabled"),
                ttl: self.duration_of(&raw, "dns.ttl")?,
            },
            login,
            mail,
            messaging,
        })
    }

    /// `state`: a file, or a PostgreSQL URL (never repeated in the message: it may hold a
    /// password).
    fn store(&self, raw: &Raw) -> Result<Store, ConfigError> {
        let text = raw.values.text_or_default("state");
        Store::parse(&text).map_err(|e| {
            self.invalid(
                "state",
                e.to_string(),
                "a file's path, or postgresql://user:password@host:5432/database",
            )
        })
    }

    /// With a PostgreSQL state there is no "beside the state": what SQLite's previewd makes
    /// there on first start would differ from one replica to the next (a session sealed by
    /// one would not open on another), so each must be configured.
    fn shared_state_needs_shared_keys(
        &self,
        state: &Store,
        clusters: &[Cluster],
        login: &LoginConfig,
        tls: &TlsConfig,
    ) -> Result<(), ConfigError> {
        if !state.is_shared() {
            return Ok(());
        }
        if login.session_key.is_none() {
            return Err(self.invalid(
                "login.session_secret",
                "it is not set, and with a PostgreSQL state every replica must seal and open \
                 sessions, hand-off codes and share links with the same key"
                    .into(),
                "a secret of 32 bytes or more (`openssl rand -hex 32`), the same for every replica",
            ));
        }
        if tls.mode == TlsMode::Sealed && tls.ca_cert.is_none() {
            return Err(self.invalid(
                "tls.ca_cert",
                "it is not set, and with a PostgreSQL state every replica must sign with the \
                 same preview CA"
                    .into(),
                "tls.ca_cert and tls.ca_key: the CA's files, mounted from one Secret",
            ));
        }
        if let Some(cluster) = clusters.iter().find(|c| c.local_sealing) {
            return Err(self.invalid(
                "clusters",
                format!(
                    "cluster {:?} would seal with a key pair made beside the state, and a \
                     PostgreSQL state has no beside",
                    cluster.name
                ),
                "a [[clusters]] entry with sealing_cert (the sealed-secrets controller's certificate)",
            ));
        }
        Ok(())
    }

    /// `listen` and `metrics.listen`, which may not share a port.
    fn listens(&self, raw: &Raw) -> Result<(SocketAddr, Option<SocketAddr>), ConfigError> {
        let listen_text = raw.values.text_or_default("listen");
        let listen = listen_text.parse().map_err(|_| {
            self.invalid(
                "listen",
                format!("{listen_text:?} is not a socket address"),
                "HOST:PORT, like 127.0.0.1:8080 or [::]:8080",
            )
        })?;
        let metrics_listen = raw
            .values
            .text("metrics.listen")
            .map(|text| {
                text.parse().map_err(|_| {
                    self.invalid(
                        "metrics.listen",
                        format!("{text:?} is not a socket address"),
                        "HOST:PORT, like 0.0.0.0:9090",
                    )
                })
            })
            .transpose()?;
        if let Some(metrics) = metrics_listen.filter(|m| collide(m, &listen)) {
            return Err(self.invalid(
                "metrics.listen",
                format!("{metrics} takes the port of listen ({listen})"),
                "another port than listen's, like 0.0.0.0:9090",
            ));
        }
        Ok((listen, metrics_listen))
    }

    /// Each `[[repos]]` entry, over `defaults`.
    fn repos(&self, raw: &Raw, defaults: &Policy) -> Result<Vec<RepoConfig>, ConfigError> {
        raw.repos
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let name = r.name.parse().map_err(|e: crate::preview::BadRepoName| {
                    self.invalid(&format!("repos[{i}].name"), e.to_string(), "owner/repo")
                })?;
                let mut policy = self.policy(&format!("repos[{i}]"), &r.policy, Some(defaults))?;
                policy.gates = self.gates(i, r)?;
                Ok(RepoConfig {
                    name,
                    policy,
                    app: self.app(i, r)?,
                })
            })
            .collect()
    }

    /// `[[clusters]]`, or previewd's own cluster when none is named.
    fn clusters(&self, raw: Vec<RawCluster>) -> Result<Vec<Cluster>, ConfigError> {
        if raw.is_empty() {
            return Ok(vec![Cluster {
                name: "in-cluster".into(),
                server: "https://kubernetes.default.svc".into(),
                sealing_cert: None,
                capacity: None,
                ingress_target: None,
                local_sealing: true,
            }]);
        }
        let mut seen = BTreeSet::new();
        raw.into_iter()
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
            .collect()
    }

    /// `public_url`, or on loopback the listen address (where it is reached then).
    fn public_url(&self, raw: &Raw, listen: SocketAddr) -> Result<Option<String>, ConfigError> {
        let Some(url) = raw.values.text("public_url") else {
            return Ok(listen
                .ip()
                .is_loopback()
                .then(|| format!("http://{listen}")));
        };
        let url = url.trim_end_matches('/').to_owned();
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"));
        if rest.is_none_or(|host| host.is_empty() || host.contains(char::is_whitespace)) {
            return Err(self.invalid(
                "public_url",
                format!("{url:?} is not an http(s) URL"),
                "where people open the dashboard, like https://previewd.example.com",
            ));
        }
        Ok(Some(url))
    }

    fn chart(&self, raw: &Raw) -> Result<ChartConfig, ConfigError> {
        let revision = raw
            .values
            .text("chart.revision")
            .unwrap_or_else(|| format!("v{}", env!("CARGO_PKG_VERSION")));
        if revision.is_empty() || revision == "HEAD" {
            return Err(self.invalid(
                "chart.revision",
                format!("{revision:?} is not pinned"),
                "a tag or commit SHA, so that every preview renders the chart it was tested with",
            ));
        }
        let project = raw.values.text_or_default("chart.project");
        let apps_project = raw.values.text_or_default("chart.apps_project");
        for (key, name) in [
            ("chart.project", &project),
            ("chart.apps_project", &apps_project),
        ] {
            if !is_dns_label(name) {
                return Err(self.invalid(
                    key,
                    format!("{name:?} is not an AppProject name"),
                    "a lower-case RFC 1123 label",
                ));
            }
        }
        if project == apps_project {
            // PR code must never run with the helpers' rights (provisioner namespace, DNS, TLS).
            return Err(self.invalid(
                "chart.apps_project",
                format!("{apps_project:?} is also chart.project"),
                "a project of its own for the apps' Applications",
            ));
        }
        Ok(ChartConfig {
            repo_url: raw.values.text_or_default("chart.repo_url"),
            path: raw.values.text_or_default("chart.path"),
            revision,
            project,
            apps_project,
            legacy_names: raw.values.flag_or_default("chart.legacy_names"),
        })
    }

    fn database(&self, raw: &Raw) -> Result<DatabaseConfig, ConfigError> {
        let mode = match raw.values.text_or_default("database.mode").as_str() {
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
        let label = |key: &str, value: Option<String>, default: &str| {
            self.label(key, value.unwrap_or_else(|| default.into()))
        };
        let namespace = label(
            "database.namespace",
            raw.values.text("database.namespace"),
            if mode == DatabaseMode::Cnpg {
                "postgres"
            } else {
                "previewd-system"
            },
        )?;
        let port_text = raw.values.text_or_default("database.port");
        let port = port_text.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
            self.invalid(
                "database.port",
                format!("{port_text:?} is not a port"),
                "a number from 1 to 65535",
            )
        })?;
        Ok(DatabaseConfig {
            mode,
            admin_secret: label(
                "database.admin_secret",
                raw.values.text("database.admin_secret"),
                default_of("database.admin_secret"),
            )?,
            cnpg_cluster: label(
                "database.cnpg_cluster",
                raw.values.text("database.cnpg_cluster"),
                default_of("database.cnpg_cluster"),
            )?,
            host: raw
                .values
                .text("database.host")
                .unwrap_or_else(|| format!("postgres.{namespace}.svc")),
            port,
            image: raw.values.text_or_default("database.image"),
            drop_on_delete: raw.values.flag_or_default("database.drop_on_delete"),
            max_bytes: self.size(
                "database.max_size",
                &raw.values.text_or_default("database.max_size"),
            )?,
            max_connections: {
                let text = raw.values.text_or_default("database.max_connections");
                text.parse()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| {
                        self.invalid(
                            "database.max_connections",
                            format!("{text:?} is not a number of sessions"),
                            "a number from 1 to 10000",
                        )
                    })?
            },
            server_bytes: raw
                .values
                .text("database.server_size")
                .map(|text| self.size("database.server_size", &text))
                .transpose()?,
            namespace,
        })
    }

    /// `value` when it is a lower-case RFC 1123 label (a namespace, a Secret, a cluster).
    pub(super) fn label(&self, key: &str, value: String) -> Result<String, ConfigError> {
        if is_dns_label(&value) {
            Ok(value)
        } else {
            Err(self.invalid(
                key,
                format!("{value:?} is not a valid name"),
                "a lower-case RFC 1123 label",
            ))
        }
    }

    /// A size such as `512MiB` or `5GiB`, in bytes: at least 64 MiB (an empty database holds
    /// about 8), at most 1 PiB.
    fn size(&self, key: &str, text: &str) -> Result<u64, ConfigError> {
        self.size_from(key, text, 64)
    }

    /// A size such as `512MiB` or `5GiB`, in bytes: at least `floor_mib` MiB, at most 1 PiB.
    pub(super) fn size_from(
        &self,
        key: &str,
        text: &str,
        floor_mib: u64,
    ) -> Result<u64, ConfigError> {
        const MIB: u64 = 1 << 20;
        let refuse = || {
            self.invalid(
                key,
                format!("{text:?} is not a size"),
                &format!("a whole number of MiB, GiB or TiB, from {floor_mib}MiB, such as `5GiB`"),
            )
        };
        let (digits, unit) = text.split_at(
            text.find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len()),
        );
        let unit = match unit.trim() {
            "MiB" => MIB,
            "GiB" => MIB << 10,
            "TiB" => MIB << 20,
            _ => return Err(refuse()),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .filter(|bytes| (floor_mib * MIB..=MIB << 30).contains(bytes))
            .ok_or_else(refuse)
    }

    fn tls(&self, raw: &Raw) -> Result<TlsConfig, ConfigError> {
        let mode = match raw.values.text_or_default("tls.mode").as_str() {
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
        let issuer_kind = raw.values.text_or_default("tls.issuer_kind");
        if !matches!(issuer_kind.as_str(), "ClusterIssuer" | "Issuer") {
            return Err(self.invalid(
                "tls.issuer_kind",
                format!("{issuer_kind:?} is not an issuer kind"),
                "ClusterIssuer or Issuer",
            ));
        }
        let (ca_cert, ca_key) = (
            self.path("tls.ca_cert", raw.values.text("tls.ca_cert"))?,
            self.path("tls.ca_key", raw.values.text("tls.ca_key"))?,
        );
        if ca_cert.is_some() != ca_key.is_some() {
            return Err(self.invalid(
                "tls.ca_key",
                "only one of tls.ca_cert and tls.ca_key is set".into(),
                "both (the preview CA's certificate and key), or neither",
            ));
        }
        Ok(TlsConfig {
            mode,
            issuer: raw.values.text_or_default("tls.issuer"),
            issuer_kind,
            ca_cert: ca_cert.map(PathBuf::from),
            ca_key: ca_key.map(PathBuf::from),
        })
    }

    fn sink(&self, raw: &Raw) -> Result<SinkConfig, ConfigError> {
        let kind = match raw.values.text_or_default("sink.kind").as_str() {
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
        let argocd_namespace = raw.values.text_or_default("sink.argocd_namespace");
        if !is_dns_label(&argocd_namespace) {
            return Err(self.invalid(
                "sink.argocd_namespace",
                format!("{argocd_namespace:?} is not a namespace name"),
                "a lower-case RFC 1123 label",
            ));
        }
        Ok(SinkConfig {
            kind,
            directory: raw.values.text_or_default("sink.directory").into(),
            argocd_namespace,
            stuck_after: self.duration_of(raw, "sink.stuck_after")?,
        })
    }
}

/// Whether two listeners would want the same socket (a wildcard address takes the port on
/// every address).
fn collide(a: &std::net::SocketAddr, b: &std::net::SocketAddr) -> bool {
    a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}
