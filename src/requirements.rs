//! What a cluster must run for previews to work (the README's "What a cluster needs", under "Install on a cluster"),
//! checked where previewd can: on its own cluster, at start, through API discovery. Pure:
//! what is served in, what is missing out; `sink::kubernetes::KubeSink::served` asks the cluster.
//!
//! Version floors that discovery shows: CloudNativePG >= 1.30 serves `databaseroles`;
//! Argo CD's CRDs and the AppProjects previewd's Applications name must exist. Floors it
//! cannot see (Argo CD >= 2.10 for PostDelete hooks, external-dns' flags) are in the README;
//! PostgreSQL >= 15 and psql >= 15 are checked by the chart's own Jobs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::config::{Config, DatabaseMode, MessagingMode, TlsMode};

/// The API resources (group, version, plural) this configuration relies on, and why.
pub fn needed(config: &Config) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    let mut needed = vec![
        (
            "argoproj.io",
            "v1alpha1",
            "applications",
            "Argo CD (>= 2.10, for PostDelete hooks)",
        ),
        (
            "argoproj.io",
            "v1alpha1",
            "appprojects",
            "Argo CD's AppProjects",
        ),
        (
            "bitnami.com",
            "v1alpha1",
            "sealedsecrets",
            "the sealed-secrets controller",
        ),
    ];
    if config.database.mode == DatabaseMode::Cnpg {
        needed.push((
            "postgresql.cnpg.io",
            "v1",
            "databaseroles",
            "CloudNativePG >= 1.30 (DatabaseRole; database.mode = \"cnpg\")",
        ));
    }
    let messaging = config.repos.iter().any(|r| r.app.messaging);
    if messaging && config.messaging.mode == MessagingMode::Operator {
        needed.push((
            "rabbitmq.com",
            "v1beta1",
            "operatorpolicies",
            "the RabbitMQ messaging-topology-operator (messaging.mode = \"operator\")",
        ));
    }
    if config.tls.mode == TlsMode::CertManager {
        needed.push((
            "cert-manager.io",
            "v1",
            "certificates",
            "cert-manager (tls.mode = \"cert-manager\")",
        ));
    }
    if config.dns.enabled && config.clusters.iter().any(|c| c.ingress_target.is_some()) {
        needed.push((
            "externaldns.k8s.io",
            "v1alpha1",
            "dnsendpoints",
            "external-dns' DNSEndpoint CRD (run it with --source=crd --policy=sync)",
        ));
    }
    needed
}

/// What is missing, one sentence each: `served` holds "group/version/plural" of what the
/// cluster serves, `projects` the AppProjects found, each with its `spec` (`None`: not
/// allowed to look). A project whose spec is not what this configuration renders is named
/// too: widened by hand (a namespace glob, a whitelist, a role), or applied for another
/// configuration.
pub fn missing(
    config: &Config,
    served: &BTreeSet<String>,
    projects: Option<&BTreeMap<String, Value>>,
) -> Vec<String> {
    let mut missing: Vec<String> = needed(config)
        .into_iter()
        .filter(|(group, version, plural, _)| {
            !served.contains(&format!("{group}/{version}/{plural}"))
        })
        .map(|(group, version, plural, what)| {
            format!("{what}: {group}/{version} {plural} is not served")
        })
        .collect();
    if let Some(projects) = projects {
        for (key, name, want) in [
            (
                "chart.project",
                &config.chart.project,
                crate::projects::helpers(config),
            ),
            (
                "chart.apps_project",
                &config.chart.apps_project,
                crate::projects::apps(config),
            ),
        ] {
            let namespace = &config.sink.argocd_namespace;
            match projects.get(name) {
                None => missing.push(format!(
                    "AppProject {name:?} ({key}) is missing in {namespace}: apply what `previewd render --projects` prints"
                )),
                Some(spec) if !same(spec, &want["spec"]) => missing.push(format!(
                    "AppProject {name:?} ({key}) in {namespace} is not what `previewd render --projects` prints for this configuration: apply that again"
                )),
                Some(_) => {}
            }
        }
    }
    missing
}

/// Equal once empty values (`[]`, `{}`, `null`, which a server may write for an absent
/// field) are left out on both sides.
fn same(live: &Value, want: &Value) -> bool {
    fn pruned(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), pruned(v)))
                    .filter(|(_, v)| !is_empty(v))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(pruned).collect()),
            other => other.clone(),
        }
    }
    fn is_empty(value: &Value) -> bool {
        match value {
            Value::Null => true,
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty(),
            _ => false,
        }
    }
    pruned(live) == pruned(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The AppProjects as `render --projects` makes them, as the cluster lists them.
    fn rendered(config: &Config) -> BTreeMap<String, Value> {
        crate::projects::projects(config)
            .into_iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap().to_owned(),
                    p["spec"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn a_project_widened_by_hand_is_named_and_empty_fields_are_not() {
        let config = Config::from_toml(
            "[[repos]]\nname = \"acme/shop\"\napp_chart = \"deploy/chart\"\n",
            Vec::new(),
        )
        .unwrap();
        let mut projects = rendered(&config);
        // A server writing an absent list as [] changes nothing.
        projects.get_mut("previews").unwrap()["roles"] = serde_json::json!([]);
        assert!(missing(&config, &served(&config), Some(&projects)).is_empty());
        projects.get_mut("preview-apps").unwrap()["destinations"][0]["namespace"] = "*".into();
        let missing = missing(&config, &served(&config), Some(&projects));
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(
            missing[0].contains("\"preview-apps\" (chart.apps_project) in argocd is not what"),
            "{missing:?}"
        );
    }

    fn served(config: &Config) -> BTreeSet<String> {
        needed(config)
            .into_iter()
            .map(|(g, v, p, _)| format!("{g}/{v}/{p}"))
            .collect()
    }

    #[test]
    fn a_cluster_with_everything_lacks_nothing() {
        let config = Config::from_toml(
            "[database]\nmode = \"cnpg\"\ncnpg_cluster = \"pg\"\n",
            Vec::new(),
        )
        .unwrap();
        assert_eq!(
            missing(&config, &served(&config), Some(&rendered(&config))),
            Vec::<String>::new()
        );
    }

    #[test]
    fn cloudnative_pg_before_1_30_and_a_missing_project_are_named() {
        let config = Config::from_toml(
            "[database]\nmode = \"cnpg\"\ncnpg_cluster = \"pg\"\n",
            Vec::new(),
        )
        .unwrap();
        let mut old = served(&config);
        old.remove("postgresql.cnpg.io/v1/databaseroles");
        let mut projects = rendered(&config);
        projects.remove("preview-apps");
        let missing = missing(&config, &old, Some(&projects));
        assert_eq!(missing.len(), 2, "{missing:?}");
        assert!(missing[0].contains("CloudNativePG >= 1.30"), "{missing:?}");
        assert!(
            missing[1].contains("\"preview-apps\" (chart.apps_project)"),
            "{missing:?}"
        );
    }

    #[test]
    fn what_the_configuration_does_not_use_is_not_asked_for() {
        let config = Config::from_toml(
            "[tls]\nmode = \"off\"\n[database]\nmode = \"shared\"\n",
            Vec::new(),
        )
        .unwrap();
        let groups: Vec<_> = needed(&config).into_iter().map(|(g, ..)| g).collect();
        assert!(
            !groups.contains(&"postgresql.cnpg.io") && !groups.contains(&"cert-manager.io"),
            "{groups:?}"
        );
        assert!(missing(&config, &served(&config), None).is_empty());
    }

    #[test]
    fn the_topology_operator_is_asked_for_only_when_a_repository_uses_it() {
        let operator = "[messaging]\nmode = \"operator\"\n[[repos]]\nname = \"o/r\"\n";
        let uses = |toml: &str| {
            let config = Config::from_toml(toml, Vec::new()).unwrap();
            needed(&config).iter().any(|(g, ..)| *g == "rabbitmq.com")
        };
        assert!(!uses(operator), "no repository asks for messaging");
        assert!(uses(&format!("{operator}messaging = \"rabbitmq\"\n")));
        assert!(
            !uses("[[repos]]\nname = \"o/r\"\nmessaging = \"rabbitmq\"\n"),
            "shared mode needs no operator"
        );
    }
}
