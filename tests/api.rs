//! The read API and the dashboard through the real router: every answer validated against
//! the served OpenAPI description (a JSON-schema validator), filters, a destroyed
//! preview's history, the token, and HTML escaping; and share links (issue #39): the
//! `/preview share` and `unshare` commands, the API's share routes, what the PR, the
//! history and the dashboard say of them (never the link), and the destroy that ends them.

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
    let (desired, actor): (String, String) = app
        .row(
            "SELECT p.desired, h.actor FROM previews p JOIN history h ON h.repo = p.repo AND h.number = p.number
             WHERE p.number = 2 AND h.what = 'destroy_requested'",
        )
        .await;
    assert_eq!((desired.as_str(), actor.as_str()), ("absent", "api"));
}

/// Inserts a preview row directly (the API reads rows; how they came is not its concern).
async fn insert_preview(app: &TestApp, repo: &str, number: i64, author: &str) {
    let now = common::NOW;
    app.execute(&format!(
        "INSERT INTO previews (repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
             fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
         VALUES ('{repo}', {number}, 1, 't', '{author}', 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', 'b', 'main',
             0, 0, 'deployed', 'ready', 'in-cluster', {now}, {now}, {now}, {now} + 86400)",
    ))
    .await;
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
        app.execute(&format!(
            "INSERT INTO history (repo, number, what, actor, reason, at) VALUES ('acme/api', 1, 'pushed', 'dev', 'push {i}', {})",
            common::NOW + i
        ))
        .await;
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
    if common::pg::on_postgres() {
        return; // SQLite's query plans (EXPLAIN QUERY PLAN) and statements.
    }
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

// ---- share links (issue #39): the commands, the API, and what ends them ----

const TOKEN: &str = "Bearer s3cret-token";
const SHARE: &str = "/api/previews/{owner}/{repo}/{number}/share";
const UNSHARE: &str = "/api/previews/{owner}/{repo}/{number}/unshare";
const SHARES: &str = "/api/previews/{owner}/{repo}/{number}/shares";

/// A previewd with `api.token` and the fixture PR's preview (Codertocat/Hello-World#2).
async fn shared_world() -> TestApp {
    let app = TestApp::start_with("[api]\ntoken = \"s3cret-token\"\n").await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler(&app).pass().await.unwrap();
    app
}

/// A `/preview` comment on the fixture PR by its repository's owner: without GitHub
/// credentials, the OWNER association is the one write access previewd can confirm.
fn owner_says(line: &str, comment_id: u64) -> Delivery {
    Delivery::fixture("issue_comment.created.pull_request")
        .edit(|body| {
            body["repository"]["full_name"] = json!("Codertocat/Hello-World");
            body["repository"]["name"] = json!("Hello-World");
            body["repository"]["owner"]["login"] = json!("Codertocat");
            body["issue"]["number"] = json!(2);
            body["comment"]["body"] = json!(line);
            body["comment"]["id"] = json!(comment_id);
            body["comment"]["user"]["login"] = json!("Codertocat");
            body["comment"]["author_association"] = json!("OWNER");
        })
        .guid(&format!("comment-{comment_id}"))
}

/// Sends `line` as the owner's comment and runs the command (the feedback worker, without
/// GitHub); its status and reply as recorded.
async fn run(app: &TestApp, line: &str, comment_id: u64) -> (String, String) {
    app.send(&owner_says(line, comment_id)).await;
    let feedback = previewd::feedback::Feedback::new(
        app.state().clone(),
        app.app.config.clone(),
        Arc::new(app.clock.clone()),
        None,
    );
    feedback.obey().await.unwrap();
    app.row(&format!(
        "SELECT status, reply FROM commands WHERE comment_id = {comment_id}"
    ))
    .await
}

/// The forward-auth check as ingress-nginx asks it for `url`: the status.
/// A share link opened as a browser opens it, then the preview's check of where previewd
/// sent it: the check's status, or previewd's refusal of the link.
async fn check(app: &TestApp, link: &str) -> u16 {
    let (status, location) = app.open_share_link(link).await;
    let Some(url) = location else {
        return status.as_u16();
    };
    let request = axum::http::Request::get("/auth/check")
        .header("host", "127.0.0.1:8080")
        .header("x-original-url", url)
        .body(axum::body::Body::empty())
        .unwrap();
    app.answer(request).await.0.as_u16()
}

async fn host(app: &TestApp) -> String {
    // Read and parsed here: the stores spell a JSON field differently.
    let names: String = app
        .scalar("SELECT names FROM previews WHERE number = 2")
        .await;
    let names: Value = serde_json::from_str(&names).unwrap();
    names["host"].as_str().unwrap().to_owned()
}

/// `POST path` with the token: status and body.
async fn post(app: &TestApp, path: &str) -> (u16, String) {
    let (status, body) = app.call("POST", path, Some(TOKEN)).await;
    (status.as_u16(), body)
}

/// Every text previewd keeps or shows about the PR: what it must never hold a link in.
async fn everything_said(app: &TestApp) -> String {
    let replies: Vec<String> = app
        .scalars("SELECT coalesce(reply, '') FROM commands")
        .await;
    let history: Vec<String> = app
        .scalars("SELECT what || ' ' || actor || ' ' || reason FROM history")
        .await;
    let (_, page) = app
        .get("/previews/codertocat/hello-world/2", Some(TOKEN))
        .await;
    let (_, detail) = app
        .get("/api/previews/codertocat/hello-world/2", Some(TOKEN))
        .await;
    format!(
        "{}\n{}\n{page}\n{detail}",
        replies.join("\n"),
        history.join("\n")
    )
}

#[tokio::test]
async fn a_writers_share_command_makes_a_link_the_pr_never_sees_and_unshare_revokes_it() {
    let app = shared_world().await;
    let openapi = json_of_with_token(&app, "/api/openapi.json").await;
    let now = common::NOW;

    let (status, reply) = run(&app, "/preview share 2d", 701).await;
    assert_eq!(status, "done", "{reply}");
    assert!(
        reply.starts_with("@Codertocat: made a share link to this preview, valid until ")
            && reply.contains("(in 2d)")
            && reply.contains(
                "`GET http://127.0.0.1:8080/api/previews/codertocat/hello-world/2/shares`"
            )
            && reply.contains("(http://127.0.0.1:8080/previews/codertocat/hello-world/2)"),
        "{reply}"
    );
    let (by, created, expires): (String, i64, i64) = app
        .row("SELECT created_by, created_at, expires_at FROM shares")
        .await;
    assert_eq!(
        (by.as_str(), created, expires),
        ("Codertocat", now, now + 2 * 86_400)
    );

    // Where the writer gets the link: the token's API, sealed again from the stored id.
    let path = "/api/previews/codertocat/hello-world/2/shares";
    let (answered, body) = app.get(path, Some(TOKEN)).await;
    assert_eq!(answered, 200, "{body}");
    documented(&openapi, "get", SHARES, 200, &body);
    let listed: Value = serde_json::from_str(&body).unwrap();
    let link = listed["shares"][0]["link"].as_str().unwrap().to_owned();
    assert!(
        link.starts_with(&format!(
            "http://127.0.0.1:8080/auth/share?rd=http%3A%2F%2F{}%2F#",
            host(&app).await.replace('-', "%2D").replace('.', "%2E")
        )),
        "{link}"
    );
    assert_eq!(listed["shares"][0]["expires_at"], now + 2 * 86_400);
    assert_eq!(check(&app, &link).await, 200, "the link opens the preview");
    let pass = link.split('#').nth(1).unwrap();
    let said = everything_said(&app).await;
    assert!(
        !said.contains(pass) && !said.contains("/auth/share"),
        "a link in a reply, the history or a page: {said}"
    );
    let stored: i64 = app
        .scalar(&format!(
            "SELECT count(*) FROM shares WHERE id LIKE '%{pass}%' OR created_by LIKE '%{pass}%'"
        ))
        .await;
    assert_eq!(stored, 0, "only the id is stored");

    // The dashboard and the API's detail count the links and say until when.
    let detail = json_of_with_token(&app, "/api/previews/codertocat/hello-world/2").await;
    assert_eq!(
        detail["shares"],
        json!([{"created_by": "Codertocat", "created_at": now, "expires_at": now + 2 * 86_400}])
    );
    let (_, page) = app
        .get("/previews/codertocat/hello-world/2", Some(TOKEN))
        .await;
    assert!(
        page.contains("1 valid: until 2026-12-01 00:00 UTC (by Codertocat)"),
        "{page}"
    );

    let (status, reply) = run(&app, "/preview unshare", 702).await;
    assert_eq!(status, "done");
    assert_eq!(
        reply,
        "@Codertocat: revoked 1 share link. It no longer opens the preview, and a browser that entered with it is asked to sign in."
    );
    assert_eq!(check(&app, &link).await, 401, "revoked: sign in instead");
    let (_, body) = app.get(path, Some(TOKEN)).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["shares"],
        json!([])
    );
    let (_, page) = app
        .get("/previews/codertocat/hello-world/2", Some(TOKEN))
        .await;
    assert!(page.contains("none (a writer makes one"), "{page}");
    let (_, reply) = run(&app, "/preview unshare", 703).await;
    assert_eq!(
        reply,
        "@Codertocat: this preview had no valid share link; nothing was revoked."
    );
    // Each command's history row: its line and its reply (no link in either).
    let finished: Vec<String> = app
        .scalars(
            "SELECT reason FROM history WHERE what = 'command' AND reason LIKE '%: @%' ORDER BY id",
        )
        .await;
    assert_eq!(finished.len(), 3, "{finished:?}");
    assert!(
        finished[0].starts_with("/preview share 2d: @Codertocat: made a share link"),
        "{finished:?}"
    );
}

#[tokio::test]
async fn a_share_lasts_at_most_a_week_and_never_past_the_preview() {
    let app = shared_world().await;
    let now = common::NOW;
    let (_, reply) = run(&app, "/preview share 30d", 711).await;
    // The preview expires 72h after it opened (`defaults.ttl`): the link with it.
    assert!(
        reply.contains("(in 3d), when the preview expires: a link never outlives it."),
        "{reply}"
    );
    let expires: i64 = app.scalar("SELECT max(expires_at) FROM shares").await;
    assert_eq!(expires, now + 72 * 3600);
    app.execute(&format!(
        "UPDATE previews SET expires_at = {}",
        now + 30 * 86_400
    ))
    .await;
    let (_, reply) = run(&app, "/preview share 30d", 712).await;
    assert!(
        reply.contains("(in 7d), the longest a share link lasts."),
        "{reply}"
    );
    let (_, reply) = run(&app, "/preview share", 713).await;
    assert!(reply.contains("(in 1d)."), "24h by default: {reply}");
    let (status, reply) = run(&app, "/preview share soon", 714).await;
    assert_eq!(status, "failed");
    assert!(reply.contains("`soon` is not a duration"), "{reply}");
    assert_eq!(app.count("shares").await, 3);
}

#[tokio::test]
async fn share_and_unshare_through_the_api_are_guarded_like_destroy_and_documented() {
    let open = TestApp::start().await;
    open.send(&Delivery::fixture("pull_request.opened")).await;
    let openapi = openapi(&open).await;
    for (path, template) in [
        ("/api/previews/codertocat/hello-world/2/share", SHARE),
        ("/api/previews/codertocat/hello-world/2/unshare", UNSHARE),
    ] {
        let (status, body) = open.call("POST", path, None).await;
        assert_eq!(status, 403, "no api.token: no share links through the API");
        documented(&openapi, "post", template, 403, &body);
    }
    let (status, body) = open
        .get("/api/previews/codertocat/hello-world/2/shares", None)
        .await;
    assert_eq!(status, 403, "{body}");
    documented(&openapi, "get", SHARES, 403, &body);

    let app = shared_world().await;
    let now = common::NOW;
    let share = "/api/previews/codertocat/hello-world/2/share";
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic dXNlcjpzM2NyZXQtdG9rZW4="),
    ] {
        let (status, body) = app.call("POST", share, auth).await;
        assert_eq!(status, 401, "{auth:?}: {body}");
        documented(&openapi, "post", SHARE, 401, &body);
        let (status, _) = app.call("POST", &format!("{share}s"), auth).await;
        assert_eq!(status, 405, "the links are read with GET");
        let (status, _) = app.get(&format!("{share}s"), auth).await;
        assert_eq!(
            status, 401,
            "{auth:?}: a browser's Basic credentials read no link"
        );
    }
    assert_eq!(app.count("shares").await, 0);

    let request = axum::http::Request::post(format!("{share}?for=2d"))
        .header("authorization", TOKEN)
        .body(axum::body::Body::empty())
        .unwrap();
    let (status, headers, body) = app.answer(request).await;
    let body = String::from_utf8(body).unwrap();
    assert_eq!(status, 201, "{body}");
    assert_eq!(headers["cache-control"], "no-store");
    documented(&openapi, "post", SHARE, 201, &body);
    let made: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(made["expires_at"], now + 2 * 86_400);
    let link = made["link"].as_str().unwrap().to_owned();
    assert_eq!(check(&app, &link).await, 200);
    let (status, body) = post(&app, share).await;
    assert_eq!(status, 201);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["expires_at"],
        now + 86_400,
        "24h by default"
    );
    let (_, body) = post(&app, &format!("{share}?for=30d")).await;
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["expires_at"],
        now + 72 * 3600,
        "never past the preview's expiry"
    );
    for bad in ["forever", "0h", "", "2%20days"] {
        let (status, body) = post(&app, &format!("{share}?for={bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        documented(&openapi, "post", SHARE, 400, &body);
    }
    for (path, template, method) in [
        (
            "/api/previews/codertocat/hello-world/99/share",
            SHARE,
            "post",
        ),
        (
            "/api/previews/codertocat/hello-world/99/unshare",
            UNSHARE,
            "post",
        ),
        (
            "/api/previews/codertocat/hello-world/99/shares",
            SHARES,
            "get",
        ),
    ] {
        let (status, body) = app.call(&method.to_uppercase(), path, Some(TOKEN)).await;
        assert_eq!(status, 404, "{path}: {body}");
        documented(&openapi, method, template, 404, &body);
    }
    let (status, body) = post(&app, "/api/previews/codertocat/hello-world/0x2/share").await;
    assert_eq!(status, 400);
    documented(&openapi, "post", SHARE, 400, &body);
    let shared: Vec<(String, String)> = app
        .rows("SELECT actor, reason FROM history WHERE what = 'shared' ORDER BY id")
        .await;
    assert_eq!(shared.len(), 3);
    assert_eq!(
        shared[0],
        (
            "api".into(),
            "a share link, valid until 2026-12-01 00:00 UTC".into()
        )
    );

    // The most a preview may have, then a clear refusal, through the API and the command.
    for _ in 3..previewd::db::login::MAX_SHARES {
        assert_eq!(post(&app, share).await.0, 201);
    }
    let (status, body) = post(&app, share).await;
    assert_eq!(status, 409, "{body}");
    documented(&openapi, "post", SHARE, 409, &body);
    assert!(body.contains("already has 20 valid share links"), "{body}");
    let (status, reply) = run(&app, "/preview share", 721).await;
    assert_eq!(status, "failed");
    assert_eq!(
        reply,
        "@Codertocat: this preview already has 20 valid share links, the most it may have, so none was made. `/preview unshare` revokes them all."
    );

    let (status, body) = post(&app, "/api/previews/codertocat/hello-world/2/unshare").await;
    assert_eq!(status, 200, "{body}");
    documented(&openapi, "post", UNSHARE, 200, &body);
    assert_eq!(body, r#"{"revoked":20}"#);
    assert_eq!(check(&app, &link).await, 401);
    let unshared: String = app
        .scalar("SELECT reason FROM history WHERE what = 'unshared' AND actor = 'api'")
        .await;
    assert_eq!(unshared, "20 share link(s) revoked");
    let (_, body) = post(&app, "/api/previews/codertocat/hello-world/2/unshare").await;
    assert_eq!(body, r#"{"revoked":0}"#);
    assert!(!everything_said(&app).await.contains("/auth/share"));
}

/// Destroy revokes: the link stops at once (the preview is ending), stays revoked when a
/// writer's `/preview deploy` brings the same row back, and its row goes with the preview.
#[tokio::test]
async fn a_destroy_ends_every_share_link_for_good() {
    let app = shared_world().await;
    let share = "/api/previews/codertocat/hello-world/2/share";
    let (_, body) = post(&app, share).await;
    let link = serde_json::from_str::<Value>(&body).unwrap()["link"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(check(&app, &link).await, 200);

    let (status, reply) = run(&app, "/preview destroy", 731).await;
    assert_eq!(
        (status.as_str(), reply.as_str()),
        ("done", "@Codertocat: tearing the preview down now.")
    );
    assert_eq!(
        check(&app, &link).await,
        403,
        "an ending preview admits no one"
    );
    let (status, body) = post(&app, share).await;
    assert_eq!(status, 409, "an ending preview is not shared: {body}");
    let (_, reply) = run(&app, "/preview share", 732).await;
    assert!(
        reply.contains("previewd has no preview for this PR"),
        "{reply}"
    );

    let (status, reply) = run(&app, "/preview deploy", 733).await;
    assert_eq!(
        (status.as_str(), reply.as_str()),
        ("done", "@Codertocat: deploying.")
    );
    let desired: String = app
        .scalar("SELECT desired FROM previews WHERE number = 2")
        .await;
    assert_eq!(desired, "deployed", "the same row, back");
    assert_eq!(
        check(&app, &link).await,
        401,
        "a link made before the destroy does not open the preview that came back"
    );

    // The operator's destroy, then the teardown: the row and its shares are gone.
    let (_, body) = post(&app, share).await;
    let link = serde_json::from_str::<Value>(&body).unwrap()["link"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(check(&app, &link).await, 200);
    let (status, _) = post(&app, "/api/previews/codertocat/hello-world/2/destroy").await;
    assert_eq!(status, 202);
    assert_eq!(check(&app, &link).await, 403);
    let reconciler = reconciler(&app);
    for _ in 0..3 {
        reconciler.pass().await.unwrap();
    }
    assert_eq!(app.count("previews").await, 0, "torn down");
    assert_eq!(app.count("shares").await, 0, "gone with the preview");
    assert_eq!(check(&app, &link).await, 403, "no preview's host");
}

async fn json_of_with_token(app: &TestApp, path: &str) -> Value {
    let (status, body) = app.get(path, Some(TOKEN)).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The sticky comment (as `/preview status` answers it) says how to get in, by the
/// repository's access rule.
#[tokio::test]
async fn the_status_says_who_gets_in_and_how_to_ask_for_a_share_link() {
    let app = shared_world().await;
    let (_, status) = run(&app, "/preview status", 741).await;
    assert!(
        status.contains("| Access | Sign in with GitHub (people who can read codertocat/hello-world), or ask a writer for a share link: `/preview share 24h` |"),
        "{status}"
    );
    for (rule, said) in [
        (
            "org",
            "| Access | Sign in with GitHub (members of the codertocat organisation), or ask a writer for a share link: `/preview share 24h` |",
        ),
        ("public", "| Access | Open to anyone, no sign-in |"),
    ] {
        let app = TestApp::start_with(&format!("[defaults]\naccess = {rule:?}\n")).await;
        app.send(&Delivery::fixture("pull_request.opened")).await;
        reconciler(&app).pass().await.unwrap();
        let (_, status) = run(&app, "/preview status", 742).await;
        assert!(status.contains(said), "{rule}: {status}");
    }
}
