//! `POST /api/templates/{owner}/{repo}/{generation}/size`: a template generation's size Job
//! (#16) reports the size it measured on the database server, with the generation's own
//! report token. The one way a number travels from a cluster back to previewd: previewd has
//! no connection to the database server, and nothing Argo CD reports can carry it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::BODY_TIMEOUT;
use super::error::Error;
use crate::app::App;
use crate::db;

/// A report is one small JSON object.
pub const MAX_REPORT: usize = 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeReport {
    token: String,
    bytes: u64,
}

pub async fn template_size(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String, u32)>, PathRejection>,
    body: Body,
) -> Result<StatusCode, Error> {
    let Path((owner, name, generation)) = path?;
    // Read within the body deadline: a slow sender holds a connection slot for 30 s at most.
    let body = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_REPORT))
        .await
        .map_err(|_| Error::SlowBody)?
        .map_err(|_| Error::ReportTooLarge)?;
    let report: SizeReport = serde_json::from_slice(&body).map_err(|e| {
        Error::BadBody(format!("not a size report ({{\"token\", \"bytes\"}}): {e}"))
    })?;
    let bytes = i64::try_from(report.bytes)
        .map_err(|_| Error::BadBody("bytes is larger than any database".into()))?;
    let repo = format!("{owner}/{name}");
    let digest = db::report_digest(&app.pool, &repo, generation.into())
        .await
        .map_err(|e| Error::State(e.into()))?;
    // One answer for a generation previewd does not know (or no longer builds) and for a
    // wrong token: a stranger learns nothing about which generations exist.
    if !digest.is_some_and(|d| crate::secrets::report_token_matches(&report.token, &d)) {
        return Err(Error::ReportRefused);
    }
    db::record_template_size(&app.pool, &repo, generation.into(), bytes, app.clock.now())
        .await
        .map_err(|e| Error::State(e.into()))?;
    tracing::info!(
        repo,
        generation,
        bytes,
        "template generation's size reported"
    );
    Ok(StatusCode::NO_CONTENT)
}
