//! The sweeper with a manual clock: expiry, the warning before it, pinned previews, quotas
//! that queue or evict, a crash in the middle of a pass, the lease, and the dry run.

#[path = "../common/mod.rs"]
mod common;

mod expiry;
mod orphans;
mod passes;
mod quotas;
mod retention;
mod sleep;

use std::sync::Arc;

use common::{Delivery, TestApp};
use previewd::reconcile::Reconciler;
use previewd::sink::{DirectorySink, Sink};
use previewd::sweep::{Orphans, Pass, Sweeper};
use serde_json::json;

pub(crate) const HOUR: i64 = 3600;
pub(crate) const DAY: i64 = 24 * HOUR;

pub(crate) async fn app_with(policy: &str) -> TestApp {
    TestApp::start_with(&format!("[defaults]\n{policy}\n")).await
}

fn sink(app: &TestApp) -> Sink {
    Sink::Directory(DirectorySink::new(app.dir.path().join("rendered")))
}

pub(crate) fn reconciler(app: &TestApp) -> Arc<Reconciler> {
    Arc::new(common::directory_reconciler(app))
}

pub(crate) fn sweeper(app: &TestApp) -> Sweeper {
    Sweeper::new(
        app.state().clone(),
        app.app.config.clone(),
        Arc::new(app.clock.clone()),
    )
    .with_sink(sink(app))
}

/// PR `number` of the Hello-World fixture, opened by `author`.
pub(crate) fn opened(number: u64, author: &str) -> Delivery {
    Delivery::fixture("pull_request.opened")
        .number(number)
        .edit(|body| body["pull_request"]["user"]["login"] = json!(author))
        .guid(&format!("opened-{number}"))
}

pub(crate) async fn live(app: &TestApp) -> Vec<(i64, String, String)> {
    app.rows("SELECT number, desired, observed FROM previews ORDER BY number")
        .await
}
