//! Config loading: defaults, file, environment, and the errors a typo earns.

use secrecy::ExposeSecret;

use super::*;

mod login;
mod resources;
mod services;
mod store;
mod strict;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn error_of(toml: &str, vars: &[(&str, &str)]) -> String {
    Config::from_toml(toml, env(vars)).unwrap_err().to_string()
}

#[test]
fn no_file_and_no_environment_gives_the_design_defaults() {
    let config = Config::from_toml("", env(&[("HOME", "/root")])).unwrap();
    assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(config.state, PathBuf::from("previewd.db"));
    assert!(config.github.webhook_secret.is_none());
    assert_eq!(config.github.api_url, "https://api.github.com");
    assert!(config.github.credentials.is_none());
    assert_eq!(config.sink.kind, SinkKind::Directory);
    assert_eq!(config.sink.directory, PathBuf::from("rendered"));
    assert_eq!(config.sink.argocd_namespace, "argocd");
    assert_eq!(config.sink.stuck_after, Duration::from_secs(15 * 60));
    assert_eq!(config.defaults.ttl, Duration::from_secs(72 * 3600));
    assert_eq!(config.defaults.domain, "preview.localhost");
    assert_eq!(config.defaults.warn_before, Duration::from_secs(24 * 3600));
    assert_eq!(
        config.defaults.max_lifetime,
        Duration::from_secs(14 * 86_400)
    );
    assert!(!config.defaults.deploy_drafts);
    assert_eq!(config.sweep_interval, Duration::from_secs(60));
    assert!(config.api_token.is_none());
    assert_eq!(config.clusters.len(), 1);
    assert_eq!(config.clusters[0].name, "in-cluster");
    assert!(config.repos.is_empty());
}

#[test]
fn environment_overrides_the_file() {
    let toml = r#"
        listen = "0.0.0.0:9000"
        [github]
        webhook_secret = "from-the-file-0123456789"
        [defaults]
        ttl = "2d"
    "#;
    let config = Config::from_toml(
        toml,
        env(&[
            ("PREVIEWD_GITHUB_WEBHOOK_SECRET", "from-the-environment"),
            ("PREVIEWD_DEFAULTS_TTL", "5h"),
            ("PREVIEWD_DEFAULTS_DEPLOY_DRAFTS", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(config.listen.port(), 9000);
    assert_eq!(
        config.github.webhook_secret.unwrap().expose_secret(),
        "from-the-environment"
    );
    assert_eq!(config.defaults.ttl, Duration::from_secs(5 * 3600));
    assert!(config.defaults.deploy_drafts);
}

#[test]
fn every_key_has_a_variable_that_is_accepted() {
    for key in KEYS.iter().map(|key| key.name) {
        let value = match key {
            "listen" | "metrics.listen" => "127.0.0.1:1",
            "defaults.deploy_drafts" => "false",
            "github.app_id" | "github.private_key_path" | "github.token" => continue,
            "github.webhook_secret_file" => continue,
            "github.api_url" => "https://ghe.example.com/api/v3",
            "github.web_url" => "https://ghe.example.com",
            "login.client_id" | "login.client_secret" => continue,
            "login.session_secret" => "a-session-secret-of-32-bytes-or-more",
            "login.access_cache" => "1m",
            "defaults.access" => "org",
            "public_url" => "https://previewd.example.com",
            "sink.kind" => "kubernetes",
            "defaults.domain"
            | "sink.argocd_namespace"
            | "chart.project"
            | "database.namespace" => "example",
            "database.admin_secret" | "database.cnpg_cluster" => "example",
            "database.mode" => "cnpg",
            "database.port" => "6432",
            "database.max_connections" => "5",
            "database.max_size" | "database.server_size" => "512MiB",
            "database.drop_on_delete" | "dns.enabled" => "true",
            "tls.mode" => "sealed",
            "tls.issuer_kind" => "Issuer",
            "tls.ca_cert" | "tls.ca_key" => continue,
            "dns.ttl" => "1m",
            "github.webhook_secret" => "sixteen-bytes...",
            "defaults.max_lifetime" => "20d",
            "defaults.allow_keep" | "sweep.remove_orphans" | "chart.legacy_names" => "true",
            "defaults.max_per_repo" | "defaults.max_per_author" | "defaults.pods" => "3",
            "defaults.at_cap" => "evict",
            "mail.max_messages"
            | "messaging.max_connections"
            | "messaging.max_queues"
            | "messaging.max_channels"
            | "messaging.max_queue_messages" => "7",
            "mail.relay_port" | "messaging.port" => "2525",
            "mail.relay_starttls" => "false",
            "messaging.mode" => "operator",
            "messaging.max_queue_size" => "8MiB",
            "mail.relay_host" | "messaging.host" => "relay.example.svc",
            "messaging.namespace" | "messaging.admin_secret" | "messaging.cluster" => "broker",
            "mail.ingress_namespace" => "traefik",
            "mail.image" | "messaging.image" => "example.com/image:1",
            "defaults.keep_for" | "sweep.delivery_retention" => "2d",
            "lease.enabled" => "false",
            "lease.duration" => "20s",
            "lease.renew_deadline" => "5s",
            "lease.retry_period" => "1s",
            "lease.namespace" | "lease.name" | "lease.identity" => "example",
            "defaults.cpu" | "defaults.container_cpu" => "250m",
            "defaults.memory" | "defaults.container_memory" => "1Gi",
            k if k.ends_with("ttl")
                || k.ends_with("_before")
                || k.ends_with("_after")
                || k.ends_with("interval") =>
            {
                "1h"
            }
            _ => "x",
        };
        Config::from_toml("", env(&[(&env_name(key), value)]))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
}

/// docs/configuration.md holds the table `readme_table` makes, between its markers;
/// `UPDATE_DOCS=1` (or the older `UPDATE_README=1`) rewrites it there instead of comparing.
#[test]
fn the_configuration_doc_lists_exactly_the_declared_keys() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (start, end) = (
        doc.find(keys::README_START)
            .expect("docs/configuration.md's start marker"),
        doc.find(keys::README_END)
            .expect("docs/configuration.md's end marker")
            + keys::README_END.len(),
    );
    let table = readme_table();
    if std::env::var_os("UPDATE_DOCS").is_some() || std::env::var_os("UPDATE_README").is_some() {
        std::fs::write(path, format!("{}{table}{}", &doc[..start], &doc[end..])).unwrap();
        return;
    }
    assert!(
        doc[start..end] == table,
        "docs/configuration.md's table of keys is not the one src/config/keys.rs declares; \
         regenerate it with `UPDATE_DOCS=1 cargo test --lib config::tests::the_configuration_doc`"
    );
}

#[test]
fn every_key_is_read_from_the_file_in_its_section() {
    let toml = "[sweep]\nremove_orphans = true\n[database]\nport = 6432\n[dns]\nttl = \"2m\"\n";
    let config = Config::from_toml(toml, Vec::new()).unwrap();
    assert!(config.remove_orphans);
    assert_eq!(config.database.port, 6432);
    assert_eq!(config.dns.ttl, Duration::from_secs(120));
    let defaults = "[defaults]\nttl = \"1d\"\nmax_per_repo = \"4\"\nat_cap = \"evict\"\n";
    let policy = Config::from_toml(defaults, Vec::new()).unwrap().defaults;
    assert_eq!(
        (policy.ttl, policy.max_per_repo, policy.at_cap),
        (Duration::from_secs(86_400), Some(4), AtCap::Evict)
    );
    let repo = "[[repos]]\nname = \"o/r\"\nmax_per_author = 2\ndeploy_drafts = true\n";
    let policy = &Config::from_toml(repo, Vec::new()).unwrap().repos[0].policy;
    assert_eq!(
        (policy.max_per_author, policy.deploy_drafts),
        (Some(2), true)
    );
}

#[test]
fn a_value_of_the_wrong_type_or_an_unknown_key_names_the_key() {
    let message = error_of("[defaults]\nttl = 5\n", &[]);
    assert!(message.contains("`defaults.ttl`"), "{message}");
    assert!(message.contains("a string"), "{message}");
    let message = error_of("[dns]\nenabled = \"yes\"\n", &[]);
    assert!(
        message.contains("`dns.enabled`") && message.contains("true or false"),
        "{message}"
    );
    let message = error_of("[sweep]\nintervall = \"1m\"\n", &[]);
    assert!(message.contains("`sweep.intervall`"), "{message}");
    assert!(error_of("[gitub]\ntoken = \"t\"\n", &[]).contains("`gitub`"));
    assert!(error_of("github = \"t\"\n", &[]).contains("`github`"));
    let message = error_of("[[repos]]\nname = \"o/r\"\nttll = \"1d\"\n", &[]);
    assert!(message.contains("`repos[0].ttll`"), "{message}");
}

#[test]
fn a_bad_duration_names_the_key_and_the_accepted_form() {
    let message = error_of("[defaults]\nttl = \"3 days\"\n", &[]);
    assert!(message.contains("`defaults.ttl`"), "{message}");
    assert!(message.contains("30s, 5m, 2h, 3d"), "{message}");
}

#[test]
fn a_bad_value_from_the_environment_names_the_variable() {
    let message = error_of("", &[("PREVIEWD_SWEEP_INTERVAL", "often")]);
    assert!(
        message.contains("`sweep.interval` (from PREVIEWD_SWEEP_INTERVAL)"),
        "{message}"
    );
    let message = error_of("", &[("PREVIEWD_DEFAULTS_DEPLOY_DRAFTS", "yes please")]);
    assert!(message.contains("true or false"), "{message}");
}

#[test]
fn typos_are_refused_not_ignored() {
    assert!(error_of("[github]\nwebhook_secrett = \"x\"\n", &[]).contains("webhook_secrett"));
    assert!(error_of("", &[("PREVIEWD_GITHUB_SECRET", "x")]).contains("PREVIEWD_GITHUB_SECRET"));
    assert!(error_of("[sink]\nkind = \"s3\"\n", &[]).contains("directory or kubernetes"));
    assert!(error_of("listen = \"localhost\"\n", &[]).contains("HOST:PORT"));
}

#[test]
fn half_set_github_app_credentials_are_refused() {
    assert!(error_of("[github]\napp_id = 12\n", &[]).contains("github.private_key_path"));
    let both = "[github]\ntoken = \"t\"\napp_id = 12\nprivate_key_path = \"k.pem\"\n";
    assert!(error_of(both, &[]).contains("either github.token or"));
    let app = Config::from_toml(
        "[github]\napp_id = 12\nprivate_key_path = \"k.pem\"\n",
        env(&[]),
    )
    .unwrap();
    assert!(matches!(
        app.github.credentials,
        Some(GithubCredentials::App { app_id: 12, .. })
    ));
}

#[test]
fn a_ttl_longer_than_the_maximum_lifetime_is_refused() {
    let message = error_of("[defaults]\nttl = \"20d\"\n", &[]);
    assert!(
        message.contains("longer than max_lifetime 14d"),
        "{message}"
    );
}

#[test]
fn repos_inherit_defaults_and_form_an_allow_list() {
    let toml = r#"
        [defaults]
        ttl = "1d"
        domain = "pr.example.com"
        [[repos]]
        name = "Octo/App"
        ttl = "6h"
        [[repos]]
        name = "octo/docs"
        deploy_drafts = true
    "#;
    let config = Config::from_toml(toml, env(&[])).unwrap();
    let app = config.policy_for(&"octo/app".parse().unwrap()).unwrap();
    assert_eq!(
        (app.ttl, app.domain.as_str()),
        (Duration::from_secs(6 * 3600), "pr.example.com")
    );
    let docs = config.policy_for(&"octo/docs".parse().unwrap()).unwrap();
    assert_eq!(docs.ttl, Duration::from_secs(86_400));
    assert!(docs.deploy_drafts);
    assert!(
        config
            .policy_for(&"someone/else".parse().unwrap())
            .is_none()
    );
}

#[test]
fn secrets_never_show_in_debug_output() {
    let config = Config::from_toml(
        "[github]\nwebhook_secret = \"hunter2-hunter2-hunter2\"\ntoken = \"ghp_hunter3\"\n",
        env(&[("PREVIEWD_API_TOKEN", "hunter4-api-token")]),
    )
    .unwrap();
    let shown = format!("{config:?}");
    for secret in ["hunter2", "hunter3", "hunter4"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        matches!(&config.github.credentials, Some(GithubCredentials::Token(t)) if t.expose_secret() == "ghp_hunter3")
    );
    assert_eq!(
        config.api_token.unwrap().expose_secret(),
        "hunter4-api-token"
    );
}

#[test]
fn the_webhook_secret_can_come_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "s3cret-from-a-file\n").unwrap();
    let config = Config::from_toml(
        "",
        env(&[(
            "PREVIEWD_GITHUB_WEBHOOK_SECRET_FILE",
            path.to_str().unwrap(),
        )]),
    )
    .unwrap();
    assert_eq!(
        config.github.webhook_secret.unwrap().expose_secret(),
        "s3cret-from-a-file"
    );
}

#[test]
fn an_app_chart_defaults_to_the_repository_on_github() {
    let config = Config::from_toml(
        "[[repos]]\nname = \"Octo/Shop\"\napp_chart = \"/deploy/chart/\"\n",
        env(&[("PREVIEWD_SINK_STUCK_AFTER", "1h")]),
    )
    .unwrap();
    let chart = config.repos[0].app.chart.clone().unwrap();
    assert_eq!(chart.repo_url, "https://github.com/octo/shop.git");
    assert_eq!(chart.path, "deploy/chart");
    assert_eq!(config.sink.stuck_after, Duration::from_secs(3600));
}

#[test]
fn app_charts_outside_the_repository_or_without_a_path_are_refused() {
    let escape = error_of("[[repos]]\nname = \"o/r\"\napp_chart = \"../x\"\n", &[]);
    assert!(escape.contains("repos[0].app_chart"), "{escape}");
    let no_path = error_of(
        "[[repos]]\nname = \"o/r\"\napp_repo_url = \"https://git.example.com/r.git\"\n",
        &[],
    );
    assert!(no_path.contains("no chart path"), "{no_path}");
    let not_git = error_of(
        "[[repos]]\nname = \"o/r\"\napp_chart = \"c\"\napp_repo_url = \"ftp://x\"\n",
        &[],
    );
    assert!(not_git.contains("repos[0].app_repo_url"), "{not_git}");
}

#[test]
fn quotas_and_keep_are_per_repository_with_defaults() {
    let config = Config::from_toml(
        "[defaults]\nmax_per_repo = 5\nat_cap = \"evict\"\nkeep_for = \"3d\"\n[[repos]]\nname = \"o/r\"\nmax_per_author = \"2\"\nallow_keep = false\n",
        Vec::new(),
    )
    .unwrap();
    let policy = &config.repos[0].policy;
    assert_eq!(
        (
            policy.max_per_repo,
            policy.max_per_author,
            policy.at_cap,
            policy.allow_keep
        ),
        (Some(5), Some(2), AtCap::Evict, false)
    );
    assert_eq!(policy.keep_for, Duration::from_secs(3 * 86_400));
    let zero = error_of("[defaults]\nmax_per_repo = 0\n", &[]);
    assert!(zero.contains("defaults.max_per_repo"), "{zero}");
    let unknown = error_of("[defaults]\nat_cap = \"drop\"\n", &[]);
    assert!(unknown.contains("queue or evict"), "{unknown}");
}

#[test]
fn the_public_url_is_an_http_url_and_defaults_to_a_loopback_listen_address() {
    let config = Config::from_toml("", Vec::new()).unwrap();
    assert_eq!(config.public_url.as_deref(), Some("http://127.0.0.1:8080"));
    let config = Config::from_toml(
        "listen = \"0.0.0.0:8080\"\n[api]\ntoken = \"0123456789abcdef0123\"\n",
        Vec::new(),
    )
    .unwrap();
    assert_eq!(config.public_url, None, "no guess off loopback");
    let config = Config::from_toml(
        "public_url = \"https://previewd.example.com/\"\n",
        Vec::new(),
    )
    .unwrap();
    assert_eq!(
        config.public_url.as_deref(),
        Some("https://previewd.example.com")
    );
    assert!(error_of("public_url = \"previewd.example.com\"\n", &[]).contains("`public_url`"));
}

#[test]
fn the_apps_never_share_the_helpers_project() {
    let message = error_of("[chart]\nproject = \"p\"\napps_project = \"p\"\n", &[]);
    assert!(message.contains("`chart.apps_project`"), "{message}");
}

#[test]
fn a_short_webhook_secret_is_refused_naming_the_key() {
    let message = error_of("[github]\nwebhook_secret = \"x\"\n", &[]);
    assert!(message.contains("`github.webhook_secret`"), "{message}");
    assert!(message.contains("16 bytes"), "{message}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, "fifteen-bytes..\n").unwrap();
    let message = error_of(
        "",
        &[(
            "PREVIEWD_GITHUB_WEBHOOK_SECRET_FILE",
            path.to_str().unwrap(),
        )],
    );
    assert!(
        message.contains("`github.webhook_secret_file` (from PREVIEWD_GITHUB_WEBHOOK_SECRET_FILE)"),
        "{message}"
    );
    Config::from_toml(
        "[github]\nwebhook_secret = \"sixteen-bytes...\"\n",
        env(&[]),
    )
    .unwrap();
}

#[test]
fn a_plain_http_api_url_is_refused_unless_it_is_loopback() {
    for url in [
        "http://api.github.com",
        "http://ghe.example.com/api/v3",
        "http://127.0.0.1.evil.example/api",
        "http://localhost@evil.example",
        "http://10.0.0.1:8080",
    ] {
        let message = error_of(&format!("[github]\napi_url = {url:?}\n"), &[]);
        assert!(message.contains("`github.api_url`"), "{url}: {message}");
        assert!(message.contains("https"), "{url}: {message}");
    }
    for url in [
        "http://127.0.0.1:9999",
        "http://localhost:8080/api/v3",
        "http://[::1]:80",
        "https://ghe.example.com/api/v3",
    ] {
        Config::from_toml(&format!("[github]\napi_url = {url:?}\n"), env(&[]))
            .unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn serving_beyond_loopback_without_an_api_token_is_refused_naming_the_key() {
    let exposed = Config::from_toml("listen = \"0.0.0.0:8080\"\n", env(&[])).unwrap();
    let message = exposed.check_serving().unwrap_err().to_string();
    assert!(message.contains("`api.token`"), "{message}");
    assert!(message.contains("0.0.0.0:8080"), "{message}");
    let with_token = Config::from_toml(
        "listen = \"[::]:8080\"\n[api]\ntoken = \"a-long-random-token\"\n",
        env(&[]),
    )
    .unwrap();
    with_token.check_serving().unwrap();
    let local = Config::from_toml("listen = \"[::1]:8080\"\n", env(&[])).unwrap();
    local.check_serving().unwrap();
}

#[test]
fn an_image_tag_template_a_registry_would_refuse_is_refused_at_start_naming_the_key() {
    let unknown = error_of(
        "[[repos]]\nname = \"o/r\"\nimage = \"ghcr.io/o/r\"\nimage_tag = \"{branch}\"\n",
        &[],
    );
    assert!(unknown.contains("repos[0].image_tag"), "{unknown}");
    assert!(unknown.contains("{branch}"), "{unknown}");
    let constant = error_of(
        "[[repos]]\nname = \"o/r\"\nimage = \"ghcr.io/o/r\"\nimage_tag = \"latest\"\n",
        &[],
    );
    assert!(
        constant.contains("every PR would run the same image"),
        "{constant}"
    );
    let config = Config::from_toml(
        "[[repos]]\nname = \"o/r\"\nimage = \"ghcr.io/o/r\"\nimage_tag = \"{sha7}\"\n",
        Vec::new(),
    )
    .unwrap();
    assert_eq!(config.repos[0].app.image_tag.to_string(), "{sha7}");
}

#[test]
fn a_database_template_is_kept_with_its_timings_and_refused_without_a_database() {
    let config = Config::from_toml(
        "[[repos]]\nname = \"o/r\"\ndatabase_template = true\ntemplate_refresh = \"6h\"\n",
        Vec::new(),
    )
    .unwrap();
    let template = config.repos[0].app.template.unwrap();
    assert_eq!(template.refresh, Duration::from_secs(6 * 3600));
    assert_eq!(template.idle, Duration::from_secs(14 * 86400));
    let off = error_of(
        "[database]\nmode = \"off\"\n[[repos]]\nname = \"o/r\"\ndatabase_template = true\n",
        &[],
    );
    assert!(off.contains("repos[0].database_template"), "{off}");
    let stray = error_of("[[repos]]\nname = \"o/r\"\ntemplate_idle = \"3d\"\n", &[]);
    assert!(stray.contains("repos[0].template_idle"), "{stray}");
    let bad = error_of(
        "[[repos]]\nname = \"o/r\"\ndatabase_template = true\ntemplate_refresh = \"soon\"\n",
        &[],
    );
    assert!(bad.contains("repos[0].template_refresh"), "{bad}");
    assert_eq!(template.spares, 2);
    let none = Config::from_toml(
        "[[repos]]\nname = \"o/r\"\ndatabase_template = true\ntemplate_spares = 0\n",
        Vec::new(),
    )
    .unwrap();
    assert_eq!(none.repos[0].app.template.unwrap().spares, 0);
    for many in ["11", "-1"] {
        let refused = error_of(
            &format!(
                "[[repos]]\nname = \"o/r\"\ndatabase_template = true\ntemplate_spares = {many}\n"
            ),
            &[],
        );
        assert!(refused.contains("repos[0].template_spares"), "{refused}");
    }
    let stray = error_of("[[repos]]\nname = \"o/r\"\ntemplate_spares = 1\n", &[]);
    assert!(stray.contains("repos[0].template_spares"), "{stray}");
}

#[test]
fn a_database_bound_is_read_in_mib_gib_or_tib_and_refused_naming_the_key_otherwise() {
    let bytes = |toml: &str| Config::from_toml(toml, vec![]).unwrap().database.max_bytes;
    assert_eq!(bytes(""), 5 << 30, "the default");
    assert_eq!(bytes("[database]\nmax_size = \"512MiB\""), 512 << 20);
    assert_eq!(bytes("[database]\nmax_size = \"2TiB\""), 2 << 40);
    for bad in ["5GB", "5", "1MiB", "-5GiB", "5.5GiB", "99999999999TiB", ""] {
        let error = error_of(&format!("[database]\nmax_size = {bad:?}"), &[]);
        assert!(
            error.contains("database.max_size") && error.contains("64MiB"),
            "{bad}: {error}"
        );
    }
    let server = |toml: &str| {
        Config::from_toml(toml, vec![])
            .unwrap()
            .database
            .server_bytes
    };
    assert_eq!(server(""), None, "spares without looking, by default");
    assert_eq!(
        server("[database]\nserver_size = \"200GiB\""),
        Some(200 << 30)
    );
    let error = error_of("[database]\nserver_size = \"200G\"", &[]);
    assert!(error.contains("database.server_size"), "{error}");
    let sessions = |toml: &str| {
        Config::from_toml(toml, vec![])
            .unwrap()
            .database
            .max_connections
    };
    assert_eq!(sessions(""), 20, "the default");
    assert_eq!(sessions("[database]\nmax_connections = 5"), 5);
    for bad in ["0", "-1", "10001", "\"many\""] {
        let error = error_of(&format!("[database]\nmax_connections = {bad}"), &[]);
        assert!(error.contains("database.max_connections"), "{bad}: {error}");
    }
    let from_env = error_of("", &[("PREVIEWD_DATABASE_MAX_SIZE", "lots")]);
    assert!(
        from_env.contains("PREVIEWD_DATABASE_MAX_SIZE"),
        "{from_env}"
    );
}
