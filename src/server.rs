//! The HTTP edge: routes, the webhook handler (decide, record, answer), health probes and
//! the metrics. The API's handlers are `api`, the dashboard's `pages`, a delivery's checks
//! `delivery`, a template's size report `report`, every failure's status code `error`; the
//! state handlers share is `app::App`; starting everything and shutting it down is `serve`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::db;
use crate::intake::Recorded;
use crate::intent::{self, Outcome};
use crate::metrics::{self, DeliveryOutcome};
use crate::server::app::App;

pub mod api;
pub mod app;
pub mod auth;
pub mod delivery;
pub mod edge;
pub mod error;
pub mod openapi;
mod pages;
pub mod refusals;
pub mod report;
mod unread;
pub mod viewer;

use delivery::Verified;
pub use error::Error;

/// Largest delivery accepted. PR and comment payloads are tens of KB; GitHub's own cap
/// (25 MB) only matters for events previewd does not use, such as large pushes.
pub const MAX_BODY: usize = 5 * 1024 * 1024;

/// Delivery bodies being read at once, in bytes: six at the size limit. 48 unfinished
/// 5 MiB bodies once took the process from 11 to 255 MiB, the pod's limit.
pub const MAX_BUFFERED: usize = 32 * 1024 * 1024;

/// A template's size report (from its build Job) is one small JSON object.
pub const MAX_REPORT: usize = 1024;

/// A delivery's body must have arrived this long after its headers.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

pub fn router(app: Arc<App>) -> Router {
    // Reads: open, or behind `api.token` (or a GitHub sign-in, `viewer`) when one is set.
    let reads = Router::new()
        .route("/", get(pages::index))
        .route("/previews/{owner}/{repo}/{number}", get(pages::preview))
        .route("/api/previews", get(api::list_previews))
        .route(
            "/api/previews/{owner}/{repo}/{number}",
            get(api::one_preview),
        )
        .route("/api/templates", get(api::templates))
        .route("/api/openapi.json", get(api::openapi));
    // Off loopback `/metrics` tells anyone which repositories and clusters previewd serves;
    // Prometheus sends the token, or scrapes `metrics.listen` instead.
    let reads = if app.config.listen.ip().is_loopback() {
        Router::new().route("/metrics", get(metrics)).merge(reads)
    } else {
        reads.route("/metrics", get(metrics))
    }
    .route_layer(axum::middleware::from_fn_with_state(
        app.clone(),
        viewer::require_reader,
    ));
    let local = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/api/previews/{owner}/{repo}/{number}/destroy",
            post(api::destroy),
        )
        // Share links: each route checks the token as the destroy does (bearer only).
        .route(
            "/api/previews/{owner}/{repo}/{number}/share",
            post(api::share),
        )
        .route(
            "/api/previews/{owner}/{repo}/{number}/unshare",
            post(api::unshare),
        )
        .route(
            "/api/previews/{owner}/{repo}/{number}/shares",
            get(api::shares),
        )
        .merge(reads)
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            only_local_hosts,
        ));
    // The webhook is signed, and tunnels to a laptop (smee, ngrok) keep their own Host; a
    // template's size report carries its generation's token and comes from a cluster.
    // The login: asked by ingress controllers (any Host: Envoy sends the preview's) and
    // opened by browsers on their way to a preview.
    let login = Router::new()
        .route("/auth/check", axum::routing::any(auth::check))
        .route("/auth/check/{*rest}", axum::routing::any(auth::check))
        .route("/auth/forward", axum::routing::any(auth::forward))
        .route("/auth/forward/{*rest}", axum::routing::any(auth::forward))
        .route("/auth/signin", get(auth::signin))
        .route("/auth/callback", get(auth::callback))
        .route("/auth/share", get(auth::share_page).post(auth::share))
        .route("/auth/signout", get(auth::signout_page).post(auth::signout));
    Router::new()
        .route("/webhooks/github", post(github_webhook))
        .merge(login)
        .route(
            "/api/templates/{owner}/{repo}/{generation}/size",
            post(report::template_size),
        )
        .merge(local)
        .layer(axum::middleware::from_fn(unread::close_if_unread))
        .with_state(app)
}

/// `metrics.listen`'s router: `/metrics` only, open.
pub fn metrics_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn(unread::close_if_unread))
        .with_state(app)
}

/// On a loopback `listen`, a page on any web site can still reach previewd through a name
/// of its own that resolves to 127.0.0.1 (DNS rebinding); its requests carry that name as
/// `Host`. Only this host's names, and `public_url`'s (a reverse proxy in front), pass.
async fn only_local_hosts(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !app.config.listen.ip().is_loopback() {
        return next.run(request).await;
    }
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{0}"));
    match host {
        Some(host) if !is_local_host(host, app.config.public_url.as_deref()) => {
            Error::ForeignHost.into_response()
        }
        // No Host at all: not a browser (HTTP/1.1 browsers always send one).
        _ => next.run(request).await,
    }
}

/// `localhost`, `127.0.0.1` or `[::1]`, with or without a port, or `public_url`'s host.
pub fn is_local_host(host: &str, public_url: Option<&str>) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((name, port)) if port.is_empty() || port.starts_with(':') => name,
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let public = public_url
        .and_then(|url| url.split_once("://"))
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""));
    matches!(
        name.to_ascii_lowercase().as_str(),
        "localhost" | "127.0.0.1" | "::1"
    ) || public.is_some_and(|public| public.eq_ignore_ascii_case(host))
}

/// Prometheus text, with the previews counted from the state now.
async fn metrics(State(app): State<Arc<App>>) -> Result<Response, Error> {
    let counts = db::preview_counts(&app.state)
        .await
        .map_err(|e| Error::NotReady(format!("database: {e}")))?;
    let previews = crate::view::counts(counts);
    Ok((
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        app.metrics.render(&previews),
    )
        .into_response())
}

/// A verified delivery: decide what it means, record that durably, answer.
async fn github_webhook(
    State(app): State<Arc<App>>,
    Verified { delivery, started }: Verified,
) -> Result<Response, Error> {
    let intent = intent::decide(&delivery, &app.config, app.clock.now());
    let (guid, event, action) = (
        delivery.guid.clone(),
        delivery.event.clone(),
        delivery.action.clone().unwrap_or_default(),
    );
    let recorded = app.intake.record(delivery, intent).await.map_err(|e| {
        tracing::warn!(delivery = %guid, reason = %e, "delivery rejected");
        app.metrics
            .delivery(Some(&event), DeliveryOutcome::Rejected, started.elapsed());
        Error::from(e)
    })?;
    let (status, body) = match recorded {
        Recorded::New {
            outcome, detail, ..
        } => {
            app.metrics.delivery(
                Some(&event),
                DeliveryOutcome::Recorded(outcome),
                started.elapsed(),
            );
            tracing::info!(delivery = %guid, %event, %action, outcome = outcome.as_str(), %detail, "delivery recorded");
            let status = if outcome == Outcome::Accepted {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            };
            (
                status,
                json!({ "delivery": guid, "outcome": outcome.as_str(), "detail": detail }),
            )
        }
        Recorded::Duplicate { outcome } => {
            app.metrics
                .delivery(Some(&event), DeliveryOutcome::Duplicate, started.elapsed());
            tracing::info!(delivery = %guid, %event, %action, previous = outcome.as_str(), "duplicate delivery ignored");
            (
                StatusCode::OK,
                json!({ "delivery": guid, "outcome": "duplicate", "previous": outcome.as_str() }),
            )
        }
    };
    Ok((status, Json(body)).into_response())
}

/// Ready to take deliveries: the writer runs and the state answers. Whether this replica
/// holds the Lease is no part of it: every replica records deliveries, and only the work
/// loops wait for the Lease (`previewd_lease_held` in /metrics says who leads).
async fn readyz(State(app): State<Arc<App>>) -> Result<&'static str, Error> {
    if !app.intake.is_running() {
        return Err(Error::NotReady("writer: stopped".into()));
    }
    match tokio::time::timeout(Duration::from_secs(2), db::ping(&app.state)).await {
        Ok(Ok(())) => Ok("ready\n"),
        Ok(Err(e)) => Err(Error::NotReady(format!("database: {e}"))),
        Err(_) => Err(Error::NotReady("database: timed out".into())),
    }
}
