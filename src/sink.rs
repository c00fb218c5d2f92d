//! Where helper Applications go: `directory` (the embedded default) writes one YAML file per
//! Application, the layout an Argo CD app-of-apps can watch in a Git repository;
//! `kubernetes` applies them to Argo CD's namespace (`argocd`).

use serde_json::Value;

use crate::ledger::{ApiRef, Entry};
use crate::plan::Observed;

pub mod argocd;
mod directory;
pub mod kubernetes;
mod watch;
mod watched;

pub use directory::DirectorySink;

pub use crate::render::APPLIED_HASH;

/// Whose an Application is, by the labels previewd writes on it: an object of the expected
/// name that carries another repository, PR or instance is never overwritten or deleted
/// (a colliding name, another previewd sharing the Argo CD, or a person's own Application).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The repository label (`Names::repo_label`); None matches any (orphan removal, which
    /// only knows that the object is this instance's).
    pub repo: Option<String>,
    pub pr: Option<String>,
    pub instance: String,
}

impl Owner {
    pub fn preview(names: &crate::naming::Names, number: u32, instance: &str) -> Self {
        Self {
            repo: Some(names.repo_label.clone()),
            pr: Some(number.to_string()),
            instance: instance.to_owned(),
        }
    }

    /// Any object this previewd state wrote.
    pub fn instance(instance: &str) -> Self {
        Self {
            repo: None,
            pr: None,
            instance: instance.to_owned(),
        }
    }

    /// None when `labels` (an object's `metadata.labels`) are this owner's; otherwise who the
    /// object says it belongs to, for the conflict report.
    pub fn mismatch(&self, labels: &Value) -> Option<String> {
        let label = |key: &str| labels[key].as_str().unwrap_or("");
        let matches =
            |want: &Option<String>, key: &str| want.as_deref().is_none_or(|w| w == label(key));
        if label(crate::render::MANAGED_BY.0) == crate::render::MANAGED_BY.1
            && matches(&self.repo, crate::render::LABEL_REPO)
            && matches(&self.pr, crate::render::LABEL_PR)
            && label(crate::render::LABEL_INSTANCE) == self.instance
        {
            return None;
        }
        Some(format!(
            "repo {:?}, PR {:?}, instance {:?}",
            label(crate::render::LABEL_REPO),
            label(crate::render::LABEL_PR),
            label(crate::render::LABEL_INSTANCE)
        ))
    }
}

/// An object of the expected name that is not this preview's: reported, never touched.
#[derive(Debug, thiserror::Error)]
#[error("Application {name} belongs to {owner}: previewd neither overwrites nor deletes it")]
pub struct Conflict {
    pub name: String,
    pub owner: String,
}

/// A write decided on the watch's copy of an Application that the server has moved past
/// (`KubeSink::apply`): nothing was written, and the look decides again on a read.
#[derive(Debug, thiserror::Error)]
#[error("Application {name} changed since the watch saw it")]
pub struct Stale {
    pub name: String,
}

/// The configured sink; the reconciler only ever talks to this.
#[derive(Clone)]
pub enum Sink {
    Directory(DirectorySink),
    Kubernetes(kubernetes::KubeSink),
}

impl Sink {
    /// The configured sink (`sink.kind`): a directory, or Argo CD's namespace on the cluster
    /// of the ambient kubeconfig or in-cluster service account.
    pub async fn from_config(config: &crate::config::Config) -> anyhow::Result<Self> {
        Ok(match config.sink.kind {
            crate::config::SinkKind::Directory => {
                Self::Directory(DirectorySink::new(&config.sink.directory))
            }
            crate::config::SinkKind::Kubernetes => Self::Kubernetes(
                kubernetes::KubeSink::connect(&config.sink.argocd_namespace).await?,
            ),
        })
    }

    /// The same sink, its writes refused while `fence` is closed (`crate::fence::Fenced`). A
    /// directory is this host's own: nothing to fence.
    pub fn fenced(self, fence: crate::fence::Fence) -> Self {
        match self {
            Self::Kubernetes(sink) => Self::Kubernetes(sink.fenced(fence)),
            directory @ Self::Directory(_) => directory,
        }
    }

    /// Writes `manifest` as `name` unless an object of that name is another's (`Conflict`).
    pub async fn apply(&self, name: &str, manifest: &Value, owner: &Owner) -> anyhow::Result<()> {
        match self {
            Self::Directory(sink) => sink.apply(name, manifest, owner).await,
            Self::Kubernetes(sink) => sink.apply(name, manifest, owner).await,
        }
    }

    /// What is there under `name`; an object that is not `owner`'s is `Observed::Foreign`.
    pub async fn observe(&self, name: &str, owner: &Owner) -> anyhow::Result<Observed> {
        match self {
            Self::Directory(sink) => sink.observe(name, owner).await,
            Self::Kubernetes(sink) => sink.observe(name, owner).await,
        }
    }

    /// What the sink's watch last saw under `name`, without asking anyone: None when it
    /// keeps nothing (a directory, whose reads are a file's metadata) or its watch is not
    /// live or a write of previewd's to `name` is on its way (`Watched`).
    pub fn observe_watched(&self, name: &str, owner: &Owner) -> Option<Observed> {
        match self {
            Self::Directory(_) => None,
            Self::Kubernetes(sink) => sink.observe_watched(name, owner),
        }
    }

    /// Deletes `name` if it is `owner`'s (checked just before, and, on Kubernetes, held by a
    /// `uid` precondition); another's is a `Conflict` error, gone is done.
    pub async fn delete(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        match self {
            Self::Directory(sink) => sink.delete(name, owner).await,
            Self::Kubernetes(sink) => sink.delete(name, owner).await,
        }
    }

    /// Asks Argo CD to sync the Application's current rendering (see
    /// `KubeSink::request_sync`); a directory's app-of-apps syncs on its own. True when it asked.
    pub async fn request_sync(&self, name: &str, owner: &Owner) -> anyhow::Result<bool> {
        match self {
            Self::Directory(_) => Ok(false),
            Self::Kubernetes(sink) => sink.request_sync(name, owner).await,
        }
    }

    /// Stops the Application's running sync so that its deletion can go on (see
    /// `KubeSink::stop_operation`); a directory has nothing running. True when it asked.
    pub async fn stop_operation(&self, name: &str, owner: &Owner) -> anyhow::Result<bool> {
        match self {
            Self::Directory(_) => Ok(false),
            Self::Kubernetes(sink) => sink.stop_operation(name, owner).await,
        }
    }

    /// The Applications this previewd state wrote here (labelled with `instance`), by name.
    pub async fn list(&self, instance: &str) -> anyhow::Result<Vec<String>> {
        match self {
            Self::Directory(sink) => sink.list(instance).await,
            Self::Kubernetes(sink) => sink.list(instance).await,
        }
    }

    /// Calls `changed` with the name of each of `instance`'s Applications as someone (Argo
    /// CD) changes it (`KubeSink::watch`). Returns only on an error. A directory's files
    /// change only by previewd's hand: nothing to follow, it never returns.
    pub async fn watch(&self, instance: &str, changed: impl Fn(&str)) -> anyhow::Result<()> {
        match self {
            Self::Directory(_) => std::future::pending().await,
            Self::Kubernetes(sink) => sink.watch(instance, changed).await,
        }
    }

    /// The Applications that changed since previewd last read them, by name, for a pass
    /// that looks only at what changed (issue #42): a directory's files whose stamp differs
    /// from the one read (edited, removed, new). Argo CD's changes come through `watch`
    /// instead: empty.
    pub async fn changed(&self) -> anyhow::Result<Vec<String>> {
        match self {
            Self::Directory(sink) => sink.changed().await,
            Self::Kubernetes(_) => Ok(Vec::new()),
        }
    }

    /// How many times the watch has listed afresh (0 where nothing is watched). A change
    /// between two watches is not told (a deletion is in no list): a new list means that
    /// every preview is looked at again.
    pub fn lists(&self) -> u64 {
        match self {
            Self::Directory(_) => 0,
            Self::Kubernetes(sink) => sink.lists(),
        }
    }

    /// `directory` or `kubernetes`, for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Directory(_) => "directory",
            Self::Kubernetes(_) => "kubernetes",
        }
    }

    /// Whether someone (Argo CD) reports the health of what this sink holds.
    pub fn reports_health(&self) -> bool {
        matches!(self, Self::Kubernetes(_))
    }

    /// What the ResourceQuota `name` of `namespace` counts in use on previewd's own
    /// cluster; `None` where this sink cannot look or finds none counted.
    pub async fn quota_used(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Option<kubernetes::Used>> {
        match self {
            Self::Directory(_) => Ok(None),
            Self::Kubernetes(sink) => sink.quota_used(namespace, name).await,
        }
    }

    /// Whether an object still exists on previewd's own cluster; `None` when this sink
    /// cannot look (a directory has no cluster behind it).
    pub async fn exists(&self, api: ApiRef, entry: &Entry) -> anyhow::Result<Option<bool>> {
        match self {
            Self::Directory(_) => Ok(None),
            Self::Kubernetes(sink) => sink.exists(api, entry).await,
        }
    }
}
