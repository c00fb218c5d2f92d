//! A webhook delivery as an extractor: its headers screened before a byte of the body is
//! read, the body read within the limits, the signature verified and the payload parsed.
//! Every refusal is counted here, under the event's name only once the signature verified,
//! and logged (unverified ones summed up a minute at a time, `refusals`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, HttpBody};
use axum::extract::{FromRequest, Request};
use axum::http::HeaderMap;

use crate::metrics::DeliveryOutcome;
use crate::server::app::App;
use crate::webhook::{self, Headers, Rejection};

use super::error::Error;
use super::{BODY_TIMEOUT, MAX_BODY};

/// A delivery whose signature verified and whose payload parsed.
pub struct Verified {
    pub delivery: webhook::Delivery,
    /// When the request reached the handler, for the intake latency.
    pub started: Instant,
}

impl FromRequest<Arc<App>> for Verified {
    type Rejection = Error;

    async fn from_request(request: Request, app: &Arc<App>) -> Result<Self, Error> {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let mut verified = None;
        match receive(app, &parts.headers, body, &mut verified).await {
            Ok(delivery) => Ok(Self { delivery, started }),
            Err(error) => {
                let guid = header(&parts.headers, "x-github-delivery").unwrap_or("-");
                if verified.is_some() {
                    // Signed by whoever holds the secret: GitHub's own, each worth a line.
                    tracing::warn!(delivery = %guid, reason = %error, "delivery rejected");
                } else {
                    let detail = format!("delivery={guid} reason={error}");
                    app.refusals.refused(error.status().as_u16(), &detail);
                }
                app.metrics.delivery(
                    verified.as_deref(),
                    DeliveryOutcome::Rejected,
                    started.elapsed(),
                );
                Err(error)
            }
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The delivery, or why not; `verified` is set to its event once the signature verified.
async fn receive(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    verified: &mut Option<String>,
) -> Result<webhook::Delivery, Error> {
    let received = Headers {
        event: header(headers, "x-github-event"),
        guid: header(headers, "x-github-delivery"),
        hook_id: header(headers, "x-github-hook-id"),
        signature: header(headers, "x-hub-signature-256"),
        content_type: header(headers, "content-type"),
    };
    let secret = app.config.github.webhook_secret.as_ref();
    // Everything the headers alone decide is decided before a byte of the body is read.
    webhook::screen(secret, received)?;
    let body = read_body(app, body).await?;
    let delivery = webhook::receive(secret, received, &body).inspect_err(|e| {
        if !matches!(e, Rejection::BadSignature(_)) {
            *verified = received.event.map(str::to_owned);
        }
    })?;
    *verified = Some(delivery.event.clone());
    Ok(delivery)
}

/// The body, within [`BODY_TIMEOUT`] and [`MAX_BODY`], holding its share of
/// [`super::MAX_BUFFERED`] while it is read. A declared length over the limit is refused
/// unread; a body of unknown length (chunked) reserves the whole limit.
async fn read_body(app: &App, mut body: Body) -> Result<Vec<u8>, Error> {
    // hyper's size hint is the Content-Length, exactly (hyper-1.12.0 src/body/incoming.rs,
    // `Incoming::size_hint`); a chunked body has none.
    let hint = body.size_hint();
    if hint.lower() > MAX_BODY as u64 {
        return Err(Error::TooLarge);
    }
    let reserve = hint.exact().map_or(MAX_BODY, |n| n as usize);
    let _permit = app
        .buffered
        .clone()
        .try_acquire_many_owned(u32::try_from(reserve).unwrap_or(u32::MAX))
        .map_err(|_| Error::Busy)?;
    let read = async {
        let mut bytes = Vec::with_capacity(reserve);
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| Error::BadBody(e.to_string()))?;
            if let Ok(data) = frame.into_data() {
                if bytes.len() + data.len() > MAX_BODY {
                    return Err(Error::TooLarge);
                }
                bytes.extend_from_slice(&data);
            }
        }
        Ok(bytes)
    };
    tokio::time::timeout(BODY_TIMEOUT, read)
        .await
        .map_err(|_| Error::SlowBody)?
}
