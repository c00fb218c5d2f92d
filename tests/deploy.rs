//! What deploy/ asks of a cluster, evaluated the way the cluster would: admission.yaml's
//! ValidatingAdmissionPolicies by cel-python (an independent CEL) on requests whose names
//! previewd itself makes — previewd may write only its two projects' Applications, and Argo
//! CD may write an app Application's objects only into that preview's own namespace — and
//! patches/argocd-cm.yaml's Lua health checks by lupa's Lua (`tests/deploy/*.py`).

mod common;

use previewd::naming::Names;
use previewd::preview::PreviewKey;
use serde_json::{Value, json};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PREVIEWD: &str = "system:serviceaccount:previewd-system:previewd";
const ARGOCD: &str = "system:serviceaccount:argocd:argocd-application-controller";

fn names(repo: &str, number: u32) -> Names {
    Names::of(
        &PreviewKey::new(repo.parse().unwrap(), number),
        "preview.example.com",
    )
}

fn case(name: &str, user: &str, object: Value, admitted: bool) -> Value {
    json!({"name": name, "user": user, "object": object, "admitted": admitted})
}

/// An object Argo CD applies for Application `app` into `namespace` (None: cluster-scoped),
/// tracked by label or by annotation.
fn applied(app: &str, namespace: Option<&str>, annotation: bool) -> Value {
    let mut object = json!({"kind": "Pod", "metadata": {"name": "x"}});
    if let Some(namespace) = namespace {
        object["metadata"]["namespace"] = json!(namespace);
    }
    if annotation {
        let tracking = format!("{app}:/Pod:{}/x", namespace.unwrap_or_default());
        object["metadata"]["annotations"] = json!({"argocd.argoproj.io/tracking-id": tracking});
    } else {
        object["metadata"]["labels"] = json!({"app.kubernetes.io/instance": app});
    }
    object
}

/// An Ingress of `names`' app Application, as Argo CD applies it.
fn ingress(names: &Names, spec: Value, annotations: Value) -> Value {
    json!({"kind": "Ingress", "metadata": {"name": "web", "namespace": names.slug, "annotations": annotations,
           "labels": {"app.kubernetes.io/instance": names.app_application}}, "spec": spec})
}

fn service(names: &Names, spec: Value) -> Value {
    json!({"kind": "Service", "metadata": {"name": "web", "namespace": names.slug,
           "labels": {"app.kubernetes.io/instance": names.app_application}}, "spec": spec})
}

#[test]
fn previewd_writes_only_its_projects_and_apps_only_their_own_namespace() {
    let own = names("octo/shop", 7);
    let other = names("octo/shop", 8);
    let legacy = Names::legacy(
        &PreviewKey::new("octo/shop".parse().unwrap(), 9),
        "preview.example.com",
    );
    let long = names(
        &format!(
            "o/{}",
            "long-repository-name-".repeat(4).trim_end_matches('-')
        ),
        123456,
    );
    let application = |project: &str| json!({"kind": "Application", "metadata": {"name": "a", "namespace": "argocd"}, "spec": {"project": project}});
    let mut forged = applied(&own.app_application, Some(&other.slug), false);
    forged["metadata"]["annotations"] = json!({
        "argocd.argoproj.io/tracking-id": format!("{}:/Pod:{}/x", other.app_application, other.slug)
    });
    let cases = json!([
        case(
            "previewd writes a helper Application",
            PREVIEWD,
            application("previews"),
            true
        ),
        case(
            "previewd writes an app Application",
            PREVIEWD,
            application("preview-apps"),
            true
        ),
        case(
            "previewd may not use the default project",
            PREVIEWD,
            application("default"),
            false
        ),
        case(
            "previewd may not omit the project",
            PREVIEWD,
            json!({"kind": "Application", "metadata": {"name": "a"}, "spec": {}}),
            false
        ),
        case(
            "others are not this policy's business",
            "alice",
            application("default"),
            true
        ),
        case(
            "an app writes into its own namespace",
            ARGOCD,
            applied(&own.app_application, Some(&own.slug), false),
            true
        ),
        case(
            "so does a long-named one",
            ARGOCD,
            applied(&long.app_application, Some(&long.slug), false),
            true
        ),
        case(
            "an app may not write into another preview's namespace",
            ARGOCD,
            applied(&own.app_application, Some(&other.slug), false),
            false
        ),
        case(
            "an app kept from before names were recorded writes into its own namespace",
            ARGOCD,
            applied(&legacy.app_application, Some(&legacy.slug), false),
            true
        ),
        case(
            "and is confined to it like any other",
            ARGOCD,
            applied(&legacy.app_application, Some(&other.slug), false),
            false
        ),
        case(
            "nor into the provisioner namespace",
            ARGOCD,
            applied(&own.app_application, Some("previewd-system"), false),
            false
        ),
        case(
            "nor anything cluster-scoped",
            ARGOCD,
            applied(&own.app_application, None, false),
            false
        ),
        case(
            "annotation tracking: its own namespace",
            ARGOCD,
            applied(&own.app_application, Some(&own.slug), true),
            true
        ),
        case(
            "annotation tracking: another preview's namespace",
            ARGOCD,
            applied(&own.app_application, Some(&other.slug), true),
            false
        ),
        case(
            "a forged tracking annotation does not hide the real label",
            ARGOCD,
            forged,
            false
        ),
        case(
            "the helpers reach the provisioner namespace",
            ARGOCD,
            applied(&own.application, Some("previewd-system"), false),
            true
        ),
        case(
            "other Applications are left alone",
            ARGOCD,
            applied("shop", Some("anywhere"), false),
            true
        ),
        case(
            "an Ingress for the preview's own host",
            ARGOCD,
            ingress(&own, json!({"rules": [{"host": own.host}]}), json!({})),
            true
        ),
        case(
            "an Ingress for another preview's host",
            ARGOCD,
            ingress(&own, json!({"rules": [{"host": other.host}]}), json!({})),
            false
        ),
        case(
            "an Ingress for any host",
            ARGOCD,
            ingress(&own, json!({"rules": [{"http": {}}]}), json!({})),
            false
        ),
        case(
            "an Ingress as the default backend",
            ARGOCD,
            ingress(&own, json!({"defaultBackend": {}}), json!({})),
            false
        ),
        case(
            "an Ingress asking cert-manager for a certificate",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}]}),
                json!({"cert-manager.io/cluster-issuer": "letsencrypt"})
            ),
            false,
        ),
        case(
            "a Service",
            ARGOCD,
            service(&own, json!({"ports": [{"port": 80}]})),
            true
        ),
        case(
            "a Service with externalIPs",
            ARGOCD,
            service(&own, json!({"externalIPs": ["10.0.0.1"]})),
            false
        ),
        case(
            "an ExternalName Service",
            ARGOCD,
            service(
                &own,
                json!({"type": "ExternalName", "externalName": "argocd-server.argocd.svc"})
            ),
            false
        ),
        case(
            "a LoadBalancer Service",
            ARGOCD,
            service(
                &own,
                json!({"type": "LoadBalancer", "ports": [{"port": 80}]})
            ),
            false
        ),
        case(
            "a NodePort Service",
            ARGOCD,
            service(&own, json!({"type": "NodePort", "ports": [{"port": 80}]})),
            false
        ),
        case(
            "a ClusterIP Service said so",
            ARGOCD,
            service(&own, json!({"type": "ClusterIP", "ports": [{"port": 80}]})),
            true
        ),
        case(
            "an Ingress with its own TLS host",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}], "tls": [{"hosts": [own.host], "secretName": "t"}]}),
                json!({})
            ),
            true,
        ),
        case(
            "an Ingress with another TLS host",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}], "tls": [{"hosts": ["shop.example.com"]}]}),
                json!({})
            ),
            false,
        ),
        case(
            "an Ingress adding a host by annotation",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}]}),
                json!({"nginx.ingress.kubernetes.io/server-alias": "shop.example.com"})
            ),
            false,
        ),
        case(
            "an Ingress with a configuration snippet",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}]}),
                json!({"nginx.ingress.kubernetes.io/server-snippet": "return 200;"})
            ),
            false,
        ),
        case(
            "an Ingress with ordinary annotations",
            ARGOCD,
            ingress(
                &own,
                json!({"rules": [{"host": own.host}]}),
                json!({"nginx.ingress.kubernetes.io/proxy-body-size": "8m"})
            ),
            true,
        ),
        case(
            "another Application's Ingress is not previewd's business",
            ARGOCD,
            json!({"kind": "Ingress", "metadata": {"name": "i", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "shop"}},
                   "spec": {"rules": [{"http": {}}]}}),
            true,
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, cases.to_string()).unwrap();
    let (ok, text) = common::python::run(
        "deploy/check_admission.py",
        &[
            format!("{ROOT}/deploy/admission.yaml"),
            file.display().to_string(),
        ],
    );
    assert!(ok && text.contains("34 passed, 0 failed"), "{text}");
}

/// deploy/patches/argocd-cm.yaml's health checks on the statuses CloudNativePG writes
/// (cloudnative-pg api/v1/database_funcs.go SetAsReady / SetAsFailed / SetAsUnknown): only a
/// reconciled object of the current generation is Healthy; a failure is retried every 30 s,
/// so it stays Progressing with CloudNativePG's message.
#[test]
fn argocd_health_checks_follow_cloudnative_pgs_status() {
    let object = |generation: u32, status: Value| json!({"metadata": {"name": "db", "generation": generation}, "status": status});
    let mut cases = Vec::new();
    for kind in ["Database", "DatabaseRole"] {
        let case = |name: &str, object: Value, status: &str| json!({"name": format!("{kind}: {name}"), "kind": kind, "object": object, "status": status});
        cases.extend([
            case(
                "just created",
                json!({"metadata": {"name": "db", "generation": 1}}),
                "Progressing",
            ),
            case(
                "reconciled",
                object(1, json!({"applied": true, "observedGeneration": 1})),
                "Healthy",
            ),
            case(
                "reconciled an older generation",
                object(2, json!({"applied": true, "observedGeneration": 1})),
                "Progressing",
            ),
            case(
                "failed, to be retried",
                object(
                    1,
                    json!({"applied": false, "message": "role \"x\" does not exist"}),
                ),
                "Progressing",
            ),
            case(
                "on a replica cluster",
                object(1, json!({"message": "waiting"})),
                "Progressing",
            ),
        ]);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, Value::from(cases).to_string()).unwrap();
    let (ok, text) = common::python::run(
        "deploy/check_health.py",
        &[
            format!("{ROOT}/deploy/patches/argocd-cm.yaml"),
            file.display().to_string(),
        ],
    );
    assert!(ok && text.contains("10 passed, 0 failed"), "{text}");
}
