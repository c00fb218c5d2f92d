//! The login's routes: `/auth/check` (the ingress controller's forward-auth call), and the
//! sign-in pages on previewd's own host (`/auth/signin`, `/auth/callback`,
//! `/auth/signout`). Each verifies, asks `login`, and answers; the decisions are
//! `login::check` and `login::flow`.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::dashboard::{escape, html_answer};
use crate::db;
use crate::login::check::{self, Asked, Refusal, Verdict, cookies};
use crate::login::flow::{Flow, FlowError, PENDING_COOKIE, SIGNED_IN_COOKIE};
use crate::login::original::{HANDOFF_PARAM, Original, Proxy};
use crate::login::{Purpose, SharePass, Who};
use crate::server::app::App;

use super::error::Error;

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
    let verdict = check::check(&app.login, &app.state, &app.config, &asked, now)
        .await
        .map_err(Error::State)?;
    let original = || Original::from_headers(headers, rest.as_deref(), proxy);
    let mut answer = match verdict {
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
    if let Some(person) = Flow::who(&login.sealer, &held, now) {
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
    let person = match login.flow.exchange(&code, &pending, now).await {
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
    let preview = match db::login::preview_by_host(&app.state, &original.host).await {
        Ok(Some(preview)) if preview.live => preview,
        Ok(_) => {
            return page(
                StatusCode::NOT_FOUND,
                "No such preview",
                &format!(
                    "{} is not a live preview's address.",
                    escape(&original.host)
                ),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "the state could not be read");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "previewd could not read its state.",
            );
        }
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

/// What the share page runs: the pass from the fragment into the form, posted at once.
const SHARE_SCRIPT: &str = "var p=location.hash.slice(1);if(p){document.getElementById('pass').value=p;\
history.replaceState(null,'',location.pathname+location.search);document.forms[0].submit();}";

#[derive(Deserialize)]
pub struct ShareQuery {
    rd: Option<String>,
}

/// `GET /auth/share?rd=<the preview>#<pass>`: a share link lands here; the page posts the
/// pass (which only the browser has read) back, so no log anywhere holds it.
pub async fn share_page(State(app): State<Arc<App>>, Query(query): Query<ShareQuery>) -> Response {
    use base64::Engine;
    use sha2::Digest;
    let rd = query.rd.unwrap_or_default();
    let mut answer = page(
        StatusCode::OK,
        "Opening the preview",
        &format!(
            "<form method=\"post\" action=\"/auth/share\"><input type=\"hidden\" id=\"pass\" \
             name=\"pass\"><input type=\"hidden\" name=\"rd\" value=\"{}\"><button \
             type=\"submit\">Open the preview</button></form><noscript>This page needs JavaScript \
             to read the link.</noscript><script>{SHARE_SCRIPT}</script>",
            escape(&rd)
        ),
    );
    let hash = base64::engine::general_purpose::STANDARD
        .encode(sha2::Sha256::digest(SHARE_SCRIPT.as_bytes()));
    if let Ok(policy) = HeaderValue::from_str(&format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         frame-ancestors 'none'; base-uri 'none'; form-action 'self' {}",
        app.login.flow.preview_sources()
    )) {
        answer
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    answer.headers_mut().insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    answer
}

/// `POST /auth/share` (`pass`, `rd`): a valid share's pass becomes a one-time hand-off
/// code to its preview (at `rd` when that is an address of the same host).
pub async fn share(State(app): State<Arc<App>>, body: axum::body::Bytes) -> Response {
    let now = app.clock.now();
    let field = |name: &str| {
        std::str::from_utf8(&body).ok().and_then(|text| {
            text.split('&').find_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                (key == name).then(|| {
                    percent_encoding::percent_decode_str(&value.replace('+', " "))
                        .decode_utf8_lossy()
                        .into_owned()
                })
            })
        })
    };
    let gone = || {
        page(
            StatusCode::UNAUTHORIZED,
            "This link does not open the preview",
            "It has expired or was revoked. Ask a writer for a new one \
             (<code>/preview share 24h</code>), or sign in with GitHub.",
        )
    };
    let Some(pass) =
        field("pass").and_then(|pass| app.login.sealer.open::<SharePass>(Purpose::Share, &pass))
    else {
        return gone();
    };
    let preview = match db::login::preview_by_host(&app.state, &pass.host).await {
        Ok(Some(preview)) if preview.live => preview,
        Ok(_) => {
            return page(
                StatusCode::FORBIDDEN,
                "No such preview",
                "This preview has ended.",
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "the state could not be read");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "previewd could not read its state.",
            );
        }
    };
    match db::login::share(&app.state, &pass.share).await {
        Ok(Some(row)) if row.preview_id == preview.id && row.is_valid(now) => {}
        _ => return gone(),
    }
    if !app
        .login
        .handoffs
        .may_mint(&format!("share:{}", pass.share), now)
    {
        return page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many openings",
            "This link was opened too often this minute; try again in a minute.",
        );
    }
    let https = app.login.flow.https();
    let back = field("rd")
        .and_then(|rd| match app.login.flow.return_to(&rd) {
            Ok(crate::login::flow::Return::Preview(original)) if original.host == pass.host => {
                Some(original)
            }
            _ => None,
        })
        .map_or_else(
            || format!("{}://{}/", if https { "https" } else { "http" }, pass.host),
            |original| original.url_without_passes(None),
        );
    let back = Original::from_url(&back).map_or(back.clone(), |original| {
        let code = check::handoff(
            &app.login,
            Who::Share { share: pass.share },
            &pass.host,
            now,
        );
        original.url_without_passes(Some((HANDOFF_PARAM, &code)))
    });
    redirect(&back)
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
