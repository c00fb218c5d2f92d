//! What the watch (`sink::watch`) has seen of previewd's Applications: for each name, the
//! little a full pass needs to find nothing to do (the owner's labels, a deletion, the applied hash, Argo
//! CD's verdict), so that an idle pass over thousands of previews asks the API server
//! nothing. It is a hint, never a reason to act: a look that finds anything to do from it
//! reads the Application again (`Reconciler`), and it answers only while the watch that
//! keeps it is live — from a complete list on, until the watch fails.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use super::Owner;
use crate::argocd::{Application, verdict};
use crate::plan::{Health, Observed};
use crate::render::APPLIED_HASH;

/// One Application as last seen.
#[derive(Debug, Clone)]
struct Seen {
    labels: Value,
    deleting: bool,
    hash: Option<String>,
    health: Health,
}

impl Seen {
    fn of(app: &Application) -> Self {
        Self {
            labels: labels_of(app),
            deleting: app.metadata.deletion_timestamp.is_some(),
            hash: app
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED_HASH))
                .cloned(),
            health: verdict(app),
        }
    }
}

#[derive(Default)]
struct Inner {
    /// Whether `seen` is every Application the watch's list found, kept by its events since.
    live: bool,
    /// The instance whose Applications these are.
    instance: String,
    seen: HashMap<String, Seen>,
}

#[derive(Default)]
pub struct Watched {
    inner: Mutex<Inner>,
}

impl Watched {
    /// What the watch has seen under `name`, as `KubeSink::observe` would read it; None
    /// while the watch is not live (the caller reads the Application itself).
    pub fn observe(&self, name: &str, owner: &Owner) -> Option<Observed> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.live {
            return None;
        }
        let Some(seen) = inner.seen.get(name) else {
            return Some(Observed::Missing);
        };
        Some(if let Some(owner) = owner.mismatch(&seen.labels) {
            Observed::Foreign { owner }
        } else if seen.deleting {
            Observed::Deleting
        } else {
            Observed::Present {
                hash: seen.hash.clone(),
                health: Some(seen.health.clone()),
            }
        })
    }

    /// The names of `instance`'s Applications, as `KubeSink::list` would list them; None
    /// while the watch is not live.
    pub fn names(&self, instance: &str) -> Option<Vec<String>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.live && inner.instance == instance).then(|| inner.seen.keys().cloned().collect())
    }

    /// Starts a list of `instance`'s Applications: until `listed`, nothing is answered.
    pub(super) fn listing(&self, instance: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.live = false;
        inner.instance = instance.to_owned();
        inner.seen.clear();
    }

    /// One Application of the list, or of a watch event.
    pub(super) fn saw(&self, app: &Application) {
        let Some(name) = &app.metadata.name else {
            return;
        };
        let seen = Seen::of(app);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seen.insert(name.clone(), seen);
    }

    pub(super) fn gone(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seen.remove(name);
    }

    /// The list is complete, and the watch goes on from its version.
    pub(super) fn listed(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).live = true;
    }

    /// The watch failed: what was seen may go stale, so nothing is answered until the next
    /// list.
    pub(super) fn lost(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.live = false;
        inner.seen.clear();
    }
}

/// An Application's labels as JSON, for `Owner::mismatch`.
pub(super) fn labels_of(app: &Application) -> Value {
    serde_json::to_value(&app.metadata.labels).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(name: &str, pr: &str, hash: &str) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "annotations": {APPLIED_HASH: hash},
                         "labels": {"app.kubernetes.io/managed-by": "previewd",
                                    "previewd.dev/repo": "octo-repo", "previewd.dev/pr": pr,
                                    "previewd.dev/instance": "i-1"}},
            "spec": {"source": {"repoURL": "https://x", "targetRevision": "v1"}}}))
        .unwrap()
    }

    fn owner(pr: &str) -> Owner {
        Owner {
            repo: Some("octo-repo".into()),
            pr: Some(pr.into()),
            instance: "i-1".into(),
        }
    }

    #[test]
    fn answers_only_between_a_complete_list_and_the_watch_failing() {
        let watched = Watched::default();
        assert_eq!(
            watched.observe("a", &owner("1")),
            None,
            "nothing listed yet"
        );
        watched.listing("i-1");
        watched.saw(&app("a", "1", "h1"));
        assert_eq!(
            watched.observe("a", &owner("1")),
            None,
            "the list is not complete"
        );
        watched.listed();
        assert_eq!(
            watched.observe("a", &owner("1")),
            Some(Observed::Present {
                hash: Some("h1".into()),
                health: Some(Health::NeedsSync)
            })
        );
        assert_eq!(watched.observe("b", &owner("2")), Some(Observed::Missing));
        assert_eq!(watched.names("i-1"), Some(vec!["a".to_owned()]));
        assert_eq!(
            watched.names("i-2"),
            None,
            "another instance's are not known"
        );
        assert!(
            matches!(
                watched.observe("a", &owner("9")),
                Some(Observed::Foreign { .. })
            ),
            "another PR's object under the name is foreign, as a read would say"
        );
        watched.gone("a");
        assert_eq!(watched.observe("a", &owner("1")), Some(Observed::Missing));
        watched.lost();
        assert_eq!(watched.observe("b", &owner("2")), None, "a failed watch");
        assert_eq!(watched.names("i-1"), None);
    }
}
