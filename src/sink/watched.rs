//! What the watch (`sink::watch`) has seen of previewd's Applications: for each name, what a
//! look decides on (the owner's labels, a deletion, the applied hash, Argo CD's verdict) and
//! what a write names (`uid`), so that neither an idle pass over thousands of previews nor
//! a push asks the API server to read what its watch already delivered. It answers only
//! while the watch that keeps it is live (from a complete list on, until the watch fails),
//! and never for a name previewd has just written until the watch delivers that write
//! (`awaiting`): a look on the state before its own write would apply it again, and run its
//! hooks twice. A write on what it says names the version it saw (`KubeSink::apply`), so a
//! copy that fell behind is refused, never written over.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use super::Owner;
use crate::plan::{Health, Observed};
use crate::render::APPLIED_HASH;
use crate::sink::argocd::{Application, verdict};

/// One Application as last seen.
#[derive(Debug, Clone)]
struct Seen {
    labels: Value,
    deleting: bool,
    hash: Option<String>,
    health: Health,
    /// Its rendering synced, hooks and all (`argocd::synced`).
    synced: bool,
    uid: Option<String>,
    /// Compared for equality only, as the API conventions allow (`confirm`).
    version: Option<String>,
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
            synced: super::argocd::synced(app),
            uid: app.metadata.uid.clone(),
            version: app.metadata.resource_version.clone(),
        }
    }
}

/// The Application a write would change, as the watch last saw it (`Watched::target`).
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    pub uid: String,
    pub version: String,
    /// The rendering it carries (`render::APPLIED_HASH`).
    pub hash: Option<String>,
    /// Argo CD synced that rendering, hooks and all (`argocd::synced`).
    pub synced: bool,
}

#[derive(Default)]
struct Inner {
    /// Whether `seen` is every Application the watch's list found, kept by its events since.
    live: bool,
    /// The instance whose Applications these are.
    instance: String,
    seen: HashMap<String, Seen>,
    /// Names previewd wrote whose write the watch has not delivered yet: the version the
    /// write made, None while it is on its way. Only names in `seen` (pruned at each list):
    /// what the watch has not seen is `Missing`, which every caller reads afresh anyway.
    awaited: HashMap<String, Option<String>>,
}

impl Inner {
    /// What was seen under `name`, when that can be answered for: live, and no write of
    /// previewd's on its way.
    fn answers(&self, name: &str) -> Option<Option<&Seen>> {
        (self.live && !self.awaited.contains_key(name)).then(|| self.seen.get(name))
    }
}

#[derive(Default)]
pub struct Watched {
    inner: Mutex<Inner>,
    /// Lists begun: each follows a gap in which a change (a deletion) may have gone untold.
    lists: std::sync::atomic::AtomicU64,
}

impl Watched {
    /// What the watch has seen under `name`, as `KubeSink::observe` would read it; None
    /// while the watch is not live or a write of previewd's to `name` is on its way (the
    /// caller reads the Application itself). `Missing` is only "none of this instance's":
    /// the watch sees only Applications labelled with it.
    pub fn observe(&self, name: &str, owner: &Owner) -> Option<Observed> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = inner.answers(name)? else {
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

    /// The `uid` and `resourceVersion` of `owner`'s Application under `name`, for a write to
    /// name (`KubeSink::apply`); None when the watch cannot answer, saw none (one of another
    /// instance's may be there, unseen), saw another's, or saw it being deleted.
    pub fn target(&self, name: &str, owner: &Owner) -> Option<Target> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let seen = inner.answers(name)??;
        // Being deleted: the look decides on a read (one that found it deleting would wait).
        if owner.mismatch(&seen.labels).is_some() || seen.deleting {
            return None;
        }
        Some(Target {
            uid: seen.uid.clone()?,
            version: seen.version.clone()?,
            hash: seen.hash.clone(),
            synced: seen.synced,
        })
    }

    /// A write of previewd's to `name` is about to be sent: `name` is not answered for until
    /// the watch delivers it (`written`, `saw`), or a read finds the watch caught up
    /// (`confirm`).
    pub(super) fn awaiting(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !inner.live || inner.seen.contains_key(name) {
            inner.awaited.insert(name.to_owned(), None);
        }
    }

    /// The write to `name` made `version`: awaited until the watch delivers that version
    /// (compared for equality only: versions are opaque), unless it already has.
    pub(super) fn written(&self, name: &str, version: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let delivered = inner.seen.get(name).and_then(|s| s.version.as_deref()) == Some(version);
        match inner.awaited.get_mut(name) {
            Some(_) if delivered => {
                inner.awaited.remove(name);
            }
            Some(awaited) => *awaited = Some(version.to_owned()),
            None => {}
        }
    }

    /// `app` was just read from the API server: when the watch last saw this very version of
    /// it, the watch has caught up with every write to it (a write that failed, or changed
    /// nothing and so made no event).
    pub(super) fn confirm(&self, app: &Application) {
        let (Some(name), Some(version)) = (&app.metadata.name, &app.metadata.resource_version)
        else {
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.seen.get(name).and_then(|s| s.version.as_ref()) == Some(version) {
            inner.awaited.remove(name);
        }
    }

    /// The names of `instance`'s Applications, as `KubeSink::list` would list them; None
    /// while the watch is not live.
    pub fn names(&self, instance: &str) -> Option<Vec<String>> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.live && inner.instance == instance).then(|| inner.seen.keys().cloned().collect())
    }

    /// Starts a list of `instance`'s Applications: until `listed`, nothing is answered.
    pub(super) fn listing(&self, instance: &str) {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.live = false;
        inner.instance = instance.to_owned();
        inner.seen.clear();
        // A write answered before this list began is in it; one still on its way may not be.
        inner.awaited.retain(|_, version| version.is_none());
    }

    /// One Application of the list, or of a watch event.
    pub(super) fn saw(&self, app: &Application) {
        let Some(name) = &app.metadata.name else {
            return;
        };
        let seen = Seen::of(app);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(Some(version)) = inner.awaited.get(name)
            && seen.version.as_ref() == Some(version)
        {
            inner.awaited.remove(name);
        }
        inner.seen.insert(name.clone(), seen);
    }

    pub(super) fn gone(&self, name: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seen.remove(name);
        // Nothing under the name is answered for but `Missing`, which no caller trusts (a
        // foreign Application is unseen): a create on its way is read, not missed.
        inner.awaited.remove(name);
    }

    /// The list is complete, and the watch goes on from its version.
    pub(super) fn listed(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.live = true;
        let Inner { seen, awaited, .. } = &mut *inner;
        awaited.retain(|name, _| seen.contains_key(name));
    }

    /// Lists begun so far (`Sink::lists`).
    pub(super) fn lists(&self) -> u64 {
        self.lists.load(std::sync::atomic::Ordering::SeqCst)
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
        versioned(name, pr, hash, "1")
    }

    fn versioned(name: &str, pr: &str, hash: &str, version: &str) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "annotations": {APPLIED_HASH: hash},
                         "uid": format!("uid-{name}"), "resourceVersion": version,
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

    fn listed(apps: &[Application]) -> Watched {
        let watched = Watched::default();
        watched.listing("i-1");
        for app in apps {
            watched.saw(app);
        }
        watched.listed();
        watched
    }

    fn hash(observed: Option<Observed>) -> Option<String> {
        match observed {
            Some(Observed::Present { hash, .. }) => hash,
            _ => None,
        }
    }

    #[test]
    fn a_name_previewd_writes_is_not_answered_for_until_the_watch_delivers_the_write() {
        let watched = listed(&[versioned("a", "1", "h1", "5")]);
        assert_eq!(
            watched.target("a", &owner("1")),
            Some(Target {
                uid: "uid-a".into(),
                version: "5".into(),
                hash: Some("h1".into()),
                synced: false,
            })
        );
        watched.awaiting("a");
        assert_eq!(watched.observe("a", &owner("1")), None, "h1 is stale now");
        assert_eq!(watched.target("a", &owner("1")), None);
        watched.written("a", "7");
        // A to B to A: an event from before the write, with the very hash the write carries.
        watched.saw(&versioned("a", "1", "h2", "6"));
        assert_eq!(
            watched.observe("a", &owner("1")),
            None,
            "an event from before the write is not the write, whatever its hash"
        );
        watched.saw(&versioned("a", "1", "h2", "7"));
        assert_eq!(hash(watched.observe("a", &owner("1"))), Some("h2".into()));
    }

    #[test]
    fn a_write_the_watch_delivered_before_its_answer_is_not_awaited() {
        let watched = listed(&[versioned("a", "1", "h1", "5")]);
        watched.awaiting("a");
        watched.saw(&versioned("a", "1", "h2", "6"));
        assert_eq!(watched.observe("a", &owner("1")), None, "not known yet");
        watched.written("a", "6");
        assert_eq!(hash(watched.observe("a", &owner("1"))), Some("h2".into()));
    }

    #[test]
    fn a_read_of_the_version_the_watch_saw_ends_the_wait_for_a_write_that_made_no_event() {
        let watched = listed(&[versioned("a", "1", "h1", "5")]);
        watched.awaiting("a");
        watched.confirm(&versioned("a", "1", "h2", "6"));
        assert_eq!(
            watched.observe("a", &owner("1")),
            None,
            "the server has a version the watch has not delivered"
        );
        watched.confirm(&versioned("a", "1", "h1", "5"));
        assert!(
            watched.observe("a", &owner("1")).is_some(),
            "the write failed: the watch is as current as a read"
        );
    }

    #[test]
    fn a_write_names_only_a_uid_the_watch_saw_of_the_owners_application() {
        let watched = listed(&[versioned("a", "1", "h1", "5")]);
        assert_eq!(watched.target("a", &owner("9")), None, "another PR's");
        assert_eq!(
            watched.target("b", &owner("1")),
            None,
            "unseen: perhaps another instance's"
        );
    }

    #[test]
    fn only_names_the_watch_has_seen_are_awaited_so_the_marks_stay_bounded() {
        let watched = listed(&[versioned("a", "1", "h1", "5")]);
        watched.awaiting("b");
        assert_eq!(
            watched.observe("b", &owner("1")),
            Some(Observed::Missing),
            "a create: Missing, which every caller reads afresh"
        );
        watched.awaiting("a");
        watched.gone("a");
        assert!(watched.inner.lock().unwrap().awaited.is_empty(), "gone");
        // A write on its way when the watch failed, to an object deleted before the list.
        watched.saw(&versioned("a", "1", "h1", "8"));
        watched.awaiting("a");
        watched.lost();
        watched.listing("i-1");
        watched.listed();
        assert!(watched.inner.lock().unwrap().awaited.is_empty(), "listed");
    }

    #[test]
    fn a_list_that_began_after_a_write_was_answered_holds_it() {
        let watched = Watched::default();
        watched.awaiting("a");
        watched.written("a", "6");
        watched.awaiting("b");
        watched.listing("i-1");
        watched.saw(&versioned("a", "1", "h2", "7"));
        watched.saw(&versioned("b", "1", "h1", "3"));
        watched.listed();
        assert_eq!(hash(watched.observe("a", &owner("1"))), Some("h2".into()));
        assert_eq!(
            watched.observe("b", &owner("1")),
            None,
            "a write on its way when the list began may not be in it"
        );
    }
}
