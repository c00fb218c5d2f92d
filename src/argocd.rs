//! Argo CD Applications through the Kubernetes API: the kubernetes sink. Server-side apply
//! with one field manager, each new rendering with the sync of it asked for (`operation`,
//! which Argo CD then owns and clears; `status` is never claimed), deletion that Argo CD's
//! cascade finalizer completes (after terminating a sync that would hold it), and Argo CD's
//! verdict read back.

use std::borrow::Cow;

use anyhow::Context;
use kube::Resource;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ledger::{ApiRef, Entry};
use crate::plan::{Health, Observed};
use crate::sink::{APPLIED_HASH, Conflict, Owner};

pub const FIELD_MANAGER: &str = "previewd";

/// An Argo CD Application: typed metadata, the rest as sent.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Application {
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

impl Default for Application {
    /// An empty Application that still says what it is (`apiVersion`, `kind`).
    fn default() -> Self {
        let mut rest = serde_json::Map::new();
        rest.insert("apiVersion".into(), Value::from("argoproj.io/v1alpha1"));
        rest.insert("kind".into(), Value::from("Application"));
        Self {
            metadata: ObjectMeta::default(),
            rest,
        }
    }
}

impl Resource for Application {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Application".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        "argoproj.io".into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha1".into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "applications".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Applications in Argo CD's namespace on the cluster of the ambient kubeconfig (or the
/// in-cluster service account).
#[derive(Clone)]
pub struct KubeSink {
    api: Api<Application>,
}

impl KubeSink {
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
        }
    }

    /// Applies a new rendering with the sync of it asked for in the same write
    /// (`sync_request`): one write, so Argo CD's own auto-sync cannot run first and the
    /// hooks run once.
    ///
    /// The write names the object it may change by `metadata.uid`: the one just read (checked
    /// to be `owner`'s), or, when there was none, a fresh one. The API server never keeps a
    /// uid given on create (apiserver registry/rest/meta.go FillObjectMetaSystemFields) and
    /// refuses to change one on update (apimachinery api/validation/objectmeta.go, uid is
    /// immutable), so an Application created or replaced under the name between the read
    /// and this write is refused, not taken over by the forced apply.
    pub async fn apply(&self, name: &str, manifest: &Value, owner: &Owner) -> anyhow::Result<()> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut manifest = manifest.clone();
        if let Some(operation) = sync_request(&manifest) {
            manifest["operation"] = operation;
        }
        let uid = match self.read(name).await? {
            Some(app) => {
                if let Some(other) = owner.mismatch(&labels_of(&app)) {
                    let name = name.to_owned();
                    return Err(Conflict { name, owner: other }.into());
                }
                app.metadata.uid.unwrap_or_default()
            }
            None => fresh_uid(),
        };
        manifest["metadata"]["uid"] = uid.into();
        self.api
            .patch(name, &params, &Patch::Apply(&manifest))
            .await
            .with_context(|| format!("applying Application {name}"))?;
        Ok(())
    }

    async fn read(&self, name: &str) -> anyhow::Result<Option<Application>> {
        self.api
            .get_opt(name)
            .await
            .with_context(|| format!("reading Application {name}"))
    }

    pub async fn observe(&self, name: &str, owner: &Owner) -> anyhow::Result<Observed> {
        let Some(app) = self.read(name).await? else {
            return Ok(Observed::Missing);
        };
        if let Some(owner) = owner.mismatch(&labels_of(&app)) {
            return Ok(Observed::Foreign { owner });
        }
        if app.metadata.deletion_timestamp.is_some() {
            return Ok(Observed::Deleting);
        }
        let hash = app
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPLIED_HASH))
            .cloned();
        Ok(Observed::Present {
            hash,
            health: Some(verdict(&app)),
        })
    }

    /// Asks Argo CD to sync the Application's current rendering (`sync_request`), unless an
    /// operation is already set or it is being deleted. True when it asked.
    pub async fn request_sync(&self, name: &str, owner: &Owner) -> anyhow::Result<bool> {
        self.patch_as_read(name, owner, "asking Argo CD to sync", |app| {
            let busy = app.rest.get("operation").is_some_and(|o| !o.is_null());
            if busy || app.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let operation = sync_request(&serde_json::to_value(app).ok()?)?;
            Some(serde_json::json!({"operation": operation}))
        })
        .await
    }

    /// Terminates the Application's running sync, as `argocd app terminate-op` does: the
    /// operation's phase set to `Terminating` (argo-cd server/application/application.go
    /// TerminateOperation; the Application CRD has no status subresource). Argo CD finalizes
    /// a deletion only once no operation runs, and a sync with no timeout whose wave never
    /// gets healthy would otherwise hold a teardown forever. True when it asked.
    pub async fn stop_operation(&self, name: &str, owner: &Owner) -> anyhow::Result<bool> {
        self.patch_as_read(name, owner, "terminating the sync of", |app| {
            let running = app.rest.get("operation").is_some_and(|o| !o.is_null())
                && app
                    .rest
                    .get("status")
                    .is_some_and(|s| s["operationState"]["phase"] == "Running");
            running.then(
                || serde_json::json!({"status": {"operationState": {"phase": "Terminating"}}}),
            )
        })
        .await
    }

    /// Reads the Application, lets `patch_for` decide on a merge patch (None: nothing to do)
    /// and sends it under the resourceVersion read, so that an Application changed meanwhile
    /// (a sync finished, a new rendering applied) is a 409 and left for the next look. True
    /// when it patched; gone, changed or another's (`Owner`) is false.
    async fn patch_as_read(
        &self,
        name: &str,
        owner: &Owner,
        what: &str,
        patch_for: impl FnOnce(&Application) -> Option<Value>,
    ) -> anyhow::Result<bool> {
        let Some(app) = self.read(name).await? else {
            return Ok(false);
        };
        if owner.mismatch(&labels_of(&app)).is_some() {
            return Ok(false);
        }
        let Some(mut patch) = patch_for(&app) else {
            return Ok(false);
        };
        patch["metadata"] = serde_json::json!({"resourceVersion": app.metadata.resource_version});
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => Ok(false),
            Err(e) => Err(e).with_context(|| format!("{what} Application {name}")),
        }
    }

    /// Asks for deletion of `owner`'s Application; Argo CD's cascade finalizer removes what
    /// it made and then the Application itself. Already gone counts as done. The owner is
    /// checked on the object just read, and the deletion holds that object's `uid` as a
    /// precondition: one re-created under the same name meanwhile (another preview's, after
    /// a collision) is a 409, never deleted.
    pub async fn delete(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        let Some(app) = self.read(name).await? else {
            return Ok(());
        };
        if let Some(other) = owner.mismatch(&labels_of(&app)) {
            return Err(Conflict {
                name: name.to_owned(),
                owner: other,
            }
            .into());
        }
        let mut params = DeleteParams::foreground();
        params.preconditions = Some(kube::api::Preconditions {
            uid: app.metadata.uid.clone(),
            resource_version: None,
        });
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting Application {name}")),
        }
    }
}

impl KubeSink {
    /// What this cluster serves of `needed` ("group/version/plural"), and the AppProjects in
    /// Argo CD's namespace (`None` when not allowed to list them). A group that is not served
    /// at all is simply absent; any other failure is an error.
    pub async fn served(
        &self,
        needed: &[(&str, &str, &str, &str)],
    ) -> anyhow::Result<(
        std::collections::BTreeSet<String>,
        Option<std::collections::BTreeSet<String>>,
    )> {
        let client = self.api.clone().into_client();
        let mut served = std::collections::BTreeSet::new();
        let mut versions: Vec<String> =
            needed.iter().map(|(g, v, ..)| format!("{g}/{v}")).collect();
        versions.dedup();
        for group_version in versions {
            match client.list_api_group_resources(&group_version).await {
                Ok(list) => served.extend(
                    list.resources
                        .into_iter()
                        .map(|r| format!("{group_version}/{}", r.name)),
                ),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("discovering {group_version}")),
            }
        }
        let resource = ApiResource {
            group: "argoproj.io".into(),
            version: "v1alpha1".into(),
            api_version: "argoproj.io/v1alpha1".into(),
            kind: "AppProject".into(),
            plural: "appprojects".into(),
        };
        let namespace = self.api.namespace().unwrap_or("argocd").to_owned();
        let projects: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
        let projects = match projects.list_metadata(&Default::default()).await {
            Ok(list) => Some(
                list.items
                    .into_iter()
                    .filter_map(|p| p.metadata.name)
                    .collect(),
            ),
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => None,
            Err(e) => return Err(e).context("listing AppProjects"),
        };
        Ok((served, projects))
    }

    /// The Applications this previewd state wrote (by its instance label).
    pub async fn list(&self, instance: &str) -> anyhow::Result<Vec<String>> {
        let selector = format!(
            "{}={},{}={instance}",
            crate::render::MANAGED_BY.0,
            crate::render::MANAGED_BY.1,
            crate::render::LABEL_INSTANCE
        );
        let listed = self
            .api
            .list_metadata(&kube::api::ListParams::default().labels(&selector))
            .await
            .context("listing previewd's Applications")?;
        Ok(listed
            .items
            .into_iter()
            .filter_map(|a| a.metadata.name)
            .collect())
    }

    /// Looks an object up by kind; a 404 is "gone", a 403 is "not allowed to look" (`None`:
    /// an operator who withheld the read permission gets Argo CD's word instead), and any
    /// other failure is an error, never a reason to believe it gone.
    pub async fn exists(&self, api: ApiRef, entry: &Entry) -> anyhow::Result<Option<bool>> {
        let resource = ApiResource {
            group: api.group.into(),
            version: api.version.into(),
            api_version: if api.group.is_empty() {
                api.version.into()
            } else {
                format!("{}/{}", api.group, api.version)
            },
            kind: api.kind.into(),
            plural: api.plural.into(),
        };
        let client = self.api.clone().into_client();
        let objects: Api<DynamicObject> = if entry.namespace.is_empty() {
            Api::all_with(client, &resource)
        } else {
            Api::namespaced_with(client, &entry.namespace, &resource)
        };
        match objects.get_opt(&entry.name).await {
            Ok(found) => Ok(Some(found.is_some())),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::warn!(
                    kind = entry.kind,
                    name = entry.name,
                    "not allowed to look up; trusting Argo CD's cascade"
                );
                Ok(None)
            }
            Err(e) => Err(e).with_context(|| format!("looking up {} {}", entry.kind, entry.name)),
        }
    }
}

/// Longest failure message kept (it ends up in the state, the API and the sticky comment).
const MAX_MESSAGE: usize = 600;

/// Names the rendering a sync was asked for, in the operation's `info` (kept by Argo CD in
/// `status.operationState.operation` through every retry).
pub const RENDERING_INFO: &str = "previewd.dev/rendering";

/// Argo CD's verdict on the Application as previewd applied it. Ready needs all of: the sync
/// previewd asked for this very rendering (its `APPLIED_HASH`, named in the operation's
/// `info`) succeeded, and Argo CD now shows it Synced and Healthy at exactly the source in
/// the spec with nothing running. Hooks (migrations, seed, the app's own) are outside Argo
/// CD's sync and health status: only `operationState` says whether they ran and passed
/// (argo-cd controller/appcontroller.go processRequestedAppOperation, gitops-engine
/// pkg/sync/sync_context.go). An operation Argo CD started on its own does not count: it
/// syncs only what is OutOfSync (appcontroller.go autoSync), so a new rendering that
/// changes no ordinary object (a chart revision bump, a push only the app's hooks see, a
/// redeploy) would never run its hooks — `NeedsSync` says previewd must ask. A failed
/// operation for this rendering is a failure, also while Argo CD waits to retry it.
/// A random RFC 4122 version-4 UUID, as the API server formats uids.
fn fresh_uid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// An Application's labels as JSON, for `Owner::mismatch`.
fn labels_of(app: &Application) -> Value {
    serde_json::to_value(&app.metadata.labels).unwrap_or_default()
}

pub fn verdict(app: &Application) -> Health {
    let null = Value::Null;
    let status = app.rest.get("status").unwrap_or(&null);
    let spec = app.rest.get("spec").unwrap_or(&null);
    let source = &spec["source"];
    if source.is_null() {
        return Health::Progressing;
    }
    let compared = same_source(&status["sync"]["comparedTo"]["source"], source);
    // The spec itself refused (project, repository, destination): nothing will ever sync.
    // A render failure of this source, likewise, until the source changes.
    for condition in status["conditions"].as_array().into_iter().flatten() {
        let kind = condition["type"].as_str().unwrap_or_default();
        if kind == "InvalidSpecError" || (kind == "ComparisonError" && compared) {
            let message = condition["message"].as_str().unwrap_or_default();
            return Health::Failed(clip(format!("{kind}: {message}")));
        }
    }
    let operation = &status["operationState"];
    let phase = operation["phase"].as_str().unwrap_or_default();
    let rendering = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPLIED_HASH));
    let ours = rendering.is_some_and(|hash| asked_for(&operation["operation"], hash))
        && same_source(&operation["syncResult"]["source"], source);
    // A failed attempt waiting for Argo CD's retry (its backoff) is Running again, with the
    // attempt's finish time and a retry count.
    let retrying = phase == "Running"
        && operation["retryCount"].as_i64().unwrap_or(0) > 0
        && !operation["finishedAt"].is_null();
    if ours && (matches!(phase, "Failed" | "Error") || retrying) {
        return Health::Failed(failure(operation));
    }
    let pinned = source["targetRevision"]
        .as_str()
        .filter(|r| r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()));
    let revision = &status["sync"]["revision"];
    let idle = app.rest.get("operation").is_none_or(Value::is_null)
        && phase != "Running"
        && phase != "Terminating";
    if !idle {
        return Health::Progressing;
    }
    if !ours {
        return Health::NeedsSync;
    }
    let synced = status["sync"]["status"] == "Synced"
        && compared
        && pinned.is_none_or(|sha| revision == sha)
        && phase == "Succeeded";
    match status["health"]["status"].as_str() {
        Some("Healthy") if synced => Health::Ready,
        // Synced and then degraded (a crash-looping app, a certificate refused): Argo CD
        // says so only in the resources' health.
        Some("Degraded") if synced => Health::Failed(clip(degraded(status))),
        _ => Health::Progressing,
    }
}

/// Whether `operation` (an Argo CD Operation) is the sync previewd asked for `rendering`.
fn asked_for(operation: &Value, rendering: &str) -> bool {
    operation["info"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|i| i["name"] == RENDERING_INFO && i["value"] == rendering)
}

/// The sync previewd asks for an Application's current rendering, as `argocd app sync`
/// would ask it (a full sync, hooks included, with the Application's own options and retry),
/// naming the rendering so that its outcome can be told apart from any other sync's.
pub fn sync_request(application: &Value) -> Option<Value> {
    let rendering = application["metadata"]["annotations"][APPLIED_HASH].as_str()?;
    let policy = &application["spec"]["syncPolicy"];
    let mut sync = serde_json::json!({"prune": true, "syncStrategy": {"hook": {}}});
    if let Some(options) = policy["syncOptions"].as_array() {
        sync["syncOptions"] = Value::from(options.clone());
    }
    let mut operation = serde_json::json!({
        "sync": sync,
        "initiatedBy": {"username": "previewd"},
        "info": [{"name": RENDERING_INFO, "value": rendering}],
    });
    if !policy["retry"].is_null() {
        operation["retry"] = policy["retry"].clone();
    }
    Some(operation)
}

/// Whether two `spec.source`s are the same, as Go's DeepEqual on Argo CD's structs sees them:
/// Argo CD echoes sources through `omitempty` JSON, so empty values may vanish on the way.
pub fn same_source(a: &Value, b: &Value) -> bool {
    !a.is_null() && normalized(a) == normalized(b)
}

fn normalized(value: &Value) -> Value {
    let empty = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    };
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// What failed: the failed hooks and resources of the operation (upstream names them only in
/// `syncResult.resources`), then Argo CD's own message.
fn failure(operation: &Value) -> String {
    let failed: Vec<String> = operation["syncResult"]["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            matches!(r["hookPhase"].as_str(), Some("Failed" | "Error"))
                || r["status"] == "SyncFailed"
        })
        .map(|r| {
            let what = if r["hookType"].is_string() {
                "hook"
            } else {
                "resource"
            };
            format!(
                "{what} {}/{} failed: {}",
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
                r["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    let message = operation["message"].as_str().unwrap_or("the sync failed");
    clip(if failed.is_empty() {
        message.to_owned()
    } else {
        format!("{} (Argo CD: {message})", failed.join("; "))
    })
}

fn degraded(status: &Value) -> String {
    let resources: Vec<String> = status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["health"]["status"] == "Degraded")
        .map(|r| {
            format!(
                "{}/{} is degraded: {}",
                r["kind"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
                r["health"]["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if resources.is_empty() {
        "Argo CD reports the Application Degraded".into()
    } else {
        resources.join("; ")
    }
}

fn clip(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests;
