//! previewd's own chart (deploy/chart) rendered by the real Helm library (helm-python-sdk,
//! `tests/deploy/chart.py`), with its default values, with everything on
//! (`tests/deploy/values-everything.yaml`) and in PostgreSQL mode
//! (`tests/deploy/values-postgresql.yaml`): every object valid against the Kubernetes and CRD
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
const POSTGRESQL: &str = "tests/deploy/values-postgresql.yaml";
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

/// PostgreSQL mode with everything it takes (`values-postgresql.yaml`), then `args`.
fn postgresql(args: &[&str]) -> (String, Vec<Value>, String) {
    let file = format!("{ROOT}/{POSTGRESQL}");
    let mut all = vec!["-f", file.as_str()];
    all.extend(args);
    render(&all)
}

/// PostgreSQL mode's values (`values-postgresql.yaml`) with `change` made to them, as a
/// values file: a builder for what must be refused or rendered otherwise.
fn postgresql_values(change: impl FnOnce(&mut Value)) -> Value {
    let mut values: Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(format!("{ROOT}/{POSTGRESQL}")).unwrap())
            .unwrap();
    change(&mut values);
    values
}

/// PostgreSQL mode's config with `from` replaced by `to` (which must be there).
fn postgresql_config(from: &str, to: &str) -> Value {
    postgresql_values(|values| {
        let config = values["config"].as_str().unwrap().to_owned();
        assert!(config.contains(from), "{from}");
        values["config"] = json!(config.replacen(from, to, 1));
    })
}

/// `values` written to a file and rendered (validated and linted).
fn render_values(values: &Value) -> (String, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values.to_string()).unwrap();
    render(&["-f", file.to_str().unwrap()])
}

fn pod(objects: &[Value]) -> &Value {
    &find(objects, "Deployment")["spec"]["template"]["spec"]
}

/// Whether `selector` (a `matchLabels`) selects pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(key, value)| &labels[key] == value)
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

    // PostgreSQL mode: the PodDisruptionBudget and the Lease's Role and RoleBinding more, the
    // claim fewer.
    let (out, _, _) = postgresql(&[]);
    assert!(out.contains("lint: 0 warnings or errors"), "{out}");
    assert!(
        out.trim_end().ends_with("validated 20 objects, 0 failed"),
        "{out}"
    );
}

/// The AppProjects the chart applies are exactly those `previewd render --projects` prints
/// for the previewd.toml its ConfigMap carries, with the environment its Deployment sets
/// (secrets stand-ins): the configuration loads, and the projects follow it.
#[test]
fn the_charts_appprojects_are_what_previewd_renders_for_the_config_it_carries() {
    for (what, (_, objects, _)) in [
        ("default values", render(&[])),
        ("everything on", everything()),
        ("PostgreSQL mode", postgresql(&[])),
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
            let value = match (variable["value"].as_str(), variable["name"].as_str()) {
                (Some(value), _) => value.to_owned(),
                (None, Some("PREVIEWD_STATE")) => {
                    "postgresql://previewd:stand-in@postgres.example.com:5432/previewd?sslmode=verify-full".to_owned()
                }
                (None, _) => format!("stand-in-for-the-secret-{}", variable["name"]),
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

/// With the SQLite state (the default): one writer, so one replica, replaced (never rolled)
/// with the volume released first, the state on its claim; several replicas are refused,
/// saying what they need.
#[test]
fn with_sqlite_previewd_runs_one_replica_on_its_volume() {
    for (_, objects, _) in [render(&[]), everything(), render(&["--set", "replicas=1"])] {
        let deployment = find(&objects, "Deployment");
        assert_eq!(deployment["spec"]["replicas"], 1);
        assert_eq!(deployment["spec"]["strategy"], json!({"type": "Recreate"}));
        let claim = find(&objects, "PersistentVolumeClaim");
        assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        let volume = pod(&objects)["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "state")
            .expect("the state's volume");
        assert_eq!(
            volume["persistentVolumeClaim"]["claimName"],
            claim["metadata"]["name"]
        );
        assert!(
            container(&objects)["volumeMounts"]
                .as_array()
                .unwrap()
                .contains(&json!({"name": "state", "mountPath": "/var/lib/previewd"}))
        );
        assert!(!kinds(&objects).contains(&"PodDisruptionBudget"));
        assert!(
            objects
                .iter()
                .all(|o| o["metadata"]["name"] != "previewd-lease")
        );
        assert!(
            !container(&objects)["env"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == "PREVIEWD_STATE")
        );
    }
    for replicas in ["2", "3"] {
        assert_refused(
            &["--set", &format!("replicas={replicas}")],
            &format!(
                "replicas is {replicas}, but state.backend is sqlite: SQLite has one writer, on a \
                 ReadWriteOnce volume, so previewd runs 1 replica; several need the PostgreSQL \
                 state (state.backend=postgresql, secretKeys.state)"
            ),
        );
    }
    assert_refused(
        &["-f", &format!("{ROOT}/{EVERYTHING}"), "--set", "replicas=2"],
        "replicas is 2, but state.backend is sqlite",
    );
    assert_refused(
        &["--set", "replicaCount=2"],
        "additional properties 'replicaCount'",
    );
    assert_refused(
        &["--set", "secretKeys.state=url"],
        "secretKeys.state is set, but state.backend is sqlite",
    );
}

/// With the PostgreSQL state: several replicas (2 unless set), rolled one more at a time
/// and none fewer, spread across nodes where there are several, ending gracefully; no claim,
/// no volume; and the readiness probe that of SQLite mode, ready whether or not the pod holds
/// the Lease.
#[test]
fn with_postgresql_previewd_rolls_several_replicas_spread_across_nodes() {
    let (_, objects, _) = postgresql(&[]);
    let deployment = find(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(
        deployment["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    );
    // deploy/postgresql/values.yaml: the chart's defaults but for the state.
    let (_, by_default, _) = render(&["-f", &format!("{ROOT}/deploy/postgresql/values.yaml")]);
    assert_eq!(find(&by_default, "Deployment")["spec"]["replicas"], 2);
    let (_, unset, _) = postgresql(&["--set", "replicas=null"]);
    assert_eq!(find(&unset, "Deployment")["spec"]["replicas"], 2);

    assert!(!kinds(&objects).contains(&"PersistentVolumeClaim"));
    let pod = pod(&objects);
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v.get("persistentVolumeClaim").is_none() && v["name"] != "state"),
        "{}",
        pod["volumes"]
    );
    assert!(
        container(&objects)["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| !m["mountPath"]
                .as_str()
                .unwrap()
                .starts_with("/var/lib/previewd")),
    );

    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert_eq!(spread.len(), 1);
    assert_eq!(spread[0]["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(spread[0]["whenUnsatisfiable"], "ScheduleAnyway");
    assert_eq!(spread[0]["maxSkew"], 1);
    assert!(selects(&spread[0]["labelSelector"]["matchLabels"], labels));
    assert!(render(&[]).1.iter().all(|o| {
        o["kind"] != "Deployment"
            || o["spec"]["template"]["spec"]
                .get("topologySpreadConstraints")
                .is_none()
    }));

    // Readiness is SQLite mode's probe, untouched: nothing here asks for the Lease.
    let (_, sqlite, _) = render(&[]);
    assert_eq!(
        container(&objects)["readinessProbe"],
        container(&sqlite)["readinessProbe"]
    );
    assert_eq!(
        container(&objects)["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );

    // A stopping replica first leaves the Service's endpoints, then drains within the grace.
    let sleep = container(&objects)["lifecycle"]["preStop"]["sleep"]["seconds"]
        .as_i64()
        .unwrap();
    let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert_eq!(grace, 90);
    assert!(sleep > 0 && grace >= sleep + 30, "{sleep} {grace}");
    assert_eq!(
        find(&by_default, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        60
    );
}

/// PostgreSQL mode's PodDisruptionBudget selects previewd's pods (the Deployment's) and lets
/// a drain take one at a time; SQLite mode, whose one pod a budget would only pin, has none.
#[test]
fn the_disruption_budget_selects_previewds_pods_in_postgresql_mode_only() {
    let (_, objects, _) = postgresql(&[]);
    let budget = find(&objects, "PodDisruptionBudget");
    assert_eq!(budget["metadata"]["namespace"], "previewd-system");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert!(budget["spec"].get("minAvailable").is_none());
    assert_eq!(budget["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    let deployment = find(&objects, "Deployment");
    let selector = &budget["spec"]["selector"]["matchLabels"];
    assert!(selects(
        selector,
        &deployment["spec"]["template"]["metadata"]["labels"]
    ));
    assert_eq!(selector, &deployment["spec"]["selector"]["matchLabels"]);
    let (_, two, _) = postgresql(&["--set", "podDisruptionBudget.maxUnavailable=2"]);
    assert_eq!(
        find(&two, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        2
    );
    for (_, objects, _) in [render(&[]), everything()] {
        assert!(!kinds(&objects).contains(&"PodDisruptionBudget"));
    }
}

/// The Lease's Role: in previewd's own namespace, `create` on leases (a name cannot narrow
/// it) and `get`/`update` of config lease.name's Lease only; bound to the account previewd
/// runs as; nothing cluster-wide touches leases. A Lease elsewhere, or none, is refused.
#[test]
fn the_lease_role_grants_the_one_lease_in_previewds_namespace() {
    let lease_role = |objects: &[Value]| -> Option<Value> {
        objects
            .iter()
            .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "previewd-lease")
            .cloned()
    };
    let (_, objects, _) = postgresql(&[]);
    let role = lease_role(&objects).expect("the Lease's Role");
    assert_eq!(role["metadata"]["namespace"], "previewd-system");
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
             "resourceNames": ["previewd"], "verbs": ["get", "update"]},
        ])
    );
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["roleRef"]["name"] == "previewd-lease")
        .expect("the Lease's RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], "previewd-system");
    assert_eq!(binding["roleRef"]["kind"], "Role");
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": pod(&objects)["serviceAccountName"],
                "namespace": "previewd-system"}])
    );
    let leases = |o: &&Value| {
        o["rules"].as_array().is_some_and(|rules| {
            rules
                .iter()
                .any(|r| r["resources"].to_string().contains("leases"))
        })
    };
    assert_eq!(objects.iter().filter(leases).count(), 1);
    assert!(objects.iter().filter(leases).all(|o| o["kind"] == "Role"));

    // The Lease config names, in the namespace the chart grants it.
    let named = postgresql_config(
        "[tls]",
        "[lease]\nname = \"previewd-eu\"\nnamespace = \"previewd-system\"\n\n[tls]",
    );
    let role = lease_role(&render_values(&named).1).unwrap();
    assert_eq!(role["rules"][1]["resourceNames"], json!(["previewd-eu"]));
    for (lines, text) in [
        (
            "[lease]\nnamespace = \"kube-system\"",
            "config sets lease.namespace = \"kube-system\": the chart grants the Lease in previewd's own namespace, previewd-system",
        ),
        (
            "[lease]\nenabled = false",
            "config sets lease.enabled = false, but state.backend is postgresql",
        ),
        ("[lease]\nname = \"Leader!\"", "is not a Lease name"),
    ] {
        refused_with(
            postgresql_config("[tls]", &format!("{lines}\n\n[tls]")),
            text,
        );
    }
    for (_, objects, _) in [render(&[]), everything()] {
        assert!(lease_role(&objects).is_none());
        assert_eq!(objects.iter().filter(leases).count(), 0);
    }
}

/// The state's URL holds a password: it reaches previewd from the Secret as PREVIEWD_STATE,
/// never through the ConfigMap, and a URL written into config is refused in either mode.
/// What SQLite mode keeps beside the state comes from the Secret too, the same for every
/// replica: the login's session key, and the preview CA as files readable by previewd's
/// group.
#[test]
fn in_postgresql_mode_the_url_and_what_replicas_share_come_from_the_secret_only() {
    let (_, objects, _) = postgresql(&[]);
    let config: toml::Table = find(&objects, "ConfigMap")["data"]["previewd.toml"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(!config.contains_key("state"), "{config}");
    let env = container(&objects)["env"].as_array().unwrap();
    let from_secret = |name: &str| {
        env.iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))["valueFrom"]["secretKeyRef"]
            .clone()
    };
    assert_eq!(
        from_secret("PREVIEWD_STATE"),
        json!({"name": "previewd-secrets", "key": "state-url"})
    );
    assert_eq!(
        from_secret("PREVIEWD_LOGIN_SESSION_SECRET"),
        json!({"name": "previewd-secrets", "key": "session-key"})
    );
    assert_eq!(
        from_secret("PREVIEWD_LOGIN_CLIENT_SECRET"),
        json!({"name": "previewd-secrets", "key": "oauth-client-secret"})
    );
    assert!(!kinds(&objects).contains(&"Secret"));

    let volume = pod(&objects)["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "preview-ca")
        .expect("the preview CA's volume")
        .clone();
    assert_eq!(volume["secret"]["secretName"], "previewd-secrets");
    assert_eq!(volume["secret"]["defaultMode"], 0o440);
    let mount = container(&objects)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "preview-ca")
        .unwrap()
        .clone();
    for (variable, key) in [
        ("PREVIEWD_TLS_CA_CERT", "ca.crt"),
        ("PREVIEWD_TLS_CA_KEY", "ca.key"),
    ] {
        let path = env.iter().find(|v| v["name"] == variable).unwrap()["value"]
            .as_str()
            .unwrap();
        let item = volume["secret"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["key"] == key)
            .unwrap();
        assert_eq!(
            Path::new(mount["mountPath"].as_str().unwrap()).join(item["path"].as_str().unwrap()),
            Path::new(path),
            "{variable}"
        );
    }

    let url = "state = \"postgresql://previewd:hunter2@db.example.com:5432/previewd\"";
    let secret = "config sets state to a URL: a PostgreSQL URL holds a password, and a secret never goes in values";
    refused_with(
        postgresql_config(
            "listen = \"0.0.0.0:8080\"",
            &format!("listen = \"0.0.0.0:8080\"\n{url}"),
        ),
        secret,
    );
    replace_in_config("state = \"/var/lib/previewd/previewd.db\"", url, secret);
    refused_with(
        postgresql_config(
            "listen = \"0.0.0.0:8080\"",
            "listen = \"0.0.0.0:8080\"\nstate = \"/var/lib/previewd/previewd.db\"",
        ),
        "config sets state = \"/var/lib/previewd/previewd.db\", but state.backend is postgresql: the PostgreSQL URL comes from the Secret \"previewd-secrets\" (secretKeys.state) as PREVIEWD_STATE",
    );
    for (line, text) in [
        (
            "session_secret = \"0123456789abcdef0123456789abcdef\"",
            "config sets login.session_secret: a secret never goes in values",
        ),
        (
            "client_secret = \"s\"",
            "config sets login.client_secret: a secret never goes in values",
        ),
    ] {
        refused_with(
            postgresql_config("[login]", &format!("[login]\n{line}")),
            text,
        );
    }
}

/// What PostgreSQL mode cannot run without is refused, saying what to set: the URL's key,
/// the session key every replica shares, sealed TLS's one CA, a cluster's sealing
/// certificate (previewd's own key pair would be each replica's own).
#[test]
fn postgresql_mode_refuses_what_its_replicas_would_not_share() {
    let without = |key: &'static str| postgresql_values(move |v| v["secretKeys"][key] = json!(""));
    refused_with(
        without("state"),
        "state.backend is postgresql: put the URL (postgresql://USER:PASSWORD@HOST:5432/DB?sslmode=verify-full) in the Secret \"previewd-secrets\" and name its key in secretKeys.state",
    );
    refused_with(
        without("loginSessionSecret"),
        "every replica must seal sessions and share links with one key",
    );
    refused_with(
        without("tlsCaKey"),
        "secretKeys.tlsCaCert and secretKeys.tlsCaKey go together",
    );
    refused_with(
        postgresql_values(|v| {
            v["secretKeys"]["tlsCaCert"] = json!("");
            v["secretKeys"]["tlsCaKey"] = json!("");
        }),
        "state.backend is postgresql and tls.mode is sealed: every replica must sign with one preview CA",
    );
    // Without sealed TLS no CA is needed.
    let (_, objects, _) = render_values(&postgresql_values(|v| {
        v["secretKeys"]["tlsCaCert"] = json!("");
        v["secretKeys"]["tlsCaKey"] = json!("");
        let config = v["config"]
            .as_str()
            .unwrap()
            .replace("mode = \"sealed\"", "mode = \"cert-manager\"");
        v["config"] = json!(config);
    }));
    assert!(
        !container(&objects)["env"]
            .to_string()
            .contains("PREVIEWD_TLS_CA")
    );
    refused_with(
        postgresql_values(|v| {
            let config = v["config"].as_str().unwrap().to_owned();
            let clusters = config.find("[[clusters]]").unwrap();
            let repos = config.find("[[repos]]").unwrap();
            v["config"] = json!(format!("{}{}", &config[..clusters], &config[repos..]));
        }),
        "state.backend is postgresql and config names no [[clusters]]",
    );
}

/// The NetworkPolicy governs who reaches previewd and leaves egress open: previewd reaches
/// the PostgreSQL server (and GitHub, the clusters) in either mode.
#[test]
fn the_network_policy_lets_previewd_reach_its_database() {
    for (_, objects, _) in [postgresql(&[]), render(&[])] {
        let policy = find(&objects, "NetworkPolicy");
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
        assert!(policy["spec"].get("egress").is_none());
    }
}

/// NOTES.txt in PostgreSQL mode: the Secret's keys it needs and how to find the Lease's
/// holder.
#[test]
fn the_notes_of_postgresql_mode_name_its_secret_keys_and_the_lease() {
    let (_, _, notes) = postgresql(&[]);
    for text in [
        "--from-literal=state-url='postgresql://previewd:<password>@<host>:5432/previewd?sslmode=verify-full'",
        "--from-literal=session-key=\"$(openssl rand -hex 32)\"",
        "--from-file=ca.crt=",
        "PostgreSQL state: 3 replicas",
        "kubectl -n previewd-system get lease previewd -o jsonpath='{.spec.holderIdentity}'",
    ] {
        assert!(notes.contains(text), "{text}\n{notes}");
    }
    let (_, _, notes) = render(&[]);
    assert!(!notes.contains("lease"), "{notes}");
    assert!(!notes.contains("postgresql://"), "{notes}");
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
            "state.backend=mysql",
            "at '/state/backend': value must be one of 'sqlite', 'postgresql'",
        ),
        ("replicas=0", "at '/replicas'"),
        ("replicas=two", "at '/replicas'"),
        (
            "podDisruptionBudget.maxUnavailable=0",
            "at '/podDisruptionBudget/maxUnavailable'",
        ),
        (
            "terminationGracePeriodSeconds=1",
            "at '/terminationGracePeriodSeconds'",
        ),
        ("secretKeys.state=a/b", "at '/secretKeys/state'"),
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

/// The plain manifests and the values they are the chart rendered with (and its Namespace):
/// deploy/ with the default values, deploy/postgresql/ in PostgreSQL mode.
const PLAIN: [(&str, &str, Option<&str>); 2] = [
    ("deploy", MANIFESTS, None),
    (
        "deploy/postgresql",
        "deploy/postgresql/previewd.yaml",
        Some("deploy/postgresql/values.yaml"),
    ),
];

/// deploy/manifests/previewd.yaml is the chart rendered with its default values (and its
/// Namespace), deploy/postgresql/previewd.yaml with deploy/postgresql/values.yaml:
/// `UPDATE_DEPLOY=1` writes them anew.
#[test]
fn the_plain_manifests_are_the_chart_rendered_with_their_values() {
    for (_, manifests, values) in PLAIN {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("previewd.yaml");
        let mut args = vec![chart()];
        if let Some(values) = values {
            args.extend(["-f".into(), format!("{ROOT}/{values}")]);
        }
        args.extend([
            "--set".into(),
            "namespace.create=true".into(),
            "--manifests".into(),
            fresh.display().to_string(),
        ]);
        let (ok, out) = python::run("deploy/chart.py", &args);
        assert!(ok, "{out}");
        let fresh = std::fs::read_to_string(fresh).unwrap();
        let committed = Path::new(ROOT).join(manifests);
        if std::env::var_os("UPDATE_DEPLOY").is_some() {
            std::fs::write(&committed, &fresh).unwrap();
        }
        let committed = std::fs::read_to_string(committed).unwrap_or_default();
        assert!(
            committed == fresh,
            "{manifests} is not the chart rendered: regenerate it with UPDATE_DEPLOY=1 cargo test --test deploy_chart"
        );
    }
}

/// deploy/postgresql/values.yaml is the chart's defaults but for the state: config is the
/// default one without its `state` line, and the manifests are PostgreSQL mode's.
#[test]
fn the_postgresql_manifests_are_the_defaults_with_the_state_in_postgresql() {
    let values: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("deploy/postgresql/values.yaml")).unwrap(),
    )
    .unwrap();
    let line = "state = \"/var/lib/previewd/previewd.db\"\n";
    let default = default_value("config");
    assert!(default.contains(line));
    assert_eq!(values["config"], json!(default.replacen(line, "", 1)));
    assert_eq!(values["state"], json!({"backend": "postgresql"}));
    let objects = yaml_documents(
        &std::fs::read_to_string(Path::new(ROOT).join("deploy/postgresql/previewd.yaml")).unwrap(),
    );
    let kinds = kinds(&objects);
    assert!(kinds.contains(&"PodDisruptionBudget"));
    assert!(!kinds.contains(&"PersistentVolumeClaim"));
    let deployment = find(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
}

/// `kubectl apply -f deploy/manifests/previewd.yaml` (or `-k deploy`, `-k deploy/postgresql`)
/// in one step: the Namespace first, the admission policies before the Deployment could
/// write anything, and every namespaced object in a namespace that exists or is made earlier
/// in the file (Argo CD's is the cluster's).
#[test]
fn the_plain_manifests_apply_in_one_step() {
    for (directory, manifests, _) in PLAIN {
        let text = std::fs::read_to_string(Path::new(ROOT).join(manifests)).unwrap();
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
            &std::fs::read_to_string(Path::new(ROOT).join(directory).join("kustomization.yaml"))
                .unwrap(),
        )
        .unwrap();
        let file = Path::new(manifests)
            .strip_prefix(directory)
            .unwrap()
            .to_str()
            .unwrap();
        assert_eq!(kustomization["resources"], json!([file]), "{directory}");
        // Kustomize sorts by kind unless told to keep the file's order.
        assert_eq!(kustomization["sortOptions"], json!({"order": "fifo"}));
        // With kubectl at hand, what `kubectl apply -k` sends is the file, in its order.
        if let Ok(output) = Command::new("kubectl")
            .args(["kustomize", &format!("{ROOT}/{directory}")])
            .output()
        {
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let built = yaml_documents(&String::from_utf8(output.stdout).unwrap());
            assert_eq!(built, objects, "{directory}");
        }
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
