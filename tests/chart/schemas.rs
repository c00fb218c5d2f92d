//! Schemas: values the chart cannot render are refused by values.schema.json, and the
//! deploy manifests validate and their config loads.

use super::*;
use serde::Deserialize;
use serde_json::json;

#[test]
fn values_the_chart_cannot_render_are_refused_by_its_schema() {
    let config = Config::from_toml(FULL, Vec::new()).unwrap();
    let preview = Preview::test().on("eu-1");
    let application =
        render::helper_application(&preview, &names_of(&preview, &config), &config, &[]).unwrap();
    let good = application["spec"]["source"]["helm"]["valuesObject"].clone();
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 8] = [
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
        // The controller renders template data as Go templates: no action but `{{ .KEY }}`.
        ("/sealedSecrets/0/templateData/PGHOST", |v| {
            v["sealedSecrets"] = json!([{
                "name": "db", "namespace": "pv-x", "scope": "strict", "type": "Opaque",
                "encryptedData": {"PGPASSWORD": "AgB="},
                "templateData": {"PGHOST": "{{ .PGPASSWORD | b64enc }}"},
            }])
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
    // deploy/manifests/previewd.yaml: deploy/chart rendered with its default values.
    let manifests = format!("{ROOT}/deploy/manifests/previewd.yaml");
    let (ok, out) = check(&["--manifests", &manifests]);
    assert!(
        ok && out.trim_end().ends_with("validated 19 objects, 0 failed"),
        "{out}"
    );
    let (ok, out) = check(&["--manifests", &format!("{ROOT}/deploy/patches")]);
    assert!(
        ok && out.trim_end().ends_with("validated 1 objects, 0 failed"),
        "{out}"
    );
    let objects: Vec<Value> =
        serde_yaml_ng::Deserializer::from_str(&std::fs::read_to_string(&manifests).unwrap())
            .map(|document| Value::deserialize(document).unwrap())
            .filter(|object| !object.is_null())
            .collect();
    let of_kind =
        |kind: &str| -> Vec<&Value> { objects.iter().filter(|o| o["kind"] == kind).collect() };
    // The previewd.toml in the ConfigMap is one this version accepts.
    let config = Config::from_toml(
        of_kind("ConfigMap")[0]["data"]["previewd.toml"]
            .as_str()
            .unwrap(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(config.sink.kind, previewd::config::SinkKind::Kubernetes);
    // The projects shipped are the ones this configuration needs, and the admission policy
    // admits exactly those.
    let shipped: Vec<Value> = of_kind("AppProject").into_iter().cloned().collect();
    assert_eq!(
        shipped,
        previewd::projects::projects(&config),
        "the chart's appProjects are stale: regenerate them with `previewd render --projects`"
    );
    let admission = serde_json::to_string(&of_kind("ValidatingAdmissionPolicy")).unwrap();
    assert!(
        admission.contains(&format!(
            "object.spec.project in ['{}', '{}']",
            config.chart.project, config.chart.apps_project
        )),
        "{admission}"
    );
    // RBAC: writes only to Applications in Argo CD's namespace; cluster-wide, only `get` on
    // exactly what a teardown confirms gone, and a preview namespace's quota (its cost).
    for object in &objects {
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
                assert!(verbs(object).iter().all(|v| v == "get"), "{object}");
                let resources: Vec<_> = object["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|rule| rule["resources"].as_array().unwrap().clone())
                    .collect();
                assert_eq!(
                    resources,
                    [
                        "namespaces",
                        "dnsendpoints",
                        "certificates",
                        "databases",
                        "deployments",
                        "vhosts",
                        "users",
                        "permissions",
                        "resourcequotas"
                    ]
                );
            }
            "Role" => {
                assert_eq!(object["metadata"]["namespace"], "argocd");
                assert_eq!(object["rules"][0]["resources"], json!(["applications"]));
                assert!(!verbs(object).iter().any(|v| v == "*" || v == "update"));
            }
            _ => {}
        }
    }
}
