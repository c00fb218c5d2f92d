//! An answer sent while the request's body is still (partly) unread says `Connection:
//! close`. hyper closes such a connection after answering, since the rest of the body is
//! still on it; a client or a proxy that keeps upstream connections alive and is not told
//! so sends its next request down a closing socket (a broken pipe; a 502 from the proxy).
//! Every route is covered: a delivery refused on its headers, a wrong method, a report
//! whose path does not parse, a refused destroy.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Version, header};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};

pub async fn close_if_unread(request: Request, next: Next) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .is_some_and(|length| length.as_bytes() != b"0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    if !declared {
        return next.run(request).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let version = request.version();
    let (parts, body) = request.into_parts();
    let body = Body::new(Watched {
        inner: body,
        finished: finished.clone(),
    });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !finished.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        // An HTTP/1.0 client that asked for keep-alive: answered as 1.1, hyper would add
        // `keep-alive` to this header (`close, keep-alive`), which such a client obeys.
        if version == Version::HTTP_10 {
            *response.version_mut() = Version::HTTP_10;
        }
    }
    response
}

/// A body that notes when it was read to its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
