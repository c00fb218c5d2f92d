//! Reading an Application as previewd does for every read, every watch event and every
//! write's answer (`argocd::Application`), against the way it read one before (the whole
//! object built as a JSON map, then its metadata typed): over previewd's own rendering of a
//! preview's helpers Application, as a real cluster holds it after ten syncs — with the API
//! server's `managedFields` for previewd's server-side apply and Argo CD's status updates,
//! and Argo CD's `status.history` of the last ten syncs (argo-cd controller/state.go
//! persistRevisionHistory) — and as the crude emulator of `tests/e2e/scale.py` sends it
//! (neither).
//!
//! Then a write's answer, the same object, read as an `Application` (as it was) against
//! `argocd::Written` (its uid and resourceVersion alone, as the kubernetes sink reads it now).
//!
//! Run: `cargo bench --bench application` (option: `-- --reads 1000`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use previewd::render::APPLIED_HASH;
use previewd::sink::argocd::{Application, RENDERING_INFO, Written, verdict};
use serde::Deserialize;
use serde_json::{Map, Value, json};

const REVISION: &str = "8d1f4c2e0a9b7c6d5e4f3a2b1c0d9e8f7a6b5c4d";

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

/// previewd's helpers Application for the recorded `pull_request.opened`, its database
/// Secret sealed for the cluster (`previewd render`, as `.ci/run` renders it).
fn rendered() -> Value {
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let config = dir.path().join("previewd.toml");
    std::fs::write(
        &config,
        format!(
            "[defaults]\ndomain = \"preview.example.com\"\n[[clusters]]\nname = \"eu-1\"\n\
             server = \"https://eu-1.k8s.example.com\"\n\
             sealing_cert = \"{root}/tests/fixtures/sealed/test-cert.pem\"\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("--config")
        .arg(&config)
        .args(["render", "--event"])
        .arg(format!(
            "{root}/tests/fixtures/github/pull_request.opened.json"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| serde_yaml_ng::from_str::<Value>(doc).unwrap())
        .find(|app| {
            app["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-helpers")
        })
        .expect("a helpers Application")
}

/// The fields server-side apply records for a manager that wrote `value` (fieldsV1: every
/// object's keys as `f:key`, down to the leaves; lists are atomic in the Application CRD).
fn fields(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (format!("f:{k}"), fields(v)))
                .collect(),
        ),
        _ => json!({}),
    }
}

/// The Application as the API server holds it after Argo CD's `syncs` syncs of it: Argo
/// CD's status (echoes of the source in `sync.comparedTo` and `operationState.syncResult`,
/// the chart's resources, the history of the last ten syncs) and, with `managed`, the
/// `managedFields` of both writers; without `managed`, neither (the crude emulator's copy).
fn as_held(applied: &Value, syncs: usize, managed: bool) -> Value {
    let mut app = applied.clone();
    let source = app["spec"]["source"].clone();
    let resources: Vec<Value> = (0..16)
        .map(|i| {
            json!({"group": "", "version": "v1", "kind": "ConfigMap", "namespace": "pr-42",
                   "name": format!("resource-{i}"), "status": "Synced",
                   "health": {"status": "Healthy"}})
        })
        .collect();
    let history: Vec<Value> = (syncs.saturating_sub(10)..syncs)
        .filter(|_| managed)
        .map(|id| {
            json!({"id": id, "revision": REVISION, "deployedAt": "2026-12-01T10:00:00Z",
                   "deployStartedAt": "2026-12-01T09:59:58Z", "source": source,
                   "initiatedBy": {"username": "previewd"}})
        })
        .collect();
    let mut status = json!({
        "sync": {"status": "Synced", "revision": REVISION,
                 "comparedTo": {"source": source, "destination": app["spec"]["destination"]}},
        "health": {"status": "Healthy", "lastTransitionTime": "2026-12-01T10:00:01Z"},
        "operationState": {
            "operation": {"sync": {"prune": true, "syncStrategy": {"hook": {}}},
                          "initiatedBy": {"username": "previewd"},
                          "info": [{"name": RENDERING_INFO,
                                    "value": app["metadata"]["annotations"][APPLIED_HASH]}]},
            "phase": "Succeeded", "message": "successfully synced (all tasks run)",
            "startedAt": "2026-12-01T09:59:58Z", "finishedAt": "2026-12-01T10:00:00Z",
            "syncResult": {"revision": REVISION, "source": source, "resources": resources}},
        "resources": resources,
        "reconciledAt": "2026-12-01T10:00:05Z", "sourceType": "Helm",
        "summary": {}, "controllerNamespace": "argocd",
    });
    if !history.is_empty() {
        status["history"] = Value::from(history);
    }
    let meta = app["metadata"].as_object_mut().unwrap();
    meta.insert("uid".into(), "4a1c6f0e-0d3b-4c8e-9f2a-6b7d8e9f0a1b".into());
    meta.insert("resourceVersion".into(), "123456".into());
    meta.insert("generation".into(), (2 * syncs as u64).into());
    meta.insert("creationTimestamp".into(), "2026-12-01T09:00:00Z".into());
    if managed {
        let mut written = applied.clone();
        written["metadata"].as_object_mut().unwrap().remove("name");
        written["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        meta.insert(
            "managedFields".into(),
            json!([
                {"manager": "previewd", "operation": "Apply", "apiVersion": "argoproj.io/v1alpha1",
                 "time": "2026-12-01T09:59:57Z", "fieldsType": "FieldsV1", "fieldsV1": fields(&written)},
                {"manager": "argocd-application-controller", "operation": "Update",
                 "apiVersion": "argoproj.io/v1alpha1", "time": "2026-12-01T10:00:05Z",
                 "fieldsType": "FieldsV1", "fieldsV1": fields(&json!({"status": status}))},
            ]),
        );
    }
    app["status"] = status;
    app
}

/// How an Application was read before: the whole object as a JSON map, then its metadata.
fn read_before(bytes: &[u8]) -> (ObjectMeta, Map<String, Value>) {
    let mut rest: Map<String, Value> = serde_json::from_slice(bytes).unwrap();
    let metadata = ObjectMeta::deserialize(rest.shift_remove("metadata").unwrap()).unwrap();
    (metadata, rest)
}

/// This thread's time on a CPU so far, in nanoseconds (the scheduler's own count: time the
/// VM's host took the CPU away, or another process ran, is not in it).
fn on_cpu() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    stat.split_whitespace().next().unwrap().parse().unwrap()
}

/// Microseconds of CPU per read, each way, the medians of nine rounds of `n` taken in turn.
fn per_read(n: usize, mut before: impl FnMut(), mut now: impl FnMut()) -> (f64, f64) {
    let round = |read: &mut dyn FnMut()| {
        let start = on_cpu();
        for _ in 0..n {
            read();
        }
        (on_cpu() - start) as f64 / 1e3 / n as f64
    };
    let (mut a, mut b): (Vec<f64>, Vec<f64>) = (0..9)
        .map(|_| (round(&mut before), round(&mut now)))
        .unzip();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[4], b[4])
}

fn main() {
    let n = arg("--reads", 1000);
    let applied = rendered();
    println!("reading one Application, µs of CPU (medians of 9 rounds of {n} each way, in turn)");
    println!(
        "{:<44} {:>8} {:>10} {:>10} {:>7}",
        "Application", "KB", "before", "now", "ratio"
    );
    for (what, syncs, managed) in [
        ("as the crude emulator sends it", 0, false),
        ("on a real cluster, after 1 sync", 1, true),
        ("on a real cluster, after 10 syncs", 10, true),
    ] {
        let held = as_held(&applied, syncs, managed);
        let bytes = serde_json::to_vec(&held).unwrap();
        // Both ways see the same verdict; the new one leaves out only what is never read.
        let (meta, rest) = read_before(&bytes);
        let now: Application = serde_json::from_slice(&bytes).unwrap();
        let before = Application {
            metadata: meta,
            rest,
        };
        assert_eq!(verdict(&before), verdict(&now));
        assert_eq!(now.metadata.managed_fields, None);
        assert!(now.rest["status"].get("history").is_none());
        let (before_us, now_us) = per_read(
            n,
            || {
                std::hint::black_box(read_before(std::hint::black_box(&bytes)));
            },
            || {
                let app: Application =
                    serde_json::from_slice(std::hint::black_box(&bytes)).unwrap();
                std::hint::black_box(app);
            },
        );
        print_row(what, bytes.len(), before_us, now_us);
    }
    println!();
    println!("a write's answer, µs of CPU (the same medians): as an Application against `Written`");
    for (what, syncs, managed) in [
        ("as the crude emulator sends it", 0, false),
        ("on a real cluster, after 10 syncs", 10, true),
    ] {
        let bytes = serde_json::to_vec(&as_held(&applied, syncs, managed)).unwrap();
        let written: Written = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(written.metadata.resource_version.as_deref(), Some("123456"));
        let (before_us, now_us) = per_read(
            n,
            || {
                let app: Application =
                    serde_json::from_slice(std::hint::black_box(&bytes)).unwrap();
                std::hint::black_box(app);
            },
            || {
                let answer: Written = serde_json::from_slice(std::hint::black_box(&bytes)).unwrap();
                std::hint::black_box(answer);
            },
        );
        print_row(what, bytes.len(), before_us, now_us);
    }
}

fn print_row(what: &str, bytes: usize, before_us: f64, now_us: f64) {
    println!(
        "{:<44} {:>8.1} {:>10.1} {:>10.1} {:>6.2}x",
        what,
        bytes as f64 / 1024.0,
        before_us,
        now_us,
        before_us / now_us
    );
}
