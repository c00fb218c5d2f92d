//! Where helper Applications go: `directory` (the embedded default) writes one YAML file per
//! Application, the layout an Argo CD app-of-apps can watch in a Git repository;
//! `kubernetes` applies them to Argo CD's namespace (`argocd`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use crate::ledger::{ApiRef, Entry};
use crate::plan::Observed;

pub mod kubernetes;

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

    /// Whether an object still exists on previewd's own cluster; `None` when this sink
    /// cannot look (a directory has no cluster behind it).
    pub async fn exists(&self, api: ApiRef, entry: &Entry) -> anyhow::Result<Option<bool>> {
        match self {
            Self::Directory(_) => Ok(None),
            Self::Kubernetes(sink) => sink.exists(api, entry).await,
        }
    }
}

/// One file per Application, written atomically (temp file, fsync, rename, fsync of the
/// directory), removed on teardown.
#[derive(Debug, Clone)]
pub struct DirectorySink {
    dir: PathBuf,
}

impl DirectorySink {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.yaml"))
    }

    pub async fn apply(&self, name: &str, manifest: &Value, owner: &Owner) -> anyhow::Result<()> {
        self.refuse_foreign(name, owner).await?;
        let (dir, path, text) = (
            self.dir.clone(),
            self.path(name),
            crate::yaml::to_string(manifest),
        );
        tokio::task::spawn_blocking(move || write_atomically(&dir, &path, text.as_bytes())).await?
    }

    async fn read(&self, name: &str) -> anyhow::Result<Option<Value>> {
        let path = self.path(name);
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{} is not YAML", path.display()))
            .map(Some)
    }

    /// A `Conflict` when a file of that name is another's.
    async fn refuse_foreign(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        if let Some(manifest) = self.read(name).await? {
            if let Some(other) = owner.mismatch(&manifest["metadata"]["labels"]) {
                let name = name.to_owned();
                return Err(Conflict { name, owner: other }.into());
            }
        }
        Ok(())
    }

    pub async fn observe(&self, name: &str, owner: &Owner) -> anyhow::Result<Observed> {
        let Some(manifest) = self.read(name).await? else {
            return Ok(Observed::Missing);
        };
        if let Some(owner) = owner.mismatch(&manifest["metadata"]["labels"]) {
            return Ok(Observed::Foreign { owner });
        }
        let hash = manifest["metadata"]["annotations"][APPLIED_HASH]
            .as_str()
            .map(str::to_owned);
        Ok(Observed::Present { hash, health: None })
    }

    pub async fn list(&self, instance: &str) -> anyhow::Result<Vec<String>> {
        let mut names = Vec::new();
        let mut entries = match tokio::fs::read_dir(&self.dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(names),
            Err(e) => return Err(e).with_context(|| format!("listing {}", self.dir.display())),
        };
        while let Some(entry) = entries.next_entry().await? {
            let file = entry.file_name();
            let Some(name) = file.to_str().and_then(|f| f.strip_suffix(".yaml")) else {
                continue;
            };
            if !(name.ends_with("-helpers") || name.ends_with("-app")) {
                continue;
            }
            // Only this state's own files; anything unreadable is not ours to judge.
            let Ok(text) = tokio::fs::read_to_string(entry.path()).await else {
                continue;
            };
            let Ok(manifest) = serde_yaml_ng::from_str::<Value>(&text) else {
                continue;
            };
            if manifest["metadata"]["labels"][crate::render::LABEL_INSTANCE] == instance {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// Removes the file if it is `owner`'s; a directory has no finalizers, so it is gone at
    /// once.
    pub async fn delete(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        self.refuse_foreign(name, owner).await?;
        let (dir, path) = (self.dir.clone(), self.path(name));
        tokio::task::spawn_blocking(move || match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
        })
        .await?
    }
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    sync_dir(dir)
}

/// Makes a rename or removal durable.
fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(repo: &str, pr: &str) -> Owner {
        Owner {
            repo: Some(repo.into()),
            pr: Some(pr.into()),
            instance: "i1".into(),
        }
    }

    fn manifest(repo: &str, pr: &str) -> Value {
        serde_json::json!({"metadata": {"name": "a", "annotations": {APPLIED_HASH: "h1"},
            "labels": {"app.kubernetes.io/managed-by": "previewd", "previewd.dev/repo": repo,
                "previewd.dev/pr": pr, "previewd.dev/instance": "i1"}}})
    }

    #[tokio::test]
    async fn files_appear_change_and_disappear() {
        let dir = tempfile::tempdir().unwrap();
        let sink = DirectorySink::new(dir.path().join("apps"));
        let me = owner("octo.app", "7");
        assert_eq!(sink.observe("a", &me).await.unwrap(), Observed::Missing);
        sink.apply("a", &manifest("octo.app", "7"), &me)
            .await
            .unwrap();
        assert_eq!(
            sink.observe("a", &me).await.unwrap(),
            Observed::Present {
                hash: Some("h1".into()),
                health: None
            }
        );
        sink.delete("a", &me).await.unwrap();
        sink.delete("a", &me).await.unwrap();
        assert_eq!(sink.observe("a", &me).await.unwrap(), Observed::Missing);
        assert_eq!(
            std::fs::read_dir(dir.path().join("apps")).unwrap().count(),
            0,
            "no temporary files left"
        );
    }

    #[tokio::test]
    async fn another_previews_file_of_the_same_name_is_foreign_and_never_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let sink = DirectorySink::new(dir.path());
        let other = owner("acme.other", "7");
        sink.apply("a", &manifest("acme.other", "7"), &other)
            .await
            .unwrap();
        let me = owner("octo.app", "7");
        let error = sink
            .apply("a", &manifest("octo.app", "7"), &me)
            .await
            .unwrap_err();
        assert!(
            error.downcast_ref::<Conflict>().is_some(),
            "never written over: {error:#}"
        );
        assert!(matches!(
            sink.observe("a", &me).await.unwrap(),
            Observed::Foreign { owner } if owner.contains("acme.other")
        ));
        let error = sink.delete("a", &me).await.unwrap_err();
        assert!(error.downcast_ref::<Conflict>().is_some(), "{error:#}");
        assert!(
            dir.path().join("a.yaml").exists(),
            "the other preview's file stays"
        );
        assert!(
            Owner::instance("i1")
                .mismatch(&manifest("acme.other", "7")["metadata"]["labels"])
                .is_none(),
            "orphan removal matches the instance only"
        );
        let unlabelled = serde_json::json!({});
        assert!(Owner::instance("i1").mismatch(&unlabelled).is_some());
    }
}
