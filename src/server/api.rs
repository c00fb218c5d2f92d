//! The `/api` routes (previews, one preview, the OpenAPI description, the operator's
//! destroy) and the `api.token` check in front of every read.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Config;
use crate::db;
use crate::preview::PreviewKey;
use crate::server::app::App;
use crate::view::{self, Detail, Filters, Page, Paging};

use super::error::Error;

/// A pull request's path: `{owner}/{repo}/{number}`, the number as a PR's (32 bits, as
/// the document says), or a 400 in JSON.
type PrPath = Result<Path<(String, String, u32)>, PathRejection>;

pub async fn list_previews(
    State(app): State<Arc<App>>,
    filters: Result<Query<Filters>, QueryRejection>,
    paging: Result<Query<Paging>, QueryRejection>,
) -> Result<Json<Page>, Error> {
    let (Query(filters), Query(paging)) = (filters?, paging?);
    let limit = view::page_limit(&paging)?;
    let after = paging
        .cursor
        .as_deref()
        .map(view::parse_cursor)
        .transpose()?;
    let after = after
        .as_ref()
        .map(|(repo, number)| (repo.as_str(), *number));
    let now = app.clock.now();
    let page = view::page(&app.state, &app.config, now, &filters, limit, after)
        .await
        .map_err(Error::State)?;
    Ok(Json(page))
}

pub async fn one_preview(State(app): State<Arc<App>>, path: PrPath) -> Result<Json<Detail>, Error> {
    let Path((owner, repo, number)) = path?;
    let repo = format!("{owner}/{repo}");
    let now = app.clock.now();
    view::detail(&app.state, &app.config, now, &repo, i64::from(number))
        .await
        .map_err(Error::State)?
        .map(Json)
        .ok_or(Error::NotFound(
            "previewd has no record of this pull request",
        ))
}

/// `GET /api/templates`: every generation of every repository's template database (#16).
pub async fn templates(State(app): State<Arc<App>>) -> Result<Json<Value>, Error> {
    let templates = view::templates(&app.state, app.clock.now())
        .await
        .map_err(Error::State)?;
    Ok(Json(json!({"templates": templates})))
}

/// `POST /api/previews/{owner}/{repo}/{number}/destroy`: always needs the token.
pub async fn destroy(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    path: PrPath,
) -> Result<Response, Error> {
    if app.config.api_token.is_none() {
        return Err(Error::DestroyNeedsToken);
    }
    // Bearer only: a browser resends cached Basic credentials with any cross-site form
    // post, and a destroy must not be one click on someone else's page away.
    if !authorized(&app.config, &headers, Credentials::Bearer) {
        return Err(Error::Unauthorized);
    }
    let Path((owner, repo, number)) = path?;
    let repo = format!("{owner}/{repo}").to_ascii_lowercase();
    let asked = db::request_destroy(&app.state, &repo, number, "api", app.clock.now())
        .await
        .map_err(|e| Error::State(e.into()))?;
    match asked {
        Some(true) => {
            if let Ok(name) = repo.parse() {
                app.work.notify(PreviewKey::new(name, number));
            }
            Ok((StatusCode::ACCEPTED, Json(json!({"destroying": true}))).into_response())
        }
        Some(false) => {
            Ok(Json(json!({"destroying": true, "detail": "already ending"})).into_response())
        }
        None => Err(Error::NotFound("no such preview")),
    }
}

pub async fn openapi() -> Json<Value> {
    Json(crate::server::openapi::document())
}

/// Reads need the token when `api.token` is set: `Authorization: Bearer TOKEN`, or Basic
/// auth with the token as password (what a browser can send for the dashboard).
pub async fn require_token(
    State(app): State<Arc<App>>,
    request: Request,
    next: Next,
) -> Result<Response, Error> {
    if app.config.api_token.is_none()
        || authorized(&app.config, request.headers(), Credentials::BearerOrBasic)
    {
        return Ok(next.run(request).await);
    }
    Err(Error::Unauthorized)
}

/// How a request may offer the token. A named choice, not a bare `bool`, so that each route
/// says which it takes: a browser resends cached Basic credentials on its own, so only reads
/// (the dashboard) take them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credentials {
    /// `Authorization: Bearer TOKEN` only.
    Bearer,
    /// That, or Basic auth with the token as password.
    BearerOrBasic,
}

fn authorized(config: &Config, headers: &HeaderMap, accepted: Credentials) -> bool {
    let Some(token) = &config.api_token else {
        return false;
    };
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let takes_basic = accepted == Credentials::BearerOrBasic;
    let offered = if let Some(bearer) = value.strip_prefix("Bearer ") {
        bearer.trim().to_owned()
    } else if let Some(basic) = value.strip_prefix("Basic ").filter(|_| takes_basic) {
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
    is_token(offered.as_bytes(), token.expose_secret().as_bytes())
}

/// Whether `offered` is the token, in time that says nothing about how much of it matched.
/// Digests are compared, so not even the token's length shows.
fn is_token(offered: &[u8], token: &[u8]) -> bool {
    Sha256::digest(offered)
        .as_slice()
        .ct_eq(Sha256::digest(token).as_slice())
        .into()
}

#[cfg(test)]
mod tests {
    use super::is_token;

    #[test]
    fn only_the_whole_token_is_the_token() {
        assert!(is_token(b"s3cret-token", b"s3cret-token"));
        assert!(!is_token(b"s3cret-toke", b"s3cret-token"));
        assert!(!is_token(b"s3cret-tokem", b"s3cret-token"));
        assert!(!is_token(b"", b"s3cret-token"));
    }
}
