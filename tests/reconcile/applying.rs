//! What the reconciler applies: a PR's file from open to close, no write for unchanged
//! input, nothing for an unapproved fork, a repository's own chart, and exactly what
//! `previewd render` prints.

use super::*;

#[tokio::test]
async fn opened_pushed_and_closed_pr_goes_from_file_to_nothing_with_history_kept() {
    let (app, reconciler) = opened_and_reconciled().await;
    let first = file(&app).expect("the Application file appears");
    assert!(first.contains("ec26c3e57ca3a959ca5aad62de7213c562f8c821"));
    assert_eq!(app.count("sealed_secrets").await, 2, "sealed once, stored");
    let kinds: Vec<String> = app.scalars("SELECT kind FROM ledger ORDER BY id").await;
    assert_eq!(
        kinds,
        [
            "Application",
            "Namespace",
            "PostgreSQL database",
            "Certificate"
        ]
    );

    let new_head = "1111111111111111111111111111111111111111";
    app.send(&Delivery::push(new_head, "2019-05-15T16:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    let second = file(&app).unwrap();
    assert!(
        second.contains(new_head) && !second.contains("ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    );
    // The secrets are the preview's own: a push does not change them.
    let secret_of = |yaml: &str| {
        yaml.lines()
            .find(|l| l.contains("PGPASSWORD"))
            .map(str::to_owned)
    };
    assert_eq!(secret_of(&first), secret_of(&second));

    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler.pass().await.unwrap(); // marks the teardown, deletes the file, confirms, forgets
    assert!(file(&app).is_none());
    assert_eq!(
        (
            app.count("previews").await,
            app.count("ledger").await,
            app.count("sealed_secrets").await
        ),
        (0, 0, 0)
    );
    assert_eq!(
        whats(&app).await,
        [
            "opened",
            "placed",
            "applied",
            "pushed",
            "applied",
            "closed",
            "teardown_started",
            "destroyed"
        ]
    );
}

#[tokio::test]
async fn unchanged_input_makes_no_write() {
    let (app, reconciler) = opened_and_reconciled().await;
    let path = rendered(&app).join(format!("{APP}.yaml"));
    let written = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        written
    );
    assert_eq!(
        whats(&app).await.iter().filter(|w| *w == "applied").count(),
        1
    );
}

/// Rendering was a fifth of a full pass over 5,000 previews with nothing to do (issue #17):
/// a preview whose inputs did not change is not rendered again, one whose inputs changed
/// is, and one whose file went missing is written whole though it was remembered.
#[tokio::test]
async fn a_pass_renders_only_the_previews_whose_inputs_changed() {
    let (app, reconciler) = opened_and_reconciled().await;
    assert_eq!(reconciler.renders(), 1);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(reconciler.renders(), 1, "nothing changed");

    let new_head = "1111111111111111111111111111111111111111";
    app.send(&Delivery::push(new_head, "2019-05-15T16:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    assert_eq!(reconciler.renders(), 2, "a new head");
    assert!(file(&app).unwrap().contains(new_head));

    std::fs::remove_file(rendered(&app).join(format!("{APP}.yaml"))).unwrap();
    reconciler.pass().await.unwrap();
    let again = file(&app).expect("written again");
    assert!(again.contains(new_head), "{again}");
    assert_eq!(reconciler.renders(), 3, "rendered whole to be written");
}

/// A commit is an fsync, a sixth of a push's CPU at scale (issue #17). A new preview's
/// ledger intent is a commit of its own, before the apply, so that a crash between the two
/// leaves teardown aware of what may exist; the state a look finds rides on the commit of
/// its apply; and a push, whose items are all known, writes no intent at all.
#[tokio::test]
async fn a_push_commits_once_its_apply_with_the_state_it_leads_to() {
    if common::pg::on_postgres() {
        return; // SQLite's inline commits (fsyncs) counted; PostgreSQL has none such.
    }
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let opened = reconciler.commits();
    assert_eq!(
        app.scalars::<String>("SELECT state FROM ledger").await,
        ["applied"; 4]
    );
    // A state the look will change: the directory sink's own is `applied`.
    app.execute("UPDATE previews SET observed = 'failed', last_error = 'boom'")
        .await;
    app.send(&Delivery::push(
        "1111111111111111111111111111111111111111",
        "2019-05-15T16:00:00Z",
    ))
    .await;
    reconciler.pass().await.unwrap();
    assert_eq!(reconciler.commits() - opened, 1, "the apply and the state");
    let observed: (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!(observed, ("applied".into(), None));
    assert_eq!(whats(&app).await.last().unwrap(), "applied");
}

/// A new preview of a repository without a template: its placement carries the decision to
/// seed its database, and its sealed values ride on the ledger's intent (no commit of their
/// own); every statement of the look runs inline, where `commits` counts it: the placement,
/// the intent with the sealed values, and the apply with its state.
#[tokio::test]
async fn a_new_preview_commits_its_placement_its_intent_and_its_apply() {
    if common::pg::on_postgres() {
        return; // SQLite's inline commits (fsyncs) counted; PostgreSQL has none such.
    }
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    assert_eq!(reconciler.commits(), 3);
    let decided: (Option<i64>, Option<i64>, i64) = app
        .row("SELECT template_generation, template_seed, seed_generation FROM previews")
        .await;
    assert_eq!(decided, (None, Some(decided.2), decided.2), "seeded");
    assert_eq!(app.count("sealed_secrets").await, 2);
}

#[tokio::test]
async fn fork_prs_awaiting_approval_get_nothing_applied() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.synchronize.fork"))
        .await;
    reconciler.pass().await.unwrap();
    assert_eq!(
        std::fs::read_dir(rendered(&app))
            .map(|d| d.count())
            .unwrap_or(0),
        0
    );
    assert_eq!(
        app.count("sealed_secrets").await,
        0,
        "no secrets are made for unapproved code"
    );
}

#[tokio::test]
async fn an_unapproved_push_to_a_fork_leaves_the_approved_version_running() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.synchronize.fork"))
        .await;
    // A maintainer approved this head (the `/preview approve` command records exactly this).
    app.execute("UPDATE previews SET approved_sha = head_sha, desired = 'deployed'")
        .await;
    reconciler.pass().await.unwrap();
    let file = |app: &TestApp| {
        std::fs::read_dir(rendered(app))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect::<Vec<_>>()
    };
    let approved = file(&app);
    assert_eq!(approved.len(), 1);
    let push = Delivery::fixture("pull_request.synchronize.fork")
        .at_sha("3333333333333333333333333333333333333333")
        .updated_at("2021-07-20T00:00:00Z");
    app.send(&push).await;
    reconciler.pass().await.unwrap();
    assert_eq!(
        file(&app),
        approved,
        "the unapproved head is not deployed, the approved one stays"
    );
    let observed: String = app.scalar("SELECT observed FROM previews").await;
    assert_eq!(observed, "awaiting_approval");
}

#[tokio::test]
async fn a_repository_with_its_own_chart_gets_the_app_application_too_and_loses_it_first() {
    let app = TestApp::start_with(&format!(
        "[[repos]]\nname = \"{HELLO}\"\napp_chart = \"deploy/chart\"\n"
    ))
    .await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let app_file = rendered(&app).join(APP.replace("-helpers", "-app.yaml"));
    let app_yaml = std::fs::read_to_string(&app_file).expect("the app Application file appears");
    assert!(app_yaml.contains("targetRevision: ec26c3e57ca3a959ca5aad62de7213c562f8c821"));
    assert!(app_yaml.contains("path: deploy/chart"));
    assert!(file(&app).is_some());

    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    assert!(!app_file.exists() && file(&app).is_none());
    assert_eq!(app.count("previews").await, 0);
    let destroyed: String = app.reason_recorded("destroyed").await;
    assert!(
        destroyed.contains(&format!(
            "Application {} gone",
            APP.replace("-helpers", "-app")
        )),
        "{destroyed}"
    );
}

/// `previewd render` promises every manifest previewd would apply: it prints exactly what the
/// directory sink receives for the same event and state, the app's Application, the
/// instance label and the applied-hash annotation included.
#[tokio::test]
async fn previewd_render_prints_exactly_what_the_reconciler_applies() {
    let toml = common::config(&format!(
        "[database]\nmode = \"off\"\n[[repos]]\nname = \"{HELLO}\"\napp_chart = \"deploy/chart\"\n"
    ));
    let app = TestApp::with_config(&toml).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let applied: String = [APP.to_owned(), APP.replace("-helpers", "-app")]
        .iter()
        .map(|name| {
            let path = rendered(&app).join(format!("{name}.yaml"));
            format!("---\n{}", std::fs::read_to_string(&path).unwrap())
        })
        .collect();

    let output = render_offline(&app, &toml);
    let printed = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success(), "{printed}");
    assert!(printed.contains(previewd::render::APPLIED_HASH));
    assert_eq!(printed, applied);
}

/// `previewd render` is an offline command: it may read the state's identity, but it must
/// leave the state as it found it. A state of the previous release (here: before migration
/// 0010) that a running `previewd serve` of that release still uses is not migrated under it.
#[tokio::test]
async fn previewd_render_leaves_an_older_state_unmigrated() {
    if common::pg::on_postgres() {
        return; // SQLite's migrations and catalog; PostgreSQL's render reads without migrating.
    }
    let toml = common::config("[database]\nmode = \"off\"\n");
    let app = TestApp::with_config(&toml).await;
    // The state as the release before 0010 left it.
    app.execute("DROP TABLE orphans").await;
    app.execute("DELETE FROM _sqlx_migrations WHERE version = 10")
        .await;
    let output = render_offline(&app, &toml);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let migrated: i64 = app
        .scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE version = 10")
        .await;
    let orphans: i64 = app
        .scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = 'orphans'")
        .await;
    assert_eq!(
        (migrated, orphans),
        (0, 0),
        "an offline render migrated the state a running previewd uses"
    );
}

/// `previewd render --event pull_request.opened.json` run as an operator would, with `toml`
/// and the state of `app`.
fn render_offline(app: &TestApp, toml: &str) -> std::process::Output {
    // The state `app` runs on, whichever store: the same file, or the same database.
    let (toml, env) = common::store_for(app.dir.path(), toml);
    let config = app.dir.path().join("previewd.toml");
    std::fs::write(&config, toml).unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(["--config", config.to_str().unwrap(), "render", "--event"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/pull_request.opened.json"
        ))
        .env_clear()
        .envs(env)
        .output()
        .unwrap()
}

/// A repository that turns mail and messaging on after its previews were sealed: each
/// existing preview gets only the new Secrets, sealed and stored beside the old ones (which
/// keep their values), and its helpers render the catcher and the vhost.
#[tokio::test]
async fn turning_mail_and_messaging_on_adds_their_secrets_to_a_sealed_preview() {
    let (app, _) = opened_and_reconciled().await;
    let before = file(&app).unwrap();
    let names_before: Vec<String> = app
        .scalars("SELECT name FROM sealed_secrets ORDER BY id")
        .await;
    assert_eq!(names_before.len(), 2);
    let db_line = |yaml: &str| {
        yaml.lines()
            .find(|l| l.contains("PGPASSWORD"))
            .map(str::to_owned)
    };

    let mut config = app.app.config.clone();
    config.repos = previewd::config::Config::from_toml(
        &format!("[[repos]]\nname = \"{HELLO}\"\nmail = true\nmessaging = \"rabbitmq\"\n"),
        Vec::new(),
    )
    .unwrap()
    .repos;
    let turned_on = reconciler(&app, config);
    turned_on.pass().await.unwrap();
    let after = file(&app).unwrap();
    let names_after: Vec<String> = app
        .scalars("SELECT name FROM sealed_secrets ORDER BY id")
        .await;
    let slug = APP.trim_end_matches("-helpers");
    assert_eq!(
        names_after,
        [
            names_before[0].clone(),
            names_before[1].clone(),
            format!("{slug}-mail"),
            format!("{slug}-amqp"),
            format!("{slug}-amqp-hash"),
        ]
    );
    assert_eq!(
        db_line(&before),
        db_line(&after),
        "the database's password stays"
    );
    assert!(after.contains("MP_SMTP_AUTH") && after.contains("AMQP_URL"));
    assert!(after.contains(&format!("name: {slug}-mail")), "the catcher");
    assert!(after.contains("vhost:"), "the vhost");

    turned_on.pass().await.unwrap();
    assert_eq!(
        app.count("sealed_secrets").await,
        5,
        "sealed once: the next pass adds nothing"
    );
}

/// A preview keeps the vhost it was made with until it ends: a repository turning messaging
/// off, or `messaging.mode` changed, would otherwise drop the delete hook from its
/// rendering and leave a vhost and a user whose password the PR's code has read.
#[tokio::test]
async fn a_preview_keeps_its_vhost_and_its_delete_until_it_ends_whatever_the_config_becomes() {
    let app = TestApp::start().await;
    let with = |extra: &str| {
        let mut config = app.app.config.clone();
        config.repos = previewd::config::Config::from_toml(
            &format!("{extra}[[repos]]\nname = \"{HELLO}\"\nmessaging = \"rabbitmq\"\n"),
            Vec::new(),
        )
        .unwrap()
        .repos;
        config
    };
    let on = with("");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler(&app, on.clone()).pass().await.unwrap();
    let slug = APP.trim_end_matches("-helpers");
    // The chart renders the delete Job from these values (tests/chart/services.rs).
    let delete = format!("hashSecret: {slug}-amqp-hash");
    assert!(file(&app).unwrap().contains(&delete));

    let mut off = on.clone();
    off.repos[0].app.messaging = false;
    // Operator mode as a file says it: its default namespace is the RabbitmqCluster's.
    let mut operator = on.clone();
    operator.messaging =
        previewd::config::Config::from_toml("[messaging]\nmode = \"operator\"\n", Vec::new())
            .unwrap()
            .messaging;
    assert_eq!(operator.messaging.namespace, "rabbitmq");
    for (what, config) in [("messaging off", off), ("operator mode", operator)] {
        reconciler(&app, config).pass().await.unwrap();
        let rendered = file(&app).unwrap();
        assert!(rendered.contains(&delete), "{what}: the delete hook stays");
        assert!(
            rendered.contains("post-delete-finalizer.argocd.argoproj.io"),
            "{what}: and the finalizers that run it"
        );
        assert!(
            !rendered.contains("credentialsSecret"),
            "{what}: still shared"
        );
        let application: serde_json::Value = serde_yaml_ng::from_str(&rendered).unwrap();
        assert_eq!(
            application["spec"]["source"]["helm"]["valuesObject"]["messaging"]["shared"]["namespace"],
            "previewd-system",
            "{what}: the Jobs where the hash was sealed, and the admin Secret is"
        );
    }
    let kinds: Vec<String> = app.scalars("SELECT kind FROM ledger ORDER BY id").await;
    assert!(kinds.contains(&"RabbitMQ vhost".to_owned()), "{kinds:?}");
}
