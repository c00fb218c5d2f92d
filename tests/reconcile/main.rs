//! The reconciler with the directory sink: intent in, Application files out, teardown to
//! the last row, and the failures in between.

#[path = "../common/mod.rs"]
mod common;

mod applying;
mod changes;
mod config;
mod teardown;
mod templates;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Delivery, TestApp};
use previewd::reconcile::Reconciler;
use previewd::seal::SealingCert;
use previewd::sink::DirectorySink;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");
pub(crate) const APP: &str = "pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers";
pub(crate) const HELLO: &str = "codertocat/hello-world";

pub(crate) fn reconciler(app: &TestApp, config: previewd::config::Config) -> Arc<Reconciler> {
    let cert = SealingCert::from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-cert.pem")).unwrap(),
        common::NOW,
    )
    .unwrap();
    let certs = config
        .clusters
        .iter()
        .map(|c| (c.name.clone(), cert.clone()))
        .collect();
    Arc::new(Reconciler::new(
        app.state().clone(),
        config,
        previewd::sink::Sink::Directory(DirectorySink::new(rendered(app))),
        certs,
        None,
        Arc::new(app.clock.clone()),
    ))
}

pub(crate) fn rendered(app: &TestApp) -> PathBuf {
    app.dir.path().join("rendered")
}

pub(crate) fn file(app: &TestApp) -> Option<String> {
    std::fs::read_to_string(rendered(app).join(format!("{APP}.yaml"))).ok()
}

/// A previewd with the fixture PR opened and one reconcile pass made.
pub(crate) async fn opened_and_reconciled() -> (TestApp, Arc<Reconciler>) {
    let app = TestApp::start().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    (app, reconciler)
}

pub(crate) async fn whats(app: &TestApp) -> Vec<String> {
    app.history(HELLO, 2)
        .await
        .into_iter()
        .map(|h| h.0)
        .collect()
}
