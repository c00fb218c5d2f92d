//! Sleep (issue #41): a preview no request reached for its repository's `sleep_after` is
//! put to sleep by the sweeper and rendered so; a visit or a push keeps it awake; a
//! repository without `sleep_after` never sleeps.

use super::*;

/// previewd whose Hello-World previews sleep after `after` behind its login (`app_service`).
async fn sleeping_after(after: &str) -> TestApp {
    TestApp::with_config(&format!(
        "public_url = \"https://previewd.example.com\"\n{}",
        common::config(&format!(
            "[defaults]\nsleep_after = \"{after}\"\n\
             [[repos]]\nname = \"codertocat/hello-world\"\napp_service = \"web:http\"\n"
        ))
    ))
    .await
}

/// PR #2 opened and applied; the reconciler that applied it.
async fn preview_applied(app: &TestApp) -> Arc<previewd::reconcile::Reconciler> {
    let reconciler = reconciler(app);
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    reconciler
}

/// What a sweep pass a month from now puts to sleep.
async fn slept_a_month_later(app: &TestApp) -> usize {
    app.clock.advance(30 * DAY);
    let (_, report) = sweeper(app).pass(Pass::Record).await.unwrap().unwrap();
    report.slept
}

async fn sleeping(app: &TestApp) -> Vec<(i64, Option<i64>, String)> {
    app.rows("SELECT number, sleeping_since, observed FROM previews ORDER BY number")
        .await
}

#[tokio::test]
async fn a_preview_idle_past_sleep_after_is_put_to_sleep_and_rendered_asleep() {
    let app = sleeping_after("1h").await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    app.send(&opened(3, "bob")).await;
    reconciler.pass().await.unwrap();
    app.clock.advance(HOUR - 60);
    // #3 was visited: a minute ago its idle hour started again.
    app.execute(&format!(
        "UPDATE previews SET last_used_at = {} WHERE number = 3",
        common::NOW + HOUR - 120
    ))
    .await;
    sweeper(&app).pass(Pass::Record).await.unwrap();
    assert!(
        sleeping(&app).await.iter().all(|r| r.1.is_none()),
        "not yet"
    );

    app.clock.advance(60);
    let (plan, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.slept, 1);
    assert!(
        plan.lines(false)
            .iter()
            .any(|l| l.starts_with("sleep codertocat/hello-world#2: no request for 1h")),
        "{:?}",
        plan.lines(false)
    );
    reconciler.pass().await.unwrap();
    let rows = sleeping(&app).await;
    assert_eq!(rows[0], (2, Some(common::NOW + HOUR), "sleeping".into()));
    assert_eq!(rows[1].1, None, "visited within the hour");
    assert_eq!(app.recorded("slept").await, 1);

    // Asleep once: the next passes put nothing more to sleep.
    app.clock.advance(HOUR);
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.slept, 1, "#3, idle now; #2 is asleep already");
}

#[tokio::test]
async fn a_push_wakes_a_sleeping_preview_and_starts_its_idle_hour_again() {
    let app = sleeping_after("1h").await;
    let reconciler = preview_applied(&app).await;
    app.clock.advance(HOUR);
    sweeper(&app).pass(Pass::Record).await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(sleeping(&app).await[0].1.is_some());

    app.clock.advance(HOUR);
    let sha = "2222222222222222222222222222222222222222";
    app.send(&Delivery::push(sha, "2026-11-29T02:00:00Z").number(2))
        .await;
    let (slept, since): (i64, Option<i64>) = app
        .row("SELECT slept_seconds, sleeping_since FROM previews")
        .await;
    assert_eq!(
        (slept, since),
        (HOUR, None),
        "awake again, the hour asleep counted"
    );
    reconciler.pass().await.unwrap();
    app.clock.advance(HOUR - 60);
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.slept, 0, "the push started its idle hour again");
}

#[tokio::test]
async fn a_repository_whose_requests_previewd_never_sees_never_sleeps_on_its_own() {
    // No `app_service`: no login in front, so no use recorded and no request to wake it.
    let app = app_with("sleep_after = \"1h\"").await;
    preview_applied(&app).await;
    assert_eq!(slept_a_month_later(&app).await, 0);
}

#[tokio::test]
async fn a_repository_without_sleep_after_never_sleeps() {
    let app = TestApp::with_config(&format!(
        "public_url = \"https://previewd.example.com\"\n{}",
        common::config(
            "[defaults]\nsleep_after = \"1h\"\n[[repos]]\nname = \"codertocat/hello-world\"\n\
             app_service = \"web:http\"\nsleep_after = \"none\"\n"
        )
    ))
    .await;
    preview_applied(&app).await;
    assert_eq!(slept_a_month_later(&app).await, 0);
}

#[tokio::test]
async fn a_visit_between_the_sweepers_read_and_its_write_keeps_the_preview_awake() {
    let app = sleeping_after("1h").await;
    preview_applied(&app).await;
    app.clock.advance(HOUR);
    let now = common::NOW + HOUR;
    let sweeper = sweeper(&app);
    let plan = sweeper.plan(now, Orphans::Skip).await.unwrap();
    assert_eq!(plan.sleep.len(), 1, "idle when read");
    app.execute(&format!("UPDATE previews SET last_used_at = {now}"))
        .await;
    let report = sweeper.apply(&plan, now).await.unwrap();
    assert_eq!(report.slept, 0, "used since: awake");
    assert!(sleeping(&app).await[0].1.is_none());
}

#[tokio::test]
async fn a_sleeping_preview_still_expires() {
    let app = sleeping_after("1h").await;
    let reconciler = preview_applied(&app).await;
    app.clock.advance(HOUR);
    sweeper(&app).pass(Pass::Record).await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(sleeping(&app).await[0].2, "sleeping");
    app.clock.advance(3 * DAY);
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(report.expired, 1, "72 h after the last push, asleep or not");
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0, "torn down and forgotten");
}

/// Hello-World's previews sleep after 1h; 500 of another repository's, which never sleep and
/// are idle longer, do not take their places (found by the attack review: the idle read
/// was capped before it was filtered).
#[tokio::test]
async fn previews_of_a_repository_that_never_sleeps_take_no_sleeping_ones_places() {
    let app = TestApp::with_config(&format!(
        "public_url = \"https://previewd.example.com\"\n{}",
        common::config(
            "[[repos]]\nname = \"codertocat/hello-world\"\napp_service = \"web:http\"\nsleep_after = \"1h\"\n\
             [[repos]]\nname = \"octo/big\"\n"
        )
    ))
    .await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    // 500 live previews of octo/big, idle since before #2 opened.
    // Every other column copied from #2; each store lists its columns its own way.
    let columns = if common::pg::on_postgres() {
        "SELECT string_agg(column_name, ',') FROM information_schema.columns
         WHERE table_name = 'previews' AND column_name NOT IN ('id','number','repo','created_at','head_changed_at')"
    } else {
        "SELECT group_concat(name) FROM pragma_table_info('previews') WHERE name NOT IN ('id','number','repo','created_at','head_changed_at')"
    };
    let cols: String = app.scalar(columns).await;
    app.execute(&format!(
        "WITH RECURSIVE n(k) AS (SELECT 1000 UNION ALL SELECT k + 1 FROM n WHERE k < 1499)
         INSERT INTO previews (number, repo, created_at, head_changed_at, {cols})
         SELECT k, 'octo/big', created_at - 10, head_changed_at - 10, {cols} FROM previews, n WHERE number = 2"
    ))
    .await;
    app.clock.advance(2 * HOUR);
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    let asleep: Option<i64> = app
        .scalar("SELECT sleeping_since FROM previews WHERE repo = (SELECT repo FROM previews WHERE number = 2) AND number = 2")
        .await;
    assert_eq!(
        report.slept, 1,
        "#2 idle 2h past a 1h sleep_after was not put to sleep (sleeping_since {asleep:?})"
    );
}

/// A PR back from draft (or a fork's head approved, or a `/preview deploy`) is deployed now:
/// its idle time starts then, not at its old head (found by the attack review).
#[tokio::test]
async fn a_preview_deployed_just_now_starts_its_idle_time_then() {
    let app = TestApp::with_config(&format!(
        "public_url = \"https://previewd.example.com\"\n{}",
        common::config(
            "[defaults]\nsleep_after = \"1h\"\n\
             [[repos]]\nname = \"codertocat/hello-world\"\napp_service = \"web:http\"\n"
        )
    ))
    .await;
    let reconciler = reconciler(&app);
    app.send(&opened(2, "alice")).await;
    reconciler.pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.converted_to_draft"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let desired: String = app.scalar("SELECT desired FROM previews").await;
    assert_eq!(desired, "draft");
    app.clock.advance(3 * DAY);
    app.send(
        &Delivery::fixture("pull_request.ready_for_review").updated_at("2019-05-18T15:30:00Z"),
    )
    .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let (desired, observed): (String, String) =
        app.row("SELECT desired, observed FROM previews").await;
    assert_eq!(
        (desired.as_str(), observed.as_str()),
        ("deployed", "applied")
    );
    // A minute after it was deployed again.
    app.clock.advance(60);
    let (_, report) = sweeper(&app).pass(Pass::Record).await.unwrap().unwrap();
    assert_eq!(
        report.slept, 0,
        "a preview deployed a minute ago was put to sleep"
    );
}
