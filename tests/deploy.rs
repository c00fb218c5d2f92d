//! What deploy/ asks of a cluster, evaluated the way the cluster would: the
//! ValidatingAdmissionPolicies of manifests/previewd.yaml (the chart's admission.yaml) by
//! cel-python (an independent CEL) on requests whose names previewd itself makes — previewd
//! may write only its two projects' Applications, Argo CD may write an app Application's
//! objects only into that preview's own namespace, only a preview's helpers publish its host
//! (an Ingress) and bound its namespace (a ResourceQuota, a LimitRange) — and
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
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web", "namespace": names.slug, "annotations": annotations,
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
    let application = |project: &str| json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a", "namespace": "argocd"}, "spec": {"project": project}});
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
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": "a"}, "spec": {}}),
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
            "an app's Ingress, even for the preview's own host",
            ARGOCD,
            ingress(&own, json!({"rules": [{"host": own.host}]}), json!({})),
            false
        ),
        case(
            "an Ingress for another preview's host",
            ARGOCD,
            ingress(&own, json!({"rules": [{"host": other.host}]}), json!({})),
            false
        ),
        case(
            "an Ingress as the default backend",
            ARGOCD,
            ingress(&own, json!({"defaultBackend": {}}), json!({})),
            false
        ),
        case(
            "an app's object asking cert-manager for a certificate",
            ARGOCD,
            {
                let mut service = service(&own, json!({"ports": [{"port": 80}]}));
                service["metadata"]["annotations"] =
                    json!({"cert-manager.io/cluster-issuer": "letsencrypt"});
                service
            },
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
            "another Application's Ingress is not previewd's business",
            ARGOCD,
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "i", "namespace": "shop", "labels": {"app.kubernetes.io/instance": "shop"}},
                   "spec": {"rules": [{"http": {}}]}}),
            true,
        ),
    ]);
    check_admission(&cases, cases.as_array().unwrap().len());
}

/// The admission policies' verdicts (deploy/manifests/previewd.yaml) on `cases` (see `case`)
/// by cel-python: all `expected` of them as the cases say.
fn check_admission(cases: &Value, expected: usize) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, cases.to_string()).unwrap();
    let (ok, text) = common::python::run(
        "deploy/check_admission.py",
        &[
            format!("{ROOT}/deploy/manifests/previewd.yaml"),
            file.display().to_string(),
        ],
    );
    assert!(
        ok && text.contains(&format!("{expected} passed, 0 failed")),
        "{text}"
    );
}

/// An object named `x` as it reaches the API server: `kind` of `api_version` in `namespace`
/// (None: cluster-scoped), tracked for Application `app` as Argo CD stamps what it applies
/// (argo-cd util/argo/resource_tracking.go SetAppInstance and BuildAppInstanceValue:
/// `<app>:<group>/<kind>:<namespace>/<name>`, a cluster-scoped object's namespace being the
/// Application's destination, previewd's slug), or untracked (`app` None).
fn written(api_version: &str, kind: &str, namespace: Option<&str>, app: Option<&str>) -> Value {
    let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}});
    if let Some(namespace) = namespace {
        object["metadata"]["namespace"] = json!(namespace);
    }
    if let Some(app) = app {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let destination = app
            .rsplit_once('-')
            .expect("<slug>-app or <slug>-helpers")
            .0;
        let tracking = format!(
            "{app}:{group}/{kind}:{}/x",
            namespace.unwrap_or(destination)
        );
        object["metadata"]["annotations"] = json!({"argocd.argoproj.io/tracking-id": tracking});
    }
    object
}

/// `object` with `key: value` among its labels (`labels`) or annotations.
fn with(mut object: Value, field: &str, key: &str, value: &str) -> Value {
    object["metadata"][field][key] = json!(value);
    object
}

/// An UPDATE: `object` replacing `old`.
fn updated(name: &str, user: &str, old: Value, object: Value, admitted: bool) -> Value {
    let mut case = case(name, user, object, admitted);
    case["oldObject"] = old;
    case
}

/// argocd-server's own account: resource patches, actions and deletions from the UI and the
/// CLI when sync impersonation is off (argo-cd server/application/application.go
/// PatchResource, RunResourceActionV2, getApplicationClusterConfig).
const ARGOCD_SERVER: &str = "system:serviceaccount:argocd:argocd-server";
/// A project's destinationServiceAccount given with its namespace (`argocd:preview-apps`):
/// with sync impersonation on, the controller and argocd-server write the apps' objects as
/// it (argo-cd controller/appcontroller.go applyImpersonationConfig, controller/sync.go
/// SyncAppState, util/settings/impersonation.go DeriveServiceAccountToImpersonate).
const APPS_DEPLOYER: &str = "system:serviceaccount:argocd:preview-apps";
const HELPERS_DEPLOYER: &str = "system:serviceaccount:argocd:preview-helpers";

/// The confinement of an app's objects holds whoever writes them (#1 of 7): Argo CD's
/// controller, the projects' impersonated service accounts, argocd-server, a preview
/// namespace's own service accounts (the PR's Pods), anyone. It goes by what is written —
/// Argo CD's tracking of the object, before and after an update — and by the preview
/// namespace it is written into, not by the writer's name alone. Every denial here was
/// admitted by the policy that matched Argo CD's controller by name.
#[test]
fn app_confinement_holds_whoever_writes() {
    let own = names("octo/shop", 7);
    let other = names("octo/shop", 8);
    let (app, helpers) = (
        Some(own.app_application.as_str()),
        Some(own.application.as_str()),
    );
    let ns = Some(own.slug.as_str());
    // A project's destinationServiceAccount given by name alone is the destination
    // namespace's (DeriveServiceAccountToImpersonate): the PR's own Pods can run as it.
    let in_preview = format!("system:serviceaccount:{}:deployer", own.slug);
    let pod = |namespace: &str| written("v1", "Pod", Some(namespace), app);
    let certificate = |app: Option<&str>| written("cert-manager.io/v1", "Certificate", ns, app);
    let service = |app: Option<&str>, kind: &str| {
        let mut service = written("v1", "Service", ns, app);
        service["spec"] = json!({"type": kind, "ports": [{"port": 80}]});
        service
    };
    let job_in =
        |namespace: &str, app: Option<&str>| written("batch/v1", "Job", Some(namespace), app);
    let ingress_for = |host: &str| {
        let mut ingress = written("networking.k8s.io/v1", "Ingress", ns, app);
        ingress["spec"] = json!({"rules": [{"host": host}]});
        ingress
    };
    let cases = json!([
        // The apps' project's impersonated service account.
        case(
            "impersonated: an app's Pod in its own namespace",
            APPS_DEPLOYER,
            pod(&own.slug),
            true
        ),
        case(
            "impersonated: an app's Pod in another preview's namespace",
            APPS_DEPLOYER,
            pod(&other.slug),
            false
        ),
        case(
            "impersonated: an app's Job in the provisioner namespace",
            APPS_DEPLOYER,
            job_in("previewd-system", app),
            false
        ),
        case(
            "impersonated: an app's Certificate",
            APPS_DEPLOYER,
            certificate(app),
            false
        ),
        case(
            "impersonated: an app's HTTPRoute",
            APPS_DEPLOYER,
            written("gateway.networking.k8s.io/v1", "HTTPRoute", ns, app),
            false
        ),
        case(
            "impersonated: an app's RoleBinding",
            APPS_DEPLOYER,
            written("rbac.authorization.k8s.io/v1", "RoleBinding", ns, app),
            false
        ),
        case(
            "impersonated: an app's ClusterRoleBinding",
            APPS_DEPLOYER,
            written(
                "rbac.authorization.k8s.io/v1",
                "ClusterRoleBinding",
                None,
                app
            ),
            false
        ),
        case(
            "impersonated: an app's LoadBalancer Service",
            APPS_DEPLOYER,
            service(app, "LoadBalancer"),
            false
        ),
        case(
            "impersonated: an app's Ingress for another preview's host",
            APPS_DEPLOYER,
            ingress_for(&other.host),
            false
        ),
        case(
            "impersonated: an untracked Pod in a preview namespace",
            APPS_DEPLOYER,
            written("v1", "Pod", ns, None),
            true
        ),
        case(
            "impersonated: an untracked LoadBalancer Service in a preview namespace",
            APPS_DEPLOYER,
            service(None, "LoadBalancer"),
            false
        ),
        // The helpers' project's impersonated service account writes what the chart renders.
        case(
            "impersonated helpers: the preview's Certificate",
            HELPERS_DEPLOYER,
            certificate(helpers),
            true
        ),
        case(
            "impersonated helpers: the database Job in the provisioner namespace",
            HELPERS_DEPLOYER,
            job_in("previewd-system", helpers),
            true
        ),
        case(
            "impersonated helpers: the preview's Namespace",
            HELPERS_DEPLOYER,
            written("v1", "Namespace", None, helpers),
            true
        ),
        // A preview namespace's own service account: the apps' deployer named without its
        // namespace, or the PR's Pods.
        case(
            "a preview's service account: its app's Pod",
            &in_preview,
            pod(&own.slug),
            true
        ),
        case(
            "a preview's service account: an untracked Secret in another preview's namespace",
            &in_preview,
            written("v1", "Secret", Some(&other.slug), None),
            false
        ),
        case(
            "a preview's service account: an untracked Certificate",
            &in_preview,
            certificate(None),
            false
        ),
        case(
            "a preview's service account: a Certificate with the helpers' tracking id",
            &in_preview,
            certificate(helpers),
            false
        ),
        case(
            "a preview's service account: a Namespace",
            &in_preview,
            written("v1", "Namespace", None, None),
            false
        ),
        // argocd-server's own account, sync impersonation off.
        updated(
            "argocd-server: a patch making an app's Service a LoadBalancer",
            ARGOCD_SERVER,
            service(app, "ClusterIP"),
            service(app, "LoadBalancer"),
            false
        ),
        updated(
            "argocd-server: a patch giving an app's Service the helpers' tracking id",
            ARGOCD_SERVER,
            service(app, "ClusterIP"),
            service(helpers, "LoadBalancer"),
            false
        ),
        updated(
            "argocd-server: a patch of an app's Deployment",
            ARGOCD_SERVER,
            written("apps/v1", "Deployment", ns, app),
            written("apps/v1", "Deployment", ns, app),
            true
        ),
        case(
            "argocd-server: the Job a resource action creates (untracked)",
            ARGOCD_SERVER,
            job_in(&own.slug, None),
            true
        ),
        case(
            "argocd-server: an untracked Certificate in a preview namespace",
            ARGOCD_SERVER,
            certificate(None),
            false
        ),
        // Argo CD's controller, its own account.
        case(
            "Argo CD: the helpers' Certificate",
            ARGOCD,
            certificate(helpers),
            true
        ),
        case(
            "Argo CD: an app's Certificate labelled as the helpers'",
            ARGOCD,
            with(
                certificate(app),
                "labels",
                "app.kubernetes.io/instance",
                &own.application
            ),
            false
        ),
        case(
            "Argo CD, label tracking: an app's Certificate with the helpers' tracking id",
            ARGOCD,
            with(
                certificate(helpers),
                "labels",
                "app.kubernetes.io/instance",
                &own.app_application
            ),
            false
        ),
        case(
            "Argo CD: another preview's helpers' tracking id",
            ARGOCD,
            written(
                "cert-manager.io/v1",
                "Certificate",
                ns,
                Some(&other.application)
            ),
            false
        ),
        case(
            "Argo CD: an untracked Certificate in a preview namespace",
            ARGOCD,
            certificate(None),
            false
        ),
        case(
            "Argo CD: an app's HTTPRoute",
            ARGOCD,
            written("gateway.networking.k8s.io/v1", "HTTPRoute", ns, app),
            false
        ),
        // Anyone else.
        case(
            "anyone: an object tracked as an app's, outside its namespace",
            "alice",
            pod("kube-system"),
            false
        ),
        case(
            "the deployment controller: an app's ReplicaSet (the Deployment's annotations copied)",
            "system:serviceaccount:kube-system:deployment-controller",
            with(
                written("apps/v1", "ReplicaSet", ns, None),
                "annotations",
                "argocd.argoproj.io/tracking-id",
                &format!("{}:apps/Deployment:{}/web", own.app_application, own.slug)
            ),
            true
        ),
        case(
            "cert-manager: the preview's TLS Secret",
            "system:serviceaccount:cert-manager:cert-manager",
            with(
                written("v1", "Secret", ns, None),
                "annotations",
                "cert-manager.io/certificate-name",
                "x"
            ),
            true
        ),
        case(
            "a person's untracked object in a preview namespace is not this policy's business",
            "alice",
            certificate(None),
            true
        ),
    ]);
    check_admission(&cases, cases.as_array().unwrap().len());
}

/// The preview's edge is its helpers' Ingress (helpers-chart templates/ingress.yaml), behind
/// previewd's login: in a preview namespace an Ingress or a Gateway API object is made only
/// by `<namespace>-helpers`, as Argo CD tracks what it applies (argo-cd
/// util/argo/resource_tracking.go BuildAppInstanceValue: `<app>:<group>/<kind>:<namespace>/
/// <name>`), whoever writes it; cert-manager's HTTP-01 solver for the preview's own host is
/// the one exception.
#[test]
fn only_the_helpers_publish_a_preview_host() {
    let own = names("octo/shop", 7);
    let other = names("octo/shop", 8);
    let legacy = Names::legacy(
        &PreviewKey::new("octo/shop".parse().unwrap(), 9),
        "preview.example.com",
    );
    let ns = Some(own.slug.as_str());
    let (app, helpers) = (
        Some(own.app_application.as_str()),
        Some(own.application.as_str()),
    );
    let in_preview = format!("system:serviceaccount:{}:default", own.slug);
    // The Ingress as the chart renders it, for `names`' preview, tracked for `app`.
    let edge = |names: &Names, app: Option<&str>| {
        let mut ingress = written("networking.k8s.io/v1", "Ingress", Some(&names.slug), app);
        let annotations = &mut ingress["metadata"]["annotations"];
        annotations["argocd.argoproj.io/sync-wave"] = json!("0");
        annotations["nginx.ingress.kubernetes.io/auth-url"] =
            json!("https://previewd.example.com/auth/check");
        annotations["nginx.ingress.kubernetes.io/auth-signin"] =
            json!("https://previewd.example.com/auth/signin");
        annotations["nginx.ingress.kubernetes.io/auth-response-headers"] =
            json!("X-Auth-Request-User");
        ingress["spec"] = json!({
            "tls": [{"hosts": [names.host], "secretName": format!("{}-tls", names.slug)}],
            "rules": [{"host": names.host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": "web", "port": {"number": 8080}}}}]}}],
        });
        ingress
    };
    let labelled = |names: &Names, app: &str| {
        let mut ingress = edge(names, None);
        ingress["metadata"]["labels"] = json!({"app.kubernetes.io/instance": app});
        ingress
    };
    // cert-manager's HTTP-01 solver Ingress (pkg/issuer/acme/http/ingress.go
    // buildIngressResource), for `host`.
    let solver = |host: &str| {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "cm-acme-http-solver-x2v7d", "namespace": own.slug,
                "labels": {"acme.cert-manager.io/http-domain": "1433929651",
                    "acme.cert-manager.io/http-token": "1190431208",
                    "acme.cert-manager.io/http01-solver": "true"},
                "annotations": {"nginx.ingress.kubernetes.io/whitelist-source-range": "0.0.0.0/0,::/0"}},
            "spec": {"rules": [{"host": host, "http": {"paths": [{"path": "/.well-known/acme-challenge/tok",
                "pathType": "ImplementationSpecific",
                "backend": {"service": {"name": "cm-acme-http-solver-6kq2n", "port": {"number": 8089}}}}]}}]}})
    };
    const CERT_MANAGER: &str = "system:serviceaccount:cert-manager:cert-manager";
    let route = |app: Option<&str>| written("gateway.networking.k8s.io/v1", "HTTPRoute", ns, app);
    let cases = json!([
        case(
            "Argo CD: the helpers' Ingress",
            ARGOCD,
            edge(&own, helpers),
            true
        ),
        case(
            "Argo CD, label tracking: the helpers' Ingress",
            ARGOCD,
            labelled(&own, &own.application),
            true
        ),
        case(
            "impersonated helpers: the helpers' Ingress",
            HELPERS_DEPLOYER,
            edge(&own, helpers),
            true
        ),
        case(
            "Argo CD: the helpers' Ingress of a preview kept from before names were recorded",
            ARGOCD,
            edge(&legacy, Some(&legacy.application)),
            true
        ),
        updated(
            "a person edits the helpers' Ingress",
            "alice",
            edge(&own, helpers),
            edge(&own, helpers),
            true
        ),
        case("Argo CD: an app's Ingress", ARGOCD, edge(&own, app), false),
        case(
            "Argo CD, label tracking: an app's Ingress",
            ARGOCD,
            labelled(&own, &own.app_application),
            false
        ),
        case(
            "impersonated: an app's Ingress",
            APPS_DEPLOYER,
            edge(&own, app),
            false
        ),
        case(
            "Argo CD: an untracked Ingress in a preview namespace",
            ARGOCD,
            edge(&own, None),
            false
        ),
        case(
            "Argo CD: another preview's helpers' tracking id on this namespace's Ingress",
            ARGOCD,
            with(
                edge(&own, None),
                "annotations",
                "argocd.argoproj.io/tracking-id",
                &format!(
                    "{}:networking.k8s.io/Ingress:{}/x",
                    other.application, own.slug
                )
            ),
            false
        ),
        case(
            "Argo CD: the helpers' tracking id of another kind",
            ARGOCD,
            with(
                edge(&own, None),
                "annotations",
                "argocd.argoproj.io/tracking-id",
                &format!("{}:/ConfigMap:{}/x", own.application, own.slug)
            ),
            false
        ),
        updated(
            "argocd-server: a patch giving an app's Ingress the helpers' tracking id",
            ARGOCD_SERVER,
            edge(&own, app),
            edge(&own, helpers),
            false
        ),
        case(
            "a preview's service account: an Ingress with the helpers' tracking id",
            &in_preview,
            edge(&own, helpers),
            false
        ),
        case(
            "a preview's service account: an untracked Ingress",
            &in_preview,
            edge(&own, None),
            false
        ),
        case(
            "a person: an untracked Ingress in a preview namespace",
            "alice",
            edge(&own, None),
            false
        ),
        case(
            "a person: an Ingress outside the preview namespaces is not previewd's business",
            "alice",
            {
                let mut ingress = edge(&own, None);
                ingress["metadata"]["namespace"] = json!("shop");
                ingress
            },
            true
        ),
        case(
            "Argo CD: an Ingress of another Application outside the preview namespaces",
            ARGOCD,
            with(
                written("networking.k8s.io/v1", "Ingress", Some("shop"), None),
                "labels",
                "app.kubernetes.io/instance",
                "shop"
            ),
            true
        ),
        case(
            "cert-manager: the HTTP-01 solver for the preview's host",
            CERT_MANAGER,
            solver(&own.host),
            true
        ),
        case(
            "cert-manager: a solver for another preview's host",
            CERT_MANAGER,
            solver(&other.host),
            false
        ),
        case(
            "a preview's service account: a solver-labelled Ingress",
            &in_preview,
            solver(&own.host),
            false
        ),
        case(
            "a person: a solver-labelled Ingress serving more than the challenge",
            "alice",
            {
                let mut ingress = solver(&own.host);
                ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!("/");
                ingress
            },
            false
        ),
        case(
            "a person: a solver-labelled Ingress with a snippet",
            "alice",
            with(
                solver(&own.host),
                "annotations",
                "nginx.ingress.kubernetes.io/server-snippet",
                "return 200;"
            ),
            false
        ),
        case("Argo CD: an app's HTTPRoute", ARGOCD, route(app), false),
        case(
            "a person: an untracked HTTPRoute in a preview namespace",
            "alice",
            route(None),
            false
        ),
        case(
            "a person: a Gateway in a preview namespace",
            "alice",
            written("gateway.networking.k8s.io/v1", "Gateway", ns, None),
            false
        ),
        case(
            "a person: a ReferenceGrant in a preview namespace",
            "alice",
            written(
                "gateway.networking.k8s.io/v1beta1",
                "ReferenceGrant",
                ns,
                None
            ),
            false
        ),
        case(
            "a NetworkPolicy of the app is still the app's",
            ARGOCD,
            written("networking.k8s.io/v1", "NetworkPolicy", ns, app),
            true
        ),
    ]);
    check_admission(&cases, cases.as_array().unwrap().len());
}

/// A DELETE of `old`.
fn deleted(name: &str, user: &str, old: Value, admitted: bool) -> Value {
    json!({"name": name, "user": user, "operation": "DELETE", "oldObject": old, "admitted": admitted})
}

/// A preview namespace's bounds are its helpers' (helpers-chart templates/resources.yaml, #41):
/// in a preview namespace a ResourceQuota or a LimitRange is made or changed only tracked as
/// `<namespace>-helpers`, never as the app's and never by the namespace's own service
/// accounts, who may not delete one either.
#[test]
fn only_the_helpers_bound_a_preview_namespace() {
    let own = names("octo/shop", 7);
    let other = names("octo/shop", 8);
    let template = Names::template(&"octo/shop".parse().unwrap(), 3, "preview.example.com");
    let legacy = Names::legacy(
        &PreviewKey::new("octo/shop".parse().unwrap(), 9),
        "preview.example.com",
    );
    let ns = Some(own.slug.as_str());
    let (app, helpers) = (
        Some(own.app_application.as_str()),
        Some(own.application.as_str()),
    );
    let in_preview = format!("system:serviceaccount:{}:default", own.slug);
    const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";
    let quota = |namespace: Option<&str>, app: Option<&str>| {
        let mut quota = written("v1", "ResourceQuota", namespace, app);
        quota["spec"] = json!({"hard": {"requests.cpu": "4", "requests.memory": "8Gi",
                                        "limits.memory": "8Gi", "pods": "20"}});
        quota
    };
    let limits = |namespace: Option<&str>, app: Option<&str>| {
        let mut limits = written("v1", "LimitRange", namespace, app);
        limits["spec"] = json!({"limits": [{"type": "Container",
            "defaultRequest": {"cpu": "100m", "memory": "256Mi"}, "default": {"memory": "256Mi"}}]});
        limits
    };
    let labelled = |object: Value, app: &str| {
        let mut object = object;
        object["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        with(object, "labels", "app.kubernetes.io/instance", app)
    };
    let lifted = {
        let mut quota = quota(ns, helpers);
        quota["spec"]["hard"]["pods"] = json!("1000");
        quota
    };
    let cases = json!([
        case(
            "Argo CD: the helpers' ResourceQuota",
            ARGOCD,
            quota(ns, helpers),
            true
        ),
        case(
            "Argo CD: the helpers' LimitRange",
            ARGOCD,
            limits(ns, helpers),
            true
        ),
        case(
            "Argo CD, label tracking: the helpers' LimitRange",
            ARGOCD,
            labelled(limits(ns, None), &own.application),
            true
        ),
        case(
            "impersonated helpers: the helpers' ResourceQuota",
            HELPERS_DEPLOYER,
            quota(ns, helpers),
            true
        ),
        case(
            "Argo CD: a template generation's helpers' ResourceQuota",
            ARGOCD,
            quota(Some(&template.slug), Some(&template.application)),
            true
        ),
        case(
            "Argo CD: the helpers' LimitRange of a preview kept from before names were recorded",
            ARGOCD,
            limits(Some(&legacy.slug), Some(&legacy.application)),
            true
        ),
        updated(
            "Argo CD: the helpers change their ResourceQuota",
            ARGOCD,
            quota(ns, helpers),
            lifted.clone(),
            true
        ),
        updated(
            "a person edits the helpers' ResourceQuota",
            "alice",
            quota(ns, helpers),
            lifted.clone(),
            true
        ),
        case(
            "Argo CD: an app's ResourceQuota",
            ARGOCD,
            quota(ns, app),
            false
        ),
        case(
            "Argo CD: an app's LimitRange",
            ARGOCD,
            limits(ns, app),
            false
        ),
        case(
            "Argo CD, label tracking: an app's LimitRange",
            ARGOCD,
            labelled(limits(ns, None), &own.app_application),
            false
        ),
        case(
            "impersonated apps: an app's ResourceQuota",
            APPS_DEPLOYER,
            quota(ns, app),
            false
        ),
        updated(
            "Argo CD: the app's tracking on the helpers' ResourceQuota",
            ARGOCD,
            quota(ns, helpers),
            quota(ns, app),
            false
        ),
        updated(
            "argocd-server: a patch giving an app's LimitRange the helpers' tracking id",
            ARGOCD_SERVER,
            limits(ns, app),
            limits(ns, helpers),
            false
        ),
        case(
            "Argo CD: another preview's helpers' tracking id on this namespace's ResourceQuota",
            ARGOCD,
            with(
                quota(ns, None),
                "annotations",
                "argocd.argoproj.io/tracking-id",
                &format!("{}:/ResourceQuota:{}/x", other.application, own.slug)
            ),
            false
        ),
        case(
            "Argo CD: the helpers' tracking id of another kind on a LimitRange",
            ARGOCD,
            with(
                limits(ns, None),
                "annotations",
                "argocd.argoproj.io/tracking-id",
                &format!("{}:/ConfigMap:{}/x", own.application, own.slug)
            ),
            false
        ),
        case(
            "Argo CD: an untracked ResourceQuota in a preview namespace",
            ARGOCD,
            quota(ns, None),
            false
        ),
        case(
            "a preview's service account: a LimitRange with the helpers' tracking id",
            &in_preview,
            limits(ns, helpers),
            false
        ),
        updated(
            "a preview's service account: lifting the helpers' ResourceQuota",
            &in_preview,
            quota(ns, helpers),
            lifted,
            false
        ),
        case(
            "a person: an untracked LimitRange in a preview namespace",
            "alice",
            limits(ns, None),
            false
        ),
        case(
            "a person: a ResourceQuota outside the preview namespaces is not previewd's business",
            "alice",
            quota(Some("shop"), None),
            true
        ),
        case(
            "Argo CD: a LimitRange of another Application outside the preview namespaces",
            ARGOCD,
            labelled(limits(Some("shop"), None), "shop"),
            true
        ),
        deleted(
            "Argo CD: the helpers prune or cascade their ResourceQuota",
            ARGOCD,
            quota(ns, helpers),
            true
        ),
        deleted(
            "the namespace controller: the LimitRange of a deleted preview namespace",
            NAMESPACE_CONTROLLER,
            limits(ns, helpers),
            true
        ),
        deleted(
            "Argo CD: an app prunes its own LimitRange from before the policy",
            ARGOCD,
            limits(ns, app),
            true
        ),
        deleted(
            "a person deletes the helpers' ResourceQuota",
            "alice",
            quota(ns, helpers),
            true
        ),
        deleted(
            "a preview's service account: deleting the helpers' ResourceQuota",
            &in_preview,
            quota(ns, helpers),
            false
        ),
        deleted(
            "a preview's service account: deleting the helpers' LimitRange",
            &in_preview,
            limits(ns, helpers),
            false
        ),
        deleted(
            "a Pod of a preview deleting an app's Pod is not this policy's business",
            &in_preview,
            written("v1", "Pod", ns, app),
            true
        ),
    ]);
    check_admission(&cases, cases.as_array().unwrap().len());
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
        let case = |name: &str, object: Value, status: &str| json!({"name": format!("{kind}: {name}"), "group": "postgresql.cnpg.io", "kind": kind, "object": object, "status": status});
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
    check_health(cases, 10);
}

/// The OperatorPolicy check (Argo CD ships none; it has Vhost, User and Permission) on the
/// statuses the RabbitMQ messaging-topology-operator writes (v1.20.1
/// internal/controller/topology_controller.go Reconcile, handleRMQReferenceParseError;
/// api/v1beta1/conditions.go Ready / NotReady): Healthy only when Ready and of the current
/// generation; a failed declare is retried with backoff, so Progressing with its message;
/// a namespace the cluster's topology-allowed-namespaces does not allow is not retried, so
/// Degraded.
#[test]
fn argocd_health_checks_follow_the_rabbitmq_topology_operators_status() {
    let ready = |status: &str, reason: &str, message: Option<&str>| {
        let mut condition = json!({"type": "Ready", "status": status, "reason": reason,
                                   "lastTransitionTime": "2026-08-07T09:16:26Z"});
        if let Some(message) = message {
            condition["message"] = json!(message);
        }
        condition
    };
    let object = |generation: u32, status: Value| {
        json!({"apiVersion": "rabbitmq.com/v1beta1", "kind": "OperatorPolicy",
               "metadata": {"name": "preview-bounds", "generation": generation},
               "spec": {"name": "preview-bounds", "vhost": "pr-1", "pattern": ".*",
                        "applyTo": "queues", "priority": 0,
                        "definition": {"max-length": 10000, "max-length-bytes": 10485760},
                        "rabbitmqClusterReference": {"name": "rabbitmq"}},
               "status": status})
    };
    let case = |name: &str, object: Value, status: &str| json!({"name": format!("OperatorPolicy: {name}"), "group": "rabbitmq.com", "kind": "OperatorPolicy", "object": object, "status": status});
    let declared = ready("True", "SuccessfulCreateOrUpdate", None);
    let cases = vec![
        case(
            "just created",
            json!({"metadata": {"name": "preview-bounds", "generation": 1}}),
            "Progressing",
        ),
        case(
            "status without conditions",
            object(1, json!({})),
            "Progressing",
        ),
        case(
            "declared",
            object(
                1,
                json!({"conditions": [declared], "observedGeneration": 1}),
            ),
            "Healthy",
        ),
        case(
            "declared an older generation",
            object(
                2,
                json!({"conditions": [declared], "observedGeneration": 1}),
            ),
            "Progressing",
        ),
        case(
            "the broker refused, to be retried",
            object(
                2,
                json!({"conditions": [ready("False", "FailedCreateOrUpdate",
                                            Some("RabbitMQ management API request failed with status code 404"))],
                       "observedGeneration": 1}),
            ),
            "Progressing",
        ),
        case(
            "the cluster is scaled to zero",
            object(
                1,
                json!({"conditions": [ready("False", "FailedCreateOrUpdate",
                                            Some("RabbitmqCluster is scaled to zero replicas; waiting for it to scale up"))]}),
            ),
            "Progressing",
        ),
        case(
            "a namespace the cluster does not allow",
            object(
                1,
                json!({"conditions": [ready("False", "FailedCreateOrUpdate",
                                            Some("resource is not allowed to reference defined cluster reference. Check the namespace of the resource is allowed as part of the cluster's `rabbitmq.com/topology-allowed-namespaces` annotation"))]}),
            ),
            "Degraded",
        ),
    ];
    check_health(cases, 7);
}

/// Runs tests/deploy/check_health.py on `cases`; all `expected` of them pass.
fn check_health(cases: Vec<Value>, expected: usize) {
    assert_eq!(cases.len(), expected);
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
    assert!(
        ok && text.contains(&format!("{expected} passed, 0 failed")),
        "{text}"
    );
}
