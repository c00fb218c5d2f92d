//! The login's routes: `/auth/check` and `/auth/forward` (the ingress controller's
//! forward-auth call) here, the sign-in pages on previewd's own host in `signin`, share
//! links in `share`. Each verifies, asks `login`, and answers; the decisions are
//! `login::check` and `login::flow`; the pages' and cookies' shapes are here.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::dashboard::{escape, html_answer};
use crate::login::check::{self, Asked, Refusal, Verdict};
use crate::login::original::{Original, Proxy};
use crate::server::app::App;

use super::error::Error;

mod share;
mod signin;
pub mod waking;

pub use share::{share, share_page};
pub use signin::{callback, signin, signout, signout_page};

/// The header naming the user to the proxy (and, passed on, to the app).
pub const USER_HEADER: &str = "x-auth-request-user";

/// `/auth/check` (ingress-nginx; `?host=` pins the preview its Ingress serves): 401
/// sends the browser to `auth-signin`, and a 2xx's `Set-Cookie` is copied to the answer.
pub async fn check(
    State(app): State<Arc<App>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, Error> {
    answer_check(&app, &uri, &headers, Proxy::Nginx).await
}

/// `/auth/forward` and `/auth/forward/*` (Traefik; Envoy appends the original path and
/// query): any non-2xx answer reaches the browser whole, so previewd redirects itself.
pub async fn forward(
    State(app): State<Arc<App>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> Result<Response, Error> {
    answer_check(&app, &uri, &headers, Proxy::Forwarding).await
}

async fn answer_check(
    app: &App,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    proxy: Proxy,
) -> Result<Response, Error> {
    let (rest, pinned) = match proxy {
        // The query is previewd's own: the host the Ingress pins.
        Proxy::Nginx => (
            None,
            uri.query().and_then(|query| {
                query
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("host="))
                    .map(str::to_owned)
            }),
        ),
        // What follows the route is the original path, and its query.
        Proxy::Forwarding => {
            let path = uri.path().strip_prefix("/auth/forward").unwrap_or("");
            let rest = match uri.query() {
                Some(query) => format!("{path}?{query}"),
                None => path.to_owned(),
            };
            (Some(rest).filter(|rest| rest.starts_with('/')), None)
        }
    };
    let asked = Asked {
        headers,
        rest: rest.as_deref(),
        proxy,
        pinned: pinned.as_deref(),
    };
    let now = app.clock.now();
    let checked = check::check(&app.login, &app.state, &app.config, &asked, now)
        .await
        .map_err(Error::State)?;
    if let Some(visit) = checked.visit {
        waking::record(app, visit, now).await;
    }
    let original = || Original::from_headers(headers, rest.as_deref(), proxy);
    let mut answer = match checked.verdict {
        // Traefik and Envoy pass a non-2xx answer to the browser whole: a fresh session is
        // set with a redirect to the address without the code, which also leaves no code
        // in the browser's history (ingress-nginx copies `Set-Cookie` from a 2xx instead).
        Verdict::Enter {
            cookie: Some(cookie),
            ..
        } if proxy == Proxy::Forwarding => match original() {
            Ok(original) => {
                let mut answer = redirect(&original.url_without_passes(None));
                set_cookie(&mut answer, &cookie);
                answer
            }
            Err(_) => StatusCode::FORBIDDEN.into_response(),
        },
        Verdict::Enter { user, cookie } => {
            let mut answer = StatusCode::OK.into_response();
            if let Some(user) = user.and_then(|u| HeaderValue::from_str(&u).ok()) {
                answer.headers_mut().insert(USER_HEADER, user);
            }
            if let Some(cookie) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
                answer.headers_mut().insert(header::SET_COOKIE, cookie);
            }
            answer
        }
        Verdict::SignIn if proxy == Proxy::Forwarding => {
            match (original(), &app.config.public_url) {
                (Ok(original), Some(public)) => {
                    let back = format!("{}{}", original.origin(), original.path_and_query);
                    redirect(&format!("{public}/auth/signin?rd={}", encode(&back)))
                }
                _ => StatusCode::UNAUTHORIZED.into_response(),
            }
        }
        Verdict::SignIn => StatusCode::UNAUTHORIZED.into_response(),
        // Traefik and Envoy show the browser this answer: the waking page itself.
        Verdict::Waking { cookie } if proxy == Proxy::Forwarding => match original() {
            Ok(original) => {
                let mut answer = waking::page(headers, &original.url_without_passes(None));
                if let Some(cookie) = cookie {
                    set_cookie(&mut answer, &cookie);
                }
                answer
            }
            Err(_) => StatusCode::FORBIDDEN.into_response(),
        },
        // ingress-nginx turns anything but 2xx, 401 and 403 into a 500: a 401 sends the
        // browser to the sign-in route, which shows the waking page while it wakes.
        Verdict::Waking { .. } => StatusCode::UNAUTHORIZED.into_response(),
        Verdict::Refused(why) => (StatusCode::FORBIDDEN, refusal_text(&why)).into_response(),
    };
    // The proxy must not keep an answer longer than a revocation takes.
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(answer)
}

fn refusal_text(why: &Refusal) -> String {
    match why {
        Refusal::Unreadable(why) => format!("the proxy's request is unreadable: {why}"),
        Refusal::NotThisHost => "the request names another host than the one it reached".into(),
        Refusal::NotAPreview => "this host is not a preview's".into(),
        Refusal::Ended => "this preview has ended".into(),
        Refusal::NoAccess { login, rule } => format!(
            "{login} may not open this preview (access: {})",
            rule.as_str()
        ),
        Refusal::Unknown(_) => "GitHub could not be asked who may open this preview".into(),
    }
}

fn page(status: StatusCode, title: &str, body_html: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <meta name=\"viewport\" content=\"width=device-width\"></head><body \
         style=\"font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em\">\
         <h1>{}</h1><p>{body_html}</p></body></html>",
        escape(title),
        escape(title)
    );
    let mut answer = html_answer(status, html);
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    answer
}

/// The live preview `host` serves, or the page saying there is none (403: an ended
/// preview admits no one, as the check says) or that the state could not be read.
async fn live_preview(app: &App, host: &str) -> Result<crate::db::login::HostPreview, Response> {
    match crate::db::login::preview_by_host(&app.state, host).await {
        Ok(Some(preview)) if preview.live => Ok(preview),
        Ok(_) => Err(page(
            StatusCode::FORBIDDEN,
            "No such preview",
            &format!(
                "{} is not a live preview's address; the preview may have ended.",
                crate::dashboard::escape(host)
            ),
        )),
        Err(e) => {
            tracing::warn!(error = %e, "the state could not be read");
            Err(page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "previewd could not read its state.",
            ))
        }
    }
}

fn redirect(location: &str) -> Response {
    let mut answer = StatusCode::FOUND.into_response();
    if let Ok(location) = HeaderValue::from_str(location) {
        answer.headers_mut().insert(header::LOCATION, location);
    }
    answer
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // The hand-off code rides in the URL: no page it reaches learns where it came from.
    answer.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    answer
}

/// `__Host-` names on https; without the prefix on plain http (loopback only).
fn cookie_name(name: &'static str, https: bool) -> &'static str {
    if https {
        name
    } else {
        name.trim_start_matches("__Host-")
    }
}

fn cookie(name: &'static str, value: &str, https: bool, max_age: i64) -> String {
    let secure = if https { "; Secure" } else { "" };
    format!(
        "{}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}",
        cookie_name(name, https)
    )
}

fn clear(name: &'static str, https: bool) -> String {
    cookie(name, "", https, 0)
}

fn set_cookie(answer: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        answer.headers_mut().append(header::SET_COOKIE, value);
    }
}

fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
