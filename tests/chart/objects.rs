//! What the chart renders from previewd's Application, validated object by object:
//! everything on in sync-wave order, CloudNativePG with sealed TLS and a command seed,
//! everything off, and awkward names and titles.

use super::*;

fn find<'a>(objects: &'a [Value], kind: &str, suffix: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no {kind} *{suffix}"))
}

#[test]
fn everything_on_renders_valid_objects_in_sync_wave_order() {
    let preview = Preview::test().on("eu-1");
    let secrets = [
        sealed(
            "pv-octo-app-609ddd1d069bc4c5-pr-7-db",
            "pv-octo-app-609ddd1d069bc4c5-pr-7",
            "strict",
            "DATABASE_URL",
        ),
        sealed(
            "pv-octo-app-609ddd1d069bc4c5-pr-7-db-password",
            "previewd-system",
            "strict",
            "VERIFIER",
        ),
    ];
    // Namespace, rendering ConfigMap, ResourceQuota, LimitRange, 2 SealedSecrets, Certificate,
    // 2 DB ConfigMaps + create + drop Jobs + the size guard's CronJob, migrate Job, 2 seed
    // ConfigMaps + seed Job, DNSEndpoint: 17.
    let objects = assert_valid(FULL, &preview, &secrets, 17);
    let wave =
        |kind, suffix| annotation(find(&objects, kind, suffix), "argocd.argoproj.io/sync-wave");
    let hook = |kind, suffix| annotation(find(&objects, kind, suffix), "argocd.argoproj.io/hook");
    assert_eq!(wave("Namespace", "pr-7"), Some("-2"));
    assert_eq!(wave("SealedSecret", "-db"), Some("-2"));
    assert_eq!(wave("ConfigMap", "-rendering"), Some("-2"));
    // The namespace's bounds, before any of its pods (tests/chart/resources.rs).
    assert_eq!(wave("ResourceQuota", "-quota"), Some("-2"));
    assert_eq!(wave("LimitRange", "-limits"), Some("-2"));
    assert_eq!(
        hook("ConfigMap", "-rendering"),
        None,
        "an ordinary object: Argo CD diffs it"
    );
    // The record before the certificate: an HTTP-01 challenge needs the name to resolve.
    assert_eq!(wave("DNSEndpoint", "-dns"), Some("-2"));
    assert_eq!(wave("Certificate", "-tls"), Some("-1"));
    assert_eq!(
        (hook("Job", "-db-create"), wave("Job", "-db-create")),
        (Some("Sync"), Some("-1"))
    );
    assert_eq!(
        (hook("Job", "-migrate"), wave("Job", "-migrate")),
        (Some("Sync"), Some("0"))
    );
    assert_eq!(hook("Job", "-seed"), Some("PostSync"));
    assert_eq!(hook("Job", "-db-drop"), Some("PostDelete"));
    // The size guard: an ordinary object beside the admin's credentials (the cascade takes
    // it), measuring every 5 minutes against database.max_size (5 GiB by default), which the
    // create Job checks too.
    let guard = find(&objects, "CronJob", "-size");
    assert_eq!(hook("CronJob", "-size"), None);
    assert_eq!(guard["metadata"]["namespace"], "previewd-system");
    assert_eq!(guard["spec"]["schedule"], "*/5 * * * *");
    assert_eq!(guard["spec"]["concurrencyPolicy"], "Forbid");
    let run = guard["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0].to_string();
    assert!(
        run.contains("max_bytes=5368709120") && run.contains("/sql/guard.sql"),
        "{run}"
    );
    assert!(
        find(&objects, "Job", "-db-create")
            .to_string()
            .contains("max_bytes=5368709120")
    );
    assert!(find(&objects, "ConfigMap", "-db-sql")["data"]["guard.sql"].is_string());
    // Argo CD deletes PostDelete hooks only by policy, and BeforeHookCreation never fires
    // after the last sync (argo-cd controller/hook.go cleanupHooks): they would leak.
    let policy = |kind, suffix| {
        annotation(
            find(&objects, kind, suffix),
            "argocd.argoproj.io/hook-delete-policy",
        )
    };
    assert_eq!(policy("Job", "-db-drop"), Some("HookSucceeded"));
    assert_eq!(policy("ConfigMap", "-db-drop-sql"), Some("HookSucceeded"));
    // The drop's SQL must outlive the Application's ordinary resources: it is a hook too.
    assert_eq!(
        (
            hook("ConfigMap", "-db-drop-sql"),
            wave("ConfigMap", "-db-drop-sql")
        ),
        (Some("PostDelete"), Some("-1"))
    );
    // The admin credentials are only ever referenced from the provisioner namespace.
    for job in objects.iter().filter(|o| o["kind"] == "Job") {
        let uses_admin = job.to_string().contains("postgres-admin");
        assert_eq!(
            uses_admin,
            job["metadata"]["namespace"] == "previewd-system",
            "{}",
            job["metadata"]["name"]
        );
    }
    // The create Job gets the role's SCRAM verifier, never a password (optional: a Secret
    // sealed before verifiers has none, and the role made then keeps its password).
    let create = &find(&objects, "Job", "-db-create")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        create["env"],
        serde_json::json!([{
            "name": "PREVIEW_VERIFIER",
            "valueFrom": {"secretKeyRef": {
                "name": "pv-octo-app-609ddd1d069bc4c5-pr-7-db-password",
                "key": "VERIFIER",
                "optional": true,
            }},
        }])
    );
    assert_eq!(
        find(&objects, "DNSEndpoint", "-dns")["spec"]["endpoints"][0]["recordType"],
        "CNAME"
    );
}

#[test]
fn cloudnative_pg_sealed_tls_and_a_command_seed_render_valid_objects() {
    let config = r#"
        [database]
        mode = "cnpg"
        namespace = "pg-shared"
        cnpg_cluster = "shared"
        [tls]
        mode = "sealed"
        [[clusters]]
        name = "lab"
        server = "https://lab.example.com"
        ingress_target = "10.20.30.40"
        [[repos]]
        name = "octo/app"
        image = "ghcr.io/octo/app"
        seed_command = ["bin/rails", "db:seed"]
    "#;
    let mut tls = sealed(
        "pv-octo-app-609ddd1d069bc4c5-pr-7-tls",
        "pv-octo-app-609ddd1d069bc4c5-pr-7",
        "strict",
        "tls.key",
    );
    let chain = "-----BEGIN CERTIFICATE-----\nMIIB\"quoted\"\n-----END CERTIFICATE-----\n";
    tls.template_data = [
        ("tls.crt".to_owned(), chain.to_owned()),
        ("ca.crt".to_owned(), "ca: pem".to_owned()),
    ]
    .into();
    let secrets = [tls];
    // Namespace, rendering ConfigMap, ResourceQuota, LimitRange, SealedSecret, DatabaseRole,
    // Database, the SQL ConfigMap and the access Job, the drop's ConfigMap and Job, the size
    // guard's CronJob, seed Job, DNSEndpoint.
    let objects = assert_valid(config, &Preview::test().on("lab"), &secrets, 14);
    // The certificate rides unsealed, byte for byte, where the controller copies it from.
    let template = &find(&objects, "SealedSecret", "-tls")["spec"]["template"];
    assert_eq!(template["data"]["tls.crt"], chain);
    assert_eq!(template["data"]["ca.crt"], "ca: pem");
    assert_eq!(template["type"], "Opaque");
    let role = find(&objects, "DatabaseRole", "-role");
    assert_eq!(role["metadata"]["namespace"], "pg-shared");
    // CloudNativePG's own drops fail with the app connected, or with the role granted
    // something by another preview's code: both retained, the superuser's drop Job drops.
    assert_eq!(role["spec"]["databaseRoleReclaimPolicy"], "retain");
    let database = find(&objects, "Database", "-db");
    assert_eq!(database["spec"]["databaseReclaimPolicy"], "retain");
    assert_eq!(
        database["spec"]["owner"], "postgres",
        "never the PR code's role"
    );
    let drop = find(&objects, "Job", "-db-drop");
    assert_eq!(
        annotation(drop, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert_eq!(drop["metadata"]["namespace"], "pg-shared");
    // Argo CD has no health check for CNPG's kinds: the superuser's access Job, in their
    // wave, waits for the role and the database before the migration's wave starts, and
    // sets the database's privileges.
    let access = find(&objects, "Job", "-db-access");
    assert_eq!(annotation(access, "argocd.argoproj.io/hook"), Some("Sync"));
    assert_eq!(
        annotation(access, "argocd.argoproj.io/sync-wave"),
        Some("-1")
    );
    assert_eq!(access["metadata"]["namespace"], "pg-shared");
    assert!(access.to_string().contains("/sql/access.sql"));
    assert!(
        find(&objects, "ConfigMap", "-db-sql")["data"]["access.sql"]
            .as_str()
            .unwrap()
            .contains("REVOKE ALL ON DATABASE")
    );

    // database.drop_on_delete = false keeps the data in cnpg mode too: no drop Job.
    let keep = config.replace(
        "mode = \"cnpg\"",
        "mode = \"cnpg\"\n        drop_on_delete = false",
    );
    let objects = assert_valid(&keep, &Preview::test().on("lab"), &secrets, 12);
    assert!(!objects.iter().any(|o| {
        o["kind"] == "Job"
            && o["metadata"]["name"]
                .as_str()
                .unwrap()
                .ends_with("-db-drop")
    }));
    assert_eq!(
        find(&objects, "DNSEndpoint", "-dns")["spec"]["endpoints"][0]["recordType"],
        "A"
    );
}

#[test]
fn everything_off_renders_just_the_namespace() {
    let config = "[database]\nmode = \"off\"\n[tls]\nmode = \"off\"\n[dns]\nenabled = false\n";
    // The namespace, the rendering ConfigMap, and the namespace's ResourceQuota and LimitRange.
    assert_valid(config, &Preview::test(), &[], 4);
}

#[test]
fn approved_fork_long_names_and_unicode_titles_render_valid_objects() {
    let long = format!(
        "{}/{}#98765",
        "o".repeat(39),
        "very-long-repository-name-".repeat(3).trim_end_matches('-')
    );
    // octo/app has migrations and a seed (15 objects); the others have no [[repos]] entry (11).
    for (preview, objects) in [
        (Preview::test().on("eu-1").fork().approved(), 15),
        (Preview::test().on("eu-1").of(&long), 11),
        (Preview::test().on("eu-1").of("octo/my_app.v2#12"), 11),
        (
            Preview::test()
                .on("eu-1")
                .titled("Añadir 🔍 <script>alert(1)</script>\n\"quoted\""),
            15,
        ),
    ] {
        assert_valid(FULL, &preview, &[], objects);
    }
}
