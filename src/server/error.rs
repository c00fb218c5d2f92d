//! Every way a request can fail, and the one place each is given its status code, its
//! headers and its body (JSON for the API and deliveries, a page for the dashboard, plain
//! text for probes).

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::intake::IntakeError;
use crate::view::PagingError;
use crate::webhook::Rejection;

use super::{BODY_TIMEOUT, MAX_BODY, MAX_REPORT};

/// Why a request was not answered as asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The delivery's headers, signature or payload are wrong.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("body is larger than {MAX_BODY} bytes")]
    TooLarge,
    #[error("body could not be read: {0}")]
    BadBody(String),
    #[error("the body did not arrive within {} s", BODY_TIMEOUT.as_secs())]
    SlowBody,
    /// Too many delivery bytes are being buffered at once.
    #[error("too many deliveries are being received at once; retry later")]
    Busy,
    /// The delivery could not be recorded: not the sender's fault, and worth a redelivery.
    #[error(transparent)]
    Unrecorded(#[from] IntakeError),
    #[error(transparent)]
    Paging(#[from] PagingError),
    /// A path or query the route cannot read: a number that is no PR's, a limit that is
    /// no number.
    #[error("{0}")]
    Unreadable(String),
    #[error("a bearer token (api.token) is required")]
    Unauthorized,
    /// A template size report whose token is not its generation's (#16).
    #[error("the report token is not this template generation's")]
    ReportRefused,
    #[error("a size report is at most {MAX_REPORT} bytes")]
    ReportTooLarge,
    #[error("destroy through the API needs api.token to be set")]
    DestroyNeedsToken,
    #[error("share links through the API need api.token to be set")]
    SharingNeedsToken,
    /// The request is understood but the preview's state refuses it (a share of an ending
    /// preview, or past the most share links); the text says why.
    #[error("{0}")]
    Conflict(String),
    /// No preview (or no record at all) of the pull request asked for; the text says which.
    #[error("{0}")]
    NotFound(&'static str),
    /// A `Host` other than this machine's on a loopback `listen` (DNS rebinding).
    #[error("previewd listens on loopback and answers only for localhost")]
    ForeignHost,
    /// The state could not be read (or written, for a destroy).
    #[error("the state could not be read")]
    State(#[source] anyhow::Error),
    /// A probe or a scrape that cannot be answered; the text says what is wrong.
    #[error("{0}")]
    NotReady(String),
    /// The same failure, answered as a dashboard page.
    #[error(transparent)]
    Page(Box<Error>),
}

impl Error {
    /// The same failure, as a page of the dashboard.
    pub fn page(self) -> Self {
        Self::Page(Box::new(self))
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Rejected(Rejection::NoSecret | Rejection::BadSignature(_))
            | Self::Rejected(Rejection::MissingHeader("X-Hub-Signature-256"))
            | Self::Unauthorized
            | Self::ReportRefused => StatusCode::UNAUTHORIZED,
            Self::Rejected(_) | Self::BadBody(_) | Self::Paging(_) | Self::Unreadable(_) => {
                StatusCode::BAD_REQUEST
            }
            Self::TooLarge | Self::ReportTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::SlowBody => StatusCode::REQUEST_TIMEOUT,
            Self::DestroyNeedsToken | Self::SharingNeedsToken => StatusCode::FORBIDDEN,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::ForeignHost => StatusCode::MISDIRECTED_REQUEST,
            Self::Busy | Self::Unrecorded(_) | Self::State(_) | Self::NotReady(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Page(inner) => inner.status(),
        }
    }

    /// When a retry may succeed, in seconds.
    fn retry_after(&self) -> Option<&'static str> {
        match self {
            Self::Page(inner) => inner.retry_after(),
            Self::Busy => Some("5"),
            // Only after the busy timeout went by without the lock: a retry will do.
            Self::State(e) if crate::db::is_busy_error(e) => Some("1"),
            _ => None,
        }
    }

    /// What the client is told; a busy state says so, any other failure stays in the log.
    fn message(&self) -> String {
        match self {
            Self::State(e) if crate::db::is_busy_error(e) => "the state is busy; try again".into(),
            Self::Page(inner) => inner.message(),
            other => other.to_string(),
        }
    }
}

impl From<PathRejection> for Error {
    fn from(rejection: PathRejection) -> Self {
        Self::Unreadable(rejection.body_text())
    }
}

impl From<QueryRejection> for Error {
    fn from(rejection: QueryRejection) -> Self {
        Self::Unreadable(rejection.body_text())
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let failure = match &self {
            Self::Page(inner) => inner.as_ref(),
            other => other,
        };
        if let Self::State(e) = failure {
            tracing::warn!(error = %format!("{e:#}"), "request failed");
        }
        let status = self.status();
        let mut response = match &self {
            Self::Page(inner) => crate::dashboard::html_answer(
                status,
                crate::dashboard::problem_page(
                    status.canonical_reason().unwrap_or(""),
                    &inner.message(),
                ),
            ),
            Self::NotReady(text) => (status, format!("{text}\n")).into_response(),
            _ => (status, Json(json!({ "error": self.message() }))).into_response(),
        };
        let headers = response.headers_mut();
        if let Some(seconds) = self.retry_after() {
            headers.insert(
                header::RETRY_AFTER,
                header::HeaderValue::from_static(seconds),
            );
        }
        if matches!(self, Self::Unauthorized) {
            headers.insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Basic realm=\"previewd\", charset=\"UTF-8\""),
            );
        }
        response
    }
}
