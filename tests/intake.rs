//! Webhook intake through the real router: recorded GitHub payloads in, rows out.

mod common;

use axum::http::StatusCode;
use common::{Delivery, NOW, TestApp};

const HELLO: &str = "codertocat/hello-world";
const HEAD: &str = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";

#[tokio::test]
async fn every_recorded_payload_gets_the_answer_and_rows_it_should() {
    // (fixture, status, outcome, preview rows, history rows, queued commands, installations)
    let cases = [
        ("pull_request.opened", 202, "accepted", 1, 1, 0, 0),
        (
            "pull_request.opened.with-null-body",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        ("pull_request.reopened", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.synchronize", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.synchronize.fork", 202, "accepted", 1, 1, 0, 0),
        ("pull_request.ready_for_review", 202, "accepted", 1, 1, 0, 0),
        (
            "pull_request.ready_for_review.with-installation",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        (
            "pull_request.converted_to_draft",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        (
            "pull_request.converted_to_draft.with-installation",
            202,
            "accepted",
            1,
            1,
            0,
            0,
        ),
        // Closing, editing or labelling a PR previewd never saw creates nothing.
        ("pull_request.closed.unmerged", 200, "ignored", 0, 0, 0, 0),
        (
            "pull_request.closed.merged.fork",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("pull_request.edited", 200, "ignored", 0, 0, 0, 0),
        ("pull_request.labeled", 200, "ignored", 0, 0, 0, 0),
        ("pull_request.unlabeled", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.created.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.created.pull_request.collaborator",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.created.issue", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.created.issue.with-installation",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.edited.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        (
            "issue_comment.edited.pull_request.bot-sticky",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.edited.issue", 200, "ignored", 0, 0, 0, 0),
        (
            "issue_comment.deleted.pull_request",
            200,
            "ignored",
            0,
            0,
            0,
            0,
        ),
        ("issue_comment.deleted.issue", 200, "ignored", 0, 0, 0, 0),
        ("ping", 200, "ignored", 0, 0, 0, 0),
        ("ping.with-app_id", 200, "ignored", 0, 0, 0, 0),
        ("push", 200, "ignored", 0, 0, 0, 0),
        ("installation.created", 202, "accepted", 0, 0, 0, 1),
        (
            "installation.created.with-requester",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
        ("installation.deleted", 202, "accepted", 0, 0, 0, 0),
        (
            "installation_repositories.added",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
        (
            "installation_repositories.removed",
            202,
            "accepted",
            0,
            0,
            0,
            1,
        ),
    ];
    for (name, status, outcome, previews, history, commands, installations) in cases {
        let app = TestApp::start().await;
        let delivery = Delivery::fixture(name);
        let (got_status, body) = app.send(&delivery).await;
        assert_eq!(got_status.as_u16(), status, "{name}: {body}");
        assert_eq!(body["outcome"], outcome, "{name}: {body}");
        assert_eq!(
            app.delivery_outcome(delivery.guid_str()).await.as_deref(),
            Some(outcome),
            "{name}"
        );
        assert_eq!(app.count("deliveries").await, 1, "{name}");
        assert_eq!(app.count("previews").await, previews, "{name}");
        assert_eq!(app.count("history").await, history, "{name}");
        assert_eq!(app.count("commands").await, commands, "{name}");
        assert_eq!(app.count("installations").await, installations, "{name}");
    }
}

#[tokio::test]
async fn opened_pr_records_a_deployed_preview_that_expires_after_the_ttl() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(preview.desired, "deployed");
    assert_eq!(preview.head_sha, HEAD);
    assert_eq!(
        (preview.author.as_str(), preview.title.as_str()),
        ("Codertocat", "Update the README with new information.")
    );
    assert_eq!(preview.installation_id, Some(1));
    assert_eq!(preview.created_at, NOW);
    assert_eq!(preview.expires_at, NOW + 72 * 3600);
    assert_eq!(
        app.history(HELLO, 2).await,
        vec![(
            "opened".into(),
            "Codertocat".into(),
            "deploy ec26c3e".into()
        )]
    );
}

#[tokio::test]
async fn push_moves_the_preview_to_the_new_head_and_restarts_its_clock() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.clock.advance(3600);
    let new_head = "1111111111111111111111111111111111111111";
    let push = Delivery::push(new_head, "2019-05-15T16:00:00Z");
    assert_eq!(app.send(&push).await.0, StatusCode::ACCEPTED);
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(preview.head_sha, new_head);
    assert_eq!(preview.expires_at, NOW + 3600 + 72 * 3600);
    assert_eq!(app.history(HELLO, 2).await.len(), 2);
}

#[tokio::test]
async fn pushes_never_extend_a_preview_past_its_maximum_lifetime() {
    let app = TestApp::with_config("[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n[defaults]\nttl = \"2d\"\nmax_lifetime = \"3d\"\n").await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.clock.advance(2 * 86_400);
    app.send(&Delivery::fixture("pull_request.synchronize").updated_at("2019-05-20T00:00:00Z"))
        .await;
    assert_eq!(
        app.preview(HELLO, 2).await.unwrap().expires_at,
        NOW + 3 * 86_400
    );
}

#[tokio::test]
async fn a_late_older_event_never_rolls_the_preview_back() {
    let app = TestApp::start().await;
    let newer = "2222222222222222222222222222222222222222";
    app.send(&Delivery::push(newer, "2019-05-15T17:00:00Z"))
        .await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "ignored");
    assert_eq!(app.preview(HELLO, 2).await.unwrap().head_sha, newer);
    assert_eq!(app.history(HELLO, 2).await.len(), 1);
}

#[tokio::test]
async fn closed_pr_marks_its_preview_absent_with_the_reason() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let (status, _) = app
        .send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(
        (preview.desired.as_str(), preview.end_reason.as_deref()),
        ("absent", Some("closed"))
    );
    let merged = Delivery::fixture("pull_request.closed.unmerged")
        .edit(|j| j["pull_request"]["merged"] = true.into())
        .updated_at("2019-05-15T15:30:00Z");
    app.send(&merged).await;
    assert_eq!(
        app.preview(HELLO, 2).await.unwrap().end_reason.as_deref(),
        Some("merged")
    );
    let whats: Vec<String> = app
        .history(HELLO, 2)
        .await
        .into_iter()
        .map(|h| h.2)
        .collect();
    assert_eq!(
        whats,
        [
            "deploy ec26c3e",
            "PR closed: tear down",
            "PR merged: tear down"
        ]
    );
}

#[tokio::test]
async fn reopened_pr_is_deployed_again() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!(
        (preview.desired.as_str(), preview.end_reason),
        ("deployed", None)
    );
}

#[tokio::test]
async fn fork_pr_is_recorded_as_awaiting_approval_and_never_deployed() {
    let app = TestApp::start().await;
    let (status, _) = app
        .send(&Delivery::fixture("pull_request.synchronize.fork"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let preview = app
        .preview("googlecloudplatform/python-docs-samples-1", 1)
        .await
        .unwrap();
    assert_eq!(preview.desired, "awaiting_approval");
    assert!(preview.fork);
    let history = app
        .history("googlecloudplatform/python-docs-samples-1", 1)
        .await;
    assert_eq!(history[0].1, "dandhlee"); // the sender who pushed, not the PR author
    assert!(history[0].2.contains("/preview approve"), "{history:?}");
}

#[tokio::test]
async fn drafts_wait_until_ready_for_review() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.converted_to_draft"))
        .await;
    let preview = app.preview(HELLO, 2).await.unwrap();
    assert_eq!((preview.desired.as_str(), preview.draft), ("draft", true));
    app.send(
        &Delivery::fixture("pull_request.ready_for_review").updated_at("2019-05-15T15:30:00Z"),
    )
    .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

#[tokio::test]
async fn redelivery_of_a_processed_delivery_is_a_harmless_200() {
    let app = TestApp::start().await;
    let delivery = Delivery::fixture("pull_request.opened");
    assert_eq!(app.send(&delivery).await.0, StatusCode::ACCEPTED);
    let (status, body) = app.send(&delivery).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (body["outcome"].as_str(), body["previous"].as_str()),
        (Some("duplicate"), Some("accepted"))
    );
    assert_eq!(
        (app.count("deliveries").await, app.count("history").await),
        (1, 1)
    );
    // The same GUID through another hook (a repo hook beside the App) is its own delivery.
    assert_eq!(
        app.send(&delivery.clone().hook("999")).await.1["outcome"],
        "accepted"
    );
    assert_eq!(app.count("deliveries").await, 2);
}

#[tokio::test]
async fn redelivery_of_a_failed_delivery_is_processed_again() {
    let app = TestApp::start().await;
    let delivery = Delivery::fixture("pull_request.opened");
    sqlx::query("INSERT INTO deliveries (hook_id, guid, event, outcome, received_at) VALUES ('12345', ?1, 'pull_request', 'failed', 0)")
        .bind(delivery.guid_str())
        .execute(app.pool())
        .await
        .unwrap();
    assert_eq!(app.send(&delivery).await.0, StatusCode::ACCEPTED);
    assert_eq!(
        app.delivery_outcome(delivery.guid_str()).await.as_deref(),
        Some("accepted")
    );
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

#[tokio::test]
async fn repositories_outside_the_allow_list_are_refused_politely() {
    let app = TestApp::with_config(
        "[github]\nwebhook_secret = \"test-webhook-secret-0123456789\"\n[[repos]]\nname = \"octo/app\"\n",
    )
    .await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["outcome"], "refused");
    assert_eq!(app.count("previews").await, 0);
    let history = app.history(HELLO, 2).await;
    assert_eq!(
        (history[0].0.as_str(), history[0].1.as_str()),
        ("refused", "Codertocat")
    );
}

#[tokio::test]
async fn preview_commands_are_queued_once_with_their_author() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let comment = Delivery::fixture("issue_comment.created.pull_request").edit(|j| {
        j["comment"]["body"] = "/preview extend 2d".into();
        j["repository"]["full_name"] = "Codertocat/Hello-World".into();
        j["issue"]["number"] = 2.into();
    });
    assert_eq!(app.send(&comment).await.0, StatusCode::ACCEPTED);
    // The same comment through a second hook is not queued twice.
    assert_eq!(
        app.send(&comment.clone().hook("777")).await.1["outcome"],
        "ignored"
    );
    let (line, actor, linked): (String, String, bool) = app
        .row("SELECT line, actor, preview_id IS NOT NULL FROM commands")
        .await;
    assert_eq!(
        (line.as_str(), actor.as_str(), linked),
        ("/preview extend 2d", "chhsia0", true)
    );
    assert_eq!(app.history(HELLO, 2).await.last().unwrap().0, "command");
}

#[tokio::test]
async fn installations_track_the_repositories_they_serve() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("installation.created")).await;
    let repos: Vec<String> = app
        .scalars("SELECT repo FROM installation_repositories WHERE installation_id = 957387")
        .await;
    assert_eq!(repos, ["codertocat/hello-world"]);
    app.send(&Delivery::fixture("installation_repositories.added"))
        .await;
    assert_eq!(app.count("installation_repositories").await, 2);
    app.send(
        &Delivery::fixture("installation.deleted")
            .edit(|j| j["installation"]["id"] = 957387.into()),
    )
    .await;
    assert_eq!(
        (
            app.count("installations").await,
            app.count("installation_repositories").await
        ),
        (0, 0)
    );
}

#[tokio::test]
async fn without_a_webhook_secret_every_delivery_is_refused() {
    let app = TestApp::with_config("").await;
    let (status, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("github.webhook_secret"),
        "{body}"
    );
    assert_eq!(app.total_rows().await, 0);
}

#[tokio::test]
async fn health_and_readiness_answer() {
    let app = TestApp::start().await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(app.get(path, None).await.0, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn state_is_durable_wal_with_foreign_keys() {
    let app = TestApp::start().await;
    let mode: String = app.scalar("PRAGMA journal_mode").await;
    let synchronous: i64 = app.scalar("PRAGMA synchronous").await;
    let foreign_keys: i64 = app.scalar("PRAGMA foreign_keys").await;
    assert_eq!((mode.as_str(), synchronous, foreign_keys), ("wal", 2, 1));
}

#[tokio::test]
async fn deleting_a_preview_cascades_to_its_children_but_history_stays() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    let id: i64 = app.scalar("SELECT id FROM previews").await;
    sqlx::query("INSERT INTO ledger (preview_id, kind, name, state, created_at) VALUES (?1, 'Application', 'pr-2', 'applied', 0)")
        .bind(id)
        .execute(app.pool())
        .await
        .unwrap();
    sqlx::query("INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at) VALUES (?1, 'ns', 'db', 'strict', 'f', '{}', 0)")
        .bind(id)
        .execute(app.pool())
        .await
        .unwrap();
    app.execute("DELETE FROM previews").await;
    assert_eq!(
        (app.count("ledger").await, app.count("sealed_secrets").await),
        (0, 0)
    );
    assert_eq!(app.count("history").await, 1);
    let tamper = sqlx::query("DELETE FROM history").execute(app.pool()).await;
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
}

#[tokio::test]
async fn a_late_opened_never_brings_back_a_closed_prs_preview() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    // Teardown finished: the row is gone (as the reconciler leaves it).
    app.execute("DELETE FROM previews").await;
    let (_, body) = app.send(&Delivery::fixture("pull_request.opened")).await;
    let late = app
        .send(&Delivery::fixture("pull_request.synchronize"))
        .await;
    assert_eq!(
        (body["outcome"].as_str(), late.1["outcome"].as_str()),
        (Some("ignored"), Some("ignored"))
    );
    assert_eq!(app.count("previews").await, 0);
    // A reopen is newer than the close: it deploys again.
    app.send(&Delivery::fixture("pull_request.reopened").updated_at("2019-05-15T15:40:00Z"))
        .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}

#[tokio::test]
async fn a_close_that_arrives_before_its_open_still_wins() {
    let app = TestApp::start().await;
    let (_, closed) = app
        .send(&Delivery::fixture("pull_request.closed.unmerged"))
        .await;
    assert_eq!(closed["outcome"], "ignored", "no preview to close yet");
    app.send(&Delivery::fixture("pull_request.opened")).await;
    assert_eq!(app.count("previews").await, 0);
}

#[tokio::test]
async fn an_edit_that_overtakes_ready_for_review_does_not_hide_it() {
    let app = TestApp::start().await;
    app.send(
        &Delivery::fixture("pull_request.converted_to_draft").updated_at("2019-05-15T15:00:00Z"),
    )
    .await;
    // GitHub delivers the (newer) edit first, then the (older) ready_for_review.
    let edit = Delivery::fixture("pull_request.labeled")
        .edit(|j| j["pull_request"]["draft"] = false.into());
    app.send(&edit.updated_at("2019-05-15T15:30:00Z")).await;
    app.send(
        &Delivery::fixture("pull_request.ready_for_review").updated_at("2019-05-15T15:20:00Z"),
    )
    .await;
    assert_eq!(app.preview(HELLO, 2).await.unwrap().desired, "deployed");
}
