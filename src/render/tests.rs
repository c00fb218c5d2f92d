//! The helper Application as Argo CD will receive it, snapshot-tested.

use super::*;

const CONFIG: &str = r#"
[defaults]
domain = "preview.example.com"

[chart]
repo_url = "https://github.com/acme/previewd.git"
revision = "v0.1.0"

[[clusters]]
name = "eu-1"
server = "https://eu-1.k8s.example.com"
ingress_target = "ingress.eu-1.example.com"

[[repos]]
name = "octo/app"
image = "ghcr.io/octo/app"
migrate_command = ["bin/migrate", "--yes"]
seed = "example"

[[repos]]
name = "octo/worker"
image = "ghcr.io/octo/worker"
seed_command = ["bin/seed"]
app_chart = "deploy/chart"
"#;

fn config() -> Config {
    Config::from_toml(CONFIG, Vec::new()).unwrap()
}

/// The names a preview created under `config` records.
fn names(preview: &Preview, config: &Config) -> Names {
    let domain = &config
        .policy_for(&preview.key.repo)
        .unwrap_or(&config.defaults)
        .domain;
    Names::of(&preview.key, domain)
}

fn render(preview: &Preview) -> Value {
    helper_application(preview, &names(preview, &config()), &config(), &[]).unwrap()
}

fn yaml(preview: &Preview) -> String {
    crate::yaml::to_string(&render(preview))
}

#[test]
fn normal_pr_renders_the_helper_application() {
    insta::assert_snapshot!(yaml(&Preview::test().on("eu-1")));
}

#[test]
fn fork_pr_after_approval_renders_with_the_approved_sha() {
    insta::assert_snapshot!(yaml(&Preview::test().on("eu-1").fork().approved()));
}

#[test]
fn fork_pr_without_approval_of_its_head_renders_nothing() {
    let preview = Preview::test()
        .on("eu-1")
        .fork()
        .approved()
        .at_sha("1111111111111111111111111111111111111111");
    assert!(matches!(
        helper_application(&preview, &names(&preview, &config()), &config(), &[]),
        Err(RenderError::NotApproved { .. })
    ));
}

#[test]
fn very_long_repository_names_get_valid_hashed_names() {
    let long = format!(
        "{}/{}#98765",
        "o".repeat(39),
        "very-long-repository-name-".repeat(3).trim_end_matches('-')
    );
    insta::assert_snapshot!(yaml(&Preview::test().on("eu-1").of(&long)));
}

#[test]
fn unicode_titles_are_kept_as_text() {
    let preview = Preview::test()
        .on("eu-1")
        .titled("Añadir búsqueda 🔍 — \"quotes\" & <tags>\nsecond line");
    let app = render(&preview);
    assert_eq!(
        app["metadata"]["annotations"]["previewd.dev/title"],
        "Añadir búsqueda 🔍 — \"quotes\" & <tags>\nsecond line"
    );
    insta::assert_snapshot!(yaml(&preview));
}

#[test]
fn command_seeds_run_in_the_app_image() {
    let values = &render(&Preview::test().on("eu-1").of("octo/worker#3"))["spec"]["source"]["helm"]
        ["valuesObject"];
    assert_eq!(values["seed"]["mode"], "command");
    assert_eq!(
        values["seed"]["commandImage"],
        "ghcr.io/octo/worker:ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    assert_eq!(values["migrations"]["enabled"], false);
}

#[test]
fn status_and_operation_are_never_written() {
    let app = render(&Preview::test().on("eu-1"));
    assert!(app.get("status").is_none() && app.get("operation").is_none());
    assert_eq!(app["metadata"]["finalizers"][0], CASCADE_FINALIZER);
}

/// Argo CD adds the post-delete finalizers only on its first refresh that compares an
/// Application: a preview closed before that would go without its database drop.
#[test]
fn a_preview_whose_database_is_dropped_carries_the_post_delete_finalizers_from_its_creation() {
    let finalizers = |toml: &str| {
        let config = Config::from_toml(toml, Vec::new()).unwrap();
        let preview = Preview::test();
        let names = Names::of(&preview.key, &config.defaults.domain);
        helper_application(&preview, &names, &config, &[]).unwrap()["metadata"]["finalizers"]
            .clone()
    };
    assert_eq!(
        finalizers(""),
        json!([
            CASCADE_FINALIZER,
            POST_DELETE_FINALIZERS[0],
            POST_DELETE_FINALIZERS[1]
        ])
    );
    assert_eq!(
        finalizers("[database]\nmode = \"cnpg\""),
        json!([
            CASCADE_FINALIZER,
            POST_DELETE_FINALIZERS[0],
            POST_DELETE_FINALIZERS[1]
        ])
    );
    for kept in [
        "[database]\ndrop_on_delete = false",
        "[database]\nmode = \"off\"",
    ] {
        assert_eq!(finalizers(kept), json!([CASCADE_FINALIZER]), "{kept}");
    }
}

#[test]
fn an_unknown_cluster_is_an_error_not_a_guess() {
    let error = helper_application(
        &Preview::test().on("mars-1"),
        &names(&Preview::test(), &config()),
        &config(),
        &[],
    )
    .unwrap_err();
    assert!(error.to_string().contains("mars-1"), "{error}");
}

#[test]
fn the_embedded_defaults_render_on_the_in_cluster_cluster() {
    let defaults = Config::from_toml("", Vec::new()).unwrap();
    let app = helper_application(
        &Preview::test(),
        &names(&Preview::test(), &defaults),
        &defaults,
        &[],
    )
    .unwrap();
    assert_eq!(
        app["spec"]["destination"]["server"],
        "https://kubernetes.default.svc"
    );
    assert_eq!(app["metadata"]["namespace"], "argocd");
    assert_eq!(
        app["spec"]["source"]["helm"]["valuesObject"]["dns"]["enabled"],
        false
    );
}

#[test]
fn a_configured_app_chart_renders_the_app_application_at_the_head_sha() {
    let preview = Preview::test().on("eu-1").of("octo/worker#3");
    let app = app_application(&preview, &names(&preview, &config()), &config())
        .unwrap()
        .unwrap();
    insta::assert_snapshot!(crate::yaml::to_string(&app));
    assert_eq!(
        app["spec"]["source"]["targetRevision"],
        preview.head_sha.as_str()
    );
    assert_eq!(
        app["spec"]["destination"],
        render(&preview)["spec"]["destination"],
        "the app lands in the preview namespace the helpers made"
    );
}

/// `[[repos]] image_tag`: the migrations, the seed command and the app all run the tag CI
/// built under the repository's template, not the bare head SHA.
#[test]
fn every_image_a_preview_runs_carries_the_tag_its_template_renders() {
    let toml = CONFIG.replace(
        "seed_command = [\"bin/seed\"]",
        "seed_command = [\"bin/seed\"]\nmigrate_command = [\"bin/migrate\"]\nimage_tag = \"pr-{number}-{sha7}\"",
    );
    let config = Config::from_toml(&toml, Vec::new()).unwrap();
    let preview = Preview::test().on("eu-1").of("octo/worker#3");
    let names = names(&preview, &config);
    let helper = helper_application(&preview, &names, &config, &[]).unwrap();
    let values = &helper["spec"]["source"]["helm"]["valuesObject"];
    assert_eq!(
        values["migrations"]["image"],
        "ghcr.io/octo/worker:pr-3-ec26c3e"
    );
    assert_eq!(
        values["seed"]["commandImage"],
        "ghcr.io/octo/worker:pr-3-ec26c3e"
    );
    let app = app_application(&preview, &names, &config).unwrap().unwrap();
    let image = &app["spec"]["source"]["helm"]["valuesObject"]["image"];
    assert_eq!(image["repository"], "ghcr.io/octo/worker");
    assert_eq!(image["tag"], "pr-3-ec26c3e");
}

#[test]
fn without_an_app_chart_there_is_no_app_application() {
    assert_eq!(
        app_application(
            &Preview::test().on("eu-1"),
            &names(&Preview::test(), &config()),
            &config()
        ),
        Ok(None)
    );
}

#[test]
fn an_unapproved_fork_gets_no_app_application_either() {
    let preview = Preview::test().on("eu-1").of("octo/worker#3").fork();
    assert!(matches!(
        app_application(&preview, &names(&preview, &config()), &config()),
        Err(RenderError::NotApproved { .. })
    ));
}

/// A sleeping preview's app renders at zero replicas and its catcher stopped, through Helm
/// parameters (a list, replaced whole by any apply), and nothing else changes: the hash is
/// the awake one's with `-asleep` after it, so a sleep or a wake is synced without hooks and
/// leaves the app's gate open.
#[test]
fn a_sleeping_preview_renders_its_app_at_zero_replicas_and_is_named_after_its_awake_twin() {
    let with_mail = Config::from_toml(&format!("{CONFIG}mail = true\n"), Vec::new()).unwrap();
    let awake = Preview::test().on("eu-1").of("octo/worker#3");
    let asleep = awake.clone().asleep();
    let named = names(&awake, &with_mail);
    let render = |p: &Preview| super::preview(p, &named, &with_mail, &[], "i").unwrap();
    let (day, night) = (render(&awake), render(&asleep));
    let (day_app, night_app) = (day.app.unwrap(), night.app.unwrap());
    assert_eq!(night.helper.hash, format!("{}-asleep", day.helper.hash));
    assert_eq!(night_app.hash, format!("{}-asleep", day_app.hash));
    let helm = |m: &Value| m["spec"]["source"]["helm"].clone();
    assert_eq!(
        helm(&night_app.manifest)["parameters"],
        json!([{"name": "replicaCount", "value": "0"},
               {"name": "autoscaling.enabled", "value": "false"},
               {"name": "preview.asleep", "value": "true"}])
    );
    assert_eq!(
        helm(&night.helper.manifest)["parameters"],
        json!([{"name": "mail.asleep", "value": "true"}])
    );
    assert_eq!(
        helm(&day_app.manifest)["parameters"],
        json!([]),
        "awake: emptied, not left out"
    );
    assert_eq!(helm(&day.helper.manifest)["parameters"], json!([]));
    assert_eq!(
        helm(&night_app.manifest)["valuesObject"],
        helm(&day_app.manifest)["valuesObject"],
        "the values stay as they are"
    );
    assert_eq!(
        night_app.manifest["metadata"]["annotations"][APPLIED_HASH],
        night_app.hash.as_str()
    );
    // Without a catcher the helpers have nothing to stop: a sleep leaves them be.
    let quiet = config();
    let named = names(&awake, &quiet);
    let plain = |p: &Preview| super::preview(p, &named, &quiet, &[], "i").unwrap().helper;
    assert_eq!(plain(&asleep), plain(&awake));
}
