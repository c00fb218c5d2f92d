//! The state intake writes: queued commands, installations and their repositories, a
//! durable WAL database with foreign keys, and cascading deletes that keep history.

use super::*;
use crate::common::{Delivery, TestApp};
use axum::http::StatusCode;

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
async fn state_is_durable_wal_with_foreign_keys() {
    if crate::common::pg::on_postgres() {
        return; // SQLite's settings; PostgreSQL's durability and foreign keys are its own.
    }
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
    app.execute(&format!("INSERT INTO ledger (preview_id, kind, name, state, created_at) VALUES ({id}, 'Application', 'pr-2', 'applied', 0)"))
        .await;
    app.execute(&format!("INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at) VALUES ({id}, 'ns', 'db', 'strict', 'f', '{{}}', 0)"))
        .await;
    app.execute("DELETE FROM previews").await;
    assert_eq!(
        (app.count("ledger").await, app.count("sealed_secrets").await),
        (0, 0)
    );
    assert_eq!(app.count("history").await, 1);
    let tamper = match app.state().postgres() {
        Some(pg) => sqlx::query("DELETE FROM history")
            .execute(pg)
            .await
            .map(drop),
        None => sqlx::query("DELETE FROM history")
            .execute(app.pool())
            .await
            .map(drop),
    };
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
}
