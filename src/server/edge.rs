//! Connections: previewd's own accept loop around hyper, because `axum::serve` offers no
//! header timeout, no bound on connections and a graceful shutdown that waits forever for
//! a client that never finishes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How long a client may take and how many may be connected (design.md, "HTTP hardening").
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From the connection's start (or the end of its previous request) to the end of the
    /// request's headers.
    pub header_timeout: Duration,
    /// Open connections; HTTP/1 without pipelining carries one request at a time, so this
    /// also bounds requests in flight.
    pub max_connections: usize,
    /// After the signal, in-flight requests get this long; then their connections are cut.
    pub shutdown_grace: Duration,
}

pub const LIMITS: Limits = Limits {
    header_timeout: Duration::from_secs(10),
    max_connections: 256,
    shutdown_grace: Duration::from_secs(10),
};

/// hyper's read buffer per connection (its default is ~400 KB). Request heads are a few KB;
/// bodies stream through it, so a small buffer only costs more reads.
const MAX_BUF: usize = 64 * 1024;

/// Serves `router` on `listener` until `shutdown` completes, then lets in-flight requests
/// finish for at most `limits.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper arms the header timer whenever it waits for a request head: on a new
    // connection and between keep-alive requests, so an idle or slow-loris connection is
    // closed too (hyper-1.12.0 src/proto/h1/conn.rs, `Conn::poll_read_head`). The timeout
    // needs a timer, or hyper panics (src/server/conn/http1.rs, `header_read_timeout`).
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(MAX_BUF);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Anyone can open connections: those over the bound are logged a minute at a time.
    let over_the_bound = super::refusals::Refusals::new("too many connections: closing new ones");
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, mostly: wait instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        while connections.try_join_next().is_some() {}
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let detail = format!("peer={peer} max={}", limits.max_connections);
            over_the_bound.refused(0, &detail);
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    // `shutdown` ends idle keep-alive connections at once and the others after their
    // current request (hyper_util::server::graceful, `GracefulShutdown::shutdown`).
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            open = connections.len(),
            grace = ?limits.shutdown_grace,
            "connections still open after the grace period: closing them"
        );
    }
    // Every task holds the router and so the state; cut what is left so the writer can end.
    connections.shutdown().await;
}
