//! Template databases (#16), the chart's side: a template-building release (one per
//! generation) and a preview cloned from a generation, in shared and cnpg mode, from values
//! written here as previewd will send them, rendered by the real Helm library and validated
//! against the Kubernetes and CRD schemas.

use super::*;
use serde_json::json;

const BUILD: &str = "pv-octo-app-4d960c3af87af320-tpl-3";
const GENERATION: &str = "pv_octo_app_4d960c3af87af320_tpl_3";
const PREVIEW: &str = "pv-octo-app-4d960c3af87af320-pr-7";
const SHA: &str = "4d960c3af87af3204d960c3af87af3204d960c3a";

fn sealed_json(name: String, namespace: &str, key: &str) -> Value {
    json!({"name": name, "namespace": namespace, "scope": "strict", "type": "Opaque",
           "encryptedData": {key: "AgBy3i4OJSWK+PiTySYZZA=="}})
}

/// The values of a release named `slug`, in `mode` ("shared" or "cnpg"), with `database`
/// merged into the database values.
fn values(slug: &str, number: u64, mode: &str, database: Value, seed: Value) -> Value {
    let admin_side = if mode == "shared" {
        "previewd-system"
    } else {
        "pg-shared"
    };
    let mut db = json!({
        "mode": mode,
        "urlSecret": format!("{slug}-db"),
        "dropOnDelete": true,
        // As previewd sends it to every release, template-building ones included.
        "maxBytes": 1u64 << 30,
    });
    if mode == "shared" {
        db["shared"] = json!({"namespace": "previewd-system", "adminSecret": "postgres-admin",
                              "passwordSecret": format!("{slug}-db-password"),
                              "image": "postgres:17-alpine"});
    } else {
        db["cnpg"] = json!({"namespace": "pg-shared", "cluster": "shared",
                            "passwordSecret": format!("{slug}-db-password"),
                            "image": "postgres:17-alpine", "superuserSecret": ""});
    }
    for (key, value) in database.as_object().unwrap() {
        db[key] = value.clone();
    }
    json!({
        "preview": {"repo": "octo/app", "number": number, "sha": SHA, "author": "octocat",
                    "host": format!("{slug}.preview.example.com")},
        "redeploy": 0,
        "namespace": slug,
        "labels": {"app.kubernetes.io/managed-by": "previewd", "previewd.dev/repo": "octo.app",
                   "previewd.dev/pr": number.to_string()},
        "sealedSecrets": [
            sealed_json(format!("{slug}-db"), slug, "DATABASE_URL"),
            sealed_json(format!("{slug}-db-password"), admin_side, "VERIFIER"),
        ],
        "tls": {"mode": "off"},
        "database": db,
        "migrations": {"enabled": true, "image": format!("ghcr.io/octo/app:{SHA}"),
                       "command": ["bin/migrate"]},
        "seed": seed,
        "dns": {"enabled": false},
    })
}

/// A template-building release: generation 3 of octo/app's template.
fn build(mode: &str) -> Value {
    values(
        BUILD,
        0,
        mode,
        json!({"build": true, "name": GENERATION, "role": GENERATION}),
        json!({"enabled": true, "generation": 1, "mode": "sql", "image": "postgres:17-alpine",
               "files": {"01-items.sql": "INSERT INTO items VALUES (1, 'one');"}}),
    )
}

/// PR 7 cloned from generation 3, at clone generation `clone`.
fn clone(mode: &str, clone: u64) -> Value {
    values(
        PREVIEW,
        7,
        mode,
        json!({"name": "octo_app_pr_7", "role": "octo_app_pr_7",
               "template": {"name": GENERATION, "role": GENERATION, "clone": clone}}),
        json!({"enabled": false}),
    )
}

/// Renders and validates `values` as release `release`; `objects` rendered, all valid.
fn rendered(values: &Value, release: &str, objects: usize) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "values.json", &values.to_string());
    let dump = dir.path().join("objects.json");
    let (ok, out) = check(&[
        &chart(),
        file.to_str().unwrap(),
        "--release",
        release,
        "--dump",
        dump.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    assert!(
        out.trim_end()
            .ends_with(&format!("validated {objects} objects, 0 failed")),
        "{out}"
    );
    serde_json::from_str(&std::fs::read_to_string(dump).unwrap()).unwrap()
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn has(objects: &[Value], kind: &str, name: &str) -> bool {
    objects
        .iter()
        .any(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// Where gitops-engine puts a hook in a sync: (phase, wave); tasks run phase by phase, and
/// within a phase wave by wave (pkg/sync/sync_tasks.go, sort by phase then wave).
fn order(object: &Value) -> (u8, i64) {
    let phase = match annotation(object, "argocd.argoproj.io/hook") {
        Some("PreSync") => 0,
        None | Some("Sync") => 1,
        Some("PostSync") => 2,
        Some(other) => panic!("not a sync phase: {other}"),
    };
    let wave = annotation(object, "argocd.argoproj.io/sync-wave")
        .map(|w| w.parse().unwrap())
        .unwrap_or(0);
    (phase, wave)
}

fn container(job: &Value) -> &Value {
    &job["spec"]["template"]["spec"]["containers"][0]
}

fn command(job: &Value) -> String {
    container(job)["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_template_building_release_in_shared_mode_seals_after_the_seed_and_drops_on_teardown() {
    // Namespace, rendering ConfigMap, 2 SealedSecrets, the SQL ConfigMap and the drop's,
    // create, seal and drop Jobs, migrate Job, 2 seed ConfigMaps and the seed Job: 13.
    let objects = rendered(&build("shared"), BUILD, 13);
    let job = |suffix: &str| named(&objects, "Job", &format!("{BUILD}{suffix}"));
    let (create, seal, drop) = (job("-db-create"), job("-db-seal"), job("-db-drop"));
    assert!(
        command(create).ends_with("-v role=pv_octo_app_4d960c3af87af320_tpl_3 -v db=pv_octo_app_4d960c3af87af320_tpl_3 -d postgres -f /sql/template-create.sql"),
        "{}",
        command(create)
    );
    assert_eq!(order(create), (1, -1), "before the migrations");
    assert_eq!(order(job("-migrate")), (1, 0));
    // The seal runs after the seed: PostSync, a later wave.
    assert_eq!(
        annotation(seal, "argocd.argoproj.io/hook"),
        Some("PostSync")
    );
    assert!(order(seal) > order(job("-seed")), "{:?}", order(seal));
    assert!(command(seal).ends_with("-f /sql/template-seal.sql"));
    for admin in [create, seal, drop] {
        assert_eq!(admin["metadata"]["namespace"], "previewd-system");
        assert_eq!(
            container(admin)["envFrom"][0]["secretRef"]["name"],
            "postgres-admin"
        );
    }
    // The seal's SQL is in the ordinary ConfigMap, which lives through PostSync.
    let sql = named(&objects, "ConfigMap", &format!("{BUILD}-db-sql"));
    assert_eq!(annotation(sql, "argocd.argoproj.io/hook"), None);
    assert!(
        sql["data"]["template-seal.sql"]
            .as_str()
            .unwrap()
            .contains("IS_TEMPLATE true")
    );
    assert!(sql["data"]["template-create.sql"].is_string());
    assert!(sql["data"]["create.sql"].is_null(), "no preview database");
    // Teardown: template-drop.sql (database and role), from a ConfigMap that is a PostDelete
    // hook itself, both removed once they succeeded.
    assert_eq!(
        annotation(drop, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert!(command(drop).ends_with("-f /sql/template-drop.sql"));
    let drop_sql = named(&objects, "ConfigMap", &format!("{BUILD}-db-drop-sql"));
    assert_eq!(
        annotation(drop_sql, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert!(drop_sql["data"]["template-drop.sql"].is_string());
    for hook in [drop, drop_sql] {
        assert_eq!(
            annotation(hook, "argocd.argoproj.io/hook-delete-policy"),
            Some("HookSucceeded")
        );
    }
    // The migrations and the seed run as the generation's role, through its URL Secret.
    for runs_as_role in [job("-migrate"), job("-seed")] {
        assert_eq!(
            container(runs_as_role)["envFrom"][0]["secretRef"]["name"],
            format!("{BUILD}-db")
        );
    }
}

#[test]
fn a_template_building_release_in_cnpg_mode_seals_after_the_seed_and_drops_what_cnpg_cannot() {
    // Namespace, rendering ConfigMap, 2 SealedSecrets, DatabaseRole, Database, the SQL
    // ConfigMap and the drop's, create, seal and drop Jobs, migrate Job, 2 seed ConfigMaps
    // and the seed Job: 15.
    let objects = rendered(&build("cnpg"), BUILD, 15);
    let database = named(&objects, "Database", &format!("{BUILD}-db"));
    assert_eq!(
        database["spec"]["owner"], "postgres",
        "never the generation's role, which REASSIGN OWNED moves from"
    );
    assert_eq!(database["spec"]["databaseReclaimPolicy"], "retain");
    assert!(
        !has(&objects, "CronJob", &format!("{BUILD}-size")),
        "a generation is measured by its size Job, and never opened to PR code"
    );
    assert!(database["spec"]["isTemplate"].is_null());
    assert!(database["spec"]["allowConnections"].is_null());
    assert_eq!(
        named(&objects, "DatabaseRole", &format!("{BUILD}-role"))["spec"]["databaseRoleReclaimPolicy"],
        "retain"
    );
    let job = |suffix: &str| named(&objects, "Job", &format!("{BUILD}{suffix}"));
    let (create, seal, drop) = (job("-db-create"), job("-db-seal"), job("-db-drop"));
    assert!(command(create).contains("-v managed_role=1"));
    assert!(command(create).ends_with("-f /sql/template-create.sql"));
    assert!(order(seal) > order(job("-seed")));
    assert_eq!(
        annotation(seal, "argocd.argoproj.io/hook"),
        Some("PostSync")
    );
    assert_eq!(
        annotation(drop, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert!(command(drop).ends_with("-f /sql/template-drop.sql"));
    assert_eq!(
        annotation(
            named(&objects, "ConfigMap", &format!("{BUILD}-db-drop-sql")),
            "argocd.argoproj.io/hook"
        ),
        Some("PostDelete")
    );
    for superuser in [create, seal, drop] {
        assert_eq!(superuser["metadata"]["namespace"], "pg-shared");
        let env = container(superuser)["env"].to_string();
        assert!(env.contains(r#""name":"shared-superuser""#), "{env}");
    }
    // An operator's own superuser Secret.
    let mut own = build("cnpg");
    own["database"]["cnpg"]["superuserSecret"] = "pg-admin".into();
    let objects = rendered(&own, BUILD, 15);
    let env = container(named(&objects, "Job", &format!("{BUILD}-db-seal")))["env"].to_string();
    assert!(
        env.contains(r#""name":"pg-admin""#) && !env.contains("shared-superuser"),
        "{env}"
    );
}

#[test]
fn a_clone_preview_renders_the_create_job_with_the_template_arguments_and_no_seed() {
    // Namespace, rendering ConfigMap, 2 SealedSecrets, the SQL ConfigMap and the drop's,
    // create and drop Jobs, the size guard's CronJob, migrate Job: 10.
    let objects = rendered(&clone("shared", 1), PREVIEW, 10);
    let create = named(&objects, "Job", &format!("{PREVIEW}-db-create"));
    assert_eq!(
        command(create),
        "psql -X -v role=octo_app_pr_7 -v db=octo_app_pr_7 \
         -v template=pv_octo_app_4d960c3af87af320_tpl_3 \
         -v template_role=pv_octo_app_4d960c3af87af320_tpl_3 -v clone=1 \
         -v max_bytes=1073741824 -d postgres -f /sql/create.sql"
    );
    let sql = named(&objects, "ConfigMap", &format!("{PREVIEW}-db-sql"));
    assert!(
        sql["data"]["create.sql"]
            .as_str()
            .unwrap()
            .contains("\\ir template-clone.sql")
    );
    assert!(
        sql["data"]["template-clone.sql"]
            .as_str()
            .unwrap()
            .contains("DROP OWNED BY")
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"].as_str().unwrap().contains("-seed"))
    );
    // The preview's teardown is the usual one: its clone and its role, never the template.
    let drop = named(&objects, "Job", &format!("{PREVIEW}-db-drop"));
    assert!(command(drop).ends_with("-f /sql/drop.sql"));
    assert!(!has(&objects, "Job", &format!("{PREVIEW}-db-seal")));
    // A preview without a template renders no clone SQL at all.
    let mut plain = clone("shared", 1);
    plain["database"]
        .as_object_mut()
        .unwrap()
        .remove("template");
    let objects = rendered(&plain, PREVIEW, 10);
    let sql = named(&objects, "ConfigMap", &format!("{PREVIEW}-db-sql"));
    assert!(sql["data"]["template-clone.sql"].is_null());
    assert!(!command(named(&objects, "Job", &format!("{PREVIEW}-db-create"))).contains("template"));
}

#[test]
fn a_clone_preview_in_cnpg_mode_clones_in_a_superuser_job_before_its_database_object() {
    // Namespace, rendering ConfigMap, 2 SealedSecrets, DatabaseRole, Database, the SQL
    // ConfigMap and the drop's, the clone and drop Jobs, the size guard's CronJob, migrate
    // Job: 12.
    let objects = rendered(&clone("cnpg", 4), PREVIEW, 12);
    let job = named(&objects, "Job", &format!("{PREVIEW}-db-clone"));
    assert_eq!(job["metadata"]["namespace"], "pg-shared");
    assert!(
        command(job).ends_with(
            "-v template=pv_octo_app_4d960c3af87af320_tpl_3 \
             -v template_role=pv_octo_app_4d960c3af87af320_tpl_3 -v clone=4 \
             -v max_bytes=1073741824 -f /sql/template-clone.sql"
        ),
        "{}",
        command(job)
    );
    let database = named(&objects, "Database", &format!("{PREVIEW}-db"));
    assert!(
        database["spec"]["template"].is_null(),
        "immutable: a reseed from a newer generation would be refused"
    );
    assert_eq!(
        database["spec"]["owner"], "postgres",
        "never the preview's role, whose code could mark it a template"
    );
    assert_eq!(database["spec"]["databaseReclaimPolicy"], "retain");
    assert!(
        order(job) < order(database),
        "cloned before CloudNativePG looks"
    );
    assert!(order(database) <= order(named(&objects, "Job", &format!("{PREVIEW}-migrate"))));
    // Teardown: CloudNativePG's plain DROP DATABASE fails with the app connected; the
    // superuser's drop Job ends its sessions.
    let drop = named(&objects, "Job", &format!("{PREVIEW}-db-drop"));
    assert_eq!(
        annotation(drop, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert!(command(drop).ends_with("-f /sql/drop.sql"));
}

/// The ordinary (non-hook) objects of a rendering: all that Argo CD compares.
fn ordinary(objects: &[Value]) -> Vec<&Value> {
    objects
        .iter()
        .filter(|o| annotation(o, "argocd.argoproj.io/hook").is_none())
        .collect()
}

#[test]
fn bumping_the_clone_generation_changes_the_rendering_config_map() {
    for (mode, count) in [("shared", 10), ("cnpg", 12)] {
        let first = rendered(&clone(mode, 1), PREVIEW, count);
        let reseeded = rendered(&clone(mode, 2), PREVIEW, count);
        let rendering = |objects: &[Value]| {
            named(objects, "ConfigMap", &format!("{PREVIEW}-rendering"))["data"].clone()
        };
        assert_eq!(rendering(&first)["databaseClone"], "1");
        assert_eq!(rendering(&reseeded)["databaseClone"], "2");
        assert_ne!(rendering(&first)["hooks"], rendering(&reseeded)["hooks"]);
        assert_ne!(ordinary(&first), ordinary(&reseeded), "{mode}");
        assert_eq!(
            ordinary(&first),
            ordinary(&rendered(&clone(mode, 1), PREVIEW, count)),
            "the same input renders the same"
        );
    }
}

#[test]
fn every_template_file_that_renders_a_hook_is_in_the_renderings_checksum() {
    let dir = format!("{ROOT}/helpers-chart/templates");
    let rendering = std::fs::read_to_string(format!("{dir}/rendering.yaml")).unwrap();
    let listed: String = rendering
        .lines()
        .filter(|l| l.contains("range $file := list"))
        .collect();
    let mut hooks = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        if text.contains("argocd.argoproj.io/hook:") {
            hooks += 1;
            assert!(
                listed.contains(&format!("\"{name}\"")),
                "{name} renders hooks but rendering.yaml's checksum leaves it out"
            );
        }
    }
    assert_eq!(
        hooks, 6,
        "database-shared, database-cnpg, migrations, seed, template-size, messaging-shared"
    );
}

#[test]
fn the_schema_refuses_a_bad_template_and_a_build_that_is_not_one() {
    type Edit = fn(&mut Value);
    let preview: [(&str, Edit); 6] = [
        ("/database/template/name", |v| {
            v["database"]["template"]["name"] = "tpl; DROP DATABASE postgres".into()
        }),
        ("/database/template/role", |v| {
            v["database"]["template"]["role"] = "Tpl".into()
        }),
        ("/database/template/clone", |v| {
            v["database"]["template"]["clone"] = 0.into()
        }),
        ("/database/template/clone", |v| {
            v["database"]["template"]["clone"] = "2".into()
        }),
        ("/database/template", |v| {
            v["database"]["template"]["reclone"] = 1.into()
        }),
        ("/preview/number", |v| v["preview"]["number"] = 0.into()),
    ];
    let built: [(&str, Edit); 3] = [
        ("/database", |v| {
            v["database"]["template"] = json!({"name": "a", "role": "a", "clone": 1})
        }),
        ("/database/build", |v| v["database"]["build"] = "yes".into()),
        ("/database/cnpg/superuserSecret", |v| {
            v["database"]["cnpg"]["superuserSecret"] = "Bad_Name".into()
        }),
    ];
    let dir = tempfile::tempdir().unwrap();
    let cases = preview
        .iter()
        .map(|(path, edit)| (clone("shared", 1), *path, *edit))
        .chain(
            built
                .iter()
                .map(|(path, edit)| (build("cnpg"), *path, *edit)),
        );
    for (good, path, edit) in cases {
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
    for good in [clone("shared", 1), build("cnpg")] {
        let file = write(dir.path(), "values.json", &good.to_string());
        assert!(check(&[&chart(), file.to_str().unwrap()]).0, "unedited");
    }
}

/// What previewd itself renders (`render::template::template`, and a preview cloned from
/// it) goes through the real chart and validates against the real schemas, in both modes.
#[test]
fn previewds_own_generation_and_clone_renderings_validate_in_both_modes() {
    use previewd::render::template::{Generation, template};
    for mode in ["shared", "cnpg"] {
        let toml = format!(
            "{}database_template = true\n[database]\nmode = \"{mode}\"\nnamespace = \"pg\"\ncnpg_cluster = \"shared\"\n",
            super::FULL
        );
        let config = Config::from_toml(&toml, Vec::new()).unwrap();
        let repo: previewd::preview::RepoName = "octo/app".parse().unwrap();
        let names = previewd::naming::Names::template(&repo, 2, "preview.example.com");
        let generation = Generation {
            repo,
            generation: 2,
            base_sha: "1111111111111111111111111111111111111111".parse().unwrap(),
            cluster: "eu-1".into(),
        };
        let rendered = template(&generation, &names, &config, &[], "inst").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let app = super::write(
            dir.path(),
            "app.yaml",
            &previewd::yaml::to_string(&rendered.application.manifest),
        );
        let (ok, out) = super::check(&[&super::chart(), "--application", app.to_str().unwrap()]);
        assert!(ok, "{mode} generation: {out}");
        assert!(out.contains(", 0 failed"), "{mode} generation: {out}");

        let preview = Preview::test().on("eu-1").cloned_from(&names.database);
        let objects = super::assert_valid_objects(&toml, &preview);
        assert!(
            objects.iter().all(|o| !o["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .ends_with("-seed")),
            "{mode}: a clone is not seeded"
        );
    }
}

/// previewd accepts any http(s) `public_url`; a generation it seals a report token for must
/// still render, or no generation of any repository ever builds. (On a loopback IPv6 `listen`
/// previewd guesses `http://[::1]:8080`, which it never gives a cluster: no report then.)
#[test]
fn a_generation_reporting_to_an_ipv6_public_url_still_renders_and_validates() {
    use previewd::render::template::{Generation, template};
    for (public, reports) in [
        ("public_url = \"http://[fd00::10]:8080\"\n", true),
        ("listen = \"[::1]:8080\"\n", false),
    ] {
        let toml = format!(
            "{public}{}database_template = true\n[database]\nmode = \"shared\"\nnamespace = \"pg\"\n",
            super::FULL
        );
        let config = Config::from_toml(&toml, Vec::new()).unwrap();
        let repo: previewd::preview::RepoName = "octo/app".parse().unwrap();
        let names = previewd::naming::Names::template(&repo, 2, "preview.example.com");
        let generation = Generation {
            repo,
            generation: 2,
            base_sha: "1111111111111111111111111111111111111111".parse().unwrap(),
            cluster: "eu-1".into(),
        };
        let report = previewd::render::SecretNames::of(&names).report;
        let sealed = [super::sealed(&report, "pg", "strict", "TOKEN")];
        let rendered = template(&generation, &names, &config, &sealed, "inst").unwrap();
        let values = &rendered.application.manifest["spec"]["source"]["helm"]["valuesObject"];
        assert_eq!(
            values["database"]["report"]["url"].is_string(),
            reports,
            "{public}: {values}"
        );
        let dir = tempfile::tempdir().unwrap();
        let app = super::write(
            dir.path(),
            "app.yaml",
            &previewd::yaml::to_string(&rendered.application.manifest),
        );
        let (ok, out) = super::check(&[&super::chart(), "--application", app.to_str().unwrap()]);
        assert!(ok && out.contains(", 0 failed"), "{public}: {out}");
    }
}

/// A generation sealed with a report token: `build(mode)` with `database.report` and the
/// report Secret, as previewd sends them when it has a `public_url`.
fn build_reporting(mode: &str) -> Value {
    let mut values = build(mode);
    let namespace = if mode == "shared" {
        "previewd-system"
    } else {
        "pg-shared"
    };
    values["database"]["report"] = json!({
        "url": "https://previewd.example.com/api/templates/octo/app/3/size",
        "tokenSecret": format!("{BUILD}-db-report"),
    });
    values["sealedSecrets"]
        .as_array_mut()
        .unwrap()
        .push(sealed_json(
            format!("{BUILD}-db-report"),
            namespace,
            "TOKEN",
        ));
    values
}

#[test]
fn a_sealed_generation_reports_its_size_after_the_seal_with_its_token_off_the_command_line() {
    // Each mode's build (13 and 15 objects) with the report SealedSecret and the size Job.
    for (mode, objects, namespace) in [("shared", 15, "previewd-system"), ("cnpg", 17, "pg-shared")]
    {
        let objects = rendered(&build_reporting(mode), BUILD, objects);
        let job = |suffix: &str| named(&objects, "Job", &format!("{BUILD}{suffix}"));
        let (seal, size) = (job("-db-seal"), job("-db-size"));
        assert_eq!(
            annotation(size, "argocd.argoproj.io/hook"),
            Some("PostSync")
        );
        assert!(order(size) > order(seal), "{mode}: measured once sealed");
        assert_eq!(size["metadata"]["namespace"], namespace);
        assert_eq!(command(size), "sh /sql/template-size.sh");
        let env = container(size)["env"].as_array().unwrap();
        let var = |name: &str| env.iter().find(|e| e["name"] == name).unwrap();
        assert_eq!(
            var("URL")["value"],
            "https://previewd.example.com/api/templates/octo/app/3/size"
        );
        assert_eq!(var("DB")["value"], GENERATION);
        let token = &var("TOKEN")["valueFrom"]["secretKeyRef"];
        assert_eq!(
            (&token["name"], &token["key"], &token["optional"]),
            (
                &json!(format!("{BUILD}-db-report")),
                &json!("TOKEN"),
                &json!(true)
            ),
            "{mode}: a missing token never holds the build"
        );
        let sealed = named(&objects, "SealedSecret", &format!("{BUILD}-db-report"));
        assert_eq!(sealed["metadata"]["namespace"], namespace);
        let sql = named(&objects, "ConfigMap", &format!("{BUILD}-db-sql"));
        assert!(
            sql["data"]["template-size.sh"]
                .as_str()
                .unwrap()
                .contains("pg_database_size"),
            "{mode}"
        );
    }
    // No report asked (no public_url): no size Job, no script.
    let objects = rendered(&build("shared"), BUILD, 13);
    assert!(!has(&objects, "Job", &format!("{BUILD}-db-size")));
}

#[test]
fn a_report_url_that_could_break_out_of_its_value_is_refused_by_the_schema() {
    let mut values = build_reporting("shared");
    values["database"]["report"]["url"] = json!("https://x\" -O /etc/passwd");
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "values.json", &values.to_string());
    let (ok, out) = check(&[&chart(), file.to_str().unwrap(), "--release", BUILD]);
    assert!(!ok && out.contains("report"), "{out}");
}

#[test]
fn a_generation_with_spares_runs_one_pool_keeper_beside_its_database_jobs() {
    for (mode, objects, namespace) in [("shared", 14, "previewd-system"), ("cnpg", 16, "pg-shared")]
    {
        let mut values = build(mode);
        values["database"]["spares"] = json!(2);
        values["database"]["room"] = json!(200u64 << 30);
        let objects = rendered(&values, BUILD, objects);
        let keeper = named(&objects, "Deployment", &format!("{BUILD}-db-spares"));
        assert_eq!(keeper["metadata"]["namespace"], namespace, "{mode}");
        let env = keeper["spec"]["template"]["spec"]["containers"][0]["env"].to_string();
        assert!(
            env.contains(r#"{"name":"ROOM","value":"214748364800"}"#),
            "database.server_size: {env}"
        );
        assert_eq!(
            annotation(keeper, "argocd.argoproj.io/hook"),
            None,
            "an ordinary object: it lives and dies with the generation's Application"
        );
        assert_eq!(keeper["spec"]["replicas"], 1);
        assert_eq!(keeper["spec"]["strategy"]["type"], "Recreate");
        let pod = &keeper["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(command(keeper), "sh /sql/template-spares.sh");
        let env = container(keeper)["env"].as_array().unwrap();
        let var = |name: &str| env.iter().find(|e| e["name"] == name).unwrap()["value"].clone();
        assert_eq!(var("TEMPLATE"), GENERATION);
        assert_eq!(var("SPARES"), "2");
        assert_eq!(var("PGDATABASE"), "postgres", "never the template");
        let sql = named(&objects, "ConfigMap", &format!("{BUILD}-db-sql"));
        for file in ["template-spares.sh", "template-spares.sql"] {
            assert!(sql["data"][file].is_string(), "{mode}: {file}");
        }
    }
    // No spares asked (template_spares = 0): no keeper.
    let mut values = build("shared");
    values["database"]["spares"] = json!(0);
    let objects = rendered(&values, BUILD, 13);
    assert!(!has(&objects, "Deployment", &format!("{BUILD}-db-spares")));
    // More than the configuration allows is refused.
    values["database"]["spares"] = json!(11);
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "values.json", &values.to_string());
    let (ok, out) = check(&[&chart(), file.to_str().unwrap(), "--release", BUILD]);
    assert!(!ok && out.contains("spares"), "{out}");
}

/// psql resolves `\ir FILE` beside the including file: in a Job, the ConfigMap mounted at
/// /sql. Every file a script of any rendering includes is in that same ConfigMap.
#[test]
fn every_file_a_sql_script_includes_is_in_its_config_map() {
    for mode in ["shared", "cnpg"] {
        let mut plain = clone(mode, 1);
        plain["database"]
            .as_object_mut()
            .unwrap()
            .remove("template");
        for values in [build(mode), clone(mode, 1), plain] {
            let release = values["namespace"].as_str().unwrap().to_owned();
            let count = check_count(&values, &release);
            for config_map in rendered(&values, &release, count)
                .iter()
                .filter(|o| o["kind"] == "ConfigMap")
            {
                let data = config_map["data"].as_object().unwrap();
                for (file, text) in data {
                    for line in text.as_str().unwrap().lines() {
                        if let Some(included) = line.strip_prefix("\\ir ") {
                            // create.sql includes it only under `-v template`.
                            let unused = included == "template-clone.sql"
                                && values["database"]["template"].is_null();
                            assert!(
                                unused || data.contains_key(included.trim()),
                                "{mode} {release}: {file} includes {included}, which {} lacks",
                                config_map["metadata"]["name"]
                            );
                        }
                    }
                }
            }
        }
    }
}

/// How many objects `values` renders (read off the checker's last line).
fn check_count(values: &Value, release: &str) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "values.json", &values.to_string());
    let (ok, out) = check(&[&chart(), file.to_str().unwrap(), "--release", release]);
    assert!(ok, "{out}");
    let last = out.trim_end().lines().last().unwrap();
    last.split_whitespace().nth(1).unwrap().parse().unwrap()
}
