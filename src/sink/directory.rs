//! The directory sink: one file per Application, for an app-of-apps (or a person) to pick up.
//! What each file says of its owner and applied hash is kept per file, keyed by the file's
//! inode, size and times: a reconcile pass observes every preview, and parsing thousands of
//! YAML files again was most of a pass with nothing to do (issue #17's profile).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde_json::Value;

use super::{APPLIED_HASH, Conflict, Owner};
use crate::plan::Observed;

/// At most this many files' heads are kept; past it the cache starts again empty.
const HEADS: usize = 100_000;

/// What previewd reads of a file: its owner labels (whose it is) and its applied hash.
#[derive(Debug)]
struct Head {
    labels: Value,
    hash: Option<String>,
}

/// Each file's head, with the stamp of the file it was read from.
type Heads = HashMap<PathBuf, (Stamp, Arc<Head>)>;

/// A file's identity and version: a write (a new file renamed in) changes the inode, an edit
/// in place the size or the change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    len: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            inode: meta.ino(),
            len: meta.len(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// One file per Application, written atomically (temp file, fsync, rename, fsync of the
/// directory), removed on teardown.
#[derive(Debug, Clone)]
pub struct DirectorySink {
    dir: PathBuf,
    heads: Arc<Mutex<Heads>>,
}

impl DirectorySink {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            heads: Arc::default(),
        }
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

    async fn read(&self, name: &str) -> anyhow::Result<Option<Arc<Head>>> {
        self.head(&self.path(name)).await
    }

    /// The head of the file at `path`: the one kept if the file is as it was then, else read
    /// and parsed. The stamp is taken before the read, so a file changed in between is read
    /// again next time, never taken for the old one.
    async fn head(&self, path: &Path) -> anyhow::Result<Option<Arc<Head>>> {
        let stamp = match tokio::fs::metadata(path).await {
            Ok(meta) => Stamp::of(&meta),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.forget(path);
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        if let Some(head) = self.kept(path, stamp) {
            return Ok(Some(head));
        }
        let text = match tokio::fs::read_to_string(path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let manifest: Value = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("{} is not YAML", path.display()))?;
        // Only the labels that say whose a file is (`Owner::mismatch`): thousands are kept.
        let labels = &manifest["metadata"]["labels"];
        let owner_labels = [
            crate::render::MANAGED_BY.0,
            crate::render::LABEL_REPO,
            crate::render::LABEL_PR,
            crate::render::LABEL_INSTANCE,
        ]
        .into_iter()
        .filter_map(|key| Some((key.to_owned(), labels.get(key)?.clone())))
        .collect();
        let head = Arc::new(Head {
            labels: Value::Object(owner_labels),
            hash: manifest["metadata"]["annotations"][APPLIED_HASH]
                .as_str()
                .map(str::to_owned),
        });
        if let Ok(mut heads) = self.heads.lock() {
            if heads.len() >= HEADS {
                heads.clear();
            }
            heads.insert(path.to_owned(), (stamp, head.clone()));
        }
        Ok(Some(head))
    }

    fn kept(&self, path: &Path, stamp: Stamp) -> Option<Arc<Head>> {
        let heads = self.heads.lock().ok()?;
        heads
            .get(path)
            .filter(|(kept, _)| *kept == stamp)
            .map(|(_, head)| head.clone())
    }

    fn forget(&self, path: &Path) {
        if let Ok(mut heads) = self.heads.lock() {
            heads.remove(path);
        }
    }

    /// A `Conflict` when a file of that name is another's.
    async fn refuse_foreign(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        if let Some(head) = self.read(name).await? {
            if let Some(other) = owner.mismatch(&head.labels) {
                let name = name.to_owned();
                return Err(Conflict { name, owner: other }.into());
            }
        }
        Ok(())
    }

    pub async fn observe(&self, name: &str, owner: &Owner) -> anyhow::Result<Observed> {
        let Some(head) = self.read(name).await? else {
            return Ok(Observed::Missing);
        };
        if let Some(owner) = owner.mismatch(&head.labels) {
            return Ok(Observed::Foreign { owner });
        }
        Ok(Observed::Present {
            hash: head.hash.clone(),
            health: None,
        })
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
            let Ok(Some(head)) = self.head(&entry.path()).await else {
                continue;
            };
            if head.labels[crate::render::LABEL_INSTANCE] == instance {
                names.push(name.to_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The Application files whose stamp is not the one they were last read with: edited,
    /// removed, or new since (`Sink::changed`). One listing and one `stat` per file, on a
    /// blocking thread; no file is read. Nothing else watches a directory for previewd (an
    /// edit by hand, a deletion), so a pass that skips unchanged previews asks this.
    pub async fn changed(&self) -> anyhow::Result<Vec<String>> {
        let (dir, heads) = (self.dir.clone(), self.heads.clone());
        tokio::task::spawn_blocking(move || changed_in(&dir, &heads)).await?
    }

    /// Removes the file if it is `owner`'s; a directory has no finalizers, so it is gone at
    /// once.
    pub async fn delete(&self, name: &str, owner: &Owner) -> anyhow::Result<()> {
        self.refuse_foreign(name, owner).await?;
        let (dir, path) = (self.dir.clone(), self.path(name));
        self.forget(&path);
        tokio::task::spawn_blocking(move || match std::fs::remove_file(&path) {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
        })
        .await?
    }
}

fn changed_in(dir: &Path, heads: &Mutex<Heads>) -> anyhow::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", dir.display())),
    };
    // Stamped first, compared under the lock after: a look's read is never held up by the
    // listing.
    let mut stamped = Vec::new();
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        match entry.metadata() {
            Ok(meta) => stamped.push((path, Stamp::of(&meta))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    let name = |path: &Path| {
        let stem = path.file_stem()?.to_str()?;
        Some(stem.to_owned())
    };
    let heads = heads
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut changed: Vec<String> = stamped
        .iter()
        .filter(|(path, stamp)| heads.get(path).is_none_or(|(kept, _)| kept != stamp))
        .filter_map(|(path, _)| name(path))
        .collect();
    let known = stamped
        .iter()
        .filter(|(path, _)| heads.contains_key(path))
        .count();
    if heads.len() > known {
        // Some file read before is gone.
        let listed: std::collections::HashSet<&Path> =
            stamped.iter().map(|(path, _)| path.as_path()).collect();
        changed.extend(
            heads
                .keys()
                .filter(|path| !listed.contains(path.as_path()))
                .filter_map(|path| name(path)),
        );
    }
    Ok(changed)
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

    #[tokio::test]
    async fn changed_names_the_files_edited_removed_or_new_since_they_were_read() {
        let dir = tempfile::tempdir().unwrap();
        let sink = DirectorySink::new(dir.path());
        let me = owner("octo.app", "7");
        for name in ["a", "b", "c"] {
            sink.apply(name, &manifest("octo.app", "7"), &me)
                .await
                .unwrap();
        }
        let mut changed = sink.changed().await.unwrap();
        changed.sort();
        assert_eq!(changed, ["a", "b", "c"], "written, never read");
        for name in ["a", "b", "c"] {
            sink.observe(name, &me).await.unwrap();
        }
        assert!(sink.changed().await.unwrap().is_empty(), "as read");
        let path = dir.path().join("a.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("h1", "h2")).unwrap();
        std::fs::remove_file(dir.path().join("b.yaml")).unwrap();
        std::fs::write(dir.path().join("d.yaml"), "{}").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not an Application").unwrap();
        let mut changed = sink.changed().await.unwrap();
        changed.sort();
        assert_eq!(changed, ["a", "b", "d"]);
    }

    #[tokio::test]
    async fn a_file_edited_in_place_is_read_again_not_taken_from_the_kept_head() {
        let dir = tempfile::tempdir().unwrap();
        let sink = DirectorySink::new(dir.path());
        let me = owner("octo.app", "7");
        sink.apply("a", &manifest("octo.app", "7"), &me)
            .await
            .unwrap();
        let present = |hash: &str| Observed::Present {
            hash: Some(hash.into()),
            health: None,
        };
        assert_eq!(sink.observe("a", &me).await.unwrap(), present("h1"));
        // Same inode, same size: only the file's times tell the edit apart.
        let path = dir.path().join("a.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("h1", "h2")).unwrap();
        assert_eq!(sink.observe("a", &me).await.unwrap(), present("h2"));
        std::fs::write(&path, text.replace("octo.app", "acme.app")).unwrap();
        assert!(matches!(
            sink.observe("a", &me).await.unwrap(),
            Observed::Foreign { .. }
        ));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(sink.observe("a", &me).await.unwrap(), Observed::Missing);
    }
}
