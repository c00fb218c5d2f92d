//! Share links on previewd's own host: `/auth/share` reads the pass from the link's
//! fragment (no server or proxy ever logs it) and answers with a one-time code to the
//! preview.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Deserialize;

use crate::dashboard::escape;
use crate::db;
use crate::login::check;
use crate::login::original::{HANDOFF_PARAM, Original};
use crate::login::{Purpose, SharePass, Who};
use crate::server::app::App;

use super::{live_preview, page, redirect};

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
    let preview = match live_preview(&app, &pass.host).await {
        Ok(preview) => preview,
        Err(page) => return page,
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
