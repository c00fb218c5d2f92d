//! Signing in on previewd's own host: `/auth/signin` (to GitHub, or straight back with a
//! hand-off code for someone signed in here), `/auth/callback` (GitHub's way back), and
//! `/auth/signout`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;

use crate::dashboard::escape;
use crate::login::Who;
use crate::login::check::{self, cookies};
use crate::login::flow::{Flow, FlowError, PENDING_COOKIE, SIGNED_IN_COOKIE};
use crate::login::original::HANDOFF_PARAM;
use crate::server::app::App;

use super::{clear, cookie, cookie_name, live_preview, page, redirect, set_cookie};
use crate::login::visit::{Wakefulness, wakefulness};

#[derive(Deserialize)]
pub struct SignInQuery {
    rd: Option<String>,
}

/// `/auth/signin?rd=<a preview's address>`: straight back with a hand-off for someone
/// signed in here already, else to GitHub.
pub async fn signin(
    State(app): State<Arc<App>>,
    Query(query): Query<SignInQuery>,
    headers: HeaderMap,
) -> Response {
    let login = &app.login;
    let now = app.clock.now();
    let https = login.flow.https();
    // A browser's own navigation only: a sibling preview's page could otherwise load this
    // as an image, with the sign-in cookie, and spend the person's hand-off codes.
    let fetched = |name: &str, wanted: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|value| value == wanted)
    };
    if !(fetched("sec-fetch-mode", "navigate") && fetched("sec-fetch-dest", "document")) {
        return page(
            StatusCode::FORBIDDEN,
            "Sign-in",
            "Sign-in starts from the preview's address, opened in the browser.",
        );
    }
    let Some(rd) = query.rd else {
        return page(
            StatusCode::BAD_REQUEST,
            "No preview to return to",
            "Open the preview's address; it sends you here.",
        );
    };
    let back = match login.flow.return_to(&rd) {
        Ok(back) => back,
        Err(e) => return flow_page(&e),
    };
    let held: Vec<&str> = cookies(&headers, cookie_name(SIGNED_IN_COOKIE, https)).collect();
    let person = Flow::who(&login.sealer, &held, now);
    // ingress-nginx sends here the 401 of a check that woke the preview (`auth::waking`):
    // the waking page, for whoever the check let in (anyone, for a public preview), and
    // to nobody else the news that a private preview is in use.
    if let crate::login::flow::Return::Preview(original) = &back
        && let Ok(Some(preview)) =
            crate::db::login::preview_by_host(&app.state, &original.host).await
        && preview.live
        && wakefulness(&preview, now) == Wakefulness::Waking
    {
        let rule = check::rule_for(&app.config, &preview);
        let entitled = rule == crate::config::Access::Public
            || match &person {
                Some(person) => matches!(
                    login.access.may_enter(person, &preview, rule).await,
                    crate::login::access::Answer::Allowed
                ),
                None => false,
            };
        if entitled {
            return super::waking::page(&headers, &original.url_without_passes(None));
        }
    }
    if let Some(person) = person {
        return finish(&app, person, &back, None).await;
    }
    match login.flow.start(&login.sealer, &back, now) {
        Ok((authorize, pending)) => {
            let mut answer = redirect(&authorize);
            set_cookie(
                &mut answer,
                &cookie(PENDING_COOKIE, &pending, https, crate::login::PENDING_TTL),
            );
            answer
        }
        Err(e) => flow_page(&e),
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `/auth/callback`: GitHub's redirect back, with the code and the `state` this browser's
/// pending cookie must hold.
pub async fn callback(
    State(app): State<Arc<App>>,
    Query(query): Query<CallbackQuery>,
    headers: HeaderMap,
) -> Response {
    let login = &app.login;
    let now = app.clock.now();
    let https = login.flow.https();
    if let Some(error) = query.error {
        return flow_page(&FlowError::Refused(error.chars().take(100).collect()));
    }
    let (Some(code), Some(state)) = (query.code, query.state) else {
        return flow_page(&FlowError::BadState);
    };
    let held: Vec<&str> = cookies(&headers, cookie_name(PENDING_COOKIE, https)).collect();
    let pending = match login.flow.resume(&login.sealer, &held, &state, now) {
        Ok(pending) => pending,
        Err(e) => return flow_page(&e),
    };
    let back = match login.flow.return_to(&pending.rd) {
        Ok(back) => back,
        Err(e) => return flow_page(&e),
    };
    let person = match login.flow.exchange(&app.state, &code, &pending, now).await {
        Ok(person) => person,
        Err(e) => {
            tracing::info!(reason = %e, "sign-in failed");
            return flow_page(&e);
        }
    };
    tracing::info!(login = %person.login, "signed in");
    let exp = now + login.session_ttl;
    let signed = Flow::signed_in(&login.sealer, person.clone(), exp);
    finish(
        &app,
        person,
        &back,
        Some(cookie(SIGNED_IN_COOKIE, &signed, https, login.session_ttl)),
    )
    .await
}

/// Someone signed in, on the way to `back`: a hand-off code if they may enter, else a page
/// saying why not. `signed` is the signed-in cookie to set (a fresh sign-in), and the
/// pending one is cleared either way.
async fn finish(
    app: &App,
    person: crate::login::Person,
    back: &crate::login::flow::Return,
    signed: Option<String>,
) -> Response {
    let now = app.clock.now();
    let https = app.login.flow.https();
    let original = match back {
        crate::login::flow::Return::Preview(original) => original,
        crate::login::flow::Return::Here(path) => {
            // The dashboard: who may read what is asked per repository as it is shown.
            let mut answer = redirect(path);
            if let Some(signed) = signed {
                set_cookie(&mut answer, &signed);
            }
            set_cookie(&mut answer, &clear(PENDING_COOKIE, https));
            return answer;
        }
    };
    let preview = match live_preview(app, &original.host).await {
        Ok(preview) => preview,
        Err(page) => return page,
    };
    let rule = check::rule_for(&app.config, &preview);
    let mut answer = match app.login.access.may_enter(&person, &preview, rule).await {
        crate::login::access::Answer::Allowed
            if !app.login.handoffs.may_mint(&person.login, now) =>
        {
            page(
                StatusCode::TOO_MANY_REQUESTS,
                "Too many sign-ins",
                "You signed in to previews too often this minute; try again in a minute.",
            )
        }
        crate::login::access::Answer::Allowed => {
            let code = check::handoff(&app.login, Who::Person(person), &original.host, now);
            redirect(&original.url_without_passes(Some((HANDOFF_PARAM, &code))))
        }
        crate::login::access::Answer::Refused => page(
            StatusCode::FORBIDDEN,
            "You may not open this preview",
            &format!(
                "GitHub says <b>{}</b> {} <b>{}</b>. Ask for access there, or ask someone who \
                 can write to the repository for a share link (<code>/preview share 24h</code> \
                 on the pull request).",
                escape(&person.login),
                match rule {
                    crate::config::Access::Org => "is not a member of the organisation owning",
                    _ => "cannot read",
                },
                escape(preview.key.repo.as_str()),
            ),
        ),
        crate::login::access::Answer::Unknown(why) => {
            tracing::warn!(reason = %why, "access could not be asked");
            page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "GitHub could not be asked who may open this preview.",
            )
        }
    };
    if let Some(signed) = signed {
        set_cookie(&mut answer, &signed);
    }
    set_cookie(&mut answer, &clear(PENDING_COOKIE, https));
    answer
}

/// `GET /auth/signout`: a page with the button that signs out (a `POST`, so that no other
/// site's link or image signs anyone out).
pub async fn signout_page() -> Response {
    let mut answer = page(
        StatusCode::OK,
        "Sign out",
        "<form method=\"post\" action=\"/auth/signout\"><button type=\"submit\">Sign out of \
         previewd</button></form>",
    );
    // The dashboard's policy allows no form at all; this page's one posts here.
    answer.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; \
             base-uri 'none'; form-action 'self'",
        ),
    );
    answer
}

/// `POST /auth/signout`: forgets the sign-in on previewd's host (a preview host's session
/// ends with its lifetime, or once access is revoked at GitHub and the cache expires).
/// Only from previewd's own pages: a browser's `Sec-Fetch-Site` or `Origin` says so.
pub async fn signout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let same_site = text("sec-fetch-site").is_none_or(|site| site == "same-origin")
        && text("origin").is_none_or(|origin| {
            app.config
                .public_url
                .as_deref()
                .is_some_and(|public| public.trim_end_matches('/') == origin)
        });
    if !same_site {
        return page(
            StatusCode::FORBIDDEN,
            "Sign out",
            "Sign out from previewd's own page: <a href=\"/auth/signout\">/auth/signout</a>.",
        );
    }
    let https = app.login.flow.https();
    let mut answer = page(
        StatusCode::OK,
        "Signed out",
        "You are signed out of previewd.",
    );
    set_cookie(&mut answer, &clear(SIGNED_IN_COOKIE, https));
    answer
}

fn flow_page(e: &FlowError) -> Response {
    let status = match e {
        FlowError::Off => StatusCode::FORBIDDEN,
        FlowError::BadReturn(_) | FlowError::BadState => StatusCode::BAD_REQUEST,
        FlowError::Busy => StatusCode::TOO_MANY_REQUESTS,
        FlowError::Refused(_) => StatusCode::FORBIDDEN,
        FlowError::GitHub(_) => StatusCode::BAD_GATEWAY,
    };
    let text = match e {
        FlowError::Off => "Sign-in is not configured here. Ask someone who can write to the \
            repository for a share link (<code>/preview share 24h</code>)."
            .to_owned(),
        other => escape(&other.to_string()),
    };
    page(status, "Sign-in", &text)
}
