//! A stand-in for GitHub's REST API on a local port: stateful (comments, reactions,
//! deployments, statuses, pull requests, permissions), answering with bodies shaped like
//! GitHub's, and able to fail on cue (a 502 after the write happened, a secondary rate
//! limit with `retry-after`, a 500 on a listing). `lookups` serves what previewd reads of a
//! PR's files and a commit's CI reports; `oauth` the OAuth web flow (GitHub's web host is
//! this same server), the signed-in person's `/user` and organization membership.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde_json::{Value, json};

pub mod lookups;
pub mod oauth;

pub const BOT: &str = "previewd-test[bot]";

/// A failure to answer with, `times` times, on requests whose method and path match.
#[derive(Clone, Debug)]
pub struct Fault {
    pub method: Method,
    pub path_contains: String,
    /// Only requests whose query contains this (`&page=3`: that page of a listing).
    pub query_contains: Option<String>,
    pub status: u16,
    pub times: usize,
    /// Do the work first, then fail (what a 502 from a proxy after GitHub wrote looks like).
    pub after_write: bool,
    pub headers: Vec<(&'static str, String)>,
    pub message: String,
}

impl Fault {
    /// `status` with `message` on every `method` request whose path contains `path_contains`,
    /// for the whole test.
    pub fn on(method: Method, path_contains: &str, status: u16, message: &str) -> Self {
        Self {
            method,
            path_contains: path_contains.into(),
            query_contains: None,
            status,
            times: 10_000,
            after_write: false,
            headers: vec![],
            message: message.into(),
        }
    }

    pub fn get(path_contains: &str, status: u16, message: &str) -> Self {
        Self::on(Method::GET, path_contains, status, message)
    }

    pub fn post(path_contains: &str, status: u16, message: &str) -> Self {
        Self::on(Method::POST, path_contains, status, message)
    }

    /// Only the first `times` such requests.
    pub fn times(mut self, times: usize) -> Self {
        self.times = times;
        self
    }

    /// Only on requests whose query contains `query` (`&page=3`: one page of a listing).
    pub fn with_query(mut self, query: &str) -> Self {
        self.query_contains = Some(query.into());
        self
    }

    /// Do the work first, then fail.
    pub fn after_write(mut self) -> Self {
        self.after_write = true;
        self
    }

    /// With a `retry-after` header of `seconds`.
    pub fn retry_after(mut self, seconds: &str) -> Self {
        self.headers.push(("retry-after", seconds.into()));
        self
    }
}

#[derive(Default)]
pub struct Hub {
    pub next_id: u64,
    pub comments: Vec<Value>,
    pub reactions: Vec<(u64, String)>,
    pub deployments: Vec<Value>,
    pub statuses: Vec<(u64, Value)>,
    pub pulls: Vec<Value>,
    pub permissions: HashMap<String, String>,
    /// The files of each PR, by number, as "List pull requests files" lists them.
    pub files: HashMap<u64, Vec<Value>>,
    /// Check runs on each commit, by SHA, oldest first.
    pub check_runs: HashMap<String, Vec<Value>>,
    /// Commit statuses on each commit, by SHA, oldest first (`statuses` are deployments').
    pub commit_statuses: HashMap<String, Vec<Value>>,
    /// Workflow runs of the repository, oldest first (each names its `head_sha`).
    pub workflow_runs: Vec<Value>,
    pub faults: Vec<Fault>,
    /// Every request, as `METHOD path`.
    pub log: Vec<String>,
    /// The `Authorization` header of each request, in the same order.
    pub auth: Vec<String>,
    /// The requests answered 304 Not Modified (GitHub does not count them against the rate
    /// limit), as `METHOD path`.
    pub not_modified: Vec<String>,
    /// OAuth apps, the browser's signed-in person, codes, user tokens, organization members.
    pub oauth: oauth::OAuth,
}

pub type Shared = Arc<Mutex<Hub>>;

pub struct FakeGitHub {
    pub url: String,
    pub hub: Shared,
}

impl FakeGitHub {
    pub async fn start() -> Self {
        let hub: Shared = Arc::new(Mutex::new(Hub {
            next_id: 1000,
            ..Hub::default()
        }));
        let router = Router::new()
            // What github.com answers, cut to a field (`previewd config check --reach`).
            .route(
                "/meta",
                get(|| async { axum::Json(json!({"verifiable_password_authentication": false})) }),
            )
            // previewd's own token reads as the bot; a person's OAuth token as that person.
            .route("/user", get(oauth::user))
            .route("/login/oauth/authorize", get(oauth::authorize))
            .route("/login/oauth/access_token", post(oauth::access_token))
            .route("/orgs/{org}/members/{username}", get(oauth::member))
            .route(
                "/app",
                get(|| async {
                    axum::Json(
                        json!({"id": 4242, "slug": "previewd-test", "name": "previewd test"}),
                    )
                }),
            )
            .route(
                "/app/installations/{id}/access_tokens",
                post(|Path(id): Path<u64>| async move {
                    let token = json!({"token": format!("ghs_installation{id}"),
                                       "expires_at": "2099-01-01T00:00:00Z",
                                       "permissions": {"issues": "write"}});
                    (StatusCode::CREATED, axum::Json(token))
                }),
            )
            .route(
                "/repos/{owner}/{repo}/issues/{number}/comments",
                get(list_comments).post(create_comment),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}",
                patch(update_comment),
            )
            .route(
                "/repos/{owner}/{repo}/issues/comments/{id}/reactions",
                post(react),
            )
            .route(
                "/repos/{owner}/{repo}/collaborators/{user}/permission",
                get(permission),
            )
            .route(
                "/repos/{owner}/{repo}/deployments",
                get(list_deployments).post(create_deployment),
            )
            .route(
                "/repos/{owner}/{repo}/deployments/{id}/statuses",
                post(create_status),
            )
            .route("/repos/{owner}/{repo}/pulls", get(list_pulls))
            .route("/repos/{owner}/{repo}/pulls/{number}", get(one_pull))
            .route(
                "/repos/{owner}/{repo}/pulls/{number}/files",
                get(lookups::list_files),
            )
            .route(
                "/repos/{owner}/{repo}/commits/{sha}/check-runs",
                get(lookups::list_check_runs),
            )
            .route(
                "/repos/{owner}/{repo}/commits/{sha}/status",
                get(lookups::combined_status),
            )
            .route(
                "/repos/{owner}/{repo}/actions/runs",
                get(lookups::list_workflow_runs),
            )
            .layer(middleware::from_fn_with_state(hub.clone(), faults))
            .with_state(hub.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { url, hub }
    }

    pub fn hub(&self) -> std::sync::MutexGuard<'_, Hub> {
        self.hub.lock().unwrap()
    }

    pub fn fail(&self, fault: Fault) {
        self.hub().faults.push(fault);
    }

    /// GitHub recovers: no fault any more.
    pub fn clear_faults(&self) {
        self.hub().faults.clear();
    }

    /// GitHub says `user` has `permission` (`read`, `write`, `admin`) on the repository.
    pub fn grant(&self, user: &str, permission: &str) {
        self.hub()
            .permissions
            .insert(user.into(), permission.into());
    }

    /// `user` has no access to the repository any more (`none`), from the next look-up on.
    pub fn revoke(&self, user: &str) {
        self.grant(user, "none");
    }

    /// The bodies of every comment made, oldest first.
    pub fn comment_bodies(&self) -> Vec<String> {
        self.hub()
            .comments
            .iter()
            .map(|c| c["body"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The bodies of previewd's replies to commands, oldest first.
    pub fn replies(&self) -> Vec<String> {
        let mut bodies = self.comment_bodies();
        bodies.retain(|body| body.contains("previewd:reply"));
        bodies
    }

    /// The body of previewd's reply to comment `id`.
    pub fn reply_to(&self, id: u64) -> String {
        let marker = format!("previewd:reply {id}");
        self.comment_bodies()
            .into_iter()
            .find(|body| body.contains(&marker))
            .unwrap_or_else(|| panic!("no reply to {id}"))
    }

    /// Whether comment `id` has the reaction `content` (`eyes`, `rocket`, `confused`).
    pub fn reacted(&self, id: u64, content: &str) -> bool {
        self.hub().reactions.contains(&(id, content.into()))
    }

    /// How many POSTs went to a path containing `path_contains`.
    pub fn posts(&self, path_contains: &str) -> usize {
        self.count("POST", path_contains)
    }

    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.hub()
            .log
            .iter()
            .filter(|l| l.starts_with(method) && l.contains(path_contains))
            .count()
    }
}

async fn faults(State(hub): State<Shared>, request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let query = request.uri().query().unwrap_or_default().to_owned();
    let fault = {
        let mut hub = hub.lock().unwrap();
        hub.log.push(format!("{method} {}", request.uri()));
        let auth = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        hub.auth.push(auth);
        let found = hub.faults.iter_mut().find(|f| {
            f.method == method
                && path.contains(&f.path_contains)
                && f.query_contains.as_ref().is_none_or(|q| query.contains(q))
                && f.times > 0
        });
        found.map(|f| {
            f.times -= 1;
            f.clone()
        })
    };
    let Some(fault) = fault else {
        return next.run(request).await;
    };
    if fault.after_write {
        let _ = next.run(request).await;
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &fault.headers {
        headers.insert(*name, value.parse().unwrap());
    }
    let body =
        json!({"message": fault.message, "documentation_url": "https://docs.github.com/rest"});
    (
        StatusCode::from_u16(fault.status).unwrap(),
        headers,
        axum::Json(body),
    )
        .into_response()
}

fn next_id(hub: &mut Hub) -> u64 {
    hub.next_id += 1;
    hub.next_id
}

type Params = Query<HashMap<String, String>>;

/// Page `page` of `items`, `per_page` a page (GitHub's default 30, its most 100; page 0 is
/// page 1, as on GitHub).
fn page(items: Vec<Value>, params: &HashMap<String, String>) -> Vec<Value> {
    let per_page: usize = params
        .get("per_page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    let page: usize = params
        .get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    items
        .into_iter()
        .skip((page - 1) * per_page)
        .take(per_page)
        .collect()
}

async fn list_comments(
    State(hub): State<Shared>,
    Path((_, _, number)): Path<(String, String, u64)>,
    Query(params): Params,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let mine = hub
        .comments
        .iter()
        .filter(|c| c["issue_number"] == number)
        .cloned()
        .collect();
    axum::Json(Value::Array(page(mine, &params)))
}

async fn create_comment(
    State(hub): State<Shared>,
    Path((owner, repo, number)): Path<(String, String, u64)>,
    axum::Json(body): axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    let mut hub = hub.lock().unwrap();
    let id = next_id(&mut hub);
    let comment = json!({
        "id": id,
        "node_id": format!("IC_{id}"),
        "url": format!("https://api.github.com/repos/{owner}/{repo}/issues/comments/{id}"),
        "html_url": format!("https://github.com/{owner}/{repo}/pull/{number}#issuecomment-{id}"),
        "issue_number": number,
        "body": body["body"],
        "user": {"login": BOT, "id": 41898282, "type": "Bot"},
        "author_association": "NONE",
        "created_at": "2026-11-29T12:00:00Z",
        "updated_at": "2026-11-29T12:00:00Z",
    });
    hub.comments.push(comment.clone());
    (StatusCode::CREATED, axum::Json(comment))
}

async fn update_comment(
    State(hub): State<Shared>,
    Path((_, _, id)): Path<(String, String, u64)>,
    axum::Json(body): axum::Json<Value>,
) -> Response {
    let mut hub = hub.lock().unwrap();
    match hub.comments.iter_mut().find(|c| c["id"] == id) {
        Some(comment) => {
            comment["body"] = body["body"].clone();
            comment["updated_at"] = json!("2026-11-29T12:30:00Z");
            axum::Json(comment.clone()).into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "Not Found"})),
        )
            .into_response(),
    }
}

async fn react(
    State(hub): State<Shared>,
    Path((_, _, id)): Path<(String, String, u64)>,
    axum::Json(body): axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    let mut hub = hub.lock().unwrap();
    let content = body["content"].as_str().unwrap_or_default().to_owned();
    let exists = hub.reactions.contains(&(id, content.clone()));
    if !exists {
        hub.reactions.push((id, content.clone()));
    }
    let reaction = json!({"id": id * 10, "content": content, "user": {"login": BOT}});
    let status = if exists {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    (status, axum::Json(reaction))
}

async fn permission(
    State(hub): State<Shared>,
    Path((_, _, user)): Path<(String, String, String)>,
) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let permission = hub
        .permissions
        .get(&user)
        .cloned()
        .unwrap_or_else(|| "none".into());
    let push = permission == "write" || permission == "admin";
    axum::Json(json!({
        "permission": permission,
        "role_name": permission,
        "user": {"login": user, "permissions": {"admin": permission == "admin", "maintain": false, "push": push, "triage": push, "pull": permission != "none"}},
    }))
}

async fn list_deployments(State(hub): State<Shared>, Query(params): Params) -> axum::Json<Value> {
    let hub = hub.lock().unwrap();
    let found: Vec<Value> = hub
        .deployments
        .iter()
        .rev()
        .filter(|d| params.get("sha").is_none_or(|sha| d["sha"] == sha.as_str()))
        .filter(|d| {
            params
                .get("environment")
                .is_none_or(|env| d["environment"] == env.as_str())
        })
        .cloned()
        .collect();
    axum::Json(Value::Array(found))
}

async fn create_deployment(
    State(hub): State<Shared>,
    axum::Json(body): axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    let mut hub = hub.lock().unwrap();
    let id = next_id(&mut hub);
    let mut deployment = body.clone();
    deployment["id"] = json!(id);
    deployment["sha"] = body["ref"].clone();
    deployment["creator"] = json!({"login": BOT});
    hub.deployments.push(deployment.clone());
    (StatusCode::CREATED, axum::Json(deployment))
}

async fn create_status(
    State(hub): State<Shared>,
    Path((_, _, id)): Path<(String, String, u64)>,
    axum::Json(body): axum::Json<Value>,
) -> (StatusCode, axum::Json<Value>) {
    let mut hub = hub.lock().unwrap();
    hub.statuses.push((id, body.clone()));
    let mut status = body;
    status["id"] = json!(id * 100 + hub.statuses.len() as u64);
    (StatusCode::CREATED, axum::Json(status))
}

/// Like GitHub, the listing carries an `ETag` and answers 304 to an `If-None-Match` that
/// still matches. GitHub's tags depend on the token that asked as well as on the content
/// (github/docs#34689), so this one hashes both.
async fn list_pulls(
    State(hub): State<Shared>,
    Query(params): Params,
    headers: HeaderMap,
) -> Response {
    use sha2::Digest;
    let mut hub = hub.lock().unwrap();
    let open = hub
        .pulls
        .iter()
        .filter(|p| p["state"] == "open")
        .cloned()
        .collect();
    let body = Value::Array(page(open, &params));
    let auth = headers
        .get("authorization")
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let mut hash = sha2::Sha256::new();
    hash.update(auth);
    hash.update(body.to_string().as_bytes());
    let etag = format!("W/\"{}\"", hex::encode(hash.finalize()));
    if headers
        .get("if-none-match")
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        let page = params.get("page").cloned().unwrap_or_default();
        hub.not_modified.push(format!("GET pulls page={page}"));
        return (StatusCode::NOT_MODIFIED, [("etag", etag)]).into_response();
    }
    ([("etag", etag)], axum::Json(body)).into_response()
}

async fn one_pull(
    State(hub): State<Shared>,
    Path((_, _, number)): Path<(String, String, u64)>,
) -> Response {
    let hub = hub.lock().unwrap();
    match hub.pulls.iter().find(|p| p["number"] == number) {
        Some(pull) => axum::Json(pull.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"message": "Not Found"})),
        )
            .into_response(),
    }
}
