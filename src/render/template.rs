//! Rendering a template generation (#16), pure: one helper Application per generation of a
//! repository's template database, with the same chart, waves and hooks as a preview's, told
//! to build a template (`database.build`): created, migrated with the default branch's image,
//! seeded once, then sealed. No TLS, no DNS, no Ingress: nothing is served from it.

use serde_json::json;

use super::{LABEL_PR, RenderError, SealedSecret, Stamped, helper_application, stamped};
use crate::config::Config;
use crate::ledger;
use crate::naming::Names;
use crate::preview::{Preview, PreviewKey, RepoName, Sha};

/// The label that tells a template generation's Application (and every object it makes)
/// from a preview's; its value is the generation.
pub const LABEL_TEMPLATE: &str = "previewd.dev/template";

/// One generation of a repository's template database, as rendering needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub repo: RepoName,
    pub generation: u32,
    /// The default branch's head it is built from: the image its migrations and seed run.
    pub base_sha: Sha,
    pub cluster: String,
}

impl Generation {
    /// The `previewd.dev/pr` value of a generation's objects: never a PR number, so no
    /// preview's owner check ever matches a template's Application, nor the other way.
    pub fn pr_label(&self) -> String {
        format!("template-{}", self.generation)
    }
}

/// Everything previewd applies for one generation: its Application, and the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedTemplate {
    pub application: Stamped,
    pub entries: Vec<ledger::Entry>,
}

/// The generation's helper Application. `names` are its recorded names
/// (`Names::template`); `sealed`, its database Secrets sealed for `generation.cluster`.
pub fn template(
    generation: &Generation,
    names: &Names,
    config: &Config,
    sealed: &[SealedSecret],
    instance: &str,
) -> Result<RenderedTemplate, RenderError> {
    // The chart renders a generation as it renders a preview at the base branch's head,
    // seed generation 1, with the changes below.
    let build = Preview {
        key: PreviewKey::new(generation.repo.clone(), 0),
        head_sha: generation.base_sha.clone(),
        author: "previewd".into(),
        title: format!("template database, generation {}", generation.generation),
        fork: false,
        approved_sha: None,
        cluster: generation.cluster.clone(),
        seed_generation: 1,
        redeploy_generation: 0,
        image_ready: true,
        template: None,
        asleep: false,
    };
    let mut app = helper_application(&build, names, config, sealed)?;
    let pr = generation.pr_label();
    let number = generation.generation.to_string();
    for path in [
        &["metadata", "labels"][..],
        &["spec", "source", "helm", "valuesObject", "labels"][..],
    ] {
        let labels = path.iter().fold(&mut app, |value, key| &mut value[*key]);
        labels[LABEL_PR] = json!(pr);
        labels[LABEL_TEMPLATE] = json!(number);
    }
    let annotations = &mut app["metadata"]["annotations"];
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.remove("link.argocd.argoproj.io/preview");
        annotations.remove("previewd.dev/author");
    }
    annotations["previewd.dev/base-sha"] = json!(generation.base_sha.as_str());
    let values = &mut app["spec"]["source"]["helm"]["valuesObject"];
    values["database"]["build"] = json!(true);
    values["tls"] = json!({"mode": "off"});
    values["dns"] = json!({"enabled": false});
    if let Some(values) = values.as_object_mut() {
        values.remove("ingress");
    }
    // Spare clones made ahead of time by the generation's pool keeper, for previews to claim.
    let spares = config
        .template_for(&generation.repo)
        .map_or(0, |t| t.spares);
    if spares > 0 {
        values["database"]["spares"] = json!(spares);
        // Made only while the server has room for them (database.server_size).
        if let Some(room) = config.database.server_bytes {
            values["database"]["room"] = json!(room);
        }
    }
    // Sealed with a report token: once sealed, the size Job measures the database and posts
    // its size here (the token's Secret is among `sealed` only with a configured public_url:
    // the loopback guess is this host's, never a cluster's way back).
    let report = super::SecretNames::of(names).report;
    if let (Some(url), true) = (
        config.reachable_url.as_deref(),
        sealed.iter().any(|s| s.name == report),
    ) {
        values["database"]["report"] = json!({
            "url": report_url(url, generation),
            "tokenSecret": report,
        });
    }
    // A generation is previewd's own object, never a preview's data: `drop_on_delete = false`
    // keeps previews' databases, while a retired generation is dropped all the same, with its
    // spare clones (template-drop.sql). Kept, it would stay on the server for good, its row
    // forgotten and nothing left to say it is there.
    if values["database"].get("dropOnDelete").is_some() {
        values["database"]["dropOnDelete"] = json!(true);
    }
    // Its drop runs even if it is retired before Argo CD's first refresh (see `finalizers`).
    let finalizers = super::finalizers(values);
    app["metadata"]["finalizers"] = finalizers;
    let mut entries: Vec<ledger::Entry> = ledger::provisioned(
        names,
        config,
        &ledger::Services::default(),
        ledger::Dns::Off,
    )
    .into_iter()
    .filter(|e| e.kind != "Certificate")
    .collect();
    if spares > 0 {
        entries.push(ledger::Entry {
            kind: "Deployment".into(),
            namespace: config.database.namespace.clone(),
            name: format!("{}-db-spares", names.slug),
        });
    }
    Ok(RenderedTemplate {
        application: stamped(app, instance),
        entries,
    })
}

/// Where a generation's size Job posts its size: `POST /api/templates/{owner}/{repo}/
/// {generation}/size` under `public_url` (repository names are URL-safe as GitHub allows them).
pub fn report_url(public_url: &str, generation: &Generation) -> String {
    format!(
        "{}/api/templates/{}/{}/size",
        public_url.trim_end_matches('/'),
        generation.repo,
        generation.generation
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn generation(n: u32) -> Generation {
        Generation {
            repo: "octo/app".parse().unwrap(),
            generation: n,
            base_sha: "1111111111111111111111111111111111111111".parse().unwrap(),
            cluster: "in-cluster".into(),
        }
    }

    fn config() -> Config {
        Config::from_toml(
            "[tls]\nmode = \"cert-manager\"\n[[repos]]\nname = \"octo/app\"\nimage = \"ghcr.io/octo/app\"\n\
             migrate_command = [\"./migrate\"]\nseed = \"example\"\ndatabase_template = true\n",
            Vec::new(),
        )
        .unwrap()
    }

    #[test]
    fn a_generation_builds_its_database_with_the_base_branchs_image_and_serves_nothing() {
        let config = config();
        let g = generation(3);
        let names = Names::template(&g.repo, 3, "preview.localhost");
        let rendered = template(&g, &names, &config, &[], "inst").unwrap();
        let app = &rendered.application.manifest;
        assert_eq!(app["metadata"]["labels"][LABEL_PR], "template-3");
        assert_eq!(app["metadata"]["labels"][LABEL_TEMPLATE], "3");
        let values = &app["spec"]["source"]["helm"]["valuesObject"];
        assert_eq!(values["database"]["build"], true);
        assert_eq!(values["database"]["name"], names.database.as_str());
        assert!(names.slug.contains("-tpl-3"), "{}", names.slug);
        assert_eq!(
            values["migrations"]["image"],
            "ghcr.io/octo/app:1111111111111111111111111111111111111111"
        );
        assert_eq!(values["seed"]["enabled"], true);
        assert_eq!(values["tls"]["mode"], "off");
        assert_eq!(values["dns"]["enabled"], false);
        assert!(values.get("ingress").is_none());
        assert_eq!(values["labels"][LABEL_TEMPLATE], "3");
        assert_eq!(values["database"]["spares"], 2, "the default pool");
        assert!(
            values["database"]["room"].is_null(),
            "no database.server_size"
        );
        assert!(rendered.entries.iter().all(|e| e.kind != "Certificate"));
        assert!(rendered.entries.iter().any(|e| e.kind == "Namespace"));
        assert!(
            rendered
                .entries
                .iter()
                .any(|e| e.kind == "Deployment" && e.name == format!("{}-db-spares", names.slug)),
            "the pool keeper is in the generation's ledger: {:?}",
            rendered.entries
        );
    }

    /// A repository's previews get an Ingress (`app_service`), its template never: nothing
    /// is served from a generation's namespace.
    #[test]
    fn a_generation_has_no_ingress_even_where_the_repositorys_previews_have_one() {
        let config = Config::from_toml(
            "public_url = \"https://previewd.example.com\"\n[[repos]]\nname = \"octo/app\"\n\
             image = \"ghcr.io/octo/app\"\nseed = \"example\"\ndatabase_template = true\n\
             app_service = \"web:80\"\n",
            Vec::new(),
        )
        .unwrap();
        let g = generation(3);
        let names = Names::template(&g.repo, 3, "preview.localhost");
        let rendered = template(&g, &names, &config, &[], "inst").unwrap();
        let values = &rendered.application.manifest["spec"]["source"]["helm"]["valuesObject"];
        assert!(values.get("ingress").is_none(), "{values}");
    }

    #[test]
    fn a_generations_spares_are_bounded_by_the_servers_room() {
        let mut config = config();
        config.database.server_bytes = Some(200 << 30);
        let g = generation(3);
        let names = Names::template(&g.repo, 3, "preview.localhost");
        let rendered = template(&g, &names, &config, &[], "inst").unwrap();
        let values = &rendered.application.manifest["spec"]["source"]["helm"]["valuesObject"];
        assert_eq!(values["database"]["room"], 200u64 << 30);
    }

    /// Argo CD adds the post-delete finalizers only on its first refresh that compares the
    /// Application: a generation deleted before that (superseded at once) never ran its drop.
    #[test]
    fn a_generation_carries_argo_cds_post_delete_finalizers_from_its_creation() {
        let g = generation(3);
        let names = Names::template(&g.repo, 3, "preview.localhost");
        let rendered = template(&g, &names, &config(), &[], "inst").unwrap();
        assert_eq!(
            rendered.application.manifest["metadata"]["finalizers"],
            json!([
                super::super::CASCADE_FINALIZER,
                "post-delete-finalizer.argocd.argoproj.io",
                "post-delete-finalizer.argocd.argoproj.io/cleanup",
            ])
        );
    }

    /// `drop_on_delete = false` keeps previews' databases; a retired generation (previewd's
    /// own, with its spare clones) is dropped all the same, or it stays on the server for good.
    #[test]
    fn a_generation_is_dropped_when_retired_though_drop_on_delete_keeps_previews_databases() {
        for mode in ["shared", "cnpg"] {
            let config = Config::from_toml(
                &format!(
                    "[database]\nmode = \"{mode}\"\ndrop_on_delete = false\n[[repos]]\n\
                     name = \"octo/app\"\nimage = \"ghcr.io/octo/app\"\nseed = \"example\"\n\
                     database_template = true\n"
                ),
                Vec::new(),
            )
            .unwrap();
            let g = generation(3);
            let names = Names::template(&g.repo, 3, "preview.localhost");
            let app = template(&g, &names, &config, &[], "inst")
                .unwrap()
                .application
                .manifest;
            let database = &app["spec"]["source"]["helm"]["valuesObject"]["database"];
            assert_eq!(database["dropOnDelete"], true, "{mode}: {database}");
            let finalizers = app["metadata"]["finalizers"].as_array().unwrap();
            assert!(
                finalizers.contains(&json!(crate::render::POST_DELETE_FINALIZERS[0])),
                "{mode}: {finalizers:?}"
            );
        }
    }

    #[test]
    fn generations_of_one_repository_and_previews_never_share_a_name() {
        let repo: RepoName = "octo/app".parse().unwrap();
        let one = Names::template(&repo, 1, "d");
        let two = Names::template(&repo, 2, "d");
        let pr = Names::of(&PreviewKey::new(repo.clone(), 1), "d");
        for (a, b) in [(&one, &two), (&one, &pr), (&two, &pr)] {
            assert_ne!(a.slug, b.slug);
            assert_ne!(a.database, b.database);
            assert_ne!(a.application, b.application);
        }
        assert!(one.slug.len() <= crate::naming::MAX_SLUG);
    }

    #[test]
    fn a_generation_sealed_with_a_report_token_tells_its_size_job_where_to_report() {
        let config = Config::from_toml(
            "public_url = \"https://previewd.example.com/\"\n[[repos]]\nname = \"octo/app\"\n\
             image = \"ghcr.io/octo/app\"\nseed = \"example\"\ndatabase_template = true\n",
            Vec::new(),
        )
        .unwrap();
        let g = generation(3);
        let names = Names::template(&g.repo, 3, "preview.localhost");
        let report = crate::render::SecretNames::of(&names).report;
        let sealed = SealedSecret {
            name: report.clone(),
            namespace: config.database.namespace.clone(),
            scope: "strict",
            type_: "Opaque".into(),
            labels: Default::default(),
            encrypted_data: [("TOKEN".to_owned(), "AgB".to_owned())].into(),
            template_data: Default::default(),
        };
        let values = |sealed: &[SealedSecret]| {
            let rendered = template(&g, &names, &config, sealed, "inst").unwrap();
            rendered.application.manifest["spec"]["source"]["helm"]["valuesObject"]["database"]
                ["report"]
                .clone()
        };
        assert_eq!(
            values(std::slice::from_ref(&sealed)),
            json!({
                "url": "https://previewd.example.com/api/templates/octo/app/3/size",
                "tokenSecret": report,
            })
        );
        // Sealed before previewd had a token to give (or with no public_url): no report.
        assert_eq!(values(&[]), serde_json::Value::Null);
    }
}
