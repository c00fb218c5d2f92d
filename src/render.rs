//! Rendering, pure: a preview and the configuration in, everything previewd applies for it
//! out (`preview`): the helper Application, with everything `helpers-chart/` needs in
//! `helm.valuesObject`, the app's own, and the ledger they make. No I/O; `status` is never
//! written, and `operation` only by the kubernetes sink's writer (`sink::argocd::sync_request`).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::{AppConfig, Cluster, Config, DatabaseMode, TlsMode};
use crate::ledger;
use crate::naming::Names;
use crate::preview::Preview;
use crate::seeds;

pub const CASCADE_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";
/// Argo CD's finalizers that run an Application's PostDelete hooks when it is deleted, and
/// then delete those hooks by their policy (argo-cd pkg/apis/application/v1alpha1
/// application_defaults.go `PostDeleteFinalizerName`, and its `/cleanup` stage).
pub const POST_DELETE_FINALIZERS: [&str; 2] = [
    "post-delete-finalizer.argocd.argoproj.io",
    "post-delete-finalizer.argocd.argoproj.io/cleanup",
];
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "previewd");
pub const LABEL_REPO: &str = "previewd.dev/repo";
pub const LABEL_PR: &str = "previewd.dev/pr";
/// Which previewd state wrote an Application (see `db::instance_id`).
pub const LABEL_INSTANCE: &str = "previewd.dev/instance";
/// The annotation that records which rendering of the Application was applied.
pub const APPLIED_HASH: &str = "previewd.dev/applied-hash";
/// Longest PR title kept in an annotation.
const MAX_TITLE: usize = 200;

/// A secret sealed for the preview's cluster, ready for the chart (see `seal`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSecret {
    pub name: String,
    pub namespace: String,
    /// `strict`, `namespace-wide` or `cluster-wide`
    pub scope: &'static str,
    pub type_: String,
    /// Labels for the Secret the controller makes (e.g. `cnpg.io/reload`).
    pub labels: BTreeMap<String, String>,
    pub encrypted_data: BTreeMap<String, String>,
    /// Public values, unsealed in `spec.template.data` (`seal::SecretSpec::public`).
    pub template_data: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("preview {preview} is placed on cluster {cluster:?}, which is not configured")]
    UnknownCluster { preview: String, cluster: String },
    #[error("fork PR {preview} is not approved at {sha}: nothing may be deployed")]
    NotApproved { preview: String, sha: String },
}

/// The names of the Secrets a preview's chart refers to; `seal` makes them.
pub struct SecretNames {
    /// In the preview namespace: DATABASE_URL and PG* for migrations, seed and the app.
    pub database_url: String,
    /// In the provisioner namespace (shared mode): the role's SCRAM VERIFIER.
    pub database_password: String,
    /// In the CloudNativePG Cluster's namespace (cnpg mode): basic-auth username/password.
    pub database_role: String,
    /// In the preview namespace: the `kubernetes.io/tls` Secret.
    pub tls: String,
    /// A template generation's (#16), beside its database Jobs: the TOKEN its size Job
    /// reports with.
    pub report: String,
    /// In the preview namespace: SMTP_* for the app, and the catcher's login (`mail`).
    pub mail: String,
    /// In the preview namespace: AMQP_URL and its parts (`messaging`).
    pub amqp: String,
    /// In the provisioner namespace (shared messaging): the broker user's PASSWORD_HASH.
    pub amqp_hash: String,
    /// In the RabbitmqCluster's namespace (operator messaging): the User's credentials.
    pub amqp_user: String,
}

impl SecretNames {
    pub fn of(names: &Names) -> Self {
        Self {
            database_url: format!("{}-db", names.slug),
            database_password: format!("{}-db-password", names.slug),
            database_role: format!("{}-db-role", names.slug),
            tls: format!("{}-tls", names.slug),
            report: format!("{}-db-report", names.slug),
            mail: format!("{}-mail", names.slug),
            amqp: format!("{}-amqp", names.slug),
            amqp_hash: format!("{}-amqp-hash", names.slug),
            amqp_user: format!("{}-amqp-user", names.slug),
        }
    }
}

/// Everything previewd applies for one preview, exactly as the sink receives it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub helper: Stamped,
    /// The app's own Application, for a repository that configures its chart.
    pub app: Option<Stamped>,
    /// What the helper Application provisions, itself included (the ledger).
    pub entries: Vec<ledger::Entry>,
}

/// An Application labelled with the state's identity and carrying the hash of its
/// rendering (`APPLIED_HASH`), which tells the reconciler whether it is applied already.
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    pub manifest: Value,
    pub hash: String,
}

/// The one rendering of a preview, for the reconciler and `previewd render` alike.
/// `instance` is the state's identity (`db::instance_id`); `sealed`, the preview's secrets
/// sealed for its cluster.
pub fn preview(
    preview: &Preview,
    names: &Names,
    config: &Config,
    sealed: &[SealedSecret],
    instance: &str,
) -> Result<Rendered, RenderError> {
    let dns = match dns_target(config, cluster_of(preview, config)?) {
        Some(_) => ledger::Dns::Endpoint,
        None => ledger::Dns::Off,
    };
    let helper = helper_application(preview, names, config, sealed)?;
    let app = app_application(preview, names, config)?;
    let (mut helper, mut app) = (stamped(helper, instance), app.map(|a| stamped(a, instance)));
    // The sleep rides outside the hash, in `helm.parameters` (`render::sleep`).
    let mail = config.app_for(&preview.key.repo).mail.is_some();
    sleep::override_helper(&mut helper, mail, preview.asleep);
    if let Some(app) = &mut app {
        sleep::override_app(app, preview.asleep);
    }
    Ok(Rendered {
        helper,
        app,
        entries: ledger::provisioned(
            names,
            config,
            &ledger_services(preview, names, config, sealed),
            dns,
        ),
    })
}

/// What the ledger lists of the preview's mail and messaging: its repository's mail, and the
/// messaging the preview has (`services::broker_of`).
fn ledger_services(
    preview: &Preview,
    names: &Names,
    config: &Config,
    sealed: &[SealedSecret],
) -> ledger::Services {
    let app = config.app_for(&preview.key.repo);
    ledger::Services {
        mail: app.mail.is_some(),
        messaging: services::broker_of(&app, config, names, sealed)
            .map(|broker| (broker.mode, broker.namespace)),
    }
}

/// `manifest` labelled with `instance`, and the hash of that, annotated.
pub fn stamped(mut manifest: Value, instance: &str) -> Stamped {
    manifest["metadata"]["labels"][LABEL_INSTANCE] = instance.into();
    let bytes = serde_json::to_vec(&manifest).expect("a JSON value always serializes");
    let hash = hex::encode(Sha256::digest(bytes));
    manifest["metadata"]["annotations"][APPLIED_HASH] = hash.clone().into();
    Stamped { manifest, hash }
}

fn cluster_of<'a>(preview: &Preview, config: &'a Config) -> Result<&'a Cluster, RenderError> {
    config
        .clusters
        .iter()
        .find(|c| c.name == preview.cluster)
        .ok_or_else(|| RenderError::UnknownCluster {
            preview: preview.key.to_string(),
            cluster: preview.cluster.clone(),
        })
}

/// Where the preview's DNS record points, when previewd manages one on `cluster`.
fn dns_target<'a>(config: &Config, cluster: &'a Cluster) -> Option<&'a String> {
    cluster
        .ingress_target
        .as_ref()
        .filter(|_| config.dns.enabled)
}

/// The helper Application for `preview`.
/// `names` are the preview's recorded names (`Names::recorded`), never recomputed here.
/// An Application's finalizers for its chart `values`. Deleting it deletes everything it
/// made, the namespace included (the cascade). The drop (the PostDelete hooks that come with
/// `database.dropOnDelete`) runs only for an Application that carries the post-delete
/// finalizers, and Argo CD adds them itself only on a refresh that compared the Application
/// with its target (argo-cd controller/appcontroller.go processAppRefreshQueueItem,
/// `SetPostDeleteFinalizer()` and `SetPostDeleteFinalizer("cleanup")`: not before its first
/// refresh, nor while refreshAppConditions fails, nor once it is being deleted). A preview
/// closed, or a generation superseded, before that would go without its drop, its database
/// and role left on the server. So they are there from the start: Argo CD changes them only
/// when they disagree with the target's hooks, runs the hooks, rendered from Git, at
/// deletion whether or not it ever synced (finalizeApplicationDeletion, controller/hook.go
/// executeHooks: GetRepoObjs), removes the first once they succeeded, and with `/cleanup`
/// deletes them by their HookSucceeded policy (cleanupHooks), then removes it: without it
/// the drop Job and its ConfigMap would stay.
fn finalizers(values: &Value) -> Value {
    let mut finalizers = vec![CASCADE_FINALIZER];
    let drops_database =
        values["database"]["mode"] != "off" && values["database"]["dropOnDelete"] == true;
    // The shared broker's vhost and user are deleted by a PostDelete Job too.
    let deletes_vhost = values["messaging"]["mode"] == "shared";
    if drops_database || deletes_vhost {
        finalizers.extend(POST_DELETE_FINALIZERS);
    }
    json!(finalizers)
}

pub fn helper_application(
    preview: &Preview,
    names: &Names,
    config: &Config,
    sealed: &[SealedSecret],
) -> Result<Value, RenderError> {
    if preview.fork && preview.approved_sha.as_ref() != Some(&preview.head_sha) {
        return Err(RenderError::NotApproved {
            preview: preview.key.to_string(),
            sha: preview.head_sha.to_string(),
        });
    }
    let cluster = cluster_of(preview, config)?;
    let labels = labels(preview, names);
    let title: String = preview.title.chars().take(MAX_TITLE).collect();
    let mut annotations = json!({
        "previewd.dev/repo": preview.key.repo.as_str(),
        "previewd.dev/head-sha": preview.head_sha.as_str(),
        "previewd.dev/author": preview.author,
        "previewd.dev/title": title,
        "link.argocd.argoproj.io/preview": format!("https://{}", names.host),
        // For an app-of-apps watching the directory sink: the helpers before the app (with
        // Argo CD's Application health check enabled, the app waits for them to be Healthy).
        "argocd.argoproj.io/sync-wave": "-1",
    });
    if let Some(sha) = &preview.approved_sha {
        annotations["previewd.dev/approved-sha"] = json!(sha.as_str());
    }
    if preview.redeploy_generation > 0 {
        // A new rendering (so it is applied), and Argo CD asked to look again from scratch.
        annotations["previewd.dev/redeploy"] = json!(preview.redeploy_generation.to_string());
        annotations["argocd.argoproj.io/refresh"] = json!("hard");
    }
    let values = values(preview, config, cluster, names, sealed);
    Ok(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": names.application,
            "namespace": config.sink.argocd_namespace,
            "labels": labels,
            "annotations": annotations,
            "finalizers": finalizers(&values),
        },
        "spec": {
            "project": config.chart.project,
            "source": {
                "repoURL": config.chart.repo_url,
                "path": config.chart.path,
                "targetRevision": config.chart.revision,
                "helm": {
                    "releaseName": names.slug,
                    "valuesObject": values,
                },
            },
            "destination": {"server": cluster.server, "namespace": names.slug},
            // Server-side apply: a large seed set in a ConfigMap would not fit client-side
            // apply's 256 KiB last-applied-configuration annotation.
            "syncPolicy": sync_policy(&["ServerSideApply=true"]),
        },
    }))
}

/// The app's own Application, for a repository that configures its chart: the PR's code at
/// its head SHA, in the preview namespace, told where its database, TLS secret and host are.
/// The reconciler applies it only once the helper Application is ready (the health gate).
pub fn app_application(
    preview: &Preview,
    names: &Names,
    config: &Config,
) -> Result<Option<Value>, RenderError> {
    let app = config.app_for(&preview.key.repo);
    let Some(chart) = app.chart.as_ref().filter(|_| preview.image_ready) else {
        return Ok(None);
    };
    let helper = helper_application(preview, names, config, &[])?;
    let secrets = SecretNames::of(names);
    let mut values = json!({
        "preview": {
            "repo": preview.key.repo.as_str(),
            "number": preview.key.number,
            "sha": preview.head_sha.as_str(),
            "host": names.host,
            "namespace": names.slug,
            "databaseSecret": (config.database.mode != DatabaseMode::Off).then_some(&secrets.database_url),
            "tlsSecret": (config.tls.mode != TlsMode::Off).then_some(&secrets.tls),
        },
    });
    if let Some(image) = &app.image {
        values["image"] = json!({"repository": image, "tag": tag(&app, preview)});
    }
    services::app_values(&app, names, &mut values["preview"]);
    // The edge is the helpers' Ingress: the chart's own, if it makes one, stays off.
    if let Some(ingress) = edge::app_values(&app) {
        values["ingress"] = ingress;
    }
    let mut metadata = helper["metadata"].clone();
    metadata["name"] = json!(names.app_application);
    metadata["annotations"]["argocd.argoproj.io/sync-wave"] = json!("0");
    // The cascade only: the app's own PostDelete hooks, if its chart has any, are Argo CD's.
    metadata["finalizers"] = json!([CASCADE_FINALIZER]);
    Ok(Some(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": metadata,
        "spec": {
            // PR code (fork code included) runs here: never with the helpers' rights.
            "project": config.chart.apps_project,
            "source": {
                "repoURL": chart.repo_url,
                "path": chart.path,
                "targetRevision": preview.head_sha.as_str(),
                // Its own release name: nothing it names can collide with the helpers' objects.
                "helm": {"releaseName": names.app_application, "valuesObject": values},
            },
            "destination": helper["spec"]["destination"].clone(),
            "syncPolicy": sync_policy(&[]),
        },
    })))
}

/// Automated sync with prune and selfHeal. Argo CD retries a failed operation itself, here
/// twice within 15 s, and then never again for the same source (appcontroller.go
/// alreadyAttemptedSync); previewd reports the failure, and a push or `/preview redeploy`
/// makes a new source. Few and short retries: while an operation retries it keeps its old
/// source, so a fixing push waits for the retries to run out (and so does a teardown:
/// finalizeApplicationDeletion waits for the operation).
fn sync_policy(extra: &[&str]) -> Value {
    let mut options = vec!["PrunePropagationPolicy=foreground"];
    options.extend_from_slice(extra);
    json!({
        "automated": {"prune": true, "selfHeal": true},
        "syncOptions": options,
        "retry": {"limit": 2, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "30s"}},
    })
}

fn labels(preview: &Preview, names: &Names) -> Value {
    json!({
        MANAGED_BY.0: MANAGED_BY.1,
        LABEL_REPO: names.repo_label,
        LABEL_PR: preview.key.number.to_string(),
    })
}

/// `helm.valuesObject`: every value `helpers-chart/values.schema.json` describes.
pub fn values(
    preview: &Preview,
    config: &Config,
    cluster: &Cluster,
    names: &Names,
    sealed: &[SealedSecret],
) -> Value {
    let mut values = values_of(preview, config, cluster, names, sealed);
    // Only when there is one: a preview without renders, and hashes, as before the edge.
    let app = config.app_for(&preview.key.repo);
    if let Some(ingress) = edge::ingress(&app, config) {
        values["ingress"] = ingress;
    }
    if let Some(mail) = services::mail(&app, config, names) {
        values["mail"] = mail;
    }
    let policy = config
        .policy_for(&preview.key.repo)
        .unwrap_or(&config.defaults);
    values["resources"] = resources::values(&policy.resources);
    let broker = services::broker_of(&app, config, names, sealed);
    if let Some(messaging) = services::messaging(broker, config, names, preview) {
        values["messaging"] = messaging;
    }
    if let (Some(source), Value::Object(database)) = (&preview.template, &mut values["database"]) {
        if database["mode"] != "off" {
            // Cloned from the template generation; `clone` follows the seed generation, so
            // a reseed (which bumps it) clones again from the generation decided for it.
            database.insert(
                "template".into(),
                json!({"name": source.database, "role": source.role, "clone": preview.seed_generation}),
            );
        }
    }
    values
}

fn values_of(
    preview: &Preview,
    config: &Config,
    cluster: &Cluster,
    names: &Names,
    sealed: &[SealedSecret],
) -> Value {
    let app = config.app_for(&preview.key.repo);
    let secrets = SecretNames::of(names);
    let database = &config.database;
    let database_on = database.mode != DatabaseMode::Off;
    json!({
        "preview": {
            "repo": preview.key.repo.as_str(),
            "number": preview.key.number,
            "sha": preview.head_sha.as_str(),
            "author": preview.author,
            "host": names.host,
        },
        "namespace": names.slug,
        "redeploy": preview.redeploy_generation,
        "labels": labels(preview, names),
        "sealedSecrets": sealed.iter().map(sealed_values).collect::<Vec<_>>(),
        "tls": match config.tls.mode {
            TlsMode::CertManager => json!({
                "mode": "cert-manager",
                "secretName": secrets.tls,
                "issuer": {"name": config.tls.issuer, "kind": config.tls.issuer_kind},
            }),
            TlsMode::Sealed => json!({"mode": "sealed", "secretName": secrets.tls}),
            TlsMode::Off => json!({"mode": "off"}),
        },
        "database": match database.mode {
            DatabaseMode::Off => json!({"mode": "off"}),
            DatabaseMode::Shared => json!({
                "mode": "shared",
                "name": names.database,
                "role": names.database,
                "urlSecret": secrets.database_url,
                "dropOnDelete": database.drop_on_delete,
                "maxBytes": database.max_bytes,
                "maxConnections": database.max_connections,
                "shared": {
                    "namespace": database.namespace,
                    "adminSecret": database.admin_secret,
                    "passwordSecret": secrets.database_password,
                    "image": database.image,
                },
            }),
            DatabaseMode::Cnpg => json!({
                "mode": "cnpg",
                "name": names.database,
                "role": names.database,
                "urlSecret": secrets.database_url,
                "dropOnDelete": database.drop_on_delete,
                "maxBytes": database.max_bytes,
                "maxConnections": database.max_connections,
                "cnpg": {
                    "namespace": database.namespace,
                    "cluster": database.cnpg_cluster,
                    "passwordSecret": secrets.database_role,
                    "image": database.image,
                },
            }),
        },
        "migrations": migrations(&app, preview),
        // A clone brings the template's data (and its seed record) along: nothing to seed.
        "seed": if database_on && preview.template.is_none() { seed(&app, preview, &database.image) } else { json!({"enabled": false}) },
        "dns": match dns_target(config, cluster) {
            Some(target) => json!({"enabled": true, "target": target, "ttl": config.dns.ttl.as_secs()}),
            None => json!({"enabled": false}),
        },
    })
}

/// The PR's image, once CI built it (`wait_for`): nothing runs it before.
/// A sealed secret as the chart's values carry it. Template data only when there is some,
/// so that a preview sealed before there was any renders, and hashes, as it did.
fn sealed_values(sealed: &SealedSecret) -> Value {
    let mut values = json!({
        "name": sealed.name,
        "namespace": sealed.namespace,
        "scope": sealed.scope,
        "type": sealed.type_,
        "labels": sealed.labels,
        "encryptedData": sealed.encrypted_data,
    });
    if !sealed.template_data.is_empty() {
        values["templateData"] = json!(sealed.template_data);
    }
    values
}

fn image(app: &AppConfig, preview: &Preview) -> Option<String> {
    app.image
        .as_ref()
        .filter(|_| preview.image_ready)
        .map(|image| format!("{image}:{}", tag(app, preview)))
}

/// The tag of the PR's image, as `[[repos]] image_tag` says CI tags it.
fn tag(app: &AppConfig, preview: &Preview) -> String {
    app.image_tag.render(&preview.head_sha, preview.key.number)
}

fn migrations(app: &AppConfig, preview: &Preview) -> Value {
    match image(app, preview) {
        Some(image) if !app.migrate_command.is_empty() => {
            json!({"enabled": true, "image": image, "command": app.migrate_command})
        }
        _ => json!({"enabled": false}),
    }
}

fn seed(app: &AppConfig, preview: &Preview, psql_image: &str) -> Value {
    // Seed data fits the schema the PR's migrations make: it waits for them, and so for CI.
    if !preview.image_ready {
        return json!({"enabled": false});
    }
    if let Some(files) = app.seed.as_deref().and_then(seeds::find) {
        let files: BTreeMap<&str, &str> = files.iter().copied().collect();
        return json!({
            "enabled": true,
            "generation": preview.seed_generation,
            "mode": "sql",
            "image": psql_image,
            "files": files,
        });
    }
    match image(app, preview) {
        Some(image) if !app.seed_command.is_empty() => json!({
            "enabled": true,
            "generation": preview.seed_generation,
            "mode": "command",
            "command": app.seed_command,
            "commandImage": image,
        }),
        _ => json!({"enabled": false}),
    }
}

mod edge;
mod resources;
pub mod services;
pub mod sleep;
pub mod template;

#[cfg(test)]
mod tests;
