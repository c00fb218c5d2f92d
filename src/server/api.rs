//! The `/api` routes (previews, one preview, the OpenAPI description, the operator's
//! destroy and share links); who may read them is `viewer`'s.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::command::{SHARE_DEFAULT, share_until};
use crate::db::{self, login::Shareable};
use crate::login::check::share_link;
use crate::preview::PreviewKey;
use crate::server::app::App;
use crate::server::viewer::{Credentials, Viewer, authorized};
use crate::view::{self, Detail, Filters, Page, Paging};

use super::error::Error;

/// A pull request's path: `{owner}/{repo}/{number}`, the number as a PR's (32 bits, as
/// the document says), or a 400 in JSON.
type PrPath = Result<Path<(String, String, u32)>, PathRejection>;

pub async fn list_previews(
    State(app): State<Arc<App>>,
    Extension(viewer): Extension<Viewer>,
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
    let page = viewer
        .page(&app, &filters, limit, after)
        .await
        .map_err(Error::State)?;
    Ok(Json(page))
}

pub async fn one_preview(
    State(app): State<Arc<App>>,
    Extension(viewer): Extension<Viewer>,
    path: PrPath,
) -> Result<Json<Detail>, Error> {
    let Path((owner, repo, number)) = path?;
    let repo = format!("{owner}/{repo}").to_ascii_lowercase();
    let now = app.clock.now();
    // The state first: GitHub is asked only about repositories previewd has records of.
    let detail = view::detail(&app.state, &app.config, now, &repo, i64::from(number))
        .await
        .map_err(Error::State)?;
    match detail {
        Some(detail) if viewer.may_read(&app, &repo).await => Ok(Json(detail)),
        _ => Err(Error::NotFound(
            "previewd has no record of this pull request",
        )),
    }
}

/// `GET /api/templates`: every generation of every repository's template database (#16).
pub async fn templates(
    State(app): State<Arc<App>>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Json<Value>, Error> {
    let templates = view::templates(&app.state, app.clock.now())
        .await
        .map_err(Error::State)?;
    let templates = viewer
        .keep_readable(&app, templates, |t| t.repo.as_str())
        .await;
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

/// The query of a share: `for`, a duration like the config's (`24h`, `2d`).
#[derive(Debug, serde::Deserialize)]
pub struct ShareQuery {
    #[serde(rename = "for")]
    for_: Option<String>,
}

/// `POST /api/previews/{owner}/{repo}/{number}/share?for=24h`: a share link to the preview,
/// guarded as the destroy is (the token always, as a bearer token: the answer is a pass
/// anyone holding it uses). `for` defaults to 24h and is bounded as `/preview share`'s is.
pub async fn share(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    path: PrPath,
    query: Result<Query<ShareQuery>, QueryRejection>,
) -> Result<Response, Error> {
    let (key, preview) = shared_preview(&app, &headers, path).await?;
    let asked = match query?.0.for_ {
        None => SHARE_DEFAULT,
        Some(text) => crate::duration::parse(&text)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                Error::Unreadable(
                    "`for` is not a duration; write it like `24h`, `2d` or `1w`".into(),
                )
            })?,
    };
    let (Some(host), true) = (&preview.host, preview.live) else {
        return Err(Error::Conflict(
            "the preview is ending (or has no recorded host): it cannot be shared".into(),
        ));
    };
    let now = app.clock.now();
    let (until, _) = share_until(now, asked, preview.expires_at);
    if until <= now {
        return Err(Error::Conflict(
            "the preview is due to be torn down now; extend it first".into(),
        ));
    }
    let reason = format!("a share link, valid until {}", crate::comment::stamp(until));
    let share = db::login::share_by(&app.state, &key, preview.id, "api", now, until, &reason)
        .await
        .map_err(Error::State)?
        .ok_or_else(|| {
            Error::Conflict(format!(
                "the preview already has {} valid share links, the most it may have; revoke them first",
                db::login::MAX_SHARES
            ))
        })?;
    tracing::info!(preview = %key, expires_at = until, "share link made through the API");
    let link = share_link(
        &app.login,
        app.config.public_url.as_deref().unwrap_or(""),
        &share.id,
        host,
        app.login.flow.https(),
    );
    Ok(secret_answer(
        StatusCode::CREATED,
        json!({"link": link, "expires_at": until}),
    ))
}

/// `GET /api/previews/{owner}/{repo}/{number}/shares`: the preview's valid share links,
/// each sealed again from its id (only ids are stored), newest first. Guarded as the share.
pub async fn shares(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    path: PrPath,
) -> Result<Response, Error> {
    let (_, preview) = shared_preview(&app, &headers, path).await?;
    let now = app.clock.now();
    let valid = db::login::valid_shares(&app.state, preview.id, now)
        .await
        .map_err(Error::State)?;
    let shares: Vec<Value> = match &preview.host {
        Some(host) => valid
            .iter()
            .map(|share| {
                json!({
                                "link": share_link(
                    &app.login,
                    app.config.public_url.as_deref().unwrap_or(""),
                    &share.id,
                    host,
                    app.login.flow.https(),
                ),
                                "created_by": share.created_by,
                                "created_at": share.created_at,
                                "expires_at": share.expires_at,
                            })
            })
            .collect(),
        None => Vec::new(),
    };
    Ok(secret_answer(StatusCode::OK, json!({"shares": shares})))
}

/// `POST /api/previews/{owner}/{repo}/{number}/unshare`: revokes every share link of the
/// preview (as `/preview unshare`); how many were valid.
pub async fn unshare(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    path: PrPath,
) -> Result<Response, Error> {
    let (key, preview) = shared_preview(&app, &headers, path).await?;
    let revoked = db::login::unshare_by(&app.state, &key, preview.id, "api", app.clock.now())
        .await
        .map_err(Error::State)?;
    tracing::info!(preview = %key, revoked, "share links revoked through the API");
    Ok(Json(json!({"revoked": revoked})).into_response())
}

/// What every share route checks first, as the destroy does: `api.token` set and sent as a
/// bearer token, then the path, then the preview's row (404 without one).
async fn shared_preview(
    app: &App,
    headers: &HeaderMap,
    path: PrPath,
) -> Result<(PreviewKey, Shareable), Error> {
    if app.config.api_token.is_none() {
        return Err(Error::SharingNeedsToken);
    }
    // Bearer only, as for the destroy: a browser's cached Basic credentials ride along with
    // any cross-site request.
    if !authorized(&app.config, headers, Credentials::Bearer) {
        return Err(Error::Unauthorized);
    }
    let Path((owner, repo, number)) = path?;
    let repo = format!("{owner}/{repo}").to_ascii_lowercase();
    let Ok(name) = repo.parse() else {
        return Err(Error::NotFound("no such preview"));
    };
    let preview = db::login::shareable(&app.state, &repo, number)
        .await
        .map_err(Error::State)?
        .ok_or(Error::NotFound("no such preview"))?;
    Ok((PreviewKey::new(name, number), preview))
}

/// An answer carrying share links: never stored by a cache on the way.
fn secret_answer(status: StatusCode, body: Value) -> Response {
    let mut answer = (status, Json(body)).into_response();
    answer.headers_mut().insert(
        header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    answer
}

pub async fn openapi() -> Json<Value> {
    Json(crate::server::openapi::document())
}
