//! The HTTP edge: routes, the webhook handler (verify, parse, record, answer), health
//! probes and the mapping from errors to status codes. The state handlers share is
//! `app::App`; starting everything and shutting it down is `serve`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::app::App;
use crate::db;
use crate::intake::{IntakeError, Recorded};
use crate::intent::{self, Outcome};
use crate::metrics::{DeliveryOutcome, METRICS};
use crate::webhook::{self, Headers, Rejection};

pub mod edge;

/// Largest delivery accepted. PR and comment payloads are tens of KB; GitHub's own cap
/// (25 MB) only matters for events previewd does not use, such as large pushes.
pub const MAX_BODY: usize = 5 * 1024 * 1024;

/// Delivery bodies being read at once, in bytes: six at the size limit. 48 unfinished
/// 5 MiB bodies once took the process from 11 to 255 MiB, the pod's limit.
pub const MAX_BUFFERED: usize = 32 * 1024 * 1024;

/// A delivery's body must have arrived this long after its headers.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

pub fn router(app: Arc<App>) -> Router {
    // Reads: open, or behind `api.token` when one is set.
    let reads = Router::new()
        .route("/", get(crate::dashboard::index))
        .route(
            "/previews/{owner}/{repo}/{number}",
            get(crate::dashboard::preview),
        )
        .route("/api/previews", get(crate::api::list_previews))
        .route(
            "/api/previews/{owner}/{repo}/{number}",
            get(crate::api::one_preview),
        )
        .route("/api/openapi.json", get(crate::api::openapi));
    // Off loopback `/metrics` tells anyone which repositories and clusters previewd serves;
    // Prometheus sends the token, or scrapes `metrics.listen` instead.
    let reads = if app.config.listen.ip().is_loopback() {
        Router::new().route("/metrics", get(metrics)).merge(reads)
    } else {
        reads.route("/metrics", get(metrics))
    }
    .route_layer(axum::middleware::from_fn_with_state(
        app.clone(),
        crate::api::require_token,
    ));
    let local = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/api/previews/{owner}/{repo}/{number}/destroy",
            post(crate::api::destroy),
        )
        .merge(reads)
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            only_local_hosts,
        ));
    // The webhook is signed, and tunnels to a laptop (smee, ngrok) keep their own Host.
    Router::new()
        .route("/webhooks/github", post(github_webhook))
        .merge(local)
        .with_state(app)
}

/// `metrics.listen`'s router: `/metrics` only, open.
pub fn metrics_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
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
        Some(host) if !is_local_host(host, app.config.public_url.as_deref()) => (
            StatusCode::MISDIRECTED_REQUEST,
            Json(json!({ "error": "previewd listens on loopback and answers only for localhost" })),
        )
            .into_response(),
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
async fn metrics(State(app): State<Arc<App>>) -> Response {
    let counts = match db::preview_counts(&app.pool).await {
        Ok(counts) => counts,
        Err(e) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}\n")).into_response();
        }
    };
    let mut previews: std::collections::BTreeMap<(String, String), i64> = Default::default();
    for (desired, observed, cluster, n) in counts {
        let state = crate::api::state_name(crate::comment::Shown::of(desired, observed));
        *previews.entry((state.to_owned(), cluster)).or_default() += n;
    }
    let previews: Vec<_> = previews.into_iter().map(|((s, c), n)| (s, c, n)).collect();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        METRICS.render(&previews),
    )
        .into_response()
}

/// Errors as the HTTP client sees them; the only place status codes are chosen.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("body is larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error("body could not be read: {0}")]
    BadBody(String),
    #[error("the body did not arrive within {} s", BODY_TIMEOUT.as_secs())]
    SlowBody,
    #[error("too many deliveries are being received at once; retry later")]
    Busy,
    #[error(transparent)]
    Unavailable(#[from] IntakeError),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::Rejected(Rejection::NoSecret | Rejection::BadSignature(_))
            | Self::Rejected(Rejection::MissingHeader("X-Hub-Signature-256")) => {
                StatusCode::UNAUTHORIZED
            }
            Self::Rejected(_) | Self::BadBody(_) => StatusCode::BAD_REQUEST,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::SlowBody => StatusCode::REQUEST_TIMEOUT,
            Self::Busy => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "5")],
                    Json(json!({ "error": self.to_string() })),
                )
                    .into_response();
            }
            // Not the sender's fault, and worth a redelivery.
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, Json(json!({ "error": self.to_string() }))).into_response()
    }
}

/// Counts every delivery, refused ones included, by event and outcome: under the event's
/// name only once its signature verified.
async fn github_webhook(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let mut verified = None;
    let answer = receive_webhook(app, headers, body, started, &mut verified).await;
    if answer.is_err() {
        METRICS.delivery(
            verified.as_deref(),
            DeliveryOutcome::Rejected,
            started.elapsed(),
        );
    }
    answer
}

async fn receive_webhook(
    app: Arc<App>,
    headers: HeaderMap,
    body: Body,
    started: std::time::Instant,
    verified: &mut Option<String>,
) -> Result<Response, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let guid = header("x-github-delivery").unwrap_or("-");
    let rejected = |error: ApiError| {
        tracing::warn!(delivery = %guid, reason = %error, "delivery rejected");
        error
    };
    let received = Headers {
        event: header("x-github-event"),
        guid: header("x-github-delivery"),
        hook_id: header("x-github-hook-id"),
        signature: header("x-hub-signature-256"),
        content_type: header("content-type"),
    };
    let secret = app.config.github.webhook_secret.as_ref();
    // Everything the headers alone decide is decided before a byte of the body is read.
    webhook::screen(secret, received).map_err(|e| rejected(e.into()))?;
    let body = read_body(&app, body).await.map_err(rejected)?;
    let delivery = webhook::receive(secret, received, &body).map_err(|e| {
        if !matches!(e, Rejection::BadSignature(_)) {
            *verified = received.event.map(str::to_owned);
        }
        rejected(e.into())
    })?;
    *verified = Some(delivery.event.clone());
    let intent = intent::decide(&delivery, &app.config, app.clock.now());
    let (event, action) = (
        delivery.event.clone(),
        delivery.action.clone().unwrap_or_default(),
    );
    let recorded = app.intake.record(delivery, intent).await?;
    let (status, body) = match recorded {
        Recorded::New { outcome, detail } => {
            METRICS.delivery(
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
            METRICS.delivery(Some(&event), DeliveryOutcome::Duplicate, started.elapsed());
            tracing::info!(delivery = %guid, %event, %action, previous = outcome.as_str(), "duplicate delivery ignored");
            (
                StatusCode::OK,
                json!({ "delivery": guid, "outcome": "duplicate", "previous": outcome.as_str() }),
            )
        }
    };
    Ok((status, Json(body)).into_response())
}

/// The body, within [`BODY_TIMEOUT`] and [`MAX_BODY`], holding its share of
/// [`MAX_BUFFERED`] until the answer. A declared length over the limit is refused
/// unread; a body of unknown length (chunked) reserves the whole limit.
async fn read_body(app: &App, mut body: Body) -> Result<Vec<u8>, ApiError> {
    // hyper's size hint is the Content-Length, exactly (hyper-1.12.0 src/body/incoming.rs,
    // `Incoming::size_hint`); a chunked body has none.
    let hint = body.size_hint();
    if hint.lower() > MAX_BODY as u64 {
        return Err(ApiError::TooLarge);
    }
    let reserve = hint.exact().map_or(MAX_BODY, |n| n as usize);
    let _permit = app
        .buffered
        .clone()
        .try_acquire_many_owned(u32::try_from(reserve).unwrap_or(u32::MAX))
        .map_err(|_| ApiError::Busy)?;
    let read = async {
        let mut bytes = Vec::with_capacity(reserve);
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| ApiError::BadBody(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > MAX_BODY {
                    return Err(ApiError::TooLarge);
                }
                bytes.extend_from_slice(&data);
            }
        }
        Ok(bytes)
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| ApiError::SlowBody)?
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    if !app.intake.is_running() {
        return (StatusCode::SERVICE_UNAVAILABLE, "writer: stopped\n").into_response();
    }
    match tokio::time::timeout(Duration::from_secs(2), db::ping(&app.pool)).await {
        Ok(Ok(())) => (StatusCode::OK, "ready\n").into_response(),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}\n")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database: timed out\n").into_response(),
    }
}
