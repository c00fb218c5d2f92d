//! previewd's own chart (deploy/chart) rendered by the real Helm library (helm-python-sdk,
//! `tests/deploy/chart.py`), with its default values and with everything on
//! (`tests/deploy/values-everything.yaml`): every object valid against the Kubernetes and CRD
//! schemas, `helm lint --strict` clean, the AppProjects what `previewd render --projects`
//! prints for the configuration the chart carries, wrong values refused saying why, and the
//! plain manifests (deploy/manifests/previewd.yaml) the chart rendered, kept equal here.

#[path = "common/python.rs"]
mod python;

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const EVERYTHING: &str = "tests/deploy/values-everything.yaml";
const MANIFESTS: &str = "deploy/manifests/previewd.yaml";

fn chart() -> String {
    format!("{ROOT}/deploy/chart")
}

/// Renders the chart with `args` (`-f FILE`, `--set K=V`), validates and lints it: the
/// checker's output, the objects in manifest order and NOTES.txt.
fn render(args: &[&str]) -> (String, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let dump = dir.path().join("objects.json");
    let notes = dir.path().join("NOTES.txt");
    let mut all = vec![
        chart(),
        "--lint".into(),
        "--dump".into(),
        dump.display().to_string(),
        "--notes".into(),
        notes.display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let (ok, out) = python::run("deploy/chart.py", &all);
    assert!(ok, "{out}");
    let objects = serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap();
    (out, objects, std::fs::read_to_string(notes).unwrap())
}

fn everything() -> (String, Vec<Value>, String) {
    render(&["-f", &format!("{ROOT}/{EVERYTHING}")])
}

/// The values are refused, by the schema or a template, with a message containing `text`.
fn assert_refused(args: &[&str], text: &str) {
    let mut all = vec![chart(), "--expect-error".into(), text.into()];
    all.extend(args.iter().map(|a| a.to_string()));
    let (ok, out) = python::run("deploy/chart.py", &all);
    assert!(ok, "{args:?} should be refused with {text:?}: {out}");
}

fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

fn kinds(objects: &[Value]) -> Vec<&str> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect()
}

fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[test]
fn the_chart_renders_valid_objects_and_lints_clean_with_default_values_and_everything_on() {
    let (out, objects, _) = render(&[]);
    assert!(out.contains("lint: 0 warnings or errors"), "{out}");
    assert!(
        out.trim_end().ends_with("validated 18 objects, 0 failed"),
        "{out}"
    );
    assert!(!kinds(&objects).contains(&"Ingress"), "the Ingress is off");
    assert!(!kinds(&objects).contains(&"ServiceMonitor"));
    assert!(!kinds(&objects).contains(&"Namespace"));

    let (out, objects, _) = everything();
    assert!(out.contains("lint: 0 warnings or errors"), "{out}");
    assert!(
        out.trim_end().ends_with("validated 21 objects, 0 failed"),
        "{out}"
    );
    for kind in ["Namespace", "Ingress", "ServiceMonitor"] {
        assert!(kinds(&objects).contains(&kind), "{kind}");
    }
}

/// The AppProjects the chart applies are exactly those `previewd render --projects` prints
/// for the previewd.toml its ConfigMap carries, with the environment its Deployment sets
/// (secrets stand-ins): the configuration loads, and the projects follow it.
#[test]
fn the_charts_appprojects_are_what_previewd_renders_for_the_config_it_carries() {
    for (what, (_, objects, _)) in [
        ("default values", render(&[])),
        ("everything on", everything()),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("previewd.toml");
        let toml = find(&objects, "ConfigMap")["data"]["previewd.toml"]
            .as_str()
            .unwrap();
        std::fs::write(&config, toml).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_previewd"));
        command.env_clear();
        for variable in container(&objects)["env"].as_array().unwrap() {
            let value = match variable["value"].as_str() {
                Some(value) => value.to_owned(),
                None => format!("stand-in-for-the-secret-{}", variable["name"]),
            };
            command.env(variable["name"].as_str().unwrap(), value);
        }
        let output = command
            .args(["--config", config.to_str().unwrap(), "render", "--projects"])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rendered = yaml_documents(&String::from_utf8(output.stdout).unwrap());
        let shipped: Vec<Value> = objects
            .iter()
            .filter(|o| o["kind"] == "AppProject")
            .cloned()
            .collect();
        assert_eq!(rendered.len(), 2, "{what}");
        assert_eq!(
            shipped, rendered,
            "{what}: appProjects is stale; regenerate it with `previewd --config previewd.toml render --projects`"
        );
    }
}

#[test]
fn the_everything_on_values_hold_two_clusters_and_two_repositories() {
    let (_, objects, _) = everything();
    let helpers = objects.iter().find(|o| o["kind"] == "AppProject").unwrap();
    let mut servers: Vec<&str> = helpers["spec"]["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["server"].as_str().unwrap())
        .collect();
    servers.dedup();
    assert_eq!(
        servers,
        [
            "https://eu-1.k8s.example.com",
            "https://us-1.k8s.example.com"
        ]
    );
    let apps = objects.iter().rfind(|o| o["kind"] == "AppProject").unwrap();
    assert_eq!(
        apps["spec"]["sourceRepos"],
        json!([
            "https://github.com/acme/shop.git",
            "https://github.com/acme/docs-deploy.git"
        ])
    );
}

/// What the chart takes from the configuration: Argo CD's namespace (the Role, the
/// projects, Argo CD's accounts in the confinement policy), the project names previewd may
/// use, and the service account previewd runs as in the release's namespace.
#[test]
fn the_admission_policies_and_the_role_follow_the_configuration() {
    let (_, objects, _) = everything();
    let policies: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .collect();
    let projects = &policies[0]["spec"];
    assert_eq!(
        projects["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:previewd-system:previewd'"
    );
    assert_eq!(
        projects["validations"][0]["expression"],
        "has(object.spec.project) && object.spec.project in ['pr-helpers', 'pr-apps']"
    );
    let confinement = policies[1]["spec"].to_string();
    assert!(confinement.contains("startsWith('system:serviceaccount:gitops:')"));
    assert!(!confinement.contains("serviceaccount:argocd:"));
    for kind in ["Role", "RoleBinding", "AppProject"] {
        assert!(
            objects
                .iter()
                .filter(|o| o["kind"] == kind)
                .all(|o| o["metadata"]["namespace"] == "gitops"),
            "{kind}"
        );
    }
    let binding = find(&objects, "RoleBinding");
    assert_eq!(
        binding["subjects"][0],
        json!({"kind": "ServiceAccount", "name": "previewd", "namespace": "previewd-system"})
    );
}

/// previewd keeps its state in SQLite: one writer, so one replica, replaced (never rolled)
/// with the volume released first, whatever the values say.
#[test]
fn previewd_runs_one_replica_whatever_the_values() {
    for (_, objects, _) in [render(&[]), everything()] {
        let deployment = find(&objects, "Deployment");
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(
            find(&objects, "PersistentVolumeClaim")["spec"]["accessModes"],
            json!(["ReadWriteOnce"])
        );
    }
    assert_refused(&["--set", "replicas=2"], "additional properties 'replicas'");
    assert_refused(
        &["--set", "replicaCount=2"],
        "additional properties 'replicaCount'",
    );
}

/// Secrets come from the existing Secret as environment variables (the App's key as a file
/// readable by previewd's group), never through values or argv; the chart renders no Secret.
#[test]
fn secrets_reach_previewd_from_the_existing_secret_only() {
    let (_, objects, _) = everything();
    assert!(!kinds(&objects).contains(&"Secret"));
    let container = container(&objects);
    let from_secret: Vec<(&str, &str, &str)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| {
            let reference = &v["valueFrom"]["secretKeyRef"];
            Some((
                v["name"].as_str()?,
                reference["name"].as_str()?,
                reference["key"].as_str()?,
            ))
        })
        .collect();
    assert_eq!(
        from_secret,
        [
            (
                "PREVIEWD_GITHUB_WEBHOOK_SECRET",
                "previewd-secrets",
                "webhook"
            ),
            ("PREVIEWD_API_TOKEN", "previewd-secrets", "token"),
        ]
    );
    assert_eq!(
        container["args"],
        json!(["--config", "/etc/previewd/previewd.toml", "serve"])
    );
    let key_path = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "PREVIEWD_GITHUB_PRIVATE_KEY_PATH")
        .expect("the App's key path")["value"]
        .as_str()
        .unwrap();
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "github-app-key")
        .unwrap();
    let pod = &find(&objects, "Deployment")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "github-app-key")
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "previewd-secrets");
    assert_eq!(volume["secret"]["items"][0]["key"], "app.pem");
    assert_eq!(volume["secret"]["defaultMode"], 0o440);
    assert_eq!(
        Path::new(mount["mountPath"].as_str().unwrap())
            .join(volume["secret"]["items"][0]["path"].as_str().unwrap()),
        Path::new(key_path)
    );
    let (_, with_token, _) = render(&["--set", "secretKeys.githubToken=gh"]);
    let env = &find(&with_token, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array().unwrap().contains(&json!({
            "name": "PREVIEWD_GITHUB_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "previewd", "key": "gh"}},
        })),
        "{env}"
    );
    // A secret written into the configuration is refused, saying where it belongs.
    for (line, text) in [
        (
            "[github]\nwebhook_secret = \"0123456789abcdef0\"",
            "config sets github.webhook_secret: a secret never goes in values; put it in the Secret \"previewd\" and name its key in secretKeys.webhookSecret",
        ),
        ("[api]\ntoken = \"t\"", "config sets api.token"),
        ("[github]\ntoken = \"t\"", "config sets github.token"),
    ] {
        with_config(line, text);
    }
}

/// The default configuration with `extra` appended, which must be refused with `text`.
fn with_config(extra: &str, text: &str) {
    let config = format!("{}\n{extra}\n", default_value("config"));
    refused_with(json!({ "config": config }), text);
}

/// The chart's default value of `key` (a string: `config`, `appProjects`).
fn default_value(key: &str) -> String {
    let defaults: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(format!("{}/values.yaml", chart())).unwrap(),
    )
    .unwrap();
    defaults[key].as_str().unwrap().to_owned()
}

/// `values` as a values file, which must be refused with `text`.
fn refused_with(values: Value, text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values.to_string()).unwrap();
    assert_refused(&["-f", file.to_str().unwrap()], text);
}

/// A configuration the pod could not run is refused at `helm install`, saying why.
#[test]
fn the_chart_refuses_a_configuration_its_pod_could_not_run() {
    let cases = [
        (
            "[metrics]\nlisten = \"127.0.0.1:9090\"",
            "\"127.0.0.1:9090\" is a loopback address",
        ),
        (
            "[metrics]\nlisten = \"0.0.0.0:8080\"",
            "metrics.listen must use another port than listen",
        ),
        (
            "[github]\napp_id = 1",
            "name the key of existingSecret that holds the App's private key",
        ),
        (
            "[github]\nprivate_key_path = \"/k.pem\"",
            "config sets github.private_key_path",
        ),
        (
            "[tls]\nca_key = \"/ca.key\"",
            "config sets tls.ca_key, a file this chart does not mount",
        ),
        (
            "[[clusters]]\nname = \"us-1\"\nserver = \"https://us-1.example.com\"\nsealing_cert = \"/certs/us-1.pem\"",
            "config: cluster us-1: sealing_cert \"/certs/us-1.pem\" is not where the chart mounts",
        ),
        ("this is not toml", "config is not valid TOML"),
    ];
    for (extra, text) in cases {
        with_config(extra, text);
    }
    // Lines that must come first in the file: replace the defaults' own.
    for (from, to, text) in [
        (
            "listen = \"0.0.0.0:8080\"",
            "listen = \"127.0.0.1:8080\"",
            "is a loopback address",
        ),
        (
            "state = \"/var/lib/previewd/previewd.db\"",
            "state = \"previewd.db\"",
            "state = \"previewd.db\" is not on the volume",
        ),
        (
            "kind = \"kubernetes\"",
            "kind = \"directory\"",
            "sink.kind must be \"kubernetes\"",
        ),
        // A quoted key with a dot is no section's: the secret checks read sections.
        (
            "listen = \"0.0.0.0:8080\"",
            "listen = \"0.0.0.0:8080\"\n\"github.token\" = \"ghp_x\"",
            "unknown top-level key \"github.token\"",
        ),
        (
            "state = \"/var/lib/previewd/previewd.db\"",
            "state = \"/var/lib/previewd/../../tmp/x.db\"",
            "is not on the volume",
        ),
        (
            "listen = \"0.0.0.0:8080\"",
            "listen = \"[0:0:0:0:0:0:0:1]:8080\"",
            "is a loopback address",
        ),
    ] {
        replace_in_config(from, to, text);
    }
}

/// The default values with `extra` after appProjects, which must be refused with `text`.
fn with_projects(extra: &str, text: &str) {
    let projects = format!("{}{extra}", default_value("appProjects"));
    refused_with(json!({ "appProjects": projects }), text);
}

/// appProjects carries the two AppProjects and nothing else, however a document is
/// written: the chart emits what it parsed and checked, never the text as given.
#[test]
fn nothing_rides_along_with_the_appprojects() {
    let binding = "{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"ClusterRoleBinding\", \
                   \"metadata\": {\"name\": \"smuggled\"}, \"roleRef\": {\"apiGroup\": \
                   \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\", \"name\": \"cluster-admin\"}}";
    let other = "holds something other than AppProjects";
    with_projects(&format!("---\n{binding}\n"), other);
    with_projects(&format!("---\n  {binding}\n"), other);
    with_projects(&format!("--- {binding}\n"), other);
    with_projects("---\n\"kind\": \"ConfigMap\"\n", other);
    with_projects(
        "---\napiVersion: example.com/v1\nkind: AppProject\nmetadata: {name: x}\n",
        other,
    );
}

/// What the chart emits reads back as what it checked: a quoted `"<<"` key (a merge key
/// once emitted) and a string `toYaml` cannot keep (a NEL before `---`) are refused.
#[test]
fn appprojects_that_would_not_read_back_as_checked_are_refused() {
    let projects = default_value("appProjects");
    let description = "  description: \"previewd helper Applications";
    assert!(projects.contains(description));
    for (from, to) in [
        (
            description.to_owned(),
            format!("  \"<<\": {{sourceRepos: [\"*\"]}}\n{description}"),
        ),
        (
            description.to_owned(),
            "  description: \"\\x85--- previewd helper Applications".to_owned(),
        ),
    ] {
        refused_with(
            json!({"appProjects": projects.replacen(&from, &to, 1)}),
            "holds something other than AppProjects",
        );
    }
}

/// The default configuration with `from` replaced by `to`, which must be refused with `text`.
fn replace_in_config(from: &str, to: &str, text: &str) {
    let config = default_value("config");
    assert!(config.contains(from), "{from}");
    refused_with(json!({"config": config.replacen(from, to, 1)}), text);
}

/// appProjects that are not `previewd render --projects` of the configuration (a cluster or
/// a repository added, a project renamed, Argo CD elsewhere) are refused with how to
/// regenerate them.
#[test]
fn appprojects_stale_for_the_configuration_are_refused() {
    let regenerate =
        "regenerate appProjects with `previewd --config previewd.toml render --projects`";
    with_config(
        "[[clusters]]\nname = \"us-1\"\nserver = \"https://us-1.example.com\"",
        regenerate,
    );
    with_config("[[repos]]\nname = \"acme/docs\"", regenerate);
    with_config(
        "[[repos]]\nname = \"acme/docs\"\napp_chart = \"chart\"",
        regenerate,
    );
    replace_in_config(
        "apps_project = \"preview-apps\"",
        "apps_project = \"apps\"",
        "config names the projects [previews apps]",
    );
    replace_in_config(
        "argocd_namespace = \"argocd\"",
        "argocd_namespace = \"gitops\"",
        "but sink.argocd_namespace is gitops",
    );
    replace_in_config(
        "revision = \"v0.1.0\"",
        "revision = \"v0.1.0\"\nlegacy_names = true",
        regenerate,
    );
}

/// values.schema.json turns a wrong value into a clear `helm install` error.
#[test]
fn the_values_schema_refuses_a_wrong_value() {
    let cases = [
        (
            "image.pullPolicy=Sometimes",
            "at '/image/pullPolicy': value must be one of",
        ),
        (
            "ingress.enabled=true",
            "at '/ingress/host': '' does not match pattern",
        ),
        ("ingress.annotations.a=1", "at '/ingress/annotations/a'"),
        ("persistence.size=lots", "at '/persistence/size'"),
        (
            "service.port=http",
            "at '/service/port': got string, want integer",
        ),
        ("existingSecret=My_Secret", "at '/existingSecret'"),
        ("secretKeys.apiToken=", "at '/secretKeys/apiToken'"),
        (
            "serviceMonitor.interval=often",
            "at '/serviceMonitor/interval'",
        ),
        (
            "networkPolicy.prometheus.podLabels=null",
            "at '/networkPolicy/prometheus",
        ),
        ("config=", "at '/config'"),
        (
            "ingres.enabled=true",
            "additional properties 'ingres' not allowed",
        ),
    ];
    for (set, text) in cases {
        assert_refused(&["--set", set], text);
    }
    // What the schema cannot say, the templates do.
    assert_refused(
        &["--set", "serviceMonitor.enabled=true"],
        "serviceMonitor.enabled: set `[metrics] listen = \"0.0.0.0:9090\"` in config",
    );
}

/// The ServiceMonitor scrapes the metrics port (`metrics.listen`), where /metrics needs no
/// token, and only Prometheus reaches that port; nothing hands Prometheus the API token.
#[test]
fn the_servicemonitor_scrapes_the_metrics_port_without_the_api_token() {
    let (_, objects, _) = everything();
    let monitor = find(&objects, "ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let endpoints = monitor["spec"]["endpoints"].as_array().unwrap();
    assert_eq!(
        endpoints,
        &[json!({"port": "metrics", "path": "/metrics", "interval": "30s"})]
    );
    let service = find(&objects, "Service");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "metrics", "port": 9090, "targetPort": "metrics"}))
    );
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    assert!(
        container(&objects)["ports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "metrics", "containerPort": 9090}))
    );
    let rules = &find(&objects, "NetworkPolicy")["spec"]["ingress"];
    assert_eq!(
        rules[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        rules[1]["ports"],
        json!([{"port": "metrics", "protocol": "TCP"}])
    );
}

/// The Ingress publishes `POST /webhooks/github` (it checks GitHub's signature) and the
/// login under `/auth/` (every preview's ingress asks the check, from any cluster); the
/// dashboard, the API and /metrics stay inside the cluster.
#[test]
fn the_ingress_publishes_the_webhook_and_the_login_only() {
    let (_, objects, _) = everything();
    let ingress = find(&objects, "Ingress");
    assert_eq!(
        ingress["metadata"]["annotations"],
        json!({"cert-manager.io/cluster-issuer": "letsencrypt"})
    );
    assert_eq!(ingress["spec"]["ingressClassName"], "traefik");
    assert_eq!(
        ingress["spec"]["tls"],
        json!([{"hosts": ["previewd.example.com"], "secretName": "previewd-webhook-tls"}])
    );
    let rules = ingress["spec"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["host"], "previewd.example.com");
    assert_eq!(
        rules[0]["http"]["paths"],
        json!([{"path": "/webhooks/github", "pathType": "Exact",
                "backend": {"service": {"name": "previewd", "port": {"name": "http"}}}},
               {"path": "/auth/", "pathType": "Prefix",
                "backend": {"service": {"name": "previewd", "port": {"name": "http"}}}}])
    );
}

/// NOTES.txt gives the step the chart cannot take: the argocd-cm health checks, as a merge
/// patch of a file that exists, in Argo CD's namespace.
#[test]
fn the_notes_state_the_argocd_cm_patch_step() {
    let step = "kubectl -n gitops patch configmap argocd-cm --type merge --patch-file deploy/patches/argocd-cm.yaml";
    let (_, _, notes) = everything();
    assert!(notes.contains(step), "{notes}");
    assert!(
        notes.contains("database.mode is cnpg, so add them"),
        "{notes}"
    );
    assert!(
        Path::new(ROOT)
            .join("deploy/patches/argocd-cm.yaml")
            .is_file()
    );
    let (_, _, notes) = render(&[]);
    assert!(notes.contains(&step.replace("gitops", "argocd")), "{notes}");
    assert!(notes.contains("--from-literal=webhook-secret="), "{notes}");
}

/// deploy/manifests/previewd.yaml is the chart rendered with its default values (and its
/// Namespace): `UPDATE_DEPLOY=1` writes it anew.
#[test]
fn the_plain_manifests_are_the_chart_rendered_with_default_values() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("previewd.yaml");
    let (ok, out) = python::run(
        "deploy/chart.py",
        &[
            chart().as_str(),
            "--set",
            "namespace.create=true",
            "--manifests",
            fresh.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}");
    let fresh = std::fs::read_to_string(fresh).unwrap();
    let committed = Path::new(ROOT).join(MANIFESTS);
    if std::env::var_os("UPDATE_DEPLOY").is_some() {
        std::fs::write(&committed, &fresh).unwrap();
    }
    let committed = std::fs::read_to_string(committed).unwrap_or_default();
    assert!(
        committed == fresh,
        "{MANIFESTS} is not the chart rendered: regenerate it with UPDATE_DEPLOY=1 cargo test --test deploy_chart"
    );
}

/// `kubectl apply -f deploy/manifests/previewd.yaml` (or `-k deploy`) in one step: the
/// Namespace first, the admission policies before the Deployment could write anything, and
/// every namespaced object in a namespace that exists or is made earlier in the file (Argo
/// CD's is the cluster's).
#[test]
fn the_plain_manifests_apply_in_one_step() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(MANIFESTS)).unwrap();
    let objects = yaml_documents(&text);
    let kinds = kinds(&objects);
    assert_eq!(kinds[0], "Namespace");
    assert_eq!(objects[0]["metadata"]["name"], "previewd-system");
    assert_eq!(
        objects[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let position = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
    assert!(position("ValidatingAdmissionPolicyBinding") < position("Deployment"));
    assert!(position("AppProject") < position("Deployment"));
    for object in &objects[1..] {
        let namespace = &object["metadata"]["namespace"];
        assert!(
            namespace.is_null() || namespace == "previewd-system" || namespace == "argocd",
            "{object}"
        );
    }
    let kustomization: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("deploy/kustomization.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        kustomization["resources"],
        json!(["manifests/previewd.yaml"])
    );
    // Kustomize sorts by kind unless told to keep the file's order.
    assert_eq!(kustomization["sortOptions"], json!({"order": "fifo"}));
    // With kubectl at hand, what `kubectl apply -k deploy` sends is the file, in its order.
    if let Ok(output) = Command::new("kubectl")
        .args(["kustomize", &format!("{ROOT}/deploy")])
        .output()
    {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let built = yaml_documents(&String::from_utf8(output.stdout).unwrap());
        assert_eq!(built, objects);
    }
}

/// Teardown confirms each ledger item it can look up (`ledger::api_of`) through the
/// Kubernetes API: previewd's ClusterRole must let it `get` every such kind, and nothing more.
#[test]
fn previewd_may_look_up_every_kind_its_ledger_confirms_and_only_get_them() {
    let (_, objects, _) = render(&[]);
    let role = objects
        .iter()
        .find(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .ends_with("-teardown-confirm")
        })
        .expect("the teardown's ClusterRole");
    let rules = role["rules"].as_array().unwrap();
    for kind in previewd::ledger::CHECKABLE {
        let api = previewd::ledger::api_of(kind).unwrap();
        assert!(
            rules.iter().any(|r| r["apiGroups"] == json!([api.group])
                && r["resources"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(api.plural))
                && r["verbs"] == json!(["get"])),
            "{kind}: no get on {}/{}",
            api.group,
            api.plural
        );
    }
    assert!(rules.iter().all(|r| r["verbs"] == json!(["get"])));
}

/// The dashboard's cost is the preview namespace's ResourceQuota count (`sink::kubernetes`
/// `quota_used`): previewd may `get` quotas, and nothing more of them.
#[test]
fn previewd_may_read_a_preview_namespaces_quota_and_only_read_it() {
    let (_, objects, _) = render(&[]);
    let rules: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .flat_map(|o| o["rules"].as_array().unwrap())
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.contains(&json!("resourcequotas")))
        })
        .collect();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0]["apiGroups"], json!([""]));
    assert_eq!(rules[0]["verbs"], json!(["get"]));
}
