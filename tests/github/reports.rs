//! What previewd reports on a PR: the sticky comment, deployments and their statuses, and a
//! GitHub App acting with its installation token.

use super::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");

/// The fixture PR is closed unmerged (at 17:00).
async fn close(app: &TestApp) {
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
}

#[tokio::test]
async fn the_sticky_comment_is_created_once_and_edited_afterwards() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    assert_eq!(sticky(&github).len(), 1);
    let body = sticky_body(&github);
    assert!(
        body.contains("Deploying") && body.contains("`ec26c3e`"),
        "{body}"
    );
    assert!(
        body.contains("/preview extend 2d") && body.contains("in-cluster"),
        "{body}"
    );

    // Nothing changed: nothing written, to GitHub or to the state (a pass over 5,000 ready
    // previews wrote 5,000 unchanged threads, one commit each, every 30 s: tests/e2e/scale.py).
    let writes = github.count("POST", "") + github.count("PATCH", "");
    let saved: i64 = app.scalar("SELECT updated_at FROM github_threads").await;
    app.clock.advance(60);
    previewd.pass().await;
    assert_eq!(github.count("POST", "") + github.count("PATCH", ""), writes);
    let resaved: i64 = app.scalar("SELECT updated_at FROM github_threads").await;
    assert_eq!(resaved, saved, "an unchanged thread is not saved again");

    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(
        sticky(&github).len(),
        1,
        "edited in place, not posted again"
    );
    assert!(sticky_body(&github).contains("`4444444`"));
    assert_eq!(github.count("PATCH", "/issues/comments/"), 1);

    close(&app).await;
    previewd.passes(2).await;
    assert_eq!(sticky(&github).len(), 1);
    let body = sticky_body(&github);
    assert!(body.contains("Destroyed"), "{body}");
}

#[tokio::test]
async fn deployments_are_transient_per_head_and_end_inactive() {
    let (app, github, previewd) = setup().await;
    previewd.open(&app).await;
    {
        let hub = github.hub();
        assert_eq!(hub.deployments.len(), 1);
        let deployment = &hub.deployments[0];
        assert_eq!(deployment["ref"], HEAD);
        assert_eq!(deployment["environment"], "preview/pr-2");
        assert_eq!(deployment["auto_merge"], false);
        assert_eq!(deployment["required_contexts"], json!([]));
        assert_eq!(deployment["transient_environment"], true);
        assert_eq!(deployment["production_environment"], false);
        assert_eq!(hub.statuses.len(), 1);
        assert_eq!(hub.statuses[0].1["state"], "in_progress");
        // GitHub's "View logs": the preview's dashboard page (public_url defaults to the
        // loopback listen address).
        assert_eq!(
            hub.statuses[0].1["log_url"],
            "http://127.0.0.1:8080/previews/codertocat/hello-world/2"
        );
    }
    push_new_head(&app).await;
    previewd.pass().await;
    close(&app).await;
    previewd.passes(2).await;
    let hub = github.hub();
    assert_eq!(hub.deployments.len(), 2, "one per head SHA");
    let states: Vec<(u64, String)> = hub
        .statuses
        .iter()
        .map(|(id, s)| (*id, s["state"].as_str().unwrap().to_owned()))
        .collect();
    let (first, second) = (
        hub.deployments[0]["id"].as_u64().unwrap(),
        hub.deployments[1]["id"].as_u64().unwrap(),
    );
    assert_eq!(
        states,
        [
            (first, "in_progress".into()),
            (first, "inactive".into()),
            (second, "in_progress".into()),
            (second, "inactive".into()),
        ]
    );
}

#[tokio::test]
async fn a_github_app_mints_an_installation_token_once_and_acts_with_it() {
    let github = FakeGitHub::start().await;
    let app = TestApp::start_with(&format!(
        "app_id = 4242\nprivate_key_path = \"{FIXTURES}/test-key.pem\"\napi_url = {:?}\n",
        github.url
    ))
    .await;
    let previewd = Previewd::new(&app);
    app.send(&Delivery::fixture("pull_request.opened")).await; // installation 1
    previewd.pass().await;
    push_new_head(&app).await;
    previewd.pass().await;
    assert_eq!(sticky(&github).len(), 1, "found again by `<slug>[bot]`");
    assert_eq!(
        github.posts("/app/installations/1/access_tokens"),
        1,
        "minted once, then cached"
    );
    let hub = github.hub();
    let (as_the_app, as_the_installation): (Vec<_>, Vec<_>) = hub
        .log
        .iter()
        .zip(&hub.auth)
        .partition(|(line, _)| line.contains(" /app"));
    let jwt = |(_, header): &(&String, &String)| header.starts_with("Bearer ey");
    assert!(as_the_app.iter().all(jwt), "the App's JWT: {as_the_app:?}");
    let token = |(_, header): &(&String, &String)| header.ends_with("ghs_installation1");
    assert!(
        as_the_installation.iter().all(token),
        "the installation's token: {as_the_installation:?}"
    );
}
