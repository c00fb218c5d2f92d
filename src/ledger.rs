//! The ledger: what a preview provisioned, derived purely from its names and the
//! configuration, and how previewd can confirm each item gone after teardown.

use crate::config::{Config, DatabaseMode, MessagingMode, TlsMode};
use crate::naming::Names;
use crate::preview::LedgerState;

/// The in-cluster API address: the only destination previewd's own client can look into.
pub const LOCAL_SERVER: &str = "https://kubernetes.default.svc";

/// One provisioned object. `namespace` is empty for cluster-scoped kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

/// Where the Kubernetes API serves a kind the ledger records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRef {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

/// Kinds previewd can look up on its own cluster after teardown (its ClusterRole in
/// deploy/chart grants `get` on each).
pub const CHECKABLE: [&str; 8] = [
    "Namespace",
    "DNSEndpoint",
    "Certificate",
    "Database",
    "Deployment",
    "Vhost",
    "User",
    "Permission",
];

/// Kinds previewd can look up on its own cluster after teardown.
pub fn api_of(kind: &str) -> Option<ApiRef> {
    let (group, version, plural) = match kind {
        "Namespace" => ("", "v1", "namespaces"),
        "DNSEndpoint" => ("externaldns.k8s.io", "v1alpha1", "dnsendpoints"),
        "Certificate" => ("cert-manager.io", "v1", "certificates"),
        "Database" => ("postgresql.cnpg.io", "v1", "databases"),
        "Deployment" => ("apps", "v1", "deployments"),
        "Vhost" => ("rabbitmq.com", "v1beta1", "vhosts"),
        "User" => ("rabbitmq.com", "v1beta1", "users"),
        "Permission" => ("rabbitmq.com", "v1beta1", "permissions"),
        _ => return None,
    };
    let kind = CHECKABLE.into_iter().find(|k| *k == kind)?;
    Some(ApiRef {
        group,
        version,
        kind,
        plural,
    })
}

/// Whether a preview's host is published by a DNSEndpoint (`dns.enabled` and a target for its
/// cluster), which the ledger then lists. A named choice, not a bare `bool`, so that
/// `provisioned(names, config, Dns::Off)` says what it leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dns {
    /// A DNSEndpoint in the preview's namespace names its host.
    Endpoint,
    /// No record is made (and a template generation never has one).
    Off,
}

/// Everything one preview's Applications make that teardown must see gone. (Sealed and TLS
/// Secrets, Jobs and ConfigMaps live in the namespace and go with it.)
/// What a preview has besides its database: a mail catcher, a vhost and user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Services {
    pub mail: bool,
    /// The preview's mode, and the namespace its broker objects are made in.
    pub messaging: Option<(MessagingMode, String)>,
}

pub fn provisioned(names: &Names, config: &Config, services: &Services, dns: Dns) -> Vec<Entry> {
    let argocd = &config.sink.argocd_namespace;
    let mut entries = vec![
        entry("Application", argocd, &names.application),
        entry("Namespace", "", &names.slug),
    ];
    match config.database.mode {
        DatabaseMode::Off => {}
        DatabaseMode::Shared => entries.push(entry(
            SHARED_DATABASE,
            &config.database.host,
            &names.database,
        )),
        DatabaseMode::Cnpg => entries.push(entry(
            "Database",
            &config.database.namespace,
            &format!("{}-db", names.slug),
        )),
    }
    if config.tls.mode == TlsMode::CertManager {
        entries.push(entry(
            "Certificate",
            &names.slug,
            &format!("{}-tls", names.slug),
        ));
    }
    if dns == Dns::Endpoint {
        entries.push(entry(
            "DNSEndpoint",
            &names.slug,
            &format!("{}-dns", names.slug),
        ));
    }
    if services.mail {
        entries.push(entry("Deployment", &names.slug, &names.mail_service()));
    }
    if let Some((mode, namespace)) = &services.messaging {
        match mode {
            MessagingMode::Shared => {
                let host = &config.messaging.host;
                entries.push(entry(SHARED_VHOST, host, &names.slug));
                entries.push(entry(SHARED_USER, host, &names.slug));
            }
            MessagingMode::Operator => {
                for kind in ["Vhost", "User", "Permission"] {
                    entries.push(entry(kind, namespace, &names.slug));
                }
            }
        }
    }
    entries
}

/// The app's own Application (for repositories that configure their chart).
pub fn app_entry(names: &Names, config: &Config) -> Entry {
    entry(
        "Application",
        &config.sink.argocd_namespace,
        &names.app_application,
    )
}

fn entry(kind: &str, namespace: &str, name: &str) -> Entry {
    Entry {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
    }
}

/// A database on the shared PostgreSQL server (`namespace` holds the server's host): not a
/// Kubernetes object, dropped by the chart's PostDelete Job.
pub const SHARED_DATABASE: &str = "PostgreSQL database";

/// A vhost and a user on the shared RabbitMQ (`namespace` holds the broker's host): not
/// Kubernetes objects, deleted by the chart's PostDelete Job (the user first, which closes
/// its connections, then the vhost).
pub const SHARED_VHOST: &str = "RabbitMQ vhost";
pub const SHARED_USER: &str = "RabbitMQ user";

/// How an item's removal is known when previewd cannot look it up itself.
pub fn unseen_gone_detail(kind: &str, config: &Config) -> (LedgerState, &'static str) {
    match kind {
        SHARED_DATABASE if !config.database.drop_on_delete => {
            (LedgerState::Kept, "kept: database.drop_on_delete is false")
        }
        SHARED_DATABASE => (
            LedgerState::Gone,
            "dropped by the chart's PostDelete Job, which Argo CD runs before it releases the Application",
        ),
        SHARED_VHOST | SHARED_USER => (
            LedgerState::Gone,
            "deleted by the chart's PostDelete Job through the broker's management API, which Argo CD runs before it releases the Application",
        ),
        _ => (
            LedgerState::Gone,
            "removed by Argo CD's cascade before it released the Application",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preview::PreviewKey;

    fn names() -> Names {
        Names::of(&"octo/app#7".parse::<PreviewKey>().unwrap(), "p.example")
    }

    #[test]
    fn the_ledger_lists_what_the_chart_makes_for_this_configuration() {
        let config = Config::from_toml(
            "[database]\nmode = \"cnpg\"\nnamespace = \"pg\"\n[tls]\nmode = \"cert-manager\"\n",
            Vec::new(),
        )
        .unwrap();
        let kinds: Vec<_> = provisioned(&names(), &config, &Services::default(), Dns::Endpoint)
            .into_iter()
            .chain([app_entry(&names(), &config)])
            .map(|e| format!("{} {}/{}", e.kind, e.namespace, e.name))
            .collect();
        let slug = names().slug;
        assert_eq!(
            kinds,
            [
                format!("Application argocd/{slug}-helpers"),
                format!("Namespace /{slug}"),
                format!("Database pg/{slug}-db"),
                format!("Certificate {slug}/{slug}-tls"),
                format!("DNSEndpoint {slug}/{slug}-dns"),
                format!("Application argocd/{slug}-app"),
            ]
        );
    }

    #[test]
    fn the_ledger_lists_the_catcher_and_the_brokers_objects_of_a_repository_with_them() {
        let slug = names().slug;
        let listed = |toml: &str| -> Vec<String> {
            let config = Config::from_toml(toml, Vec::new()).unwrap();
            let services = Services {
                mail: true,
                messaging: Some((config.messaging.mode, config.messaging.namespace.clone())),
            };
            provisioned(&names(), &config, &services, Dns::Off)
                .into_iter()
                .skip(4)
                .map(|e| format!("{} {}/{}", e.kind, e.namespace, e.name))
                .collect()
        };
        assert_eq!(
            listed(""),
            [
                format!("Deployment {slug}/{slug}-mail"),
                format!("RabbitMQ vhost rabbitmq.previewd-system.svc/{slug}"),
                format!("RabbitMQ user rabbitmq.previewd-system.svc/{slug}"),
            ]
        );
        assert_eq!(
            listed("[messaging]\nmode = \"operator\"\n")[1..],
            [
                format!("Vhost rabbitmq/{slug}"),
                format!("User rabbitmq/{slug}"),
                format!("Permission rabbitmq/{slug}"),
            ]
        );
    }

    #[test]
    fn every_checkable_kind_has_an_api_and_others_have_none() {
        for kind in CHECKABLE {
            assert_eq!(api_of(kind).unwrap().kind, kind);
        }
        assert_eq!(api_of(SHARED_DATABASE), None);
        assert_eq!(api_of(SHARED_VHOST), None);
        assert_eq!(api_of("Application"), None);
    }
}
