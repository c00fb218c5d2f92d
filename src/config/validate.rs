//! Validation: raw values to typed configuration, each error naming its key and the
//! accepted form.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::raw::{Raw, RawChart, RawDatabase, RawGithub, RawPolicy, RawSink, RawTls};
use super::*;
use crate::duration;
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

    fn secret(&self, key: &str, raw: Option<String>) -> Result<Option<SecretString>, ConfigError> {
        match raw {
            Some(s) if s.trim().is_empty() => Err(self.invalid(
                key,
                "the value is empty".into(),
                "a non-empty secret, or no key at all",
            )),
            other => Ok(other.map(SecretString::from)),
        }
    }

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

    pub(super) fn config(&self, raw: Raw) -> Result<Config, ConfigError> {
        let listen_text = raw.listen.as_deref().unwrap_or("127.0.0.1:8080");
        let listen = listen_text.parse().map_err(|_| {
            self.invalid(
                "listen",
                format!("{listen_text:?} is not a socket address"),
                "HOST:PORT, like 127.0.0.1:8080 or [::]:8080",
            )
        })?;
        let metrics_listen = raw
            .metrics
            .listen
            .as_deref()
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
                    allow_keep: r.allow_keep,
                    keep_for: r.keep_for.clone(),
                    max_per_repo: r.max_per_repo.clone(),
                    max_per_author: r.max_per_author.clone(),
                    at_cap: r.at_cap.clone(),
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
        let public_url = match raw.public_url {
            Some(url) => {
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
                Some(url)
            }
            // On loopback the listen address is where it is reached.
            None => {
                let listen: std::net::SocketAddr = listen;
                listen
                    .ip()
                    .is_loopback()
                    .then(|| format!("http://{listen}"))
            }
        };
        Ok(Config {
            listen,
            state: raw.state.unwrap_or_else(|| "previewd.db".into()).into(),
            log,
            public_url,
            github: self.github(raw.github)?,
            sink: self.sink(raw.sink)?,
            defaults,
            sweep_interval: self.duration("sweep.interval", raw.sweep.interval.as_deref(), "1m")?,
            delivery_retention: self.duration(
                "sweep.delivery_retention",
                raw.sweep.delivery_retention.as_deref(),
                "7d",
            )?,
            remove_orphans: raw.sweep.remove_orphans.unwrap_or(false),
            api_token: self.secret("api.token", raw.api.token)?,
            metrics_listen,
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
        let apps_project = raw.apps_project.unwrap_or_else(|| "preview-apps".into());
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
            repo_url: raw
                .repo_url
                .unwrap_or_else(|| "https://github.com/previewd/previewd.git".into()),
            path: raw.path.unwrap_or_else(|| "helpers-chart".into()),
            revision,
            project,
            apps_project,
            legacy_names: raw.legacy_names.unwrap_or(false),
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
            (secret, None) => self.webhook_secret("github.webhook_secret", secret)?,
            (None, Some(path)) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    self.invalid(
                        "github.webhook_secret_file",
                        format!("cannot read {path:?}: {e}"),
                        "a readable file holding the secret",
                    )
                })?;
                self.webhook_secret(
                    "github.webhook_secret_file",
                    Some(text.trim_end_matches(['\n', '\r']).to_owned()),
                )?
            }
        };
        let api_url = raw
            .api_url
            .unwrap_or_else(|| "https://api.github.com".into());
        let plain = api_url.strip_prefix("http://");
        if !(api_url.starts_with("https://") || plain.is_some_and(is_loopback_authority)) {
            // Plain HTTP would carry the token and every answer readable and forgeable on
            // the way; only a test server on this host may be spoken to without TLS.
            return Err(self.invalid(
                "github.api_url",
                format!("{api_url:?} is not an https URL (plain http is for loopback only)"),
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
            resync_interval: self.duration(
                "github.resync_interval",
                raw.resync_interval.as_deref(),
                "10m",
            )?,
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
            stuck_after: self.duration("sink.stuck_after", raw.stuck_after.as_deref(), "15m")?,
        })
    }
}
