//! Validation of `[lease]`: whether this replica stands for the Lease that says who leads, and
//! its timing, checked as client-go checks its leader election's (tools/leaderelection
//! `NewLeaderElector`: duration > renew deadline > 1.2 × retry period).

use std::time::Duration;

use super::raw::Raw;
use super::validate::Validator;
use super::*;

/// Where Kubernetes mounts the pod's namespace.
pub(super) const POD_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// `[lease]`: the Lease that says which replica runs the reconciler, the sweeper, resync and
/// the feedback worker.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Off: this process runs the work loops whatever other processes do (one replica).
    pub enabled: bool,
    /// The Lease's namespace (empty when none was set or found: `serve` then refuses to
    /// start with leases on).
    pub namespace: String,
    pub name: String,
    /// The identity's prefix; a random suffix is always added (`lease::identity`).
    pub identity: Option<String>,
    /// Others take the Lease over after seeing it unchanged this long.
    pub duration: Duration,
    /// The holder writes only until its last renew's send time plus this.
    pub renew_deadline: Duration,
    /// How often the Lease is read (and renewed by its holder).
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// The longest a `kill -9` of the holder leaves nobody leading: a contender may have
    /// read the holder's last renew a retry period late, then waits out the duration.
    pub fn worst_takeover(&self) -> Duration {
        self.duration + self.retry_period
    }
}

impl Validator {
    /// `shared`: the state is one several replicas share (PostgreSQL), which turns the
    /// Lease on by default wherever it can live (the kubernetes sink).
    pub(super) fn lease(
        &self,
        raw: &Raw,
        sink: SinkKind,
        shared: bool,
    ) -> Result<LeaseConfig, ConfigError> {
        let enabled = raw
            .values
            .flag("lease.enabled")
            .unwrap_or(shared && sink == SinkKind::Kubernetes);
        let duration = self.duration_of(raw, "lease.duration")?;
        let renew_deadline = self.duration_of(raw, "lease.renew_deadline")?;
        let retry_period = self.duration_of(raw, "lease.retry_period")?;
        if renew_deadline >= duration {
            return Err(self.invalid(
                "lease.renew_deadline",
                format!("{renew_deadline:?} is not shorter than lease.duration ({duration:?})"),
                "less than lease.duration: the holder must stop writing before anyone may take over",
            ));
        }
        if renew_deadline.as_secs_f64() <= 1.2 * retry_period.as_secs_f64() {
            return Err(self.invalid(
                "lease.retry_period",
                format!("{retry_period:?} leaves no second try within lease.renew_deadline ({renew_deadline:?})"),
                "less than lease.renew_deadline / 1.2",
            ));
        }
        if enabled && sink != SinkKind::Kubernetes {
            return Err(self.invalid(
                "lease.enabled",
                "it is on, and sink.kind is not kubernetes".into(),
                "sink.kind = \"kubernetes\": the Lease lives on the cluster previewd writes to",
            ));
        }
        let namespace = match raw.values.text("lease.namespace") {
            Some(namespace) if is_dns_label(&namespace) => namespace,
            Some(namespace) => {
                return Err(self.invalid(
                    "lease.namespace",
                    format!("{namespace:?} is not a namespace name"),
                    "a namespace, like previewd-system",
                ));
            }
            // Needed only to serve (`Config::check_serving`): `render`, `config check` and
            // `migrate-state` run outside a pod too.
            None => std::fs::read_to_string(POD_NAMESPACE)
                .map(|namespace| namespace.trim().to_owned())
                .unwrap_or_default(),
        };
        let name = raw.values.text_or_default("lease.name");
        if !is_dns_name(&name) || name.is_empty() {
            return Err(self.invalid(
                "lease.name",
                format!("{name:?} is not an object name"),
                "a DNS name, like previewd",
            ));
        }
        let identity = raw.values.text("lease.identity");
        if let Some(identity) = identity
            .as_deref()
            .filter(|i| i.is_empty() || i.len() > 200)
        {
            return Err(self.invalid(
                "lease.identity",
                format!("{identity:?} is empty or too long"),
                "a short name for this replica (a random suffix is added)",
            ));
        }
        Ok(LeaseConfig {
            enabled,
            namespace,
            name,
            identity,
            duration,
            renew_deadline,
            retry_period,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(toml: &str) -> Result<Config, ConfigError> {
        Config::from_toml(toml, std::iter::empty())
    }

    const KUBE: &str = "[sink]\nkind = \"kubernetes\"\n";

    #[test]
    fn leases_are_off_by_default_and_the_defaults_hand_over_within_15_s_of_a_kill() {
        let lease = load("").unwrap().lease;
        assert!(!lease.enabled);
        assert_eq!(lease.name, "previewd");
        assert_eq!(lease.duration, Duration::from_secs(12));
        assert_eq!(lease.renew_deadline, Duration::from_secs(8));
        assert_eq!(lease.retry_period, Duration::from_secs(2));
        assert!(lease.worst_takeover() <= Duration::from_secs(15));
    }

    #[test]
    fn a_lease_without_a_namespace_is_refused_to_serve_but_not_to_render() {
        // Outside a pod (as here: no service account namespace to read).
        let config = load(&format!("{KUBE}[lease]\nenabled = true\n")).unwrap();
        assert!(config.lease.namespace.is_empty());
        let refused = config.check_serving().unwrap_err().to_string();
        assert!(refused.contains("lease.namespace"), "{refused}");
    }

    #[test]
    fn a_lease_is_kept_on_the_cluster_so_it_needs_the_kubernetes_sink() {
        let error = load("[lease]\nenabled = true\nnamespace = \"previewd\"\n").unwrap_err();
        assert!(error.to_string().contains("lease.enabled"), "{error}");
        let on = load(&format!(
            "{KUBE}[lease]\nenabled = true\nnamespace = \"previewd\"\n"
        ));
        assert_eq!(on.unwrap().lease.namespace, "previewd");
    }

    #[test]
    fn the_holder_must_stop_before_anyone_may_take_over() {
        let error = load(&format!(
            "{KUBE}[lease]\nduration = \"10s\"\nrenew_deadline = \"10s\"\n"
        ))
        .unwrap_err();
        assert!(
            error.to_string().contains("lease.renew_deadline"),
            "{error}"
        );
        let error = load(&format!(
            "{KUBE}[lease]\nrenew_deadline = \"2s\"\nretry_period = \"2s\"\n"
        ))
        .unwrap_err();
        assert!(error.to_string().contains("lease.retry_period"), "{error}");
    }

    #[test]
    fn the_environment_turns_leases_on_and_names_the_lease() {
        let env = [
            ("PREVIEWD_SINK_KIND", "kubernetes"),
            ("PREVIEWD_LEASE_ENABLED", "true"),
            ("PREVIEWD_LEASE_NAMESPACE", "ops"),
            ("PREVIEWD_LEASE_NAME", "previewd-eu"),
            ("PREVIEWD_LEASE_IDENTITY", "replica-a"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let lease = Config::from_toml("", env).unwrap().lease;
        assert!(lease.enabled);
        assert_eq!(
            (lease.namespace.as_str(), lease.name.as_str()),
            ("ops", "previewd-eu")
        );
        assert_eq!(lease.identity.as_deref(), Some("replica-a"));
    }

    #[test]
    fn a_postgresql_state_with_the_kubernetes_sink_stands_for_the_lease_unless_told_not_to() {
        let toml = format!(
            "{KUBE}[lease]\nnamespace = \"previewd\"\n[[clusters]]\nname = \"eu-1\"\n\
             server = \"https://eu-1.example.com\"\nsealing_cert = \"eu-1.pem\"\n"
        );
        let env = |extra: &[(&str, &str)]| {
            let mut env = vec![
                ("PREVIEWD_STATE", "postgresql://db.internal/previewd"),
                (
                    "PREVIEWD_LOGIN_SESSION_SECRET",
                    "a-session-secret-of-32-bytes-or-more",
                ),
            ];
            env.extend_from_slice(extra);
            env.into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect::<Vec<_>>()
        };
        let shared = Config::from_toml(&toml, env(&[])).unwrap();
        assert!(shared.lease.enabled);
        let off = Config::from_toml(&toml, env(&[("PREVIEWD_LEASE_ENABLED", "false")])).unwrap();
        assert!(!off.lease.enabled);
        let sqlite = load(&format!("{KUBE}[lease]\nnamespace = \"previewd\"\n")).unwrap();
        assert!(
            !sqlite.lease.enabled,
            "one process's state: no Lease unless asked"
        );
    }

    #[test]
    fn a_namespace_that_is_no_name_is_refused() {
        let error = load(&format!(
            "{KUBE}[lease]\nenabled = true\nnamespace = \"Ops!\"\n"
        ))
        .unwrap_err();
        assert!(error.to_string().contains("lease.namespace"), "{error}");
    }
}
