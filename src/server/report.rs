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

use super::error::Error;
use super::{BODY_TIMEOUT, MAX_REPORT};
use crate::db;
use crate::server::app::App;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SizeReport {
    token: String,
    /// A JSON number: `271.0` is the integer 271 to JSON Schema, and so here.
    bytes: serde_json::Number,
}

/// The size in bytes, when `number` is a whole, non-negative one.
fn whole_bytes(number: &serde_json::Number) -> Option<i64> {
    // Up to 2^53, as the API document says: the largest a float spells exactly, and 8 PiB,
    // past any database.
    const MAX: i64 = 1 << 53;
    if let Some(n) = number.as_u64() {
        return i64::try_from(n).ok().filter(|n| *n <= MAX);
    }
    number
        .as_f64()
        .filter(|f| f.fract() == 0.0 && (0.0..=MAX as f64).contains(f))
        .map(|f| f as i64)
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
    let bytes = whole_bytes(&report.bytes)
        .ok_or_else(|| Error::BadBody("bytes is not a whole number of bytes".into()))?;
    let repo = format!("{owner}/{name}");
    let digest = db::report_digest(&app.state, &repo, generation.into())
        .await
        .map_err(|e| Error::State(e.into()))?;
    // One answer for a generation previewd does not know (or no longer builds) and for a
    // wrong token: a stranger learns nothing about which generations exist.
    if !digest.is_some_and(|d| crate::secrets::report_token_matches(&report.token, &d)) {
        return Err(Error::ReportRefused);
    }
    db::record_template_size(&app.state, &repo, generation.into(), bytes, app.clock.now())
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

#[cfg(test)]
mod tests {
    use super::whole_bytes;

    #[test]
    fn a_size_is_a_whole_non_negative_number_however_json_spells_it() {
        let of = |text: &str| whole_bytes(&serde_json::from_str(text).unwrap());
        assert_eq!(of("271"), Some(271));
        assert_eq!(of("271.0"), Some(271));
        assert_eq!(of("2.71e2"), Some(271));
        assert_eq!(of("271.5"), None);
        assert_eq!(of("-1"), None);
        assert_eq!(of("1e300"), None);
        assert_eq!(of("9007199254740992"), Some(1 << 53));
        assert_eq!(of("9007199254740993"), None, "past the document's maximum");
        assert_eq!(of("18446744073709551615"), None, "past i64");
    }
}
