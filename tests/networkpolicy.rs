//! The NetworkPolicy of deploy/manifests/previewd.yaml (the chart's networkpolicy.yaml)
//! against the Deployment it guards: it selects previewd's pods, names ports they have, and
//! admits only the two sources it documents.

use serde_json::Value;

fn documents() -> Vec<Value> {
    let file = format!(
        "{}/deploy/manifests/previewd.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn only_the_ingress_controller_and_prometheus_reach_previewd() {
    let documents = documents();
    let policy = documents
        .iter()
        .find(|d| d["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy");
    let deployment = documents
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    assert_eq!(
        policy["metadata"]["namespace"],
        deployment["metadata"]["namespace"]
    );
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &pod_labels[key], value,
            "the policy must select previewd's pods"
        );
    }
    assert!(
        policy["spec"]["policyTypes"]
            .as_array()
            .unwrap()
            .contains(&"Ingress".into())
    );
    let container_ports: Vec<&Value> =
        deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| &p["name"])
            .collect();
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    let mut sources = Vec::new();
    for rule in rules {
        // A rule without `from` (or with an empty peer) admits every pod in the cluster.
        let peers = rule["from"]
            .as_array()
            .expect("every rule names its sources");
        for peer in peers {
            let namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                .as_str()
                .expect("a namespace by name");
            let pods = peer["podSelector"]["matchLabels"]
                .as_object()
                .expect("pods by label");
            assert!(!pods.is_empty());
            assert!(peer.get("ipBlock").is_none());
            sources.push(namespace.to_owned());
        }
        for port in rule["ports"]
            .as_array()
            .expect("every rule names its ports")
        {
            let port = &port["port"];
            assert!(
                port.is_number() || container_ports.contains(&port),
                "{port} is not a port of the Deployment"
            );
        }
    }
    assert_eq!(sources, ["ingress-nginx", "monitoring"]);
}
