//! The read API (`/api/previews`, one preview with its ledger and history, the OpenAPI
//! description) and the operator's destroy, behind `api.token` when one is set. The JSON
//! shapes are built here, once, for the API, the dashboard and `previewd list --json`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::SqlitePool;

use crate::app::App;
use crate::comment::Shown;
use crate::config::Config;
use crate::db::{self, HistoryEntry, LedgerRow, PreviewSummary};
use crate::naming::Names;
use crate::preview::PreviewKey;

/// The state a person sees (`ready`, `queued`, `tearing_down`, ...).
pub fn state_name(shown: Shown) -> &'static str {
    match shown {
        Shown::Queued => "queued",
        Shown::AwaitingApproval => "awaiting_approval",
        Shown::Draft => "draft",
        Shown::Deploying => "deploying",
        Shown::Ready => "ready",
        Shown::Failed => "failed",
        Shown::TearingDown => "tearing_down",
        Shown::Destroyed => "destroyed",
    }
}

/// github.com for api.github.com, the server for a GHES `/api/v3`, else the URL itself.
pub fn github_web(config: &Config) -> String {
    let api = config.github.api_url.trim_end_matches('/');
    if api == "https://api.github.com" {
        return "https://github.com".into();
    }
    api.strip_suffix("/api/v3").unwrap_or(api).to_owned()
}

/// One preview as the API and the dashboard show it.
pub fn preview_json(p: &PreviewSummary, config: &Config, now: i64) -> Value {
    let host = p
        .repo
        .parse()
        .ok()
        .and_then(|repo| {
            let number = u32::try_from(p.number).ok()?;
            let key = PreviewKey::new(repo, number);
            let domain = &config
                .policy_for(&key.repo)
                .unwrap_or(&config.defaults)
                .domain;
            Some(Names::recorded(p.names.as_deref(), &key, domain).ok()?.host)
        })
        .unwrap_or_default();
    let shown = Shown::of(&p.desired, &p.observed);
    json!({
        "repo": p.repo,
        "number": p.number,
        "pr_url": format!("{}/{}/pull/{}", github_web(config), p.repo, p.number),
        "title": p.title,
        "author": p.author,
        "state": state_name(shown),
        "desired": p.desired,
        "observed": p.observed,
        "url": format!("https://{host}"),
        "cluster": p.cluster,
        "head_sha": p.head_sha,
        "created_at": p.created_at,
        "expires_at": p.expires_at,
        "seconds_left": (p.expires_at - now).max(0),
        "keep": p.keep,
        "fork": p.fork,
        "last_error": p.last_error,
        "end_reason": p.end_reason,
    })
}

pub fn ledger_json(rows: &[LedgerRow]) -> Value {
    rows.iter()
        .map(|r| json!({"kind": r.kind, "namespace": r.namespace, "name": r.name, "state": r.state, "detail": r.detail}))
        .collect()
}

pub fn history_json(rows: &[HistoryEntry]) -> Value {
    rows.iter()
        .map(|h| json!({"at": h.at, "what": h.what, "actor": h.actor, "reason": h.reason, "head_sha": h.head_sha}))
        .collect()
}

#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    pub repo: Option<String>,
    pub author: Option<String>,
    pub state: Option<String>,
    pub cluster: Option<String>,
}

/// Previews per page when the request names no `limit`, and the most it may ask for.
pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 500;

/// `?limit=&cursor=`: the page size and where the page starts (the `next` of the last one).
#[derive(Debug, Default, Deserialize)]
pub struct Paging {
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

/// A request's paging the API refuses (400): the caller's mistake, never a 5xx.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PagingError {
    #[error("limit must be between 1 and {MAX_LIMIT}")]
    Limit,
    #[error("cursor is not one this API gave out")]
    Cursor,
}

/// The page size asked for, refused beyond [`MAX_LIMIT`] (a silent clamp would let a
/// client believe it has everything).
pub fn page_limit(paging: &Paging) -> Result<u32, PagingError> {
    match paging.limit.unwrap_or(DEFAULT_LIMIT) {
        n @ 1..=MAX_LIMIT => Ok(n),
        _ => Err(PagingError::Limit),
    }
}

/// The opaque cursor after `(repo, number)`: base64url of `number:repo`.
pub fn cursor_after(repo: &str, number: i64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{number}:{repo}"))
}

/// The `(repo, number)` a cursor continues after.
pub fn parse_cursor(cursor: &str) -> Result<(String, i64), PagingError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| PagingError::Cursor)?;
    let text = String::from_utf8(bytes).map_err(|_| PagingError::Cursor)?;
    let (number, repo) = text.split_once(':').ok_or(PagingError::Cursor)?;
    let number = number.parse().map_err(|_| PagingError::Cursor)?;
    Ok((repo.to_owned(), number))
}

/// One page of previews and the cursor of the next (`None` after the last).
#[derive(Debug)]
pub struct Page {
    pub previews: Vec<Value>,
    pub next: Option<String>,
}

/// A page of the previews matching `filters`: at most `limit`, after `after`. The state is
/// known only once a row is read, so with `state` a page can hold fewer than `limit`;
/// `next` is still where the following page starts.
pub async fn page(
    pool: &SqlitePool,
    config: &Config,
    now: i64,
    filters: &Filters,
    limit: u32,
    after: Option<(&str, i64)>,
) -> anyhow::Result<Page> {
    let repo = filters.repo.as_deref().map(str::to_ascii_lowercase);
    let filter = db::PreviewFilter {
        repo: repo.as_deref(),
        author: filters.author.as_deref(),
        cluster: filters.cluster.as_deref(),
        after,
    };
    let rows = db::previews(pool, &filter, i64::from(limit)).await?;
    let next = match rows.last() {
        Some(last) if rows.len() == limit as usize => Some(cursor_after(&last.repo, last.number)),
        _ => None,
    };
    let previews = rows
        .iter()
        .map(|p| preview_json(p, config, now))
        .filter(|p| filters.state.as_deref().is_none_or(|s| p["state"] == s))
        .collect();
    Ok(Page { previews, next })
}

/// Every preview matching `filters` (the CLI, the dashboard), a bounded page at a time.
pub async fn list(
    pool: &SqlitePool,
    config: &Config,
    now: i64,
    filters: &Filters,
) -> anyhow::Result<Vec<Value>> {
    let mut all = Vec::new();
    let mut after: Option<(String, i64)> = None;
    loop {
        let after_ref = after.as_ref().map(|(r, n)| (r.as_str(), *n));
        let page = page(pool, config, now, filters, MAX_LIMIT, after_ref).await?;
        all.extend(page.previews);
        match page.next {
            Some(next) => after = Some(parse_cursor(&next)?),
            None => return Ok(all),
        }
    }
}

/// One preview (or `null` once destroyed), its ledger and its history; `None` when
/// previewd never knew the PR.
pub async fn detail(
    pool: &SqlitePool,
    config: &Config,
    now: i64,
    repo: &str,
    number: i64,
) -> anyhow::Result<Option<Value>> {
    let repo = repo.to_ascii_lowercase();
    let preview = db::preview_summary(pool, &repo, number).await?;
    let history = db::history(pool, &repo, number).await?;
    if preview.is_none() && history.is_empty() {
        return Ok(None);
    }
    let ledger = match &preview {
        Some(p) => db::ledger(pool, p.id).await?,
        None => Vec::new(),
    };
    Ok(Some(json!({
        "preview": preview.map(|p| preview_json(&p, config, now)),
        "ledger": ledger_json(&ledger),
        "history": history_json(&history),
    })))
}

pub async fn list_previews(
    State(app): State<Arc<App>>,
    Query(filters): Query<Filters>,
    Query(paging): Query<Paging>,
) -> Response {
    let (limit, after) = match page_limit(&paging).and_then(|limit| {
        let after = paging.cursor.as_deref().map(parse_cursor).transpose()?;
        Ok((limit, after))
    }) {
        Ok(asked) => asked,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let after = after
        .as_ref()
        .map(|(repo, number)| (repo.as_str(), *number));
    match page(
        &app.pool,
        &app.config,
        app.clock.now(),
        &filters,
        limit,
        after,
    )
    .await
    {
        Ok(page) => Json(json!({ "previews": page.previews, "next": page.next })).into_response(),
        Err(e) => internal(e),
    }
}

pub async fn one_preview(
    State(app): State<Arc<App>>,
    Path((owner, repo, number)): Path<(String, String, i64)>,
) -> Response {
    let repo = format!("{owner}/{repo}");
    match detail(&app.pool, &app.config, app.clock.now(), &repo, number).await {
        Ok(Some(body)) => Json(body).into_response(),
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "previewd has no record of this pull request",
        ),
        Err(e) => internal(e),
    }
}

/// `POST /api/previews/{owner}/{repo}/{number}/destroy`: always needs the token.
pub async fn destroy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((owner, repo, number)): Path<(String, String, i64)>,
) -> Response {
    if app.config.api_token.is_none() {
        return error(
            StatusCode::FORBIDDEN,
            "destroy through the API needs api.token to be set",
        );
    }
    // Bearer only: a browser resends cached Basic credentials with any cross-site form
    // post, and a destroy must not be one click on someone else's page away.
    if !authorized(&app.config, &headers, false) {
        return unauthorized();
    }
    let repo = format!("{owner}/{repo}").to_ascii_lowercase();
    match db::request_destroy(&app.pool, &repo, number, "api", app.clock.now()).await {
        Ok(Some(true)) => {
            if let (Ok(name), Ok(number)) = (repo.parse(), u32::try_from(number)) {
                app.work.notify(PreviewKey::new(name, number));
            }
            (StatusCode::ACCEPTED, Json(json!({"destroying": true}))).into_response()
        }
        Ok(Some(false)) => {
            Json(json!({"destroying": true, "detail": "already ending"})).into_response()
        }
        Ok(None) => error(StatusCode::NOT_FOUND, "no such preview"),
        Err(e) => internal(e.into()),
    }
}

/// Reads need the token when `api.token` is set: `Authorization: Bearer TOKEN`, or Basic
/// auth with the token as password (what a browser can send for the dashboard).
pub async fn require_token(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if app.config.api_token.is_none() || authorized(&app.config, request.headers(), true) {
        return next.run(request).await;
    }
    unauthorized()
}

fn authorized(config: &Config, headers: &HeaderMap, allow_basic: bool) -> bool {
    let Some(token) = &config.api_token else {
        return false;
    };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let offered = if let Some(bearer) = value.strip_prefix("Bearer ") {
        bearer.trim().to_owned()
    } else if let Some(basic) = value.strip_prefix("Basic ").filter(|_| allow_basic) {
        use base64::Engine;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&decoded).into_owned();
        text.split_once(':')
            .map(|(_, p)| p.to_owned())
            .unwrap_or_default()
    } else {
        return false;
    };
    constant_time_eq(offered.as_bytes(), token.expose().as_bytes())
}

/// Compares digests, so the time taken says nothing about how much of the token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            "Basic realm=\"previewd\", charset=\"UTF-8\"",
        )],
        Json(json!({"error": "a bearer token (api.token) is required"})),
    )
        .into_response()
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

fn internal(e: anyhow::Error) -> Response {
    tracing::warn!(error = %format!("{e:#}"), "API request failed");
    if db::is_busy_error(&e) {
        // Only after the busy timeout went by without the lock: a retry will do.
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            Json(json!({"error": "the state is busy; try again"})),
        )
            .into_response();
    }
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the state could not be read",
    )
}

pub async fn openapi() -> Json<Value> {
    Json(crate::openapi::document())
}
