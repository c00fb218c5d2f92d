//! helpers-chart rendered by the real Helm library (helm-python-sdk) with what previewd
//! renders, and every object validated against the Kubernetes and CRD schemas, through
//! `tests/chart/check_chart.py`. `scripts/test` installs the Python packages.

#[path = "../common/mod.rs"]
mod common;

mod events;
mod objects;
mod resources;
mod schemas;
mod services;
mod template;

use std::path::{Path, PathBuf};

use previewd::config::Config;
use previewd::preview::Preview;
use previewd::render::{self, SealedSecret};
use serde_json::Value;

pub(crate) const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Runs the checker; returns (success, output).
pub(crate) fn check(args: &[&str]) -> (bool, String) {
    common::python::run("chart/check_chart.py", args)
}

pub(crate) fn chart() -> String {
    format!("{ROOT}/helpers-chart")
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The names a preview created under `config` records.
pub(crate) fn names_of(preview: &Preview, config: &Config) -> previewd::naming::Names {
    let policy = config
        .policy_for(&preview.key.repo)
        .unwrap_or(&config.defaults);
    previewd::naming::Names::of(&preview.key, &policy.domain)
}

/// Renders the Application for `preview` under `config`, then renders and validates the
/// chart: the checker's output and the objects it rendered.
fn render_and_check(
    config_toml: &str,
    preview: &Preview,
    sealed: &[SealedSecret],
) -> (String, Vec<Value>) {
    let config = Config::from_toml(config_toml, Vec::new()).unwrap();
    let application =
        render::helper_application(preview, &names_of(preview, &config), &config, sealed).unwrap();
    check_application(&application)
}

/// Validates `application` (a helper Application as previewd writes it) and the objects its
/// chart renders; check_chart.py's report and the objects.
fn check_application(application: &Value) -> (String, Vec<Value>) {
    let dir = tempfile::tempdir().unwrap();
    let app = write(
        dir.path(),
        "app.yaml",
        &previewd::yaml::to_string(application),
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
    let objects = serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap();
    (out, objects)
}

/// The objects of `preview`'s helper Application as previewd writes it (`render::preview`:
/// its Helm parameters too, which a sleep rides in), rendered and validated.
pub(crate) fn assert_valid_rendering(config_toml: &str, preview: &Preview) -> Vec<Value> {
    let config = Config::from_toml(config_toml, Vec::new()).unwrap();
    let rendered =
        render::preview(preview, &names_of(preview, &config), &config, &[], "i").unwrap();
    let (out, objects) = check_application(&rendered.helper.manifest);
    assert!(out.contains(", 0 failed"), "{out}");
    objects
}

/// Renders and validates the chart for `preview` under `config`, however many objects.
pub(crate) fn assert_valid_objects(config_toml: &str, preview: &Preview) -> Vec<Value> {
    let (out, objects) = render_and_check(config_toml, preview, &[]);
    assert!(out.contains(", 0 failed"), "{out}");
    objects
}

/// Renders the Application for `preview` under `config`, then renders and validates the chart.
pub(crate) fn assert_valid(
    config_toml: &str,
    preview: &Preview,
    sealed: &[SealedSecret],
    objects: usize,
) -> Vec<Value> {
    let (out, rendered) = render_and_check(config_toml, preview, sealed);
    // The Application itself is validated too, hence one more than the chart's objects.
    assert!(
        out.trim_end()
            .ends_with(&format!("validated {} objects, 0 failed", objects + 1)),
        "{out}"
    );
    rendered
}

pub(crate) const FULL: &str = r#"
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

pub(crate) fn sealed(name: &str, namespace: &str, scope: &'static str, key: &str) -> SealedSecret {
    SealedSecret {
        name: name.into(),
        namespace: namespace.into(),
        scope,
        type_: "Opaque".into(),
        labels: Default::default(),
        encrypted_data: [(key.to_string(), "AgBy3i4OJSWK+PiTySYZZA==".to_string())].into(),
        template_data: Default::default(),
    }
}

pub(crate) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object["metadata"]["annotations"][key].as_str()
}
