//! GitHub's OAuth web flow and what a signed-in person's token reads, on the stand-in
//! (GitHub's web host and its API are the same server here), shaped as GitHub documents
//! them (docs.github.com: "Authorizing OAuth apps", "Troubleshooting OAuth app access
//! token request errors", "Troubleshooting authorization request errors", REST "Get the
//! authenticated user" and "Check organization membership for a user"):
//!
//! - `GET /login/oauth/authorize?client_id=&redirect_uri=&state=&scope=`: the stand-in's
//!   browser user (`Hub::sign_in_as`) approves at once: 302 to
//!   `redirect_uri?code=<fresh code>&state=<state>` (the registered callback URL when
//!   `redirect_uri` is left out). An unknown `client_id` or a `redirect_uri` GitHub would
//!   not accept for the app answers 400 with a page naming the problem (github.com shows
//!   an error page; its older docs describe a redirect to the registered callback with
//!   `error=redirect_uri_mismatch` instead). A browser user who refuses
//!   (`Hub::deny_sign_in`) is sent back with `error=access_denied`, as documented; with
//!   nobody signed in, the answer is GitHub's sign-in page (200), with no code.
//! - `POST /login/oauth/access_token` (client_id, client_secret, code, redirect_uri: in the
//!   query, a form-encoded or JSON body, or the client as HTTP Basic credentials): a
//!   `gho_` token, as JSON with `Accept: application/json`, form-encoded otherwise. Its
//!   errors answer 200, as GitHub's do: `incorrect_client_credentials`,
//!   `redirect_uri_mismatch`, `bad_verification_code` (unknown, already used, expired by
//!   `Hub::expire_codes`, or issued to another app). Codes are single-use.
//! - `GET /user` with `Authorization: Bearer <token>` (or `token <token>`): the token's
//!   person. An unknown `gho_` token answers 401 `Bad credentials`, no token 401
//!   `Requires authentication`; any other token is previewd's own (the configured
//!   `test-token`) and reads as the bot, as before.
//! - `GET /orgs/{org}/members/{username}`: 204 for a member (`Hub::add_member`), 404
//!   otherwise (what GitHub answers a token that can see the organization's members).
//!
//! What the redirect URL must be (GitHub's "Redirect URLs"): the registered callback
//! URL's scheme, its host or a subdomain of it ("host (excluding sub-domains)"), the same
//! port (any port for a loopback callback: "localhost redirect URLs"), and a path at or
//! under the callback's path.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};
use base64::Engine;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use rand::Rng;
use serde_json::{Value, json};

use super::{BOT, FakeGitHub, Hub, Params, Shared};

/// An OAuth app registered on the stand-in (`Hub::register_oauth_app`).
#[derive(Clone, Debug)]
pub struct OAuthApp {
    pub client_secret: String,
    /// The "Authorization callback URL" of the app's settings.
    pub callback_url: String,
}

/// A person on the stand-in.
#[derive(Clone, Debug, PartialEq)]
pub struct Person {
    pub login: String,
    pub id: u64,
}

/// A code handed out by the authorize page and not yet exchanged.
#[derive(Clone, Debug)]
pub struct Code {
    pub client_id: String,
    pub person: Person,
    /// The scopes asked for, comma-separated as GitHub answers them.
    pub scope: String,
    pub redirect_uri: String,
}

/// A user token issued by the token exchange.
#[derive(Clone, Debug)]
pub struct UserToken {
    pub client_id: String,
    pub person: Person,
    pub scope: String,
}

#[derive(Default)]
pub struct OAuth {
    /// Registered OAuth apps, by client id.
    pub apps: HashMap<String, OAuthApp>,
    /// Who the stand-in's browser is signed in to GitHub as; nobody at first.
    pub browser_user: Option<Person>,
    /// Whether the browser user refuses the app on the authorize page.
    pub denies: bool,
    /// Codes issued and not yet exchanged, by code.
    pub codes: HashMap<String, Code>,
    /// User tokens issued, by token.
    pub tokens: HashMap<String, UserToken>,
    /// Members of each organization, by organization (lowercase) then login (lowercase).
    pub members: HashMap<String, Vec<String>>,
}

impl Hub {
    /// Registers an OAuth app: its client id and secret, and its authorization callback URL.
    pub fn register_oauth_app(&mut self, client_id: &str, client_secret: &str, callback_url: &str) {
        self.oauth.apps.insert(
            client_id.into(),
            OAuthApp {
                client_secret: client_secret.into(),
                callback_url: callback_url.into(),
            },
        );
    }

    /// The stand-in's browser is signed in to GitHub as `login` (user id `id`), and approves
    /// whatever app asks (until `deny_sign_in`).
    pub fn sign_in_as(&mut self, login: &str, id: u64) {
        self.oauth.browser_user = Some(Person {
            login: login.into(),
            id,
        });
        self.oauth.denies = false;
    }

    /// The browser user refuses the app: the authorize page sends them back with
    /// `error=access_denied`.
    pub fn deny_sign_in(&mut self) {
        self.oauth.denies = true;
    }

    /// Every code handed out and not yet exchanged expires (GitHub's last ten minutes).
    pub fn expire_codes(&mut self) {
        self.oauth.codes.clear();
    }

    /// `login` is a member of `org`.
    pub fn add_member(&mut self, org: &str, login: &str) {
        let members = self.oauth.members.entry(org.to_lowercase()).or_default();
        if !members.contains(&login.to_lowercase()) {
            members.push(login.to_lowercase());
        }
    }

    /// `login` leaves `org`.
    pub fn remove_member(&mut self, org: &str, login: &str) {
        if let Some(members) = self.oauth.members.get_mut(&org.to_lowercase()) {
            members.retain(|m| *m != login.to_lowercase());
        }
    }

    /// The token is revoked (the person revoked the app, or it was deleted): `/user` answers
    /// 401 to it.
    pub fn revoke_token(&mut self, token: &str) {
        self.oauth.tokens.remove(token);
    }
}

impl FakeGitHub {
    /// `Hub::register_oauth_app`.
    pub fn register_oauth_app(&self, client_id: &str, client_secret: &str, callback_url: &str) {
        self.hub()
            .register_oauth_app(client_id, client_secret, callback_url);
    }

    /// `Hub::sign_in_as`.
    pub fn sign_in_as(&self, login: &str, id: u64) {
        self.hub().sign_in_as(login, id);
    }

    /// `Hub::add_member`.
    pub fn add_member(&self, org: &str, login: &str) {
        self.hub().add_member(org, login);
    }

    /// `Hub::remove_member`.
    pub fn remove_member(&self, org: &str, login: &str) {
        self.hub().remove_member(org, login);
    }
}

/// Query values as a browser and GitHub encode them: everything but RFC 3986's unreserved.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(value: &str) -> String {
    utf8_percent_encode(value, COMPONENT).to_string()
}

/// `url` with `pairs` added to its query.
fn with_query(url: &str, pairs: &[(&str, &str)]) -> String {
    let query = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{query}")
}

fn random(alphabet: &[u8], len: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

fn is_loopback(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1")
}

/// Whether GitHub accepts `redirect_uri` for an app whose callback URL is `callback`.
pub fn redirect_allowed(callback: &str, redirect_uri: &str) -> bool {
    let (Ok(callback), Ok(redirect)) = (callback.parse::<Uri>(), redirect_uri.parse::<Uri>())
    else {
        return false;
    };
    let (Some(c_scheme), Some(r_scheme)) = (callback.scheme_str(), redirect.scheme_str()) else {
        return false;
    };
    let (Some(c_host), Some(r_host)) = (callback.host(), redirect.host()) else {
        return false;
    };
    let (c_host, r_host) = (c_host.to_lowercase(), r_host.to_lowercase());
    let default_port = |scheme: &str| if scheme == "https" { 443 } else { 80 };
    let c_port = callback.port_u16().unwrap_or(default_port(c_scheme));
    let r_port = redirect.port_u16().unwrap_or(default_port(r_scheme));
    let host_ok = r_host == c_host || r_host.ends_with(&format!(".{c_host}"));
    let port_ok = r_port == c_port || (is_loopback(&c_host) && r_host == c_host);
    let (c_path, r_path) = (callback.path(), redirect.path());
    let path_ok = r_path == c_path
        || c_path == "/"
        || r_path.starts_with(&format!("{}/", c_path.trim_end_matches('/')));
    c_scheme.eq_ignore_ascii_case(r_scheme) && host_ok && port_ok && path_ok
}

fn error_page(problem: &str) -> Response {
    let body = format!(
        "<!DOCTYPE html><html><head><title>Error · GitHub</title></head>\
         <body><h1>Be careful!</h1><p>{problem}</p></body></html>"
    );
    (StatusCode::BAD_REQUEST, Html(body)).into_response()
}

fn found(location: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, location.to_owned())]).into_response()
}

pub async fn authorize(State(hub): State<Shared>, Query(params): Params) -> Response {
    let mut hub = hub.lock().unwrap();
    let client_id = params.get("client_id").cloned().unwrap_or_default();
    let Some(app) = hub.oauth.apps.get(&client_id).cloned() else {
        return error_page(&format!(
            "The client_id {client_id:?} is not the client ID of any OAuth app."
        ));
    };
    let redirect_uri = match params.get("redirect_uri") {
        None => app.callback_url.clone(),
        Some(uri) if redirect_allowed(&app.callback_url, uri) => uri.clone(),
        Some(uri) => {
            return error_page(&format!(
                "The redirect_uri is not associated with this application: {uri} \
                 (the authorization callback URL is {}).",
                app.callback_url
            ));
        }
    };
    let state = params.get("state").cloned();
    let with_state = |mut pairs: Vec<(&'static str, String)>| {
        if let Some(state) = &state {
            pairs.push(("state", state.clone()));
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        with_query(&redirect_uri, &pairs)
    };
    if hub.oauth.denies {
        return found(&with_state(vec![
            ("error", "access_denied".into()),
            (
                "error_description",
                "The user has denied your application access.".into(),
            ),
            (
                "error_uri",
                "https://docs.github.com/apps/managing-oauth-apps/troubleshooting-authorization-request-errors/#access-denied".into(),
            ),
        ]));
    }
    let Some(person) = hub.oauth.browser_user.clone() else {
        let page = "<!DOCTYPE html><html><head><title>Sign in to GitHub · GitHub</title></head>\
                    <body><form action=\"/session\" method=\"post\">Sign in to GitHub</form>\
                    </body></html>";
        return Html(page).into_response();
    };
    let scope = params
        .get("scope")
        .map(|s| {
            s.split([' ', ','])
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let code = random(b"0123456789abcdef", 20);
    hub.oauth.codes.insert(
        code.clone(),
        Code {
            client_id,
            person,
            scope,
            redirect_uri: redirect_uri.clone(),
        },
    );
    found(&with_state(vec![("code", code)]))
}

/// `a=b&c=d` decoded (`+` is a space).
fn form_pairs(text: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        percent_decode_str(&s.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// GitHub's answer to a token request, JSON or form-encoded as the client accepts: 200,
/// errors included.
fn token_answer(json: bool, pairs: &[(&str, &str)]) -> Response {
    if json {
        let object: serde_json::Map<String, Value> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect();
        return axum::Json(Value::Object(object)).into_response();
    }
    let body = pairs
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    (
        [(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

fn token_error(json: bool, error: &str, description: &str, anchor: &str, page: &str) -> Response {
    let uri = format!("https://docs.github.com/apps/managing-oauth-apps/{page}/#{anchor}");
    token_answer(
        json,
        &[
            ("error", error),
            ("error_description", description),
            ("error_uri", &uri),
        ],
    )
}

const TOKEN_ERRORS: &str = "troubleshooting-oauth-app-access-token-request-errors";

pub async fn access_token(
    State(hub): State<Shared>,
    Query(query): Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let json = header(header::ACCEPT).contains("application/json");
    let mut params: HashMap<String, String> = query;
    if header(header::CONTENT_TYPE).contains("json") {
        if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(&body) {
            for (k, v) in object {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                params.insert(k, v);
            }
        }
    } else {
        params.extend(form_pairs(&String::from_utf8_lossy(&body)));
    }
    if let Some(basic) = header(header::AUTHORIZATION).strip_prefix("Basic ") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(basic.trim())
            .unwrap_or_default();
        if let Some((id, secret)) = String::from_utf8_lossy(&decoded).split_once(':') {
            params.entry("client_id".into()).or_insert(id.into());
            params
                .entry("client_secret".into())
                .or_insert(secret.into());
        }
    }
    let get = |name: &str| params.get(name).cloned().unwrap_or_default();
    let (client_id, secret, code) = (get("client_id"), get("client_secret"), get("code"));

    let mut hub = hub.lock().unwrap();
    let app = hub.oauth.apps.get(&client_id).cloned();
    let Some(app) = app.filter(|app| !secret.is_empty() && app.client_secret == secret) else {
        return token_error(
            json,
            "incorrect_client_credentials",
            "The client_id and/or client_secret passed are incorrect.",
            "incorrect-client-credentials",
            TOKEN_ERRORS,
        );
    };
    if let Some(uri) = params.get("redirect_uri") {
        if !redirect_allowed(&app.callback_url, uri) {
            return token_error(
                json,
                "redirect_uri_mismatch",
                "The redirect_uri MUST match the registered callback URL for this application.",
                "redirect-uri-mismatch2",
                "troubleshooting-authorization-request-errors",
            );
        }
    }
    let issued = hub.oauth.codes.get(&code).cloned();
    let Some(issued) = issued.filter(|c| c.client_id == client_id) else {
        return token_error(
            json,
            "bad_verification_code",
            "The code passed is incorrect or expired.",
            "bad-verification-code",
            TOKEN_ERRORS,
        );
    };
    hub.oauth.codes.remove(&code);
    let token = format!(
        "gho_{}",
        random(
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            36
        )
    );
    hub.oauth.tokens.insert(
        token.clone(),
        UserToken {
            client_id,
            person: issued.person,
            scope: issued.scope.clone(),
        },
    );
    token_answer(
        json,
        &[
            ("access_token", &token),
            ("token_type", "bearer"),
            ("scope", &issued.scope),
        ],
    )
}

/// What `GET /user` answers about `person`.
pub fn user_object(person: &Person) -> Value {
    let Person { login, id } = person;
    json!({
        "login": login,
        "id": id,
        "node_id": format!("U_kgDO{id:08}"),
        "avatar_url": format!("https://avatars.githubusercontent.com/u/{id}?v=4"),
        "gravatar_id": "",
        "url": format!("https://api.github.com/users/{login}"),
        "html_url": format!("https://github.com/{login}"),
        "type": "User",
        "user_view_type": "public",
        "site_admin": false,
        "name": login,
        "company": null,
        "blog": "",
        "location": null,
        "email": null,
        "hireable": null,
        "bio": null,
        "public_repos": 2,
        "followers": 0,
        "following": 0,
        "created_at": "2020-01-01T00:00:00Z",
        "updated_at": "2026-11-01T00:00:00Z",
    })
}

fn unauthorized(message: &str) -> Response {
    let body = json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": "401",
    });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

/// The token of an `Authorization: Bearer <t>` or `token <t>` header.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") || scheme.eq_ignore_ascii_case("token"))
        .then(|| token.to_owned())
        .filter(|t| !t.is_empty())
}

pub async fn user(State(hub): State<Shared>, headers: HeaderMap) -> Response {
    let Some(token) = bearer(&headers) else {
        return unauthorized("Requires authentication");
    };
    let hub = hub.lock().unwrap();
    if let Some(issued) = hub.oauth.tokens.get(&token) {
        return axum::Json(user_object(&issued.person)).into_response();
    }
    if token.starts_with("gho_") {
        return unauthorized("Bad credentials");
    }
    axum::Json(json!({"login": BOT, "id": 1, "type": "Bot"})).into_response()
}

pub async fn member(
    State(hub): State<Shared>,
    Path((org, username)): Path<(String, String)>,
) -> Response {
    let hub = hub.lock().unwrap();
    let member = hub
        .oauth
        .members
        .get(&org.to_lowercase())
        .is_some_and(|m| m.contains(&username.to_lowercase()));
    if member {
        return StatusCode::NO_CONTENT.into_response();
    }
    let body = json!({
        "message": "User does not exist or is not a member of the organization",
        "documentation_url": "https://docs.github.com/rest/orgs/members#check-organization-membership-for-a-user",
        "status": "404",
    });
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}
