//! Placement and configuration changes: previews queue when every cluster is full, a live
//! preview keeps its names across a naming or domain change, and a repository dropped from
//! the allow list stays frozen until it closes.

use super::*;

/// helper-15's repro: placement re-read the state's counts after an eviction, which lacked
/// the previews placed earlier in the same pass (written at its end): the evicting preview
/// was put on a cluster already full.
#[tokio::test]
async fn an_eviction_frees_its_own_slot_and_keeps_the_passs_earlier_placements() {
    let app = TestApp::with_config(
        "[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n\
         [defaults]\nmax_per_author = 1\nat_cap = \"evict\"\n\
         [[clusters]]\nname = \"a\"\nserver = \"https://a\"\ncapacity = 1\n\
         [[clusters]]\nname = \"b\"\nserver = \"https://b\"\ncapacity = 1\n",
    )
    .await;
    let reconciler = reconciler(&app, app.app.config.clone());
    let opened = |number: u64, author: &str| {
        Delivery::fixture("pull_request.opened")
            .number(number)
            .edit(|body| body["pull_request"]["user"]["login"] = serde_json::json!(author))
            .guid(&format!("opened-{number}"))
    };
    app.send(&opened(1, "carol")).await;
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.closed.unmerged").number(1))
        .await;
    for _ in 0..3 {
        reconciler.pass().await.unwrap();
    }
    // a is free, alice's #2 holds b; one pass places dave's #3, then alice's #4 evicts #2.
    app.send(&opened(3, "dave")).await;
    app.send(&opened(4, "alice")).await;
    reconciler.pass().await.unwrap();
    let placed: Vec<(i64, Option<String>)> = app
        .rows("SELECT number, cluster FROM previews WHERE desired = 'deployed' ORDER BY number")
        .await;
    assert_eq!(placed, [(3, Some("a".into())), (4, Some("b".into()))]);
    let evicted: String = app.reason_recorded("evicted").await;
    assert!(evicted.contains("#4"), "{evicted}");
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
