//! Retention: what belongs to previews gone past the window is forgotten, the recent kept,
//! and a busy preview's history is capped in batches.

use super::*;
use previewd::clock::Clock;

/// What a PR destroyed at `at` leaves behind: its history, a finished command, a posted
/// notice, its GitHub thread and its close.
async fn gone_pr(app: &TestApp, number: i64, at: i64) {
    for (what, when) in [("opened", at - DAY), ("destroyed", at)] {
        app.execute(&format!("INSERT INTO history (repo, number, what, actor, at) VALUES ('acme/api', {number}, '{what}', 'previewd', {when})"))
            .await;
    }
    let asked = at - DAY;
    app.execute(&format!(
        "INSERT INTO commands (repo, number, comment_id, actor, association, line, status, created_at, done_at, answered)
         VALUES ('acme/api', {number}, {number}, 'dev', 'OWNER', '/preview keep', 'done', {asked}, {asked}, 1)"
    ))
    .await;
    app.execute(&format!("INSERT INTO notices (repo, number, kind, body, created_at, posted_at) VALUES ('acme/api', {number}, 'expiry_warning', 'soon', {asked}, {asked})"))
        .await;
    app.execute(&format!("INSERT INTO github_threads (repo, number, final_pending, updated_at) VALUES ('acme/api', {number}, 0, {at})"))
        .await;
    app.execute(&format!(
        "INSERT INTO closed_prs (repo, number, pr_updated_at) VALUES ('acme/api', {number}, {at})"
    ))
    .await;
}

/// Rows of `table` about PR `number` of acme/api.
async fn rows_of(app: &TestApp, table: &str, number: i64) -> i64 {
    app.scalar(&format!(
        "SELECT COUNT(*) FROM {table} WHERE repo = 'acme/api' AND number = {number}"
    ))
    .await
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
    let long_ago = now - 90 * DAY;
    app.execute(&format!("INSERT INTO history (repo, number, what, actor, at) VALUES ('codertocat/hello-world', 2, 'pushed', 'alice', {long_ago})"))
        .await;
    // An old delivery record goes after its own (shorter) retention.
    let received = now - 8 * DAY;
    app.execute(&format!("INSERT INTO deliveries (hook_id, guid, event, outcome, received_at) VALUES ('', 'old', 'ping', 'accepted', {received})"))
        .await;

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
    let tamper = match app.state().postgres() {
        Some(pg) => sqlx::query("DELETE FROM history WHERE number = 100")
            .execute(pg)
            .await
            .map(drop),
        None => sqlx::query("DELETE FROM history WHERE number = 100")
            .execute(app.pool())
            .await
            .map(drop),
    };
    assert!(tamper.unwrap_err().to_string().contains("append-only"));
}

#[tokio::test]
async fn a_busy_previews_history_is_capped_to_its_newest_rows_in_batches() {
    let app = app_with("ttl = \"72h\"").await;
    let now = app.clock.now();
    app.send(&opened(2, "alice")).await;
    pushes(&app, 2, 1_700, now - 1_700).await;

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
    let at = now - 3_000;
    app.execute(&format!(
        "WITH RECURSIVE pr(n) AS (SELECT 1000 UNION ALL SELECT n + 1 FROM pr WHERE n < 1599)
         INSERT INTO history (repo, number, what, actor, reason, at)
         SELECT 'codertocat/hello-world', n, 'opened', 'bob', 'opened', {at} FROM pr"
    ))
    .await;
    pushes(&app, 2, 1_200, now - 1_200).await;

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

/// `count` history rows `push 0`.. of PR `number`, a second apart from `from`, in one
/// statement (valid on both stores).
async fn pushes(app: &TestApp, number: i64, count: i64, from: i64) {
    let last = count - 1;
    app.execute(&format!(
        "WITH RECURSIVE push(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM push WHERE i < {last})
         INSERT INTO history (repo, number, what, actor, reason, at)
         SELECT 'codertocat/hello-world', {number}, 'pushed', 'alice', 'push ' || i, {from} + i FROM push"
    ))
    .await;
}
