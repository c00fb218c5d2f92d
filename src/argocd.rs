//! Argo CD Applications through the Kubernetes API: the kubernetes sink. Server-side apply
//! with one field manager (so previewd never claims `status` or `operation`, which Argo CD
//! writes), deletion that Argo CD's cascade finalizer completes, and readiness read back.

use std::borrow::Cow;

use anyhow::Context;
use kube::Resource;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ledger::{ApiRef, Entry};
use crate::plan::Observed;
use crate::sink::APPLIED_HASH;

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

    pub async fn apply(&self, name: &str, manifest: &Value) -> anyhow::Result<()> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch(name, &params, &Patch::Apply(manifest))
            .await
            .with_context(|| format!("applying Application {name}"))?;
        Ok(())
    }

    pub async fn observe(&self, name: &str) -> anyhow::Result<Observed> {
        let Some(app) = self
            .api
            .get_opt(name)
            .await
            .with_context(|| format!("reading Application {name}"))?
        else {
            return Ok(Observed::Missing);
        };
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
            ready: Some(ready(&app)),
        })
    }

    /// Asks for deletion; Argo CD's cascade finalizer removes what the Application made and
    /// then the Application itself. Already gone counts as done.
    pub async fn delete(&self, name: &str) -> anyhow::Result<()> {
        match self.api.delete(name, &DeleteParams::foreground()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting Application {name}")),
        }
    }
}

impl KubeSink {
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

/// Synced and Healthy, no operation running, and compared against exactly the source
/// previewd applied, so a status left over from the previous push never counts.
pub fn ready(app: &Application) -> bool {
    let status = &app.rest.get("status").cloned().unwrap_or(Value::Null);
    let spec = app.rest.get("spec").cloned().unwrap_or(Value::Null);
    // Pinned to a commit (the app at the PR's head): Argo CD must have synced exactly it.
    let pinned = spec["source"]["targetRevision"]
        .as_str()
        .filter(|r| r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()));
    status["sync"]["status"] == "Synced"
        && status["health"]["status"] == "Healthy"
        && pinned.is_none_or(|sha| status["sync"]["revision"] == sha)
        && status["operationState"]["phase"] != "Running"
        && !spec["source"].is_null()
        && status["sync"]["comparedTo"]["source"] == spec["source"]
}
