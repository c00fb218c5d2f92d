//! The reconciler with the directory sink: intent in, Application files out, teardown to
//! the last row, and the failures in between.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Delivery, TestApp};
use previewd::reconcile::Reconciler;
use previewd::seal::SealingCert;
use previewd::sink::DirectorySink;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");
const APP: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers";
const HELLO: &str = "codertocat/hello-world";

fn reconciler(app: &TestApp, config: previewd::config::Config) -> Arc<Reconciler> {
    let cert = SealingCert::from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-cert.pem")).unwrap(),
        common::NOW,
    )
    .unwrap();
    let certs = config
        .clusters
        .iter()
        .map(|c| (c.name.clone(), cert.clone()))
        .collect();
    Arc::new(Reconciler::new(
        app.pool().clone(),
        config,
        previewd::sink::Sink::Directory(DirectorySink::new(rendered(app))),
        certs,
        None,
        Arc::new(app.clock.clone()),
    ))
}

fn rendered(app: &TestApp) -> PathBuf {
    app.dir.path().join("rendered")
}

fn file(app: &TestApp) -> Option<String> {
    std::fs::read_to_string(rendered(app).join(format!("{APP}.yaml"))).ok()
}

/// A previewd with the fixture PR opened and one reconcile pass made.
async fn opened_and_reconciled() -> (TestApp, Arc<Reconciler>) {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    (app, reconciler)
}

/// The fixture PR is closed, and its teardown marked begun (the sink not yet called).
async fn closed_and_teardown_started(app: &TestApp) {
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    previewd::db::start_teardown(app.pool(), id, common::NOW)
        .await
        .unwrap();
}

async fn whats(app: &TestApp) -> Vec<String> {
    app.history(HELLO, 2)
        .await
        .into_iter()
        .map(|h| h.0)
        .collect()
}

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
async fn a_failing_sink_is_recorded_once_and_recovers() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    // A file where the directory should be: every write fails.
    std::fs::write(rendered(&app), "not a directory").unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let (observed, error): (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!(observed, "error");
    assert!(
        error.as_deref().unwrap().contains("failed 3 times"),
        "{error:?}"
    );
    assert_eq!(
        whats(&app).await.iter().filter(|w| *w == "error").count(),
        1,
        "one history row per distinct error"
    );

    std::fs::remove_file(rendered(&app)).unwrap();
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some());
    let (observed, error): (String, Option<String>) =
        app.row("SELECT observed, last_error FROM previews").await;
    assert_eq!((observed.as_str(), error), ("applied", None));
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_teardown_finishes_it_once() {
    let app = TestApp::start().await;
    reconciler(&app, app.app.config.clone())
        .pass()
        .await
        .unwrap();
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler(&app, app.app.config.clone())
        .pass()
        .await
        .unwrap();
    // A crash between deleting the Application and forgetting the preview: the teardown is
    // marked and the file is gone, the row is still there.
    closed_and_teardown_started(&app).await;
    std::fs::remove_file(rendered(&app).join(format!("{APP}.yaml"))).unwrap();
    // "Restart": a fresh reconciler on the same state and directory.
    let after_restart = reconciler(&app, app.app.config.clone());
    after_restart.pass().await.unwrap();
    after_restart.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0);
    let history = whats(&app).await;
    assert_eq!(
        history.iter().filter(|w| *w == "teardown_started").count(),
        1
    );
    assert_eq!(history.iter().filter(|w| *w == "destroyed").count(), 1);
}

#[tokio::test]
async fn a_pr_reopened_during_teardown_is_deployed_again_once() {
    let (app, reconciler) = opened_and_reconciled().await;
    // Closed, and the teardown begun (as with a sink whose deletion takes a while)...
    closed_and_teardown_started(&app).await;
    // ...then reopened before it finished.
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some());
    let (observed, teardown): (String, Option<i64>) = app
        .row("SELECT observed, teardown_started_at FROM previews")
        .await;
    assert_eq!(
        (app.count("previews").await, observed.as_str(), teardown),
        (1, "applied", None)
    );
    // The Application still on the sink is exactly the one wanted: nothing is rewritten.
    let history = whats(&app).await;
    assert_eq!(
        history.iter().filter(|w| *w == "applied").count(),
        1,
        "{history:?}"
    );
    assert!(!history.contains(&"destroyed".to_owned()));
}

#[tokio::test]
async fn previews_wait_in_a_queue_when_every_cluster_is_full() {
    let app = TestApp::with_config(
        "[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n[[clusters]]\nname = \"small\"\nserver = \"https://small\"\ncapacity = 1\n",
    )
    .await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened").number(1))
        .await;
    app.send(&Delivery::fixture("pull_request.opened").number(2))
        .await;
    reconciler.pass().await.unwrap();
    let states: Vec<(i64, String, Option<String>)> = app
        .rows("SELECT number, observed, cluster FROM previews ORDER BY number")
        .await;
    assert_eq!(
        states,
        [
            (1, "applied".into(), Some("small".into())),
            (2, "queued".into(), None)
        ]
    );

    app.send(&Delivery::fixture("pull_request.closed.unmerged").number(1))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let states: Vec<(i64, String)> = app.rows("SELECT number, observed FROM previews").await;
    assert_eq!(
        states,
        [(2, "applied".into())],
        "the queued preview is promoted once a slot frees"
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

/// The security review's replay: a captured `opened` re-sent with a fresh delivery GUID (the
/// GUID is an unsigned header) brought a destroyed preview back. An end on purpose holds
/// against any event not newer than it; a genuinely new push still deploys.
#[tokio::test]
async fn a_replayed_opened_with_a_fresh_guid_does_not_bring_back_a_destroyed_preview() {
    let (app, reconciler) = opened_and_reconciled().await;
    assert!(file(&app).is_some());
    previewd::db::request_destroy(app.pool(), HELLO, 2, "octocat", common::NOW)
        .await
        .unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!((app.count("previews").await, file(&app)), (0, None));

    for (fixture, guid) in [
        ("pull_request.opened", "replayed-1"),
        ("pull_request.reopened", "replayed-2"),
        ("pull_request.synchronize", "replayed-3"),
    ] {
        let (status, _) = app.send(&Delivery::fixture(fixture).guid(guid)).await;
        assert!(status.is_success(), "{fixture}: {status}");
        reconciler.pass().await.unwrap();
        assert_eq!(
            (app.count("previews").await, file(&app)),
            (0, None),
            "{fixture} replayed after the destroy"
        );
    }
    // A push after the destroy is news: the preview comes back.
    let after = time::OffsetDateTime::from_unix_timestamp(common::NOW + 60).unwrap();
    let after = after
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    app.send(
        &Delivery::fixture("pull_request.synchronize")
            .guid("new-push")
            .updated_at(&after),
    )
    .await;
    reconciler.pass().await.unwrap();
    assert!(file(&app).is_some(), "a newer push deploys again");
}

/// Previews created before names were recorded keep the names they have (the 24-bit hash),
/// and recorded names survive a change of the domain: nothing live is renamed, so nothing is
/// deleted and re-created.
#[tokio::test]
async fn a_live_preview_keeps_its_names_across_a_naming_rule_or_domain_change() {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.execute("UPDATE previews SET names = NULL").await;
    reconciler.pass().await.unwrap();
    let key = "codertocat/hello-world#2".parse().unwrap();
    let legacy = previewd::naming::Names::legacy(&key, "preview.localhost");
    assert!(
        rendered(&app)
            .join(format!("{}.yaml", legacy.application))
            .exists(),
        "the pre-upgrade preview is applied under its old name"
    );
    assert!(file(&app).is_none(), "and not under a new one");

    let mut moved = app.app.config.clone();
    moved.defaults.domain = "elsewhere.example.com".into();
    let reconciler = self::reconciler(&app, moved);
    app.send(&Delivery::fixture("pull_request.synchronize"))
        .await;
    reconciler.pass().await.unwrap();
    let text = std::fs::read_to_string(rendered(&app).join(format!("{}.yaml", legacy.application)))
        .unwrap();
    assert!(
        text.contains(&legacy.host),
        "the host stays: {}",
        legacy.host
    );
    assert!(!text.contains("elsewhere.example.com"));
}

/// A repository dropped from `[[repos]]` used to have its live preview re-rendered with the
/// defaults (domain moved, migrations off) and its close refused. Frozen now: never
/// rendered again, and its close and commands still tear it down.
#[tokio::test]
async fn a_repository_dropped_from_the_allow_list_keeps_its_preview_frozen_until_it_closes() {
    let listed = common::config(
        "[[repos]]\nname = \"codertocat/hello-world\"\ndomain = \"hello.example.com\"\nmigrate_command = [\"bin/migrate\"]\nimage = \"ghcr.io/codertocat/hello\"\n",
    );
    let app = TestApp::with_config(&listed).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let before = file(&app).expect("applied");

    // Restarted with the repository no longer listed, on the same state.
    let TestApp { dir, .. } = app;
    let dropped = common::config("[[repos]]\nname = \"someone/else\"\n");
    let app = TestApp::in_dir(dir, &dropped).await;
    let reconciler = self::reconciler(&app, app.app.config.clone());
    // A push is refused (no new rendering) and a redeploy-worthy pass rewrites nothing.
    let (status, body) = app
        .send(&Delivery::fixture("pull_request.synchronize").guid("push-after-drop"))
        .await;
    assert!(status.is_success(), "{status} {body}");
    reconciler.pass().await.unwrap();
    assert_eq!(
        file(&app).as_deref(),
        Some(before.as_str()),
        "exactly as last applied"
    );

    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    reconciler.pass().await.unwrap();
    assert_eq!(
        (app.count("previews").await, file(&app)),
        (0, None),
        "the close tears it down"
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

    let config = app.dir.path().join("previewd.toml");
    std::fs::write(&config, &toml).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(["--config", config.to_str().unwrap(), "render", "--event"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/pull_request.opened.json"
        ))
        .env_clear()
        .env("PREVIEWD_STATE", app.dir.path().join("previewd.db"))
        .output()
        .unwrap();
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
    let toml = common::config("[database]\nmode = \"off\"\n");
    let app = TestApp::with_config(&toml).await;
    // The state as the release before 0010 left it.
    app.execute("DROP TABLE orphans").await;
    app.execute("DELETE FROM _sqlx_migrations WHERE version = 10")
        .await;
    let config = app.dir.path().join("previewd.toml");
    std::fs::write(&config, &toml).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(["--config", config.to_str().unwrap(), "render", "--event"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/github/pull_request.opened.json"
        ))
        .env_clear()
        .env("PREVIEWD_STATE", app.dir.path().join("previewd.db"))
        .output()
        .unwrap();
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
