//! The state every request handler shares: configuration, the read pool, the intake
//! writer's handle, the clock and the body-buffer budget. Built by `serve::start`.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Config;
use crate::intake::Intake;

/// Everything a request handler may touch.
pub struct App {
    pub config: Config,
    pub state: crate::db::State,
    pub intake: Intake,
    pub clock: Arc<dyn Clock>,
    /// Tells the reconciler a preview has work (the API's destroy); the reconciler's end
    /// is returned by `serve::start`, never parked here.
    pub work: crate::work::Work,
    /// Permits for body bytes being buffered, `server::MAX_BUFFERED` in all.
    pub buffered: Arc<tokio::sync::Semaphore>,
    /// The process's metrics registry: the edge counts deliveries into it and `/metrics`
    /// renders it; `serve` hands the same one to the reconciler, sweeper and GitHub client.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Unverified refused deliveries, summed up in the log a minute at a time.
    pub refusals: super::refusals::Refusals,
    /// The login in front of every preview: its key, access answers and used codes.
    pub login: crate::login::Login,
    /// GitHub, when credentials are configured: `serve` hands the same client to the
    /// feedback worker and resync.
    pub github: Option<Arc<crate::github::GitHub>>,
}
