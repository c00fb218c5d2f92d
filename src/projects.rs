//! The two AppProjects previewd's Applications run under, generated from the configuration so
//! that they always cover `[[clusters]]` and `[[repos]]` (`previewd render --projects`;
//! the chart's `appProjects` value is what it prints for the chart's `config`). Pure.
//!
//! The helpers' project may create what `helpers-chart/` renders, in the preview namespaces
//! and in the provisioner (and CloudNativePG) namespace. The apps' project runs PR code, fork
//! code included: preview namespaces only, nothing cluster-scoped, and only plain workload
//! kinds (none that reach beyond a namespace: RBAC, certificates and DNS for any name,
//! database roles, sealed secrets the controller would open, Applications) and nothing that
//! publishes a host (no Ingress, no Gateway API kind: the preview's Ingress is the helpers').
//! What the project cannot say — each app only in its own namespace, an Ingress in a preview
//! namespace only from its helpers, `externalIPs` — is the chart's admission policies'
//! (deploy/chart/templates/admission.yaml). Argo CD checks cluster-scoped objects
//! against the kind whitelist only (argo-cd controller/sync.go validateSyncPermissions), so
//! the Namespace entry carries the name glob.

use serde_json::{Value, json};

use crate::config::{Config, DatabaseMode};
use crate::naming;

/// What the helper Applications may create (group, kind): exactly what the chart renders.
const HELPER_KINDS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    // The mail catcher's (helpers-chart templates/mail.yaml).
    ("", "Service"),
    // The preview namespace's bounds (helpers-chart templates/resources.yaml); never the apps'.
    ("", "ResourceQuota"),
    ("", "LimitRange"),
    // A template generation's pool keeper (helpers-chart templates/template-spares.yaml),
    // and the mail catcher.
    ("apps", "Deployment"),
    ("batch", "Job"),
    // The size guard of a preview's database (helpers-chart templates/database-guard.yaml).
    ("batch", "CronJob"),
    ("bitnami.com", "SealedSecret"),
    ("cert-manager.io", "Certificate"),
    ("externaldns.k8s.io", "DNSEndpoint"),
    // The preview's edge, behind previewd's login (helpers-chart templates/ingress.yaml).
    ("networking.k8s.io", "Ingress"),
    // Who reaches the mail catcher (helpers-chart templates/mail.yaml).
    ("networking.k8s.io", "NetworkPolicy"),
    ("postgresql.cnpg.io", "Database"),
    ("postgresql.cnpg.io", "DatabaseRole"),
    // The broker's, through the messaging-topology-operator (templates/messaging-operator.yaml).
    ("rabbitmq.com", "OperatorPolicy"),
    ("rabbitmq.com", "Permission"),
    ("rabbitmq.com", "User"),
    ("rabbitmq.com", "Vhost"),
];

/// All an app's chart may create, in its own namespace: plain workloads and their wiring. A
/// whitelist, because anything else may reach further than the namespace: RBAC (a Role or a
/// RoleBinding to `cluster-admin`, then a Pod that creates DNSEndpoints, Certificates or
/// SealedSecrets itself), CRDs of operators that act on names (cert-manager, external-dns,
/// CloudNativePG), Argo CD's own kinds, PodDisruptionBudgets (`maxUnavailable: 0` stalls
/// every node drain), and anything that publishes a host: no Ingress (the preview's edge is
/// the helpers', behind previewd's login; an app's own would serve its host without one) and
/// no Gateway API kind (a Gateway or a route claims any hostname).
const APP_KINDS: &[(&str, &str)] = &[
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "Service"),
    ("", "ServiceAccount"),
    ("", "PersistentVolumeClaim"),
    ("", "Pod"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("autoscaling", "HorizontalPodAutoscaler"),
];

/// Both projects, the helpers' first.
pub fn projects(config: &Config) -> Vec<Value> {
    vec![helpers(config), apps(config)]
}

/// Namespace globs of the previews this configuration can make: every repository's when
/// `[[repos]]` is empty (then any repository that sends webhooks is accepted). With
/// `chart.legacy_names`, also those of previews created before names were recorded, which
/// keep their names (and namespaces) for life.
fn preview_namespaces(config: &Config) -> Vec<String> {
    let mut globs = Vec::new();
    if config.repos.is_empty() {
        globs.push(naming::PREVIEW_NAMESPACES.to_owned());
        if config.chart.legacy_names {
            globs.push(naming::legacy_namespaces(None));
        }
    }
    for repo in &config.repos {
        globs.push(naming::namespaces_of(&repo.name));
        if repo.app.template.is_some() {
            // The template's generations: the helpers build them, never the apps (whose
            // globs come from `namespaces_of` alone).
            globs.push(naming::template_namespaces_of(&repo.name));
        }
        if config.chart.legacy_names {
            globs.push(naming::legacy_namespaces(Some(&repo.name)));
        }
    }
    globs
}

fn kinds(list: &[(&str, &str)]) -> Value {
    list.iter()
        .map(|(group, kind)| json!({"group": group, "kind": kind}))
        .collect()
}

fn project(config: &Config, name: &str, description: &str, rules: Value) -> Value {
    let mut spec = json!({"description": description});
    for (key, value) in rules.as_object().into_iter().flatten() {
        spec[key] = value.clone();
    }
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": {
            "name": name,
            "namespace": config.sink.argocd_namespace,
            "labels": {crate::render::MANAGED_BY.0: crate::render::MANAGED_BY.1},
        },
        "spec": spec,
    })
}

pub fn helpers(config: &Config) -> Value {
    let namespaces = preview_namespaces(config);
    let mut destinations = Vec::new();
    for cluster in &config.clusters {
        for glob in &namespaces {
            destinations.push(json!({"server": cluster.server, "namespace": glob}));
        }
        if config.database.mode != DatabaseMode::Off {
            // The create and drop Jobs (shared) or the Database and DatabaseRole (cnpg).
            destinations
                .push(json!({"server": cluster.server, "namespace": config.database.namespace}));
        }
        let messaging = &config.messaging.namespace;
        let broker = config.messaging.configured || config.repos.iter().any(|r| r.app.messaging);
        let shared_with_database =
            *messaging == config.database.namespace && config.database.mode != DatabaseMode::Off;
        if broker && !shared_with_database {
            // The vhost's Jobs (shared) or its Vhost, User and Permission (operator): also
            // while no repository asks for messaging any more, as long as `[messaging]` is
            // configured: a preview made with it keeps it until it ends, and its teardown
            // must still reach them.
            destinations.push(json!({"server": cluster.server, "namespace": messaging}));
        }
    }
    let owned_namespaces: Vec<Value> = namespaces
        .iter()
        .map(|glob| json!({"group": "", "kind": "Namespace", "name": glob}))
        .collect();
    project(
        config,
        &config.chart.project,
        "previewd helper Applications: helpers-chart only, into preview namespaces and the provisioner namespace",
        json!({
            "sourceRepos": [config.chart.repo_url],
            "destinations": destinations,
            "clusterResourceWhitelist": owned_namespaces,
            "namespaceResourceWhitelist": kinds(HELPER_KINDS),
        }),
    )
}

pub fn apps(config: &Config) -> Value {
    let mut sources = Vec::new();
    let mut destinations = Vec::new();
    for repo in &config.repos {
        let Some(chart) = &repo.app.chart else {
            continue;
        };
        if !sources.contains(&chart.repo_url) {
            sources.push(chart.repo_url.clone());
        }
        let mut globs = vec![naming::namespaces_of(&repo.name)];
        if config.chart.legacy_names {
            globs.push(naming::legacy_namespaces(Some(&repo.name)));
        }
        for cluster in &config.clusters {
            for glob in &globs {
                destinations.push(json!({"server": cluster.server, "namespace": glob}));
            }
        }
    }
    project(
        config,
        &config.chart.apps_project,
        "previewd app Applications: the PRs' own charts (fork code included), confined to their preview namespaces",
        json!({
            "sourceRepos": sources,
            "destinations": destinations,
            // Nothing cluster-scoped: an empty whitelist permits none.
            "clusterResourceWhitelist": [],
            "namespaceResourceWhitelist": kinds(APP_KINDS),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
        [database]
        mode = "cnpg"
        namespace = "pg"
        cnpg_cluster = "shared"
        [[clusters]]
        name = "eu-1"
        server = "https://eu-1.example.com"
        [[clusters]]
        name = "us-1"
        server = "https://us-1.example.com"
        [[repos]]
        name = "octo/shop"
        app_chart = "deploy/chart"
        [[repos]]
        name = "octo/docs"
    "#;

    fn strings(value: &Value, field: &str) -> Vec<String> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v[field].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_helpers_reach_every_cluster_and_the_database_namespace() {
        let config = Config::from_toml(CONFIG, Vec::new()).unwrap();
        let helpers = helpers(&config);
        let destinations = &helpers["spec"]["destinations"];
        assert_eq!(
            strings(destinations, "server"),
            ["https://eu-1.example.com"; 3]
                .into_iter()
                .chain(["https://us-1.example.com"; 3])
                .collect::<Vec<_>>()
        );
        assert!(strings(destinations, "namespace").contains(&"pg".to_owned()));
        assert_eq!(
            helpers["spec"]["sourceRepos"],
            json!(["https://github.com/previewd/previewd.git"])
        );
    }

    /// Also when no repository asks for messaging any more, while `[messaging]` is set: a
    /// preview made with it keeps it until it ends, and Argo CD deletes nothing its project
    /// no longer permits.
    #[test]
    fn the_helpers_reach_a_configured_brokers_namespace_whether_or_not_a_repository_uses_it() {
        let reaches = |toml: &str| {
            let config = Config::from_toml(toml, Vec::new()).unwrap();
            strings(&helpers(&config)["spec"]["destinations"], "namespace")
                .contains(&"mq".to_owned())
        };
        let broker =
            "[messaging]\nmode = \"operator\"\nnamespace = \"mq\"\n[[repos]]\nname = \"o/r\"\n";
        assert!(reaches(broker));
        assert!(reaches(&format!("{broker}messaging = \"rabbitmq\"\n")));
        let cnpg = |extra: &str| {
            let toml = format!("[database]\nmode = \"cnpg\"\nnamespace = \"pg\"\n{extra}");
            let config = Config::from_toml(&toml, Vec::new()).unwrap();
            strings(&helpers(&config)["spec"]["destinations"], "namespace")
                .contains(&"previewd-system".to_owned())
        };
        assert!(!cnpg(""), "no broker configured, none reached");
        assert!(
            cnpg("[messaging]\nmax_queues = 5\n"),
            "a configured broker is"
        );
        let defaults = Config::from_toml("", Vec::new()).unwrap();
        let namespaces = strings(&helpers(&defaults)["spec"]["destinations"], "namespace");
        assert_eq!(
            namespaces
                .iter()
                .filter(|n| *n == "previewd-system")
                .count(),
            1,
            "the broker's provisioner namespace is the database's by default: {namespaces:?}"
        );
    }

    #[test]
    fn the_apps_are_confined_to_their_own_preview_namespaces() {
        let config = Config::from_toml(CONFIG, Vec::new()).unwrap();
        let apps = apps(&config);
        let shop = naming::namespaces_of(&"octo/shop".parse().unwrap());
        assert_eq!(
            strings(&apps["spec"]["destinations"], "namespace"),
            [shop.clone(), shop]
        );
        assert_eq!(
            apps["spec"]["sourceRepos"],
            json!(["https://github.com/octo/shop.git"])
        );
        assert_eq!(apps["spec"]["clusterResourceWhitelist"], json!([]));
        let allowed = strings(&apps["spec"]["namespaceResourceWhitelist"], "group");
        for group in [
            "rbac.authorization.k8s.io",
            "cert-manager.io",
            "externaldns.k8s.io",
            "postgresql.cnpg.io",
            "rabbitmq.com",
            "bitnami.com",
            "argoproj.io",
            "gateway.networking.k8s.io",
        ] {
            assert!(!allowed.contains(&group.to_owned()), "{group}");
        }
        assert!(
            !apps["spec"]["namespaceResourceWhitelist"]
                .to_string()
                .contains('*')
        );
        assert!(
            !strings(&apps["spec"]["destinations"], "namespace").contains(&"pg".to_owned()),
            "PR code never reaches the database namespace"
        );
    }

    /// The edge is the helpers': their project admits the preview's Ingress, and the apps'
    /// admits nothing that publishes a host, neither an Ingress nor a Gateway API kind.
    #[test]
    fn only_the_helpers_may_publish_a_preview_host() {
        let config = Config::from_toml(CONFIG, Vec::new()).unwrap();
        let admitted = |project: Value| -> Vec<(String, String)> {
            project["spec"]["namespaceResourceWhitelist"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| {
                    (
                        k["group"].as_str().unwrap().to_owned(),
                        k["kind"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        let helpers = admitted(helpers(&config));
        assert!(helpers.contains(&("networking.k8s.io".into(), "Ingress".into())));
        let apps = admitted(apps(&config));
        for (group, kind) in [
            ("networking.k8s.io", "Ingress"),
            ("extensions", "Ingress"),
            ("gateway.networking.k8s.io", "HTTPRoute"),
            ("gateway.networking.k8s.io", "GRPCRoute"),
            ("gateway.networking.k8s.io", "TLSRoute"),
            ("gateway.networking.k8s.io", "Gateway"),
        ] {
            assert!(
                !apps
                    .iter()
                    .any(|(g, k)| (g == group || g == "*") && (k == kind || k == "*")),
                "the apps' project admits {group}/{kind}"
            );
        }
        assert!(
            !apps.iter().any(|(g, _)| g == "gateway.networking.k8s.io"),
            "no Gateway API kind at all"
        );
        // The apps keep their NetworkPolicies, the one other kind of the group.
        assert!(apps.contains(&("networking.k8s.io".into(), "NetworkPolicy".into())));
    }

    /// A preview namespace's bounds are the helpers' (helpers-chart templates/resources.yaml):
    /// their project admits the ResourceQuota and the LimitRange, the apps' neither, so a PR's
    /// chart cannot lift or loosen them. Argo CD refuses what a whitelist omits only when there
    /// is one: without it every namespaced kind is admitted (argo-cd pkg/apis/application/
    /// v1alpha1/app_project_types.go IsGroupKindNamePermitted).
    #[test]
    fn only_the_helpers_may_bound_a_preview_namespace() {
        let config = Config::from_toml(CONFIG, Vec::new()).unwrap();
        let whitelist = |project: &Value| project["spec"]["namespaceResourceWhitelist"].clone();
        let admits = |list: &Value, group: &str, kind: &str| {
            list.as_array().unwrap().iter().any(|k| {
                (k["group"] == group || k["group"] == "*")
                    && (k["kind"] == kind || k["kind"] == "*")
            })
        };
        let helpers = whitelist(&helpers(&config));
        let apps = whitelist(&apps(&config));
        assert!(
            !apps.as_array().unwrap().is_empty(),
            "the apps' project has a whitelist"
        );
        for kind in ["ResourceQuota", "LimitRange"] {
            assert!(
                admits(&helpers, "", kind),
                "the helpers' project admits {kind}"
            );
            assert!(!admits(&apps, "", kind), "the apps' project admits {kind}");
        }
    }

    /// Argo CD matches destination namespaces as globs (util/glob, gobwas/glob): `*` is any
    /// run of characters.
    fn glob(pattern: &str, text: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == text,
            Some((head, rest)) => {
                text.starts_with(head)
                    && (0..=text.len() - head.len()).any(|i| glob(rest, &text[head.len() + i..]))
            }
        }
    }

    #[test]
    fn a_preview_namespace_matches_its_repositorys_glob_and_no_other() {
        let repo: crate::preview::RepoName =
            format!("o/{}", "long-name".repeat(9)).parse().unwrap();
        let slug =
            naming::Names::of(&crate::preview::PreviewKey::new(repo.clone(), 12345), "x").slug;
        assert!(glob(&naming::namespaces_of(&repo), &slug), "{slug}");
        assert!(glob(naming::PREVIEW_NAMESPACES, &slug), "{slug}");
        let other = naming::namespaces_of(&"o/other".parse().unwrap());
        assert!(!glob(&other, &slug), "{other} {slug}");
    }

    /// Previews created before names were recorded keep their namespaces: while they live
    /// (`chart.legacy_names`), the projects admit those too, and otherwise they do not.
    #[test]
    fn legacy_names_admit_the_namespaces_previews_had_before_names_were_recorded() {
        let toml = "[[repos]]\nname = \"acme/shop\"\napp_chart = \"deploy/chart\"\n";
        let legacy = naming::Names::legacy(&"acme/shop#7".parse().unwrap(), "x").slug;
        let admits = |config: &crate::config::Config| {
            let project = |p: Value| {
                p["spec"]["destinations"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| glob(d["namespace"].as_str().unwrap(), &legacy))
            };
            let namespace_kind = helpers(config)["spec"]["clusterResourceWhitelist"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| glob(k["name"].as_str().unwrap_or(""), &legacy));
            (
                project(helpers(config)),
                project(apps(config)),
                namespace_kind,
            )
        };
        let plain = crate::config::Config::from_toml(toml, Vec::new()).unwrap();
        assert_eq!(admits(&plain), (false, false, false));
        let upgrading = crate::config::Config::from_toml(
            &format!("[chart]\nlegacy_names = true\n{toml}"),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(admits(&upgrading), (true, true, true), "{legacy}");
    }

    #[test]
    fn the_preview_glob_matches_no_namespace_that_is_not_previewds() {
        for unrelated in [
            "api-pr-x",
            "team-pr-tools",
            "kube-system",
            "previewd-system",
            "prod-pr-1",
        ] {
            assert!(!glob(naming::PREVIEW_NAMESPACES, unrelated), "{unrelated}");
        }
        let config = crate::config::Config::from_toml("", Vec::new()).unwrap();
        let helpers = helpers(&config);
        for destination in helpers["spec"]["destinations"].as_array().unwrap() {
            let namespace = destination["namespace"].as_str().unwrap();
            assert!(!glob(namespace, "api-pr-x"), "{namespace}");
        }
    }
}
