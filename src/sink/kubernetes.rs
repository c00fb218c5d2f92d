//! The kubernetes sink: Argo CD Applications through the Kubernetes API. Server-side apply
//! with one field manager, each new rendering with the sync of it asked for (`operation`,
//! which Argo CD then owns and clears; `status` is never claimed), deletion that Argo CD's
//! cascade finalizer completes (after terminating a sync that would hold it), and Argo CD's
//! verdict read back; every read and write checks the object is this preview's (`Owner`).

use anyhow::Context;

mod quota;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
pub use quota::Used;
use serde_json::Value;

use super::watched::{Watched, labels_of};
use super::{Conflict, Owner, Stale};
use crate::fence::Fence;
use crate::ledger::{ApiRef, Entry};
use crate::plan::{Health, Observed};
use crate::render::APPLIED_HASH;
use crate::sink::argocd::{Application, Replacing, Written, sync_request, synced, verdict};

pub const FIELD_MANAGER: &str = "previewd";
/// Applications' metadata listed at a time (about 1 KB each).
const METADATA_PAGE: u32 = 500;

/// Applications in Argo CD's namespace on the cluster of the ambient kubeconfig (or the
/// in-cluster service account).
#[derive(Clone)]
pub struct KubeSink {
    pub(super) api: Api<Application>,
    /// What the watch (`KubeSink::watch`) has seen, while it is live.
    pub(super) watched: std::sync::Arc<Watched>,
    /// Asked immediately before every write: a replica that does not hold the Lease sends
    /// none (`Fenced`).
    fence: Fence,
}

impl KubeSink {
    /// On the cluster of the ambient kubeconfig (or the in-cluster service account).
    pub async fn connect(namespace: &str) -> anyhow::Result<Self> {
        // Already installed (a second call in tests) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = kube::Client::try_default()
            .await
            .context("connecting to Kubernetes (kubeconfig or in-cluster service account)")?;
        Ok(Self::new(client, namespace))
    }

    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            watched: std::sync::Arc::default(),
            fence: Fence::open(),
        }
    }

    /// Every write asks `fence` first (`Sink::fenced`).
    pub fn fenced(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Refused (`Fenced`, nothing sent) unless this replica may write now.
    fn may_write(&self, what: &str, name: &str) -> anyhow::Result<()> {
        Ok(self.fence.check(|| format!("{what} Application {name}"))?)
    }

    /// Applies a new rendering with the sync of it asked for in the same write
    /// (`sync_request`): one write, so Argo CD's own auto-sync cannot run first and the
    /// hooks run once.
    ///
    /// A write over an existing Application names the object and the version it decided on:
    /// `metadata.uid` and `metadata.resourceVersion`, from the watch's copy (`Watched::target`)
    /// or a read. The API server refuses to change a uid (apimachinery
    /// api/validation/objectmeta.go, immutable) and keeps a resourceVersion a write carries
    /// as its precondition (apiserver registry/generic/registry/store.go Update, a conflict;
    /// kubernetes/kubernetes#63104 for patches), so an Application replaced, relabelled or
    /// being deleted since is a 409 (`Stale`), never written over by the forced apply; the
    /// look decides again on a read. A create names neither: an apply that names a uid and
    /// finds no object is refused (apiserver endpoints/handlers/patch.go applyPatch, "uid
    /// mismatch ... no existing object was found"), so one created under the name in the
    /// round trip since the read found none is taken over, the one window left.
    pub async fn apply(&self, name: &str, manifest: &Value, owner: &Owner) -> anyhow::Result<()> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let mut manifest = manifest.clone();
        let hash = manifest["metadata"]["annotations"][APPLIED_HASH]
            .as_str()
            .map(str::to_owned);
        let hash = hash.as_deref();
        let target = match self.watched.target(name, owner) {
            Some(seen) => Some((seen.uid, seen.version, seen.hash, seen.synced)),
            None => match self.read(name).await? {
                Some(app) => {
                    if let Some(other) = owner.mismatch(&labels_of(&app)) {
                        let name = name.to_owned();
                        return Err(Conflict { name, owner: other }.into());
                    }
                    // Decided on a copy from before its deletion: decided again, to wait.
                    if app.metadata.deletion_timestamp.is_some() {
                        let name = name.to_owned();
                        return Err(Stale { name }.into());
                    }
                    let carries = applied_hash(&app).map(str::to_owned);
                    let synced = synced(&app);
                    let (uid, version) = (app.metadata.uid, app.metadata.resource_version);
                    uid.zip(version)
                        .map(|(uid, version)| (uid, version, carries, synced))
                }
                None => None,
            },
        };
        if let Some((uid, version, carries, _)) = &target {
            // Written already: an earlier try whose answer was lost (a timeout), and whose
            // sync Argo CD may have run since. Again would run the hooks again.
            if hash.is_some() && carries.as_deref() == hash {
                return Ok(());
            }
            manifest["metadata"]["uid"] = uid.as_str().into();
            manifest["metadata"]["resourceVersion"] = version.as_str().into();
        }
        let replacing = match &target {
            // Synced: its hooks ran for what it carries (a self-heal since included).
            Some((_, _, Some(carries), true)) => Replacing::Rendering(carries),
            // Made now, never previewd's write, or a rendering Argo CD has not synced yet (a
            // push's sync still to run): its hooks may never have run, so these run them
            // (found by the attack review: a sleep right after a push dropped its migration).
            Some((_, _, _, _)) | None => Replacing::Nothing,
        };
        if let Some(operation) = sync_request(&manifest, replacing) {
            manifest["operation"] = operation;
        }
        self.may_write("applying", name)?;
        self.watched.awaiting(name);
        match self
            .writes()
            .patch(name, &params, &Patch::Apply(&manifest))
            .await
        {
            Ok(app) => {
                if let Some(version) = &app.metadata.resource_version {
                    self.watched.written(name, version);
                }
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 && target.is_some() => Err(Stale {
                name: name.to_owned(),
            }
            .into()),
            Err(e) => Err(e).with_context(|| format!("applying Application {name}")),
        }
    }

    /// The same Applications, for writes: their answers read for the version alone.
    fn writes(&self) -> Api<Written> {
        let namespace = self.api.namespace().unwrap_or_default();
        Api::namespaced(self.api.clone().into_client(), namespace)
    }

    async fn read(&self, name: &str) -> anyhow::Result<Option<Application>> {
        let app = self
            .api
            .get_opt(name)
            .await
            .with_context(|| format!("reading Application {name}"))?;
        if let Some(app) = &app {
            self.watched.confirm(app);
        }
        Ok(app)
    }

    /// What the watch last saw under `name` (`Watched::observe`): None while it is not live.
    pub fn observe_watched(&self, name: &str, owner: &Owner) -> Option<Observed> {
        self.watched.observe(name, owner)
    }

    /// Lists the watch has begun (`Sink::lists`).
    pub fn lists(&self) -> u64 {
        self.watched.lists()
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
        Ok(Observed::Present {
            hash: applied_hash(&app).map(str::to_owned),
            health: Some(verdict(&app)),
        })
    }

    /// Asks Argo CD to sync the Application's current rendering (`sync_request`), unless an
    /// operation is already set or it is being deleted. True when it asked.
    pub async fn request_sync(&self, name: &str, owner: &Owner) -> anyhow::Result<bool> {
        self.patch_as_read(name, owner, "asking Argo CD to sync", |app| {
            let busy = app.rest.get("operation").is_some_and(|o| !o.is_null());
            // Decided on what was just read, not on what the look saw: a sync that finished
            // since (the watch a little behind) is not asked for again, hooks and all.
            if busy
                || app.metadata.deletion_timestamp.is_some()
                || verdict(app) != Health::NeedsSync
            {
                return None;
            }
            let operation = sync_request(&serde_json::to_value(app).ok()?, Replacing::Itself)?;
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
        self.may_write(what, name)?;
        match self
            .writes()
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
        self.may_write("deleting", name)?;
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e).with_context(|| format!("deleting Application {name}")),
        }
    }
}

impl KubeSink {
    /// What this cluster serves of `needed` ("group/version/plural"), and the AppProjects in
    /// Argo CD's namespace with their specs (`None` when not allowed to list them). A group that is not served
    /// at all is simply absent; any other failure is an error.
    pub async fn served(
        &self,
        needed: &[(&str, &str, &str, &str)],
    ) -> anyhow::Result<(
        std::collections::BTreeSet<String>,
        Option<std::collections::BTreeMap<String, serde_json::Value>>,
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
        let projects = match projects.list(&Default::default()).await {
            Ok(list) => Some(
                list.items
                    .into_iter()
                    .filter_map(|p| Some((p.metadata.name?, p.data.get("spec").cloned()?)))
                    .collect(),
            ),
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 404) => None,
            Err(e) => return Err(e).context("listing AppProjects"),
        };
        Ok((served, projects))
    }

    /// The Applications this previewd state wrote (by its instance label): as the watch
    /// keeps them while it is live, else listed.
    pub async fn list(&self, instance: &str) -> anyhow::Result<Vec<String>> {
        if let Some(names) = self.watched.names(instance) {
            return Ok(names);
        }
        let selector = instance_selector(instance);
        let mut params = kube::api::ListParams::default()
            .labels(&selector)
            .limit(METADATA_PAGE);
        let mut names = Vec::new();
        loop {
            let page = self
                .api
                .list_metadata(&params)
                .await
                .context("listing previewd's Applications")?;
            names.extend(page.items.into_iter().filter_map(|a| a.metadata.name));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(names),
            }
        }
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

/// The rendering an Application carries (`render::APPLIED_HASH`).
fn applied_hash(app: &Application) -> Option<&str> {
    let annotations = app.metadata.annotations.as_ref()?;
    annotations.get(APPLIED_HASH).map(String::as_str)
}

/// The label selector of every Application this previewd state wrote.
pub(super) fn instance_selector(instance: &str) -> String {
    format!(
        "{}={},{}={instance}",
        crate::render::MANAGED_BY.0,
        crate::render::MANAGED_BY.1,
        crate::render::LABEL_INSTANCE
    )
}
