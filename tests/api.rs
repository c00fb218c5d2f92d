//! The read API and the dashboard through the real router: every answer validated against
//! the served OpenAPI description (a JSON-schema validator), filters, a destroyed
//! preview's history, the token, and HTML escaping.

mod common;

use std::sync::Arc;

use common::openapi::{documented, get_documented, openapi};
use common::{Delivery, TestApp};
use previewd::reconcile::Reconciler;
use serde_json::{Value, json};

fn reconciler(app: &TestApp) -> Arc<Reconciler> {
    Arc::new(common::directory_reconciler(app))
}

async fn json_of(app: &TestApp, path: &str) -> Value {
    let (status, body) = app.get(path, None).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Two previews by different authors; #2 pushed once.
async fn two_previews(app: &TestApp) {
    let reconciler = reconciler(app);
    app.send(&Delivery::fixture("pull_request.opened")).await;
    app.send(
        &Delivery::fixture("pull_request.opened")
            .number(3)
            .edit(|b| {
                b["pull_request"]["user"]["login"] = json!("octocat");
                b["pull_request"]["title"] = json!("<script>alert('x')</script> & friends");
            })
            .guid("opened-3"),
    )
    .await;
    reconciler.pass().await.unwrap();
}

#[tokio::test]
async fn previews_are_listed_filtered_and_shaped_as_the_openapi_description_says() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    let openapi = openapi(&app).await;
    let (list, one) = ("/api/previews", "/api/previews/{owner}/{repo}/{number}");

    let all = get_documented(&app, &openapi, list, "/api/previews", None, 200).await;
    let previews = all["previews"].as_array().unwrap();
    assert_eq!(previews.len(), 2);
    let first = &previews[0];
    assert_eq!(first["repo"], "codertocat/hello-world");
    assert_eq!(first["number"], 2);
    assert_eq!(first["author"], "Codertocat");
    assert_eq!(first["state"], "rendered"); // the directory sink: nobody reports health
    assert_eq!(first["cluster"], "in-cluster");
    assert_eq!(
        first["pr_url"],
        "https://github.com/codertocat/hello-world/pull/2"
    );
    assert_eq!(first["seconds_left"], 72 * 3600);

    let by_author = json_of(&app, "/api/previews?author=octocat").await;
    assert_eq!(by_author["previews"].as_array().unwrap().len(), 1);
    let by_state = json_of(&app, "/api/previews?state=ready").await;
    assert_eq!(by_state["previews"].as_array().unwrap().len(), 0);
    let by_cluster = json_of(
        &app,
        "/api/previews?cluster=in-cluster&repo=Codertocat/Hello-World",
    )
    .await;
    assert_eq!(by_cluster["previews"].as_array().unwrap().len(), 2);

    let path = "/api/previews/codertocat/hello-world/2";
    let detail = get_documented(&app, &openapi, one, path, None, 200).await;
    assert!(detail["ledger"].as_array().unwrap().len() >= 2);
    let whats: Vec<&str> = detail["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["what"].as_str().unwrap())
        .collect();
    assert_eq!(whats, ["opened", "placed", "applied"]);
    let path = "/api/previews/codertocat/hello-world/99";
    get_documented(&app, &openapi, one, path, None, 404).await;
}

#[tokio::test]
async fn a_destroyed_preview_keeps_its_history_in_the_api_and_the_dashboard() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler(&app).pass().await.unwrap();
    let detail = get_documented(
        &app,
        &openapi(&app).await,
        "/api/previews/{owner}/{repo}/{number}",
        "/api/previews/codertocat/hello-world/2",
        None,
        200,
    )
    .await;
    assert_eq!(detail["preview"], Value::Null);
    assert_eq!(detail["ledger"], json!([]));
    let history = detail["history"].as_array().unwrap();
    assert_eq!(history.last().unwrap()["what"], "destroyed");
    let (status, page) = app.get("/previews/codertocat/hello-world/2", None).await;
    assert_eq!(status, 200);
    assert!(page.contains("has been destroyed") && page.contains("destroyed"));
    let (_, index) = app.get("/", None).await;
    assert!(
        index.contains("Recently destroyed")
            && index.contains("/previews/codertocat/hello-world/2")
    );
}

#[tokio::test]
async fn a_title_with_a_script_tag_shows_as_text() {
    let app = TestApp::start().await;
    two_previews(&app).await;
    let (status, page) = app.get("/", None).await;
    assert_eq!(status, 200);
    assert!(!page.contains("<script>"), "{page}");
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; friends"));
    assert!(
        page.contains("2d 23h") || page.contains("3d"),
        "time left shown: {page}"
    );
}

#[tokio::test]
async fn with_a_token_reads_need_it_and_destroy_always_does() {
    let open = TestApp::start().await;
    two_previews(&open).await;
    let (status, body) = open
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            None,
        )
        .await;
    assert_eq!(
        status, 403,
        "no api.token: nobody destroys through the API: {body}"
    );

    let app = TestApp::start_with("[api]\ntoken = \"s3cret-token\"\n").await;
    two_previews(&app).await;
    for path in [
        "/",
        "/api/previews",
        "/api/previews/codertocat/hello-world/2",
        "/api/openapi.json",
    ] {
        let (status, _) = app.get(path, None).await;
        assert_eq!(status, 401, "{path}");
        let (status, _) = app.get(path, Some("Bearer wrong")).await;
        assert_eq!(status, 401, "{path}");
        let (status, _) = app.get(path, Some("Bearer s3cret-token")).await;
        assert_eq!(status, 200, "{path}");
    }
    // A browser sends Basic auth after the prompt; the password is the token.
    let (status, _) = app.get("/", Some("Basic dXNlcjpzM2NyZXQtdG9rZW4=")).await;
    assert_eq!(status, 200);
    let (status, _) = app.get("/healthz", None).await;
    assert_eq!(status, 200, "health stays open");

    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            None,
        )
        .await;
    assert_eq!(status, 401);
    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            Some("Basic dXNlcjpzM2NyZXQtdG9rZW4="),
        )
        .await;
    assert_eq!(
        status, 401,
        "a browser's cached Basic credentials cannot destroy (CSRF)"
    );
    let (status, _) = app
        .call(
            "POST",
            "/api/previews/codertocat/hello-world/2/destroy",
            Some("Bearer s3cret-token"),
        )
        .await;
    assert_eq!(status, 202);
    let (desired, actor): (String, String) = sqlx::query_as(
        "SELECT p.desired, h.actor FROM previews p JOIN history h ON h.repo = p.repo AND h.number = p.number
         WHERE p.number = 2 AND h.what = 'destroy_requested'",
    )
    .fetch_one(app.pool())
    .await
    .unwrap();
    assert_eq!((desired.as_str(), actor.as_str()), ("absent", "api"));
}

/// Inserts a preview row directly (the API reads rows; how they came is not its concern).
async fn insert_preview(app: &TestApp, repo: &str, number: i64, author: &str) {
    sqlx::query(
        "INSERT INTO previews (repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
             fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
         VALUES (?1, ?2, 1, 't', ?3, 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', 'b', 'main',
             0, 0, 'deployed', 'ready', 'in-cluster', ?4, ?4, ?4, ?4 + 86400)",
    )
    .bind(repo)
    .bind(number)
    .bind(author)
    .bind(common::NOW)
    .execute(app.pool())
    .await
    .unwrap();
}

/// Before, the dashboard listed every preview on one page: 140 ms at 5,200 previews
/// (`cargo bench --bench scale`), against issue #17's 100 ms for its first page.
#[tokio::test]
async fn the_dashboard_shows_a_page_of_previews_and_links_the_next() {
    let app = TestApp::start().await;
    for number in 1..=250 {
        insert_preview(&app, "acme/api", number, "dev").await;
    }
    let rows = |page: &str| page.matches("data-label=\"Repository\"").count();
    let next = |page: &str| {
        let at = page.find("/?cursor=").expect("a link to the next page");
        page[at..].split('"').next().unwrap().replace("&amp;", "&")
    };

    let (status, first) = app.get("/", None).await;
    assert_eq!(status, 200);
    assert_eq!(rows(&first), 100, "the first page");
    assert!(first.contains("250 live, 100 on this page"), "{first}");
    assert!(!first.contains("First page"));
    let (_, second) = app.get(&next(&first), None).await;
    assert_eq!(rows(&second), 100);
    assert!(
        second.contains(">#101<") && !second.contains(">#100<"),
        "continues after 100"
    );
    assert!(second.contains("<a href=\"/\">First page</a>"));
    let (_, third) = app.get(&next(&second), None).await;
    assert_eq!(rows(&third), 50);
    assert!(
        third.contains(">#250<") && !third.contains("/?cursor="),
        "the last page"
    );

    let (status, page) = app.get("/?limit=20", None).await;
    assert_eq!(status, 200);
    assert_eq!(rows(&page), 20, "a smaller page, as in the API");
    let (_, second) = app.get(&next(&page), None).await;
    assert_eq!(rows(&second), 20, "the links keep the page size");
    assert!(second.contains(">#21<") && second.contains("<a href=\"/?limit=20\">First page</a>"));
    // 250 in pages of 50: the fifth is the last, with no link to an empty sixth.
    let mut page = app.get("/?limit=50", None).await.1;
    for _ in 0..4 {
        page = app.get(&next(&page), None).await.1;
    }
    assert_eq!(rows(&page), 50);
    assert!(
        page.contains(">#250<") && !page.contains("/?cursor="),
        "{page}"
    );
    for bad in ["/?cursor=not-one-of-ours", "/?limit=501", "/?limit=many"] {
        let (status, page) = app.get(bad, None).await;
        assert_eq!(status, 400, "{bad}: {page}");
        assert!(page.contains("<html"), "{bad}: answered as a page: {page}");
    }
}

#[tokio::test]
async fn pagination_walks_every_preview_exactly_once_across_pages() {
    let app = TestApp::start().await;
    let mut expected = Vec::new();
    for repo in ["acme/api", "acme/web", "zeta/app"] {
        for number in [1, 2, 10, 11, 100, 9, 3] {
            insert_preview(&app, repo, number, "dev").await;
            expected.push((repo.to_owned(), number));
        }
    }
    expected.sort();
    let mut seen = Vec::new();
    let mut path = "/api/previews?limit=4".to_owned();
    let mut pages = 0;
    loop {
        let page = json_of(&app, &path).await;
        let previews = page["previews"].as_array().unwrap();
        assert!(previews.len() <= 4, "{page}");
        seen.extend(previews.iter().map(|p| {
            (
                p["repo"].as_str().unwrap().to_owned(),
                p["number"].as_i64().unwrap(),
            )
        }));
        pages += 1;
        assert!(pages <= 10, "the walk ends");
        match page["next"].as_str() {
            Some(next) => path = format!("/api/previews?limit=4&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(
        seen, expected,
        "every preview once, in (repo, number) order"
    );
    assert_eq!(pages, 6, "21 previews in pages of 4");

    // A filter pages the same way, by its own index.
    let first = json_of(&app, "/api/previews?repo=acme/web&limit=5").await;
    let next = first["next"].as_str().unwrap();
    let second = json_of(
        &app,
        &format!("/api/previews?repo=acme/web&limit=5&cursor={next}"),
    )
    .await;
    let numbers: Vec<i64> = [&first, &second]
        .iter()
        .flat_map(|p| p["previews"].as_array().unwrap().clone())
        .map(|p| p["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3, 9, 10, 11, 100]);
    assert_eq!(second["next"], Value::Null);

    // The response is the documented one: `previews` and `next`, nothing else.
    documented(
        &openapi(&app).await,
        "get",
        "/api/previews",
        200,
        &first.to_string(),
    );
}

#[tokio::test]
async fn a_limit_over_the_maximum_or_a_forged_cursor_is_refused_with_400() {
    let app = TestApp::start().await;
    insert_preview(&app, "acme/api", 1, "dev").await;
    for path in [
        "/api/previews?limit=501",
        "/api/previews?limit=0",
        "/api/previews?cursor=not-a-cursor!",
        "/api/previews?cursor=Zm9v", // base64url of "foo": no number
    ] {
        let (status, body) = app.get(path, None).await;
        assert_eq!(status, 400, "{path}: {body}");
        documented(&openapi(&app).await, "get", "/api/previews", 400, &body);
    }
    let page = json_of(&app, "/api/previews?limit=500").await;
    assert_eq!(page["previews"].as_array().unwrap().len(), 1);
    assert_eq!(page["next"], Value::Null);
}

#[tokio::test]
async fn one_previews_history_shows_only_its_newest_entries() {
    let app = TestApp::start().await;
    insert_preview(&app, "acme/api", 1, "dev").await;
    for i in 0..300 {
        sqlx::query(
            "INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('acme/api', 1, 'pushed', 'dev', ?1, ?2)",
        )
        .bind(format!("push {i}"))
        .bind(common::NOW + i)
        .execute(app.pool())
        .await
        .unwrap();
    }
    let detail = json_of(&app, "/api/previews/acme/api/1").await;
    let history = detail["history"].as_array().unwrap();
    assert_eq!(history.len() as i64, previewd::db::HISTORY_SHOWN);
    assert_eq!(history.first().unwrap()["reason"], "push 100");
    assert_eq!(
        history.last().unwrap()["reason"],
        "push 299",
        "oldest first, ending with the newest"
    );
}

/// `EXPLAIN QUERY PLAN` of `sql`, one detail line per step.
async fn plan(app: &TestApp, sql: &str) -> Vec<String> {
    let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(app.pool())
        .await
        .unwrap();
    rows.into_iter().map(|(_, _, _, detail)| detail).collect()
}

/// A step that reads a whole table, or sorts what it read: what an index avoids.
fn scans(plan: &[String]) -> bool {
    plan.iter().any(|step| {
        (step.starts_with("SCAN ") && !step.contains(" USING ")) || step.contains("TEMP B-TREE")
    })
}

#[tokio::test]
async fn the_dashboard_and_api_queries_read_an_index_not_the_whole_table() {
    let app = TestApp::start().await;
    // Enough rows that a scan would cost: 2,000 history rows over 200 PRs, 50 destroyed.
    let mut tx = app.pool().begin().await.unwrap();
    for i in 0..2_000i64 {
        let what = if i % 40 == 0 { "destroyed" } else { "pushed" };
        sqlx::query("INSERT INTO history (repo, number, what, actor, at) VALUES ('acme/api', ?1, ?2, 'dev', ?3)")
            .bind(i % 200 + 1)
            .bind(what)
            .bind(common::NOW + i)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    for n in 1..=200 {
        insert_preview(&app, "acme/api", n, &format!("dev-{}", n % 7)).await;
    }

    let destroyed = plan(&app, previewd::db::RECENTLY_DESTROYED).await;
    assert!(!scans(&destroyed), "{destroyed:?}");
    assert!(
        destroyed.iter().any(|s| s.contains("history_destroyed")),
        "{destroyed:?}"
    );
    let history = plan(&app, previewd::db::HISTORY).await;
    assert!(!scans(&history), "{history:?}");

    use previewd::db::PreviewFilter;
    for filter in [
        PreviewFilter::default(),
        PreviewFilter {
            after: Some(("acme/api", 50)),
            ..PreviewFilter::default()
        },
        PreviewFilter {
            repo: Some("acme/api"),
            after: Some(("acme/api", 50)),
            ..PreviewFilter::default()
        },
        PreviewFilter {
            author: Some("dev-3"),
            after: Some(("acme/api", 50)),
            ..PreviewFilter::default()
        },
        PreviewFilter {
            cluster: Some("in-cluster"),
            ..PreviewFilter::default()
        },
    ] {
        let query = previewd::db::previews_query(&filter, 100);
        let steps = plan(&app, query.sql()).await;
        assert!(!scans(&steps), "{filter:?}: {steps:?}");
        // A filter or a cursor seeks into its index; only the first unfiltered page
        // reads one from its start (and stops after `limit` rows).
        let first_page = filter.after.is_none() && filter.cluster.is_none();
        assert!(
            first_page || steps.iter().all(|s| s.starts_with("SEARCH ")),
            "{filter:?}: {steps:?}"
        );
    }
}
