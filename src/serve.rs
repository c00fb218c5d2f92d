//! The composition root: `previewd serve` opens the state, starts the intake writer, the
//! reconciler (the one actor on the sink) and the drivers that only record intent or talk to
//! GitHub (the sweeper, resync, the feedback worker), serves HTTP, and on a signal stops them
//! in order. The only module that knows every system.

use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::db;
use crate::fence::Fence;
use crate::intake::Intake;
use crate::server::app::App;
use crate::server::{self, MAX_BUFFERED, edge};
use crate::work::Pending;

mod duties;

/// What `start` opens: the request state, the reconciler's end of the notifier (every
/// producer's end is `app.work`), and the writer task, which ends once `app` is dropped.
pub struct Started {
    pub app: Arc<App>,
    pub pending: Pending,
    pub writer: tokio::task::JoinHandle<()>,
    /// On SQLite, the hold on the state file that keeps `migrate-state` off it.
    pub serving: Option<db::Serving>,
}

/// Opens the state and starts the writer: the parts `serve` and the tests share.
pub async fn start(config: Config, clock: Arc<dyn Clock>) -> anyhow::Result<Started> {
    let dir = config.state.file().and_then(|file| file.parent());
    if let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let state = db::State::open(&config.state).await?;
    let serving = match config.state.file() {
        Some(file) => Some(db::hold_serving(file)?),
        None => None,
    };
    let (work, pending) = crate::work::channel();
    let (intake, writer) = Intake::start(
        db::writer::Writer::open(&state)?,
        clock.clone(),
        work.clone(),
    );
    let metrics: Arc<crate::metrics::Metrics> = Arc::default();
    let github = github(&config)?.map(|github| Arc::new(github.with_metrics(metrics.clone())));
    let login = crate::login::Login::new(&config, github.clone())?;
    let app = Arc::new(App {
        login,
        github,
        config,
        state,
        intake,
        clock,
        work,
        buffered: Arc::new(tokio::sync::Semaphore::new(MAX_BUFFERED)),
        metrics,
        refusals: Default::default(),
    });
    Ok(Started {
        app,
        pending,
        writer,
        serving,
    })
}

/// `previewd serve`: runs until SIGTERM or Ctrl-C, then finishes in-flight requests and
/// the writes they started.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    if config.github.webhook_secret.is_none() {
        tracing::warn!(
            "github.webhook_secret is not set: every webhook delivery will be refused with 401"
        );
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding metrics.listen {addr}"))?,
        ),
        None => None,
    };
    let Started {
        app,
        pending,
        writer,
        serving: _serving,
    } = start(config, Arc::new(SystemClock)).await?;
    let (elector, fence) = leadership(&app).await?;
    let github = app.github.clone();
    if let Some(github) = &github {
        github.fence(fence.clone());
    }
    // Beside the reconciler, never inside it: GitHub's rate limits and outages delay only
    // what is said on PRs (and the commands that need GitHub's word), never a deploy.
    let feedback = Arc::new(
        crate::feedback::Feedback::new(
            // Connections of its own for its inline statements, apart from the reconciler's.
            app.state.apart(),
            app.config.clone(),
            app.clock.clone(),
            github.clone(),
        )
        .notifying(app.work.clone()),
    );
    // One sink (one Kubernetes client) for the reconciler and the sweeper, fenced.
    let sink = crate::sink::Sink::from_config(&app.config)
        .await?
        .fenced(fence.clone());
    let reconciler = Arc::new(
        reconciler(&app, sink.clone())
            .await?
            .with_feedback(feedback.nudge())
            .with_metrics(app.metrics.clone()),
    );
    let sweeper = {
        let (app, sink) = (app.clone(), sink);
        move || {
            crate::sweep::Sweeper::new(app.state.clone(), app.config.clone(), app.clock.clone())
                .with_sink(sink.clone())
                .notifying(app.work.clone())
                .with_metrics(app.metrics.clone())
        }
    };
    // Beside the sweeper, apart from the reconciler: it records what GitHub lists through
    // intake, which tells the reconciler.
    let resync = github.map(|github| {
        Arc::new(crate::resync::Resync::new(
            app.state.clone(),
            app.config.clone(),
            app.clock.clone(),
            github,
            app.intake.clone(),
        ))
    });
    let duties = duties::Duties {
        reconciler,
        pending: Some(pending),
        feedback,
        sweeper: Box::new(sweeper),
        resync,
    };
    // One token ends the work loops, cancelled once the HTTP listeners have stopped taking
    // new work; the Lease is released only after they have stopped.
    let stop = CancellationToken::new();
    let leading = tokio::spawn(duties.run(fence, stop.clone()));
    let releasing = CancellationToken::new();
    let electing = elector.map(|elector| tokio::spawn(elector.run(releasing.clone())));
    tracing::info!(
        listen = %listener.local_addr()?,
        state = %app.config.state,
        "previewd is serving"
    );
    // One signal ends both listeners.
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let signalled = tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stopping.send(true);
    });
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let metrics_serving = metrics_listener.map(|listener| {
        tracing::info!(listen = ?listener.local_addr().ok(), "serving /metrics");
        tokio::spawn(edge::serve(
            listener,
            server::metrics_router(app.clone()),
            edge::LIMITS,
            until_stopped(stopped.clone()),
        ))
    });
    edge::serve(
        listener,
        server::router(app.clone()),
        edge::LIMITS,
        until_stopped(stopped),
    )
    .await;
    signalled.abort();
    if let Some(serving) = metrics_serving {
        serving.await.context("waiting for the metrics listener")?;
    }
    stop.cancel();
    leading
        .await
        .context("waiting for the work loops to finish")??;
    releasing.cancel();
    if let Some(electing) = electing {
        electing.await.context("releasing the Lease")?;
    }
    drop(app);
    writer.await.context("waiting for the writer to finish")?;
    tracing::info!("stopped");
    Ok(())
}

/// Who leads: with `lease.enabled`, the Lease's elector and the fence it moves (closed until
/// the Lease is won); without, an open fence and one replica, said once.
async fn leadership(app: &App) -> anyhow::Result<(Option<crate::lease::Elector>, Fence)> {
    let config = &app.config.lease;
    if !config.enabled {
        if app.config.state.is_shared() {
            tracing::warn!(
                "lease.enabled is off with a shared state: this process runs the reconciler, \
                 sweeper, resync and feedback whatever other replicas do; run one replica only"
            );
        } else {
            tracing::info!(
                "previewd runs as one replica: its SQLite state is this process's alone, so it \
                 runs the reconciler, sweeper, resync and feedback itself, without a Lease"
            );
        }
        app.metrics.lease_held(true);
        return Ok((None, Fence::open()));
    }
    let (elector, fence) = crate::lease::Elector::connect(config, app.metrics.clone()).await?;
    tracing::info!(
        namespace = %config.namespace,
        lease = %config.name,
        identity = %elector.identity(),
        "the reconciler, sweeper, resync and feedback run only while this replica holds the Lease; \
         deliveries are taken either way"
    );
    Ok((Some(elector), fence))
}

/// The GitHub client, shared by the feedback worker and resync; `None` without credentials.
fn github(config: &Config) -> anyhow::Result<Option<crate::github::GitHub>> {
    Ok(match &config.github.credentials {
        Some(credentials) => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let github = crate::github::GitHub::new(&config.github.api_url, credentials)
                .context("setting up the GitHub client")?;
            tracing::info!(api = %config.github.api_url, "reporting to GitHub");
            Some(github)
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
    sink: crate::sink::Sink,
) -> anyhow::Result<crate::reconcile::Reconciler> {
    let now = app.clock.now();
    let mut certs = std::collections::BTreeMap::new();
    for (cluster, cert) in
        crate::clusters::sealing_certs(&app.config, now, crate::clusters::LocalKeys::Create)
    {
        let cert = cert?;
        let rotation = crate::clusters::check_rotation(&app.state, &cluster, &cert, now).await?;
        tracing::info!(%cluster, fingerprint = %cert.fingerprint, ?rotation, "sealing certificate");
        certs.insert(cluster, cert);
    }
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
        // Connections of its own for a look's inline statements (`db::inline`).
        app.state.apart(),
        app.config.clone(),
        sink,
        certs,
        crate::ca::from_config(&app.config, now, crate::clusters::LocalKeys::Create)?,
        app.clock.clone(),
    ))
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
