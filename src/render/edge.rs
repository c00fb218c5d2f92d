//! A preview's public edge, previewd's and not the app chart's: the values of the helpers'
//! Ingress (`helpers-chart/templates/ingress.yaml`), the preview's host to the Service the
//! repository names (`[[repos]] app_service`) behind previewd's login, and what the app's own
//! chart is told about it. Pure.

use serde_json::{Value, json};

use crate::config::{AppConfig, Config, ServicePort};

/// The chart's `ingress` values: for a repository with `app_service` once previewd has a
/// configured `public_url` (`Config::reachable_url`), where the ingress controller asks
/// `/auth/check` and sends people to `/auth/signin`. The loopback guess is never given to a
/// cluster: it is this host's own address, not one an ingress controller can reach. `None`:
/// no Ingress, and no `ingress` values (the chart's default is off), so that a preview
/// without one renders, and hashes, as it did before there was an edge.
pub(super) fn ingress(app: &AppConfig, config: &Config) -> Option<Value> {
    let (service, url) = (app.service.as_ref()?, config.reachable_url.as_ref()?);
    Some(json!({
        "enabled": true,
        "service": {"name": service.name, "port": port(&service.port)},
        "loginUrl": url.trim_end_matches('/'),
    }))
}

/// An Ingress backend's port, as the chart takes it: a number, or the Service port's name.
fn port(port: &ServicePort) -> Value {
    match port {
        ServicePort::Number(number) => json!(number),
        ServicePort::Name(name) => json!(name),
    }
}

/// What the app's chart is told when the edge is previewd's (the repository names its
/// `app_service`): `ingress.enabled: false`, the switch of `helm create`'s scaffold and of
/// most charts that make an Ingress, which the apps' AppProject would refuse. `None`: the
/// values stay as they were (a chart with a strict schema and no `ingress` key still
/// renders).
pub(super) fn app_values(app: &AppConfig) -> Option<Value> {
    app.service.as_ref().map(|_| json!({"enabled": false}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::Names;
    use crate::preview::Preview;
    use crate::render::{app_application, helper_application};

    const CONFIG: &str = r#"
public_url = "https://previewd.example.com/"
[defaults]
domain = "preview.example.com"
[tls]
mode = "cert-manager"
[[clusters]]
name = "eu-1"
server = "https://eu-1.k8s.example.com"
[[repos]]
name = "octo/app"
image = "ghcr.io/octo/app"
app_chart = "deploy/chart"
app_service = "web:8080"
[[repos]]
name = "octo/named"
app_service = "web:http"
[[repos]]
name = "octo/plain"
app_chart = "deploy/chart"
"#;

    fn config(toml: &str) -> Config {
        Config::from_toml(toml, Vec::new()).unwrap()
    }

    fn helpers(config: &Config, pr: &str) -> Value {
        let preview = Preview::test().on("eu-1").of(pr);
        let names = Names::of(&preview.key, &config.defaults.domain);
        helper_application(&preview, &names, config, &[]).unwrap()["spec"]["source"]["helm"]
            ["valuesObject"]
            .clone()
    }

    fn app(config: &Config, pr: &str) -> Value {
        let preview = Preview::test().on("eu-1").of(pr);
        let names = Names::of(&preview.key, &config.defaults.domain);
        app_application(&preview, &names, config).unwrap().unwrap()["spec"]["source"]["helm"]
            ["valuesObject"]
            .clone()
    }

    #[test]
    fn a_repository_with_app_service_gets_an_ingress_behind_previewds_login() {
        let config = config(CONFIG);
        let values = helpers(&config, "octo/app#7");
        assert_eq!(
            values["ingress"],
            json!({
                "enabled": true,
                "service": {"name": "web", "port": 8080},
                "loginUrl": "https://previewd.example.com",
            })
        );
        // The Ingress's TLS is the preview's certificate, which the same values name.
        assert_eq!(values["tls"]["mode"], "cert-manager");
        assert_eq!(
            values["tls"]["secretName"],
            format!("{}-tls", values["namespace"].as_str().unwrap())
        );
        // And the app's own chart is told to make none.
        assert_eq!(
            app(&config, "octo/app#7")["ingress"],
            json!({"enabled": false})
        );
    }

    #[test]
    fn without_app_service_there_is_no_ingress_and_the_apps_values_are_as_they_were() {
        let config = config(CONFIG);
        assert!(helpers(&config, "octo/plain#7").get("ingress").is_none());
        assert!(app(&config, "octo/plain#7").get("ingress").is_none());
    }

    /// The helper Application of a repository with `app_service`, and its app's, as Argo CD
    /// receives them.
    #[test]
    fn a_preview_with_an_edge_renders_the_helper_and_app_applications() {
        let config = config(CONFIG);
        let preview = Preview::test().on("eu-1").of("octo/app#7");
        let names = Names::of(&preview.key, &config.defaults.domain);
        let helper = helper_application(&preview, &names, &config, &[]).unwrap();
        let app = app_application(&preview, &names, &config).unwrap().unwrap();
        insta::assert_snapshot!(format!(
            "{}---\n{}",
            crate::yaml::to_string(&helper),
            crate::yaml::to_string(&app)
        ));
    }

    #[test]
    fn a_port_may_be_named() {
        let config = config(CONFIG);
        assert_eq!(
            helpers(&config, "octo/named#7")["ingress"]["service"],
            json!({"name": "web", "port": "http"})
        );
    }

    #[test]
    fn with_tls_off_the_ingress_is_still_made_and_the_chart_gives_it_no_tls() {
        let config = config(&CONFIG.replace("mode = \"cert-manager\"", "mode = \"off\""));
        let values = helpers(&config, "octo/app#7");
        assert_eq!(values["ingress"]["enabled"], true);
        assert_eq!(values["tls"], json!({"mode": "off"}));
    }

    /// No `public_url` configured: the loopback guess (`http://127.0.0.1:8080`) is this
    /// host's, and an ingress controller asking it would ask itself. No Ingress then.
    #[test]
    fn without_a_configured_public_url_no_ingress_is_promised() {
        // The loopback guess is no address a cluster's ingress reaches: refused at start
        // rather than rendered without the Ingress the repository asks for.
        let refused = Config::from_toml(
            &CONFIG.replace("public_url = \"https://previewd.example.com/\"\n", ""),
            Vec::new(),
        )
        .unwrap_err();
        assert!(refused.to_string().contains("app_service"), "{refused}");
    }
}
