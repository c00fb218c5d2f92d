//! Retention: what belongs to previews gone past the window is forgotten, the recent kept,
//! and a busy preview's history is capped in batches.

use super::*;
use previewd::clock::Clock;

/// What a PR destroyed at `at` leaves behind: its history, a finished command, a posted
/// notice, its GitHub thread and its close.
async fn gone_pr(app: &TestApp, number: i64, at: i64) {
    let pool = app.pool();
    for (what, when) in [("opened", at - DAY), ("destroyed", at)] {
        sqlx::query("INSERT INTO history (repo, number, what, actor, at) VALUES ('acme/api', ?1, ?2, 'previewd', ?3)")
            .bind(number)
            .bind(what)
            .bind(when)
            .execute(pool)
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO commands (repo, number, comment_id, actor, association, line, status, created_at, done_at, answered)
         VALUES ('acme/api', ?1, ?1, 'dev', 'OWNER', '/preview keep', 'done', ?2, ?2, 1)",
    )
    .bind(number)
    .bind(at - DAY)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO notices (repo, number, kind, body, created_at, posted_at) VALUES ('acme/api', ?1, 'expiry_warning', 'soon', ?2, ?2)")
        .bind(number)
        .bind(at - DAY)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO github_threads (repo, number, final_pending, updated_at) VALUES ('acme/api', ?1, 0, ?2)")
        .bind(number)
        .bind(at)
        .execute(pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES ('acme/api', ?1, ?2)")
        .bind(number)
        .bind(at)
        .execute(pool)
        .await
        .unwrap();
}

/// Rows of `table` about PR `number` of acme/api.
async fn rows_of(app: &TestApp, table: &str, number: i64) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM {table} WHERE repo = 'acme/api' AND number = ?1"
    ))
    .bind(number)
    .fetch_one(app.pool())
    .await
    .unwrap()
}

#[tokio::test]
async fn a_sweep_forgets_what_belongs_to_previews_gone_past_the_window_and_keeps_the_recent() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    // 25 PRs destroyed 40 days ago (#1 the latest of them), one 2 days ago.
    for n in 1..=25 {
        gone_pr(&app, n, now - 40 * DAY - n * 60).await;
    }
    gone_pr(&app, 100, now - 2 * DAY).await;
    // A live preview keeps even its oldest history.
    app.send(&opened(2, "alice")).await;
    sqlx::query("INSERT INTO history (repo, number, what, actor, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', ?1)")
        .bind(now - 90 * DAY)
        .execute(app.pool())
        .await
        .unwrap();
    // An old delivery record goes after its own (shorter) retention.
    sqlx::query("INSERT INTO deliveries (hook_id, guid, event, outcome, received_at) VALUES ('', 'old', 'ping', 'accepted', ?1)")
        .bind(now - 8 * DAY)
        .execute(app.pool())
        .await
        .unwrap();

    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();

    // The dashboard lists the 20 most recently destroyed: #100 and #1..=#19 keep their history.
    for n in (1..=19).chain([100]) {
        assert_eq!(
            rows_of(&app, "history", n).await,
            2,
            "#{n} is shown as recent"
        );
    }
    for n in 20..=25 {
        assert_eq!(
            rows_of(&app, "history", n).await,
            0,
            "#{n} is gone past the window"
        );
    }
    for n in 1..=25 {
        assert_eq!(
            rows_of(&app, "closed_prs", n).await,
            1,
            "a close is kept at any age: it is what stops a replayed opened"
        );
    }
    for table in ["commands", "notices", "github_threads"] {
        for n in 1..=25 {
            assert_eq!(rows_of(&app, table, n).await, 0, "{table} of #{n}");
        }
        assert_eq!(
            rows_of(&app, table, 100).await,
            1,
            "{table} of #100 is recent"
        );
    }
    let live: i64 = app
        .scalar("SELECT COUNT(*) FROM history WHERE repo = 'codertocat/hello-world' AND number = 2")
        .await;
    assert_eq!(live, 2, "a live preview's history stays");
    assert_eq!(app.delivery_outcome("old").await, None);
    assert_eq!(report.pruned, 1);
    assert_eq!(report.forgotten, 6 * 2 + 25 * 3);

    // Nothing is forgotten twice, and history stays append-only outside retention.
    let (_, again) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!((again.forgotten, again.pruned), (0, 0));
    let tamper = sqlx::query("DELETE FROM history WHERE number = 100")
        .execute(app.pool())
        .await;
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
}

#[tokio::test]
async fn a_busy_previews_history_is_capped_to_its_newest_rows_in_batches() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    app.send(&opened(2, "alice")).await;
    let mut tx = app.pool().begin().await.unwrap();
    for i in 0..1_700 {
        sqlx::query("INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', ?1, ?2)")
            .bind(format!("push {i}"))
            .bind(now - 1_700 + i)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    let kept: Vec<String> = app
        .scalars("SELECT what FROM history WHERE number = 2 ORDER BY at, id")
        .await;
    assert_eq!(kept.len() as i64, previewd::sweep::HISTORY_CAP);
    assert_eq!(
        report.forgotten,
        1_701 - 1_000,
        "the 'opened' row was the newest"
    );
    assert_eq!(kept.last().unwrap(), "opened", "the newest stays");
    let oldest: String = app
        .scalar("SELECT reason FROM history WHERE number = 2 ORDER BY at, id LIMIT 1")
        .await;
    assert_eq!(oldest, "push 701", "the oldest go");
}

/// Before, the pass looked at the first 500 PRs written in the last hour, oldest first, each
/// in a write transaction: after a busy hour the PR over the cap was never reached.
#[tokio::test]
async fn a_busy_previews_history_is_capped_after_hundreds_of_other_prs_were_written() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    app.send(&opened(2, "alice")).await;
    let mut tx = app.pool().begin().await.unwrap();
    for pr in 1_000..1_600 {
        sqlx::query("INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('codertocat/hello-world', ?1, 'opened', 'bob', 'opened', ?2)")
            .bind(pr)
            .bind(now - 3_000)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    for i in 0..1_200 {
        sqlx::query("INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', ?1, ?2)")
            .bind(format!("push {i}"))
            .bind(now - 1_200 + i)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    let kept: i64 = app
        .scalar("SELECT count(*) FROM history WHERE number = 2")
        .await;
    assert_eq!(kept, previewd::sweep::HISTORY_CAP);
    let others: i64 = app
        .scalar("SELECT count(*) FROM history WHERE number >= 1000")
        .await;
    assert_eq!(others, 600, "the PRs under the cap keep theirs");
}
