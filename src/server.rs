//! The HTTP edge: routes, the webhook handler (verify, parse, record, answer), health
//! probes, the one mapping from errors to status codes, and graceful shutdown.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use sqlx::SqlitePool;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::db;
use crate::intake::{Intake, IntakeError, Recorded};
use crate::intent::{self, Outcome};
use crate::metrics::METRICS;
use crate::webhook::{self, Headers, Rejection};

/// Largest delivery accepted. PR and comment payloads are tens of KB; GitHub's own cap
/// (25 MB) only matters for events previewd does not use, such as large pushes.
pub const MAX_BODY: usize = 5 * 1024 * 1024;

/// Everything a request handler may touch.
pub struct App {
    pub config: Config,
    pub pool: SqlitePool,
    pub intake: Intake,
    pub clock: Arc<dyn Clock>,
    /// Tells the reconciler a preview has work (the sweeper's expiries).
    pub notify: tokio::sync::mpsc::UnboundedSender<crate::preview::PreviewKey>,
    /// Previews whose intent changed, for the reconciler (taken by `serve`).
    pub changed:
        std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<crate::preview::PreviewKey>>>,
}

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
        .route("/api/openapi.json", get(crate::api::openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::api::require_token,
        ));
    Router::new()
        .route(
            "/webhooks/github",
            post(github_webhook).layer(DefaultBodyLimit::max(MAX_BODY)),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/api/previews/{owner}/{repo}/{number}/destroy",
            post(crate::api::destroy),
        )
        .merge(reads)
        .with_state(app)
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
        let state = crate::api::state_name(crate::comment::Shown::of(&desired, &observed));
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
            // Not the sender's fault, and worth a redelivery.
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        (status, Json(json!({ "error": self.to_string() }))).into_response()
    }
}

/// Counts every delivery, refused ones included, by event and outcome.
async fn github_webhook(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = std::time::Instant::now();
    let event = headers
        .get("x-github-event")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("none")
        .to_owned();
    let answer = receive_webhook(app, headers, body, started).await;
    if answer.is_err() {
        METRICS.delivery(&event, "rejected", started.elapsed());
    }
    answer
}

async fn receive_webhook(
    app: Arc<App>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    started: std::time::Instant,
) -> Result<Response, ApiError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let guid = header("x-github-delivery").unwrap_or("-");
    let body = body.map_err(|e| {
        let error = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge
        } else {
            ApiError::BadBody(e.body_text())
        };
        tracing::warn!(delivery = %guid, reason = %error, "delivery rejected");
        error
    })?;
    let received = Headers {
        event: header("x-github-event"),
        guid: header("x-github-delivery"),
        hook_id: header("x-github-hook-id"),
        signature: header("x-hub-signature-256"),
        content_type: header("content-type"),
    };
    let delivery = webhook::receive(app.config.github.webhook_secret.as_ref(), received, &body)
        .map_err(|e| {
            tracing::warn!(delivery = %guid, reason = %e, "delivery rejected");
            ApiError::from(e)
        })?;
    let intent = intent::decide(&delivery, &app.config, app.clock.now());
    let (event, action) = (
        delivery.event.clone(),
        delivery.action.clone().unwrap_or_default(),
    );
    let recorded = app.intake.record(delivery, intent).await?;
    let (status, body) = match recorded {
        Recorded::New { outcome, detail } => {
            METRICS.delivery(&event, outcome.as_str(), started.elapsed());
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
            METRICS.delivery(&event, "duplicate", started.elapsed());
            tracing::info!(delivery = %guid, %event, %action, previous = outcome.as_str(), "duplicate delivery ignored");
            (
                StatusCode::OK,
                json!({ "delivery": guid, "outcome": "duplicate", "previous": outcome.as_str() }),
            )
        }
    };
    Ok((status, Json(body)).into_response())
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

/// Opens the state and starts the writer: the parts `serve` and the tests share.
pub async fn start(
    config: Config,
    clock: Arc<dyn Clock>,
) -> anyhow::Result<(Arc<App>, tokio::task::JoinHandle<()>)> {
    if let Some(dir) = config.state.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let pool = db::open(&config.state).await?;
    let (changes, changed) = tokio::sync::mpsc::unbounded_channel();
    let notify = changes.clone();
    let (intake, writer) = Intake::start(
        db::writer_connection(&config.state).await?,
        clock.clone(),
        changes,
    );
    let changed = std::sync::Mutex::new(Some(changed));
    Ok((
        Arc::new(App {
            config,
            pool,
            intake,
            clock,
            notify,
            changed,
        }),
        writer,
    ))
}

/// `previewd serve`: runs until SIGTERM or Ctrl-C, then finishes in-flight requests and
/// the writes they started.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    if config.github.webhook_secret.is_none() {
        tracing::warn!(
            "github.webhook_secret is not set: every webhook delivery will be refused with 401"
        );
    }
    if config.github.credentials.is_none() {
        tracing::info!(
            "no GitHub credentials (github.token or github.app_id): reporting to GitHub is off"
        );
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let (app, writer) = start(config, Arc::new(SystemClock)).await?;
    let github = github(&app.config)?;
    // Beside the reconciler, never inside it: GitHub's rate limits and outages delay only
    // what is said on PRs (and the commands that need GitHub's word), never a deploy.
    let feedback = Arc::new(
        crate::feedback::Feedback::new(
            app.pool.clone(),
            app.config.clone(),
            app.clock.clone(),
            github.clone(),
        )
        .notifying(app.notify.clone()),
    );
    let reconciler = Arc::new(
        reconciler(&app, github)
            .await?
            .with_feedback(feedback.nudge()),
    );
    let stop_feedback = Arc::new(tokio::sync::Notify::new());
    let feeding_back = tokio::spawn(feedback.run(stop_feedback.clone()));
    let stop = Arc::new(tokio::sync::Notify::new());
    let changed = app
        .changed
        .lock()
        .map_err(|_| anyhow::anyhow!("state lock poisoned"))?
        .take()
        .context("reconciler already running")?;
    let reconciling = tokio::spawn(reconciler.run(changed, stop.clone()));
    tracing::info!(
        listen = %listener.local_addr()?,
        state = %app.config.state.display(),
        "previewd is serving"
    );
    let sweeper =
        crate::sweep::Sweeper::new(app.pool.clone(), app.config.clone(), app.clock.clone())
            .with_sink(sink(&app.config).await?)
            .notifying(app.notify.clone());
    // Each task its own stop: a `Notify` keeps one permit for one waiter.
    let stop_sweeping = Arc::new(tokio::sync::Notify::new());
    let sweeping = tokio::spawn(sweeper.run(stop_sweeping.clone()));
    axum::serve(listener, router(app.clone()))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("serving HTTP")?;
    stop.notify_one();
    stop_sweeping.notify_one();
    stop_feedback.notify_one();
    // A call to a slow GitHub is not waited out: what the worker owed stays owed (in the
    // state) for the next start.
    match tokio::time::timeout(Duration::from_secs(10), feeding_back).await {
        Ok(done) => done.context("waiting for the feedback worker to finish")?,
        Err(_) => tracing::warn!("the feedback worker did not stop within 10 s; left behind"),
    }
    sweeping
        .await
        .context("waiting for the sweeper to finish")?;
    reconciling
        .await
        .context("waiting for the reconciler to finish")?;
    drop(app);
    writer.await.context("waiting for the writer to finish")?;
    tracing::info!("stopped");
    Ok(())
}

/// The GitHub client, shared by the feedback worker and resync; `None` without credentials.
fn github(config: &Config) -> anyhow::Result<Option<Arc<crate::github::GitHub>>> {
    Ok(match &config.github.credentials {
        Some(credentials) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let github = crate::github::GitHub::new(&config.github.api_url, credentials)
                .context("setting up the GitHub client")?;
            tracing::info!(api = %config.github.api_url, "reporting to GitHub");
            Some(Arc::new(github))
        }
        None => {
            tracing::info!("no github.token or App credentials: GitHub reporting is off");
            None
        }
    })
}

/// The reconciler with its sink. Every cluster needs a certificate that has not expired (a
/// changed one re-seals that cluster's previews): previewd refuses to start otherwise,
/// rather than render secrets nobody can open.
async fn reconciler(
    app: &App,
    github: Option<Arc<crate::github::GitHub>>,
) -> anyhow::Result<crate::reconcile::Reconciler> {
    let now = app.clock.now();
    let mut certs = std::collections::BTreeMap::new();
    for (cluster, cert) in crate::clusters::sealing_certs(&app.config, now, true) {
        let cert = cert?;
        let rotation = crate::clusters::check_rotation(&app.pool, &cluster, &cert, now).await?;
        tracing::info!(%cluster, fingerprint = %cert.fingerprint, ?rotation, "sealing certificate");
        certs.insert(cluster, cert);
    }
    let sink = sink(&app.config).await?;
    if let crate::sink::Sink::Kubernetes(kube) = &sink {
        // What previews need on this cluster (others cannot be seen from here): said loudly
        // at start rather than found later as a stuck preview.
        let config = &app.config;
        match kube.served(&crate::requirements::needed(config)).await {
            Ok((served, projects)) => {
                for missing in crate::requirements::missing(config, &served, projects.as_ref()) {
                    tracing::error!(%missing, "this cluster lacks what previews need");
                }
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "could not check what this cluster serves")
            }
        }
    }
    Ok(crate::reconcile::Reconciler::new(
        app.pool.clone(),
        app.config.clone(),
        sink,
        certs,
        crate::ca::from_config(&app.config, now, true)?,
        app.clock.clone(),
    )
    .with_github(github, app.intake.clone()))
}

pub async fn sink(config: &Config) -> anyhow::Result<crate::sink::Sink> {
    Ok(match config.sink.kind {
        crate::config::SinkKind::Directory => {
            crate::sink::Sink::Directory(crate::sink::DirectorySink::new(&config.sink.directory))
        }
        crate::config::SinkKind::Kubernetes => {
            // Already installed (a second call in tests) is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let client = kube::Client::try_default()
                .await
                .context("connecting to Kubernetes (kubeconfig or in-cluster service account)")?;
            crate::sink::Sink::Kubernetes(crate::argocd::KubeSink::new(
                client,
                &config.sink.argocd_namespace,
            ))
        }
    })
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}
