//! A sleeping preview's first request: the wake recorded and the reconciler told, and the
//! page that says so and comes back by itself (a 503 with `Retry-After` to any client that
//! does not ask for HTML). Traefik and Envoy pass the check's answer to the browser as it
//! is; ingress-nginx cannot (`auth_request` turns any answer but 2xx, 401 and 403 into a
//! 500), so there the check answers 401 and the sign-in route, where a 401 sends the
//! browser, shows the same page while the preview wakes.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::dashboard::{escape, html_answer};
use crate::login::visit::Visit;
use crate::server::app::App;

/// Seconds a client is asked to wait before it tries again.
pub const RETRY_AFTER: u64 = 5;

/// Records what a request the check let in says: the wake of a sleeping preview (then the
/// reconciler is told at once: previewd's share of a wake is this write and one pass), and
/// a use at most once a minute, written off the request's path.
pub async fn record(app: &App, visit: Visit, now: i64) {
    if visit.wake {
        let why = format!("a request to {}", visit.host);
        match crate::db::sleep::wake(&app.state, visit.id, &why, now).await {
            Ok(true) => {
                tracing::info!(preview = %visit.key, "waking on a request");
                app.work.notify(visit.key.clone());
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(preview = %visit.key, error = %e, "the wake could not be recorded")
            }
        }
    } else if visit.used && app.login.uses.take(visit.id, now) {
        let state = app.state.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::db::sleep::record_use(&state, visit.id, now).await {
                tracing::warn!(preview = %visit.key, error = %e, "a use could not be recorded");
            }
        });
    }
}

/// The waking page for `url` (the address to come back to), or the 503 a client that
/// does not read HTML gets.
pub fn page(headers: &HeaderMap, url: &str) -> Response {
    let html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/html"));
    let mut answer = if html {
        html_answer(StatusCode::SERVICE_UNAVAILABLE, html_of(url))
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "This preview is waking up; try again in a few seconds.\n",
        )
            .into_response()
    };
    let headers = answer.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

fn html_of(url: &str) -> String {
    let url = escape(url);
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{RETRY_AFTER};url={url}\">\
         <title>Waking up</title><meta name=\"viewport\" content=\"width=device-width\"></head>\
         <body style=\"font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em\">\
         <h1>Waking up</h1><p>This preview was asleep after a while without visits. It is \
         starting again and this page turns into it when it is ready, usually within a \
         minute.</p><p><a href=\"{url}\">Try now</a></p></body></html>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_waking_page_comes_back_to_the_preview_by_itself() {
        insta::assert_snapshot!(html_of("https://pr-7.preview.example.com/a?b=1&c=\"2\""));
    }

    #[test]
    fn a_client_that_reads_no_html_gets_a_503_with_retry_after() {
        let answer = page(&HeaderMap::new(), "https://x/");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.headers()[header::RETRY_AFTER], "5");
        assert_eq!(answer.headers()[header::CACHE_CONTROL], "no-store");
    }
}
