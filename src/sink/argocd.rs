//! Argo CD's Application as previewd reads and writes it, pure: the resource type, Argo CD's
//! verdict on a rendering (`verdict`), and the sync previewd asks for (`sync_request`). The
//! kubernetes sink (`sink::kubernetes`) does the talking.

use std::borrow::Cow;

use kube::Resource;
use kube::core::{NamespaceResourceScope, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::Health;
use crate::render::APPLIED_HASH;

/// An Argo CD Application: typed metadata, the rest as sent, less what previewd never reads
/// (`UNREAD`).
#[derive(Clone, Debug, Serialize)]
pub struct Application {
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

/// What previewd never reads of an Application, skipped as it is read instead of built into
/// maps, in every read, every watch event and every write's answer (issue #17): the API
/// server's `metadata.managedFields` (server-side apply lists each field previewd wrote,
/// the chart's values key by key) and Argo CD's `status.history`, the source of each of the
/// last ten syncs, values and all (argo-cd controller/state.go persistRevisionHistory,
/// `RevisionHistoryLimit = 10` in pkg/apis/application/v1alpha1/application_defaults.go).
/// On a real cluster they are most of a mature preview's Application.
const UNREAD: [(&str, &str); 2] = [("metadata", "managedFields"), ("status", "history")];

/// Read as one JSON map in one pass, `UNREAD` skipped, then `metadata` taken out of it. A
/// derived `flatten` buffers the whole object in serde's `Content` first and builds the map
/// from that: two trees of a 24 KB Application for every read and every watch event (a
/// tenth of previewd's CPU per push at 2,000 previews, issue #17).
impl<'de> Deserialize<'de> for Application {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut rest = match deserializer.deserialize_any(Skipping(None))? {
            Value::Object(map) => map,
            other => return Err(D::Error::custom(format!("an Application, not {other}"))),
        };
        let metadata = rest
            .shift_remove("metadata") // the other keys stay in the order sent
            .ok_or_else(|| D::Error::missing_field("metadata"))?;
        let metadata = ObjectMeta::deserialize(metadata).map_err(D::Error::custom)?;
        Ok(Self { metadata, rest })
    }
}

/// A value read as `serde_json::Value` reads it, but that the fields `UNREAD`
/// names in it are passed over (`IgnoredAny` allocates nothing): in the Application itself
/// (None) for its `metadata` and `status`, and in those (`Some` of the key holding them).
struct Skipping(Option<&'static str>);

impl<'de> serde::de::DeserializeSeed<'de> for Skipping {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Skipping {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = match self.0 {
                // The Application itself: its metadata and status are read skipping.
                None => match UNREAD.iter().find(|(holder, _)| *holder == key) {
                    Some((holder, _)) => map.next_value_seed(Skipping(Some(holder)))?,
                    None => map.next_value()?,
                },
                Some(holder) => {
                    if UNREAD.contains(&(holder, key.as_str())) {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        continue;
                    }
                    map.next_value()?
                }
            };
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }

    // Anything but an object is read as it is, for the caller to judge: a `status` of
    // another shape (a cluster without the CRD's schema) is no reason to fail the read of
    // a whole list page or watch.
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
    }
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

/// An Application as a write's answer is read: the object it made, named by `uid` and
/// `resourceVersion`, the rest passed over. The API server answers a patch with the whole
/// object (24 KB from the crude emulator, 104 KB on a real cluster after ten syncs), and a
/// write needs only the version it made, to know the watch's event of it (issue #17).
#[derive(Clone, Debug, Default)]
pub struct Written {
    pub metadata: ObjectMeta,
}

impl<'de> Deserialize<'de> for Written {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Derived: every other key is passed over as `IgnoredAny`, which builds nothing.
        #[derive(Deserialize)]
        struct Answer {
            metadata: Meta,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta {
            name: Option<String>,
            uid: Option<String>,
            resource_version: Option<String>,
        }
        let Answer { metadata } = Answer::deserialize(deserializer)?;
        Ok(Self {
            metadata: ObjectMeta {
                name: metadata.name,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                ..ObjectMeta::default()
            },
        })
    }
}

impl Resource for Written {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Application::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        Application::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        Application::version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Application::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
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
        Some("Degraded") if synced => {
            Health::Failed(clip(degraded(status, &spec["destination"]["namespace"])))
        }
        _ => Health::Progressing,
    }
}

/// Whether Argo CD synced the Application's current source and the last operation on it
/// succeeded, whoever asked for it (previewd, or a self-heal since), with nothing running.
/// Then the hooks of its rendering ran: previewd asks for each new source's sync in the
/// write that makes it, Argo CD runs an operation asked for before any auto-sync, and a
/// self-heal follows only a sync that succeeded (argo-cd v3.5.1 controller/appcontroller.go
/// autoSync). What a sleep alone replaces without hooks must be so (`sync_request`).
pub fn synced(app: &Application) -> bool {
    let null = Value::Null;
    let status = app.rest.get("status").unwrap_or(&null);
    let source = &app.rest.get("spec").unwrap_or(&null)["source"];
    let operation = &status["operationState"];
    let pinned = source["targetRevision"]
        .as_str()
        .filter(|r| r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit()));
    !source.is_null()
        && app.rest.get("operation").is_none_or(Value::is_null)
        && operation["phase"] == "Succeeded"
        && same_source(&operation["syncResult"]["source"], source)
        && status["sync"]["status"] == "Synced"
        && same_source(&status["sync"]["comparedTo"]["source"], source)
        && pinned.is_none_or(|sha| status["sync"]["revision"] == sha)
}

/// Whether `operation` (an Argo CD Operation) is the sync previewd asked for `rendering`.
fn asked_for(operation: &Value, rendering: &str) -> bool {
    operation["info"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|i| i["name"] == RENDERING_INFO && i["value"] == rendering)
}

/// What the rendering a sync is asked for replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacing<'a> {
    /// Nothing: a new Application, whose hooks never ran.
    Nothing,
    /// The rendering the Application carried.
    Rendering(&'a str),
    /// Itself: the Application's rendering synced again (`Health::NeedsSync`).
    Itself,
}

/// The sync previewd asks for an Application's current rendering, as `argocd app sync`
/// would ask it (a full sync, hooks included, with the Application's own options and retry),
/// naming the rendering so that its outcome can be told apart from any other sync's.
///
/// A sleep, a wake, or a sleeping rendering synced again runs no hook: its migrations ran
/// at this head already. The apply strategy skips them (argo-cd v3.5.1 controller/sync.go:
/// `WithOperationSettings(..., syncOp.IsApplyStrategy() || ...)` is `skipHooks`); a push,
/// asleep or not, is rendered awake and runs them.
pub fn sync_request(application: &Value, replacing: Replacing<'_>) -> Option<Value> {
    let rendering = application["metadata"]["annotations"][APPLIED_HASH].as_str()?;
    let policy = &application["spec"]["syncPolicy"];
    // Only a change that is the sleep alone skips them: a sleeping rendering that differs
    // from the one it replaces otherwise (a reseed, a redeploy, a chart revision, the image
    // CI built) or that replaces nothing (an Application made while the preview sleeps: a
    // preview slept waiting for CI, or closed asleep and reopened) is synced with its
    // hooks, or they would never run, asleep or after the wake.
    let hookless = match replacing {
        Replacing::Nothing => false,
        Replacing::Rendering(old) => crate::render::sleep::same_but_sleep(old, rendering),
        Replacing::Itself => rendering.ends_with(crate::render::sleep::ASLEEP),
    };
    let strategy = if hookless {
        serde_json::json!({"apply": {}})
    } else {
        serde_json::json!({"hook": {}})
    };
    let mut sync = serde_json::json!({"prune": true, "syncStrategy": strategy});
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
/// Compared in place: each verdict compares the spec's source (7 KB of values here) with
/// two echoes of it, and copying all three was 3% of previewd's CPU per push (issue #17).
pub fn same_source(a: &Value, b: &Value) -> bool {
    !a.is_null() && equivalent(a, b)
}

/// Equal once every empty value (null, false, "", [], and objects of nothing else) is
/// dropped from the objects that hold it. Array items stay where they are.
fn equivalent(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let same =
                |(key, v): (&String, &Value), other: &serde_json::Map<String, Value>| match other
                    .get(key)
                {
                    Some(w) => match (vanishes(v), vanishes(w)) {
                        (true, true) => true,
                        (false, false) => equivalent(v, w),
                        _ => false,
                    },
                    None => vanishes(v),
                };
            x.iter().all(|entry| same(entry, y))
                && y.iter().all(|(key, w)| x.contains_key(key) || vanishes(w))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(v, w)| equivalent(v, w))
        }
        _ => a == b,
    }
}

/// Whether `omitempty` drops this value from the object that holds it.
fn vanishes(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(vanishes),
        Value::Number(_) | Value::Bool(true) => false,
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

/// What is degraded; `destination` is the Application's namespace (the preview's).
fn degraded(status: &Value, destination: &Value) -> String {
    let resources: Vec<String> = status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["health"]["status"] == "Degraded")
        .map(|r| {
            // The chart's size guard (templates/database-guard.yaml, beside the admin's
            // credentials, never in the preview's namespace) fails only to say this; Argo
            // CD's CronJob health says no more than that a run failed.
            let name = r["name"].as_str().unwrap_or_default();
            if r["kind"] == "CronJob" && name.ends_with("-size") && &r["namespace"] != destination {
                return format!(
                    "CronJob/{name}: the database grew past database.max_size and takes no \
                     more connections (/preview reseed for a template database, or /preview destroy)"
                );
            }
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
