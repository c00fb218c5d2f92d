//! `previewd migrate-state`: an SQLite state copied into PostgreSQL, all of it, once, and
//! never while a serve runs on the file or into a state that holds anything.

mod common;

use std::process::Command;

use common::{Delivery, TestApp, config, pg};

/// Tables compared row for row after the copy (every column, as text, in key order).
const TABLES: &[(&str, &str)] = &[
    ("previews", "id"),
    ("ledger", "id"),
    ("sealed_secrets", "id"),
    ("commands", "id"),
    ("deliveries", "hook_id, guid"),
    ("history", "id"),
    ("closed_prs", "repo, number"),
    ("github_threads", "repo, number"),
    ("notices", "id"),
    ("installations", "id"),
    ("installation_repositories", "installation_id, repo"),
    ("template_repos", "repo"),
];

/// The columns of `table` in the SQLite state, and every row rendered as text (each
/// column cast to text, NULL as "∅"), ordered by `key`.
fn sqlite_rows(state: &std::path::Path, table: &str, key: &str) -> (Vec<String>, Vec<String>) {
    let conn = rusqlite::Connection::open(state).unwrap();
    let mut statement = conn
        .prepare(&format!(
            "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
        ))
        .unwrap();
    let columns: Vec<String> = statement
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let sql = format!("SELECT {} FROM {table} ORDER BY {key}", as_text(&columns));
    let mut statement = conn.prepare(&sql).unwrap();
    let rows = statement
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (columns, rows)
}

/// The same columns of `table` in the PostgreSQL state, rendered the same way.
async fn postgres_rows(url: &str, table: &str, key: &str, columns: &[String]) -> Vec<String> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let sql = format!("SELECT {} FROM {table} ORDER BY {key}", as_text(columns));
    let rows = sqlx::query_scalar(&sql).fetch_all(&pool).await.unwrap();
    pool.close().await;
    rows
}

fn as_text(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| format!("COALESCE(CAST({c} AS TEXT), '∅')"))
        .collect::<Vec<_>>()
        .join(" || '|' || ")
}

/// A PostgreSQL configuration for the target: the URL only in the environment.
fn migrate_state(dir: &std::path::Path, from: &std::path::Path, url: &str) -> std::process::Output {
    let toml = dir.join("target.toml");
    std::fs::write(
        &toml,
        "[[clusters]]\nname = \"in-cluster\"\nserver = \"https://kubernetes.default.svc\"\nsealing_cert = \"unused.pem\"\n",
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_previewd"))
        .arg("--config")
        .arg(&toml)
        .arg("migrate-state")
        .arg("--from")
        .arg(from)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PREVIEWD_STATE", url)
        .env(
            "PREVIEWD_LOGIN_SESSION_SECRET",
            "a-test-session-secret-of-32-bytes-or-more",
        )
        .output()
        .unwrap()
}

/// An SQLite state with a little of everything: previews opened, one closed, a command.
async fn recorded_state() -> tempfile::TempDir {
    let app = TestApp::on_sqlite(tempfile::tempdir().unwrap(), &config("")).await;
    for number in 1..=3 {
        let opened = Delivery::fixture("pull_request.opened").number(number);
        assert!(app.send(&opened).await.0.is_success());
    }
    let closed = Delivery::fixture("pull_request.closed.unmerged").number(2);
    assert!(app.send(&closed).await.0.is_success());
    let command = Delivery::fixture("issue_comment.created.pull_request");
    assert!(app.send(&command).await.0.is_success());
    app.app.state.close().await;
    let TestApp { dir, .. } = app;
    dir
}

#[tokio::test]
async fn everything_an_sqlite_state_holds_is_in_postgresql_after_migrate_state() {
    let dir = recorded_state().await;
    let from = dir.path().join("previewd.db");
    let before: Vec<_> = TABLES
        .iter()
        .map(|(table, key)| sqlite_rows(&from, table, key))
        .collect();
    assert_eq!(before[0].1.len(), 3, "the source has three previews");
    assert!(!before[4].1.is_empty(), "and deliveries");
    let url = pg::server().fresh_database();
    let out = migrate_state(dir.path(), &from, &url);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for ((table, key), (columns, rows)) in TABLES.iter().zip(&before) {
        assert_eq!(
            &postgres_rows(&url, table, key, columns).await,
            rows,
            "{table}"
        );
    }
    // Once is all: the target now holds rows.
    let again = migrate_state(dir.path(), &from, &url);
    assert!(!again.status.success());
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("already holds rows"), "{said}");
}

#[tokio::test]
async fn migrate_state_refuses_while_a_serve_holds_the_sqlite_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("previewd.db").display().to_string();
    let config = previewd::config::Config::from_toml(
        &config(""),
        vec![("PREVIEWD_STATE".into(), state.clone())],
    )
    .unwrap();
    let started = previewd::serve::start(config, std::sync::Arc::new(previewd::clock::SystemClock))
        .await
        .unwrap();
    let url = pg::server().fresh_database();
    let out = migrate_state(dir.path(), std::path::Path::new(&state), &url);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("a previewd serve is running"), "{said}");
    let copied: i64 = {
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let n = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'previews'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        n
    };
    assert_eq!(copied, 0, "nothing was made in the target either");
    drop(started);
}

#[tokio::test]
async fn a_password_in_the_target_url_is_never_printed() {
    let dir = recorded_state().await;
    let from = dir.path().join("previewd.db");
    // A server that is not there: the error names the host, not the password.
    let out = migrate_state(
        dir.path(),
        &from,
        "postgresql://previewd:hunter2-secret@127.0.0.1:1/previewd",
    );
    assert!(!out.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!said.contains("hunter2-secret"), "{said}");
    assert!(said.contains("127.0.0.1"), "{said}");
}
