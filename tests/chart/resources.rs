//! A preview namespace's bounds (#41) as the chart renders them from previewd's Application:
//! a ResourceQuota and a LimitRange from the keys cpu, memory, pods, container_cpu and
//! container_memory of `[defaults]` or the repository's entry, in the preview namespace, in
//! the Namespace's wave (before any of its pods), every object validated against the
//! Kubernetes schemas; and quantities the values schema refuses.

use super::*;
use serde_json::json;

const SLUG: &str = "pv-octo-app-609ddd1d069bc4c5-pr-7";

fn config(defaults: &str, repo: &str) -> String {
    format!(
        r#"
[defaults]
domain = "preview.example.com"
{defaults}
[[clusters]]
name = "eu-1"
server = "https://eu-1.k8s.example.com"
[[repos]]
name = "octo/app"
image = "ghcr.io/octo/app"
migrate_command = ["bin/migrate"]
seed = "example"
{repo}
[[repos]]
name = "octo/docs"
"#
    )
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}: {found:?}");
    found[0]
}

/// The quota's `spec.hard` and the LimitRange's one Container limit, checked against
/// `(cpu, memory, pods, container_cpu, container_memory)`.
fn assert_bounds(objects: &[Value], namespace: &str, expected: [&str; 5]) {
    let [cpu, memory, pods, container_cpu, container_memory] = expected;
    let quota = one(objects, "ResourceQuota");
    let limits = one(objects, "LimitRange");
    for object in [quota, limits] {
        assert_eq!(object["metadata"]["namespace"], namespace);
        assert_eq!(
            object["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "previewd"
        );
        assert_eq!(
            annotation(object, "argocd.argoproj.io/sync-wave"),
            Some("-2"),
            "the Namespace's wave, before any pod of the namespace"
        );
        assert_eq!(annotation(object, "argocd.argoproj.io/hook"), None);
    }
    assert_eq!(quota["metadata"]["name"], format!("{namespace}-quota"));
    assert_eq!(limits["metadata"]["name"], format!("{namespace}-limits"));
    assert_eq!(
        quota["spec"]["hard"],
        json!({"requests.cpu": cpu, "requests.memory": memory, "limits.memory": memory,
               "pods": pods})
    );
    assert_eq!(
        limits["spec"]["limits"],
        json!([{"type": "Container",
                "defaultRequest": {"cpu": container_cpu, "memory": container_memory},
                "default": {"memory": container_memory}}])
    );
}

#[test]
fn a_preview_namespace_gets_the_default_quota_and_limit_range() {
    let preview = Preview::test().on("eu-1");
    let objects = assert_valid_objects(&config("", ""), &preview);
    assert_bounds(&objects, SLUG, ["4", "8Gi", "20", "100m", "256Mi"]);
    // Nothing of the namespace runs before them: its Namespace shares their wave (and is
    // applied first, by kind), every pod-making object comes later.
    let namespace = one(&objects, "Namespace");
    assert_eq!(
        annotation(namespace, "argocd.argoproj.io/sync-wave"),
        Some("-2")
    );
    let migrate = objects
        .iter()
        .find(|o| o["kind"] == "Job" && o["metadata"]["name"] == format!("{SLUG}-migrate"))
        .expect("the migration Job");
    assert_eq!(annotation(migrate, "argocd.argoproj.io/hook"), Some("Sync"));
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        if object["metadata"]["namespace"] == SLUG
            && ["Pod", "Deployment", "StatefulSet", "Job", "CronJob"].contains(&kind)
        {
            let wave: i64 = annotation(object, "argocd.argoproj.io/sync-wave")
                .unwrap_or("0")
                .parse()
                .unwrap();
            let hooked = annotation(object, "argocd.argoproj.io/hook").is_some();
            assert!(hooked || wave > -2, "{kind} before the quota: {object}");
        }
    }
}

#[test]
fn defaults_and_a_repositorys_own_bounds_reach_the_objects() {
    let toml = config(
        "cpu = \"2\"\nmemory = \"4Gi\"\npods = 10\ncontainer_cpu = \"50m\"",
        "cpu = \"1500m\"\ncontainer_memory = \"512Mi\"\npods = 6",
    );
    // octo/app: its own cpu, pods and container_memory; memory and container_cpu inherited.
    let objects = assert_valid_objects(&toml, &Preview::test().on("eu-1"));
    assert_bounds(&objects, SLUG, ["1500m", "4Gi", "6", "50m", "512Mi"]);
    // octo/docs names none: [defaults]' own.
    let mut docs = Preview::test().on("eu-1");
    docs.key = previewd::preview::PreviewKey::new("octo/docs".parse().unwrap(), 3);
    let config = Config::from_toml(&toml, Vec::new()).unwrap();
    let namespace = names_of(&docs, &config).slug;
    let objects = assert_valid_objects(&toml, &docs);
    assert_bounds(&objects, &namespace, ["2", "4Gi", "10", "50m", "256Mi"]);
}

/// The values previewd renders for `octo/app#7` under the default bounds.
fn values() -> Value {
    let config = Config::from_toml(&config("", ""), Vec::new()).unwrap();
    let preview = Preview::test().on("eu-1");
    let application =
        render::helper_application(&preview, &names_of(&preview, &config), &config, &[]).unwrap();
    application["spec"]["source"]["helm"]["valuesObject"].clone()
}

fn render_values(values: &Value) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "values.json", &values.to_string());
    let dump = dir.path().join("objects.json");
    let (ok, out) = check(&[
        &chart(),
        file.to_str().unwrap(),
        "--release",
        SLUG,
        "--dump",
        dump.to_str().unwrap(),
    ]);
    assert!(ok && out.contains(", 0 failed"), "{out}");
    serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap()
}

#[test]
fn the_values_reach_the_objects_as_written_and_without_them_there_are_none() {
    let mut values = values();
    assert_eq!(
        values["resources"],
        json!({"cpu": "4", "memory": "8Gi", "pods": 20, "containerCpu": "100m",
               "containerMemory": "256Mi"})
    );
    values["resources"] = json!({"cpu": "0.5", "memory": "1073741824", "pods": 1000,
                                 "containerCpu": "1", "containerMemory": "64Ki"});
    let objects = render_values(&values);
    assert_bounds(&objects, SLUG, ["0.5", "1073741824", "1000", "1", "64Ki"]);
    values.as_object_mut().unwrap().remove("resources");
    let objects = render_values(&values);
    assert!(
        objects
            .iter()
            .all(|o| o["kind"] != "ResourceQuota" && o["kind"] != "LimitRange"),
        "no bounds without values"
    );
}

#[test]
fn quantities_the_schema_does_not_know_are_refused() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 9] = [
        ("/resources/cpu", |v| v["resources"]["cpu"] = "4000x".into()),
        ("/resources/cpu", |v| {
            v["resources"]["cpu"] = "0.0005".into()
        }),
        ("/resources/cpu", |v| v["resources"]["cpu"] = json!(4)),
        ("/resources/memory", |v| {
            v["resources"]["memory"] = "8GB".into()
        }),
        ("/resources/memory", |v| {
            v["resources"]["memory"] = "8G".into()
        }),
        ("/resources/pods", |v| v["resources"]["pods"] = json!(0)),
        ("/resources/pods", |v| v["resources"]["pods"] = json!(1001)),
        ("/resources/containerMemory", |v| {
            v["resources"]["containerMemory"] = "1e9".into()
        }),
        ("/resources", |v| v["resources"]["limitsCpu"] = "1".into()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let good = values();
    for (path, edit) in cases {
        let mut values = good.clone();
        edit(&mut values);
        let file = write(dir.path(), "values.json", &values.to_string());
        let (ok, out) = check(&[
            &chart(),
            file.to_str().unwrap(),
            "--expect-schema-error",
            path,
        ]);
        assert!(ok, "{path}: {values}: {out}");
    }
}
