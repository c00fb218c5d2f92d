//! helpers-chart rendered by the real Helm library (helm-python-sdk) with what previewd
//! renders, and every object validated against the Kubernetes and CRD schemas, through
//! `tests/chart/check_chart.py`. `scripts/test` installs the Python packages.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use previewd::config::Config;
use previewd::preview::Preview;
use previewd::render::{self, SealedSecret};
use serde::Deserialize;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the checker; returns (success, output).
fn check(args: &[&str]) -> (bool, String) {
    common::python::run("chart/check_chart.py", args)
}

fn chart() -> String {
    format!("{ROOT}/helpers-chart")
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The names a preview created under `config` records.
fn names_of(preview: &Preview, config: &Config) -> previewd::naming::Names {
    let policy = config
        .policy_for(&preview.key.repo)
        .unwrap_or(&config.defaults);
    previewd::naming::Names::of(&preview.key, &policy.domain)
}

/// Renders the Application for `preview` under `config`, then renders and validates the chart.
fn assert_valid(
    config_toml: &str,
    preview: &Preview,
    sealed: &[SealedSecret],
    objects: usize,
) -> Vec<Value> {
    let config = Config::from_toml(config_toml, Vec::new()).unwrap();
    let application =
        render::helper_application(preview, &names_of(preview, &config), &config, sealed).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let app = write(
        dir.path(),
        "app.yaml",
        &previewd::yaml::to_string(&application),
    );
    let dump = dir.path().join("objects.json");
    let (ok, out) = check(&[
        &chart(),
        "--application",
        app.to_str().unwrap(),
        "--dump",
        dump.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    // The Application itself is validated too, hence one more than the chart's objects.
    assert!(
        out.trim_end()
            .ends_with(&format!("validated {} objects, 0 failed", objects + 1)),
        "{out}"
    );
    serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap()
}

const FULL: &str = r#"
[defaults]
domain = "preview.example.com"
[[clusters]]
name = "eu-1"
server = "https://eu-1.k8s.example.com"
ingress_target = "ingress.eu-1.example.com"
[[repos]]
name = "octo/app"
image = "ghcr.io/octo/app"
migrate_command = ["bin/migrate"]
seed = "example"
"#;

fn sealed(name: &str, namespace: &str, scope: &'static str, key: &str) -> SealedSecret {
    SealedSecret {
        name: name.into(),
        namespace: namespace.into(),
        scope,
        type_: "Opaque".into(),
        labels: Default::default(),
        encrypted_data: [(key.to_string(), "AgBy3i4OJSWK+PiTySYZZA==".to_string())].into(),
    }
}

fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}

fn find<'a>(objects: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no {kind} *{suffix}"))
}

#[test]
fn everything_on_renders_valid_objects_in_sync_wave_order() {
    let preview = Preview::test().on("eu-1");
    let secrets = [
        sealed(
            "pv-octo-app-609ddd1d069bc4c5-pr-7-db",
            "pv-octo-app-609ddd1d069bc4c5-pr-7",
            "strict",
            "DATABASE_URL",
        ),
        sealed(
            "pv-octo-app-609ddd1d069bc4c5-pr-7-db-password",
            "previewd-system",
            "strict",
            "VERIFIER",
        ),
    ];
    // Namespace, rendering ConfigMap, 2 SealedSecrets, Certificate, 2 DB ConfigMaps + create
    // + drop Jobs, migrate Job, 2 seed ConfigMaps + seed Job, DNSEndpoint: 14.
    let objects = assert_valid(FULL, &preview, &secrets, 14);
    let wave =
        |kind, suffix| annotation(find(&objects, kind, suffix), "argocd.argoproj.io/sync-wave");
    let hook = |kind, suffix| annotation(find(&objects, kind, suffix), "argocd.argoproj.io/hook");
    assert_eq!(wave("Namespace", "pr-7"), Some("-2"));
    assert_eq!(wave("SealedSecret", "-db"), Some("-2"));
    assert_eq!(wave("ConfigMap", "-rendering"), Some("-2"));
    assert_eq!(
        hook("ConfigMap", "-rendering"),
        None,
        "an ordinary object: Argo CD diffs it"
    );
    // The record before the certificate: an HTTP-01 challenge needs the name to resolve.
    assert_eq!(wave("DNSEndpoint", "-dns"), Some("-2"));
    assert_eq!(wave("Certificate", "-tls"), Some("-1"));
    assert_eq!(
        (hook("Job", "-db-create"), wave("Job", "-db-create")),
        (Some("Sync"), Some("-1"))
    );
    assert_eq!(
        (hook("Job", "-migrate"), wave("Job", "-migrate")),
        (Some("Sync"), Some("0"))
    );
    assert_eq!(hook("Job", "-seed"), Some("PostSync"));
    assert_eq!(hook("Job", "-db-drop"), Some("PostDelete"));
    // Argo CD deletes PostDelete hooks only by policy, and BeforeHookCreation never fires
    // after the last sync (argo-cd controller/hook.go cleanupHooks): they would leak.
    let policy = |kind, suffix| {
        annotation(
            find(&objects, kind, suffix),
            "argocd.argoproj.io/hook-delete-policy",
        )
    };
    assert_eq!(policy("Job", "-db-drop"), Some("HookSucceeded"));
    assert_eq!(policy("ConfigMap", "-db-drop-sql"), Some("HookSucceeded"));
    // The drop's SQL must outlive the Application's ordinary resources: it is a hook too.
    assert_eq!(
        (
            hook("ConfigMap", "-db-drop-sql"),
            wave("ConfigMap", "-db-drop-sql")
        ),
        (Some("PostDelete"), Some("-1"))
    );
    // The admin credentials are only ever referenced from the provisioner namespace.
    for job in objects.iter().filter(|o| o["kind"] == "Job") {
        let uses_admin = job.to_string().contains("postgres-admin");
        assert_eq!(
            uses_admin,
            job["metadata"]["namespace"] == "previewd-system",
            "{}",
            job["metadata"]["name"]
        );
    }
    // The create Job gets the role's SCRAM verifier, never a password (optional: a Secret
    // sealed before verifiers has none, and the role made then keeps its password).
    let create = &find(&objects, "Job", "-db-create")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        create["env"],
        serde_json::json!([{
            "name": "PREVIEW_VERIFIER",
            "valueFrom": {"secretKeyRef": {
                "name": "pv-octo-app-609ddd1d069bc4c5-pr-7-db-password",
                "key": "VERIFIER",
                "optional": true,
            }},
        }])
    );
    assert_eq!(
        find(&objects, "DNSEndpoint", "-dns")["spec"]["endpoints"][0]["recordType"],
        "CNAME"
    );
}

#[test]
fn cloudnative_pg_sealed_tls_and_a_command_seed_render_valid_objects() {
    let config = r#"
        [database]
        mode = "cnpg"
        namespace = "pg-shared"
        cnpg_cluster = "shared"
        [tls]
        mode = "sealed"
        [[clusters]]
        name = "lab"
        server = "https://lab.example.com"
        ingress_target = "10.20.30.40"
        [[repos]]
        name = "octo/app"
        image = "ghcr.io/octo/app"
        seed_command = ["bin/rails", "db:seed"]
    "#;
    let secrets = [sealed(
        "pv-octo-app-609ddd1d069bc4c5-pr-7-tls",
        "pv-octo-app-609ddd1d069bc4c5-pr-7",
        "strict",
        "tls.key",
    )];
    // Namespace, rendering ConfigMap, SealedSecret, DatabaseRole, Database, the wait Job,
    // seed Job, DNSEndpoint.
    let objects = assert_valid(config, &Preview::test().on("lab"), &secrets, 8);
    let role = find(&objects, "DatabaseRole", "-role");
    assert_eq!(role["metadata"]["namespace"], "pg-shared");
    assert_eq!(role["spec"]["databaseRoleReclaimPolicy"], "delete");
    assert_eq!(
        find(&objects, "Database", "-db")["spec"]["databaseReclaimPolicy"],
        "delete"
    );
    // Argo CD has no health check for CNPG's kinds: a hook in their wave waits for the
    // database before the migration's wave starts.
    let ready = find(&objects, "Job", "-db-ready");
    assert_eq!(annotation(ready, "argocd.argoproj.io/hook"), Some("Sync"));
    assert_eq!(
        annotation(ready, "argocd.argoproj.io/sync-wave"),
        Some("-1")
    );
    assert_eq!(
        ready["metadata"]["namespace"],
        "pv-octo-app-609ddd1d069bc4c5-pr-7"
    );
    assert!(ready.to_string().contains("REVOKE ALL ON DATABASE"));

    // database.drop_on_delete = false keeps the data in cnpg mode too.
    let keep = config.replace(
        "mode = \"cnpg\"",
        "mode = \"cnpg\"\n        drop_on_delete = false",
    );
    let objects = assert_valid(&keep, &Preview::test().on("lab"), &secrets, 8);
    assert_eq!(
        find(&objects, "Database", "-db")["spec"]["databaseReclaimPolicy"],
        "retain"
    );
    assert_eq!(
        find(&objects, "DatabaseRole", "-role")["spec"]["databaseRoleReclaimPolicy"],
        "retain"
    );
    assert_eq!(
        find(&objects, "DNSEndpoint", "-dns")["spec"]["endpoints"][0]["recordType"],
        "A"
    );
}

#[test]
fn everything_off_renders_just_the_namespace() {
    let config = "[database]\nmode = \"off\"\n[tls]\nmode = \"off\"\n[dns]\nenabled = false\n";
    // The namespace and the rendering ConfigMap.
    assert_valid(config, &Preview::test(), &[], 2);
}

#[test]
fn approved_fork_long_names_and_unicode_titles_render_valid_objects() {
    let long = format!(
        "{}/{}#98765",
        "o".repeat(39),
        "very-long-repository-name-".repeat(3).trim_end_matches('-')
    );
    // octo/app has migrations and a seed (12 objects); the others have no [[repos]] entry (8).
    for (preview, objects) in [
        (Preview::test().on("eu-1").fork().approved(), 12),
        (Preview::test().on("eu-1").of(&long), 8),
        (Preview::test().on("eu-1").of("octo/my_app.v2#12"), 8),
        (
            Preview::test()
                .on("eu-1")
                .titled("Añadir 🔍 <script>alert(1)</script>\n\"quoted\""),
            12,
        ),
    ] {
        assert_valid(FULL, &preview, &[], objects);
    }
}

#[test]
fn the_binary_renders_every_recorded_pr_event_into_valid_objects() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "previewd.toml",
        "[defaults]\ndomain = \"preview.example.com\"\n",
    );
    for event in [
        "pull_request.opened",
        "pull_request.synchronize",
        "pull_request.reopened",
        "pull_request.ready_for_review",
        "pull_request.opened.with-null-body",
    ] {
        let out = dir.path().join(event);
        let status = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "render",
                "--out",
                out.to_str().unwrap(),
                "--event",
            ])
            .arg(format!("{ROOT}/tests/fixtures/github/{event}.json"))
            .env_clear()
            .status()
            .unwrap();
        assert!(status.success(), "{event}");
        let app = out.join("pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml");
        // No [[repos]] entry: no migrations or seed; the default cluster has no ingress
        // target: no DNS record. Left: the Application, Namespace, rendering ConfigMap,
        // Certificate, and the database's two ConfigMaps, create and drop Jobs.
        let (ok, output) = check(&[&chart(), "--application", app.to_str().unwrap()]);
        assert!(
            ok && output.trim_end().ends_with("validated 8 objects, 0 failed"),
            "{event}: {output}"
        );
    }
}

/// The ordinary (non-hook) objects of a rendering: all that Argo CD compares.
fn ordinary(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| annotation(o, "argocd.argoproj.io/hook").is_none())
        .collect()
}

/// Argo CD splits hooks out of its diff and auto-syncs only an OutOfSync Application
/// (argo-cd controller/appcontroller.go autoSync, gitops-engine pkg/sync/reconcile.go
/// splitHooks): whatever must run the hooks again has to change an ordinary object.
#[test]
fn a_push_a_reseed_a_redeploy_and_a_hook_only_change_each_change_an_ordinary_object() {
    let base = Preview::test().on("eu-1");
    let first = assert_valid(FULL, &base, &[], 12);
    let mut reseeded = base.clone();
    reseeded.seed_generation += 1;
    let mut redeployed = base.clone();
    redeployed.redeploy_generation += 1;
    let other_command = FULL.replace("[\"bin/migrate\"]", "[\"bin/migrate\", \"--all\"]");
    for (what, config, preview) in [
        (
            "push",
            FULL,
            base.clone()
                .at_sha("1111111111111111111111111111111111111111"),
        ),
        ("reseed", FULL, reseeded),
        ("redeploy", FULL, redeployed),
        (
            "a new migrate_command",
            other_command.as_str(),
            base.clone(),
        ),
    ] {
        let next = assert_valid(config, &preview, &[], 12);
        assert_ne!(
            ordinary(&first),
            ordinary(&next),
            "{what} changes only hooks"
        );
    }
    let again = assert_valid(FULL, &base, &[], 12);
    assert_eq!(
        ordinary(&first),
        ordinary(&again),
        "the same input renders the same"
    );
}

#[test]
fn render_refuses_what_is_not_a_pull_request_event() {
    for event in ["issue_comment.created.pull_request", "ping", "push"] {
        let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
            .args(["render", "--event"])
            .arg(format!("{ROOT}/tests/fixtures/github/{event}.json"))
            .env_clear()
            .current_dir(tempfile::tempdir().unwrap().path())
            .output()
            .unwrap();
        assert!(!output.status.success(), "{event}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains("not a pull_request event"), "{stderr}");
    }
}

#[test]
fn values_the_chart_cannot_render_are_refused_by_its_schema() {
    let config = Config::from_toml(FULL, Vec::new()).unwrap();
    let preview = Preview::test().on("eu-1");
    let application =
        render::helper_application(&preview, &names_of(&preview, &config), &config, &[]).unwrap();
    let good = application["spec"]["source"]["helm"]["valuesObject"].clone();
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 7] = [
        ("/namespace", |v| v["namespace"] = "Not_A_Label".into()),
        ("/preview/sha", |v| v["preview"]["sha"] = "main".into()),
        ("/database/mode", |v| v["database"]["mode"] = "mysql".into()),
        ("/database/name", |v| {
            v["database"]["name"] = "x; DROP DATABASE postgres".into()
        }),
        ("/dns/ttl", |v| v["dns"]["ttl"] = "300".into()),
        ("/migrations", |v| {
            v["migrations"]["command"] = serde_json::json!([])
        }),
        ("propertyName", |v| {
            v["seed"]["files"] = serde_json::json!({"../../etc/passwd": "x"})
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
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
        assert!(ok, "{path}: {out}");
    }
    let file = write(dir.path(), "values.json", &good.to_string());
    assert!(
        check(&[&chart(), file.to_str().unwrap()]).0,
        "the unedited values render"
    );
}

#[test]
fn the_deploy_manifests_validate_and_their_config_loads() {
    let deploy = format!("{ROOT}/deploy");
    let (ok, out) = check(&["--manifests", &deploy]);
    assert!(
        ok && out.trim_end().ends_with("validated 18 objects, 0 failed"),
        "{out}"
    );
    let (ok, out) = check(&["--manifests", &format!("{deploy}/patches")]);
    assert!(
        ok && out.trim_end().ends_with("validated 1 objects, 0 failed"),
        "{out}"
    );
    // The previewd.toml in the ConfigMap is one this version accepts.
    let text = std::fs::read_to_string(format!("{deploy}/config.yaml")).unwrap();
    let config_map: Value = serde_yaml_ng::from_str(&text).unwrap();
    let config = Config::from_toml(
        config_map["data"]["previewd.toml"].as_str().unwrap(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(config.sink.kind, previewd::config::SinkKind::Kubernetes);
    // The projects shipped are the ones this configuration needs, and the admission policy
    // admits exactly those.
    let shipped = std::fs::read_to_string(format!("{deploy}/appprojects.yaml")).unwrap();
    let generated: String = previewd::projects::projects(&config)
        .iter()
        .map(|p| format!("---\n{}", previewd::yaml::to_string(p)))
        .collect();
    assert!(
        shipped.ends_with(&generated),
        "deploy/appprojects.yaml is stale: regenerate it with `previewd render --projects`"
    );
    let admission = std::fs::read_to_string(format!("{deploy}/admission.yaml")).unwrap();
    assert!(
        admission.contains(&format!(
            "object.spec.project in ['{}', '{}']",
            config.chart.project, config.chart.apps_project
        )),
        "{admission}"
    );
    // RBAC: writes only to Applications in Argo CD's namespace; cluster-wide, only `get` on
    // exactly what a teardown confirms gone.
    let rbac = std::fs::read_to_string(format!("{deploy}/rbac.yaml")).unwrap();
    for document in serde_yaml_ng::Deserializer::from_str(&rbac) {
        let object = Value::deserialize(document).unwrap();
        let verbs = |object: &Value| -> Vec<String> {
            object["rules"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|rule| rule["verbs"].as_array().unwrap().clone())
                .map(|verb| verb.as_str().unwrap().to_owned())
                .collect()
        };
        match object["kind"].as_str().unwrap() {
            "ClusterRole" => {
                assert!(verbs(&object).iter().all(|v| v == "get"), "{object}");
                let resources: Vec<_> = object["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|rule| rule["resources"].as_array().unwrap().clone())
                    .collect();
                assert_eq!(
                    resources,
                    ["namespaces", "dnsendpoints", "certificates", "databases"]
                );
            }
            "Role" => {
                assert_eq!(object["metadata"]["namespace"], "argocd");
                assert_eq!(object["rules"][0]["resources"], json!(["applications"]));
                assert!(!verbs(&object).iter().any(|v| v == "*" || v == "update"));
            }
            _ => {}
        }
    }
}
