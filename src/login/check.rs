//! One check: may the request a proxy asks about enter the preview whose host it names?
//! What the browser holds is read first (a hand-off code or a share pass in the URL, then
//! the host's session cookie), then who may enter the repository's previews; the answer is
//! a whole `Verdict`, which the edge maps to 200, 401 or 403.

use axum::http::HeaderMap;

use crate::config::{Access as Rule, Config};
use crate::db::{self, login::HostPreview};

use super::access::Answer;
use super::original::{HANDOFF_PARAM, Original, Proxy, Unreadable};
use super::visit::{Visit, Wakefulness, wakefulness};
use super::{Handoff, Login, Purpose, Session, SharePass, Who};

/// The session cookie on a preview host served over https: `__Host-` keeps it host-only
/// (no `Domain`, `Path=/`, `Secure`), so no sibling host can set one in its place.
pub const SESSION_COOKIE: &str = "__Host-previewd";
/// The same over plain http (loopback trials only: a `Secure` cookie is not stored there).
pub const SESSION_COOKIE_PLAIN: &str = "previewd";

/// The answer to a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// 200, naming the user (none for a public preview's anonymous visitor), and a fresh
    /// session cookie to set on the preview host.
    Enter {
        user: Option<String>,
        cookie: Option<String>,
    },
    /// 401: no session; the proxy sends the browser to sign in.
    SignIn,
    /// 403.
    Refused(Refusal),
    /// The person may enter, but the preview sleeps or is waking (`visit::wakefulness`):
    /// the waking page, with a fresh session cookie to set as `Enter`'s.
    Waking { cookie: Option<String> },
}

/// A check's answer, and what the route records of the request (`None`: nothing; it was
/// not let in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub verdict: Verdict,
    pub visit: Option<Visit>,
}

impl From<Verdict> for Checked {
    fn from(verdict: Verdict) -> Self {
        Self {
            verdict,
            visit: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The proxy named no original request previewd can read, or two hosts at once (a 403,
    /// not a 400: ingress-nginx turns any other answer into a 500).
    Unreadable(Unreadable),
    /// The original request's host is not the one the Ingress asks for (`?host=`): a
    /// request whose `Host` names another preview than the server it reached.
    NotThisHost,
    /// The host is no preview's (never 2xx outside the preview domains).
    NotAPreview,
    /// The preview is ending.
    Ended,
    /// GitHub says the person may not read the repository (or is not in its organisation).
    NoAccess { login: String, rule: Rule },
    /// GitHub could not be asked, and no recent answer serves.
    Unknown(String),
}

/// What the browser holds that names someone, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Claim {
    /// Only from a fresh hand-off or share pass: the session cookie to set.
    Fresh(Who),
    /// A session cookie already set.
    Held(Who),
    Nobody,
}

/// The rule of `preview`'s repository (`[defaults]` for one no longer listed).
pub fn rule_for(config: &Config, preview: &HostPreview) -> Rule {
    config
        .policy_for(&preview.key.repo)
        .map_or(config.defaults.access, |p| p.access)
}

/// What a proxy asked: its headers, the route's rest (Envoy's original path), which kind
/// of proxy, and the host its Ingress pins (`/auth/check?host=`: ingress-nginx routes by
/// the request line but names the `Host` header in `X-Original-URL`, which a client sets).
pub struct Asked<'a> {
    pub headers: &'a HeaderMap,
    pub rest: Option<&'a str>,
    pub proxy: Proxy,
    pub pinned: Option<&'a str>,
}

pub async fn check(
    login: &Login,
    state: &db::State,
    config: &Config,
    asked: &Asked<'_>,
    now: i64,
) -> anyhow::Result<Checked> {
    let headers = asked.headers;
    let original = match Original::from_headers(headers, asked.rest, asked.proxy) {
        Ok(original) => original,
        Err(why) => return Ok(Verdict::Refused(Refusal::Unreadable(why)).into()),
    };
    if let Some(pinned) = asked.pinned
        && !pinned
            .trim_end_matches('.')
            .eq_ignore_ascii_case(&original.host)
    {
        return Ok(Verdict::Refused(Refusal::NotThisHost).into());
    }
    let Some(preview) = db::login::preview_by_host(state, &original.host).await? else {
        return Ok(Verdict::Refused(Refusal::NotAPreview).into());
    };
    if !preview.live {
        return Ok(Verdict::Refused(Refusal::Ended).into());
    }
    let claim = claim(login, state, headers, &original, &preview, now).await?;
    let mut rule = rule_for(config, &preview);
    if rule == Rule::Public && super::inbox::is_inbox(&original.path_and_query) {
        // What the app mailed is for the people who may read its repository.
        rule = Rule::Repo;
    }
    let (who, fresh) = match claim {
        Claim::Fresh(who) => (who, true),
        Claim::Held(who) => (who, false),
        Claim::Nobody if rule == Rule::Public => {
            return Ok(entered(&preview, &original.host, None, None, now));
        }
        Claim::Nobody => return Ok(Verdict::SignIn.into()),
    };
    let (user, exp) = match &who {
        Who::Person(person) => match login.access.may_enter(person, &preview, rule).await {
            Answer::Allowed => (person.login.clone(), now + login.session_ttl),
            Answer::Refused => {
                return Ok(Verdict::Refused(Refusal::NoAccess {
                    login: person.login.clone(),
                    rule,
                })
                .into());
            }
            Answer::Unknown(why) => return Ok(Verdict::Refused(Refusal::Unknown(why)).into()),
        },
        Who::Share { share } => match db::login::share(state, share).await? {
            Some(row) if row.preview_id == preview.id && row.is_valid(now) => (
                format!("share:{}", &share[..8.min(share.len())]),
                row.expires_at.min(now + login.session_ttl),
            ),
            // Expired or revoked: a person may still sign in.
            _ => return Ok(Verdict::SignIn.into()),
        },
    };
    let cookie = fresh.then(|| {
        let session = Session {
            who,
            host: original.host.clone(),
            exp,
        };
        session_cookie(
            &login.sealer.seal(Purpose::Session, &session),
            original.https,
            exp - now,
        )
    });
    Ok(entered(&preview, &original.host, Some(user), cookie, now))
}

/// Someone may enter: the app, or the waking page while it sleeps or wakes; either way a
/// visit for the route to record.
fn entered(
    preview: &HostPreview,
    host: &str,
    user: Option<String>,
    cookie: Option<String>,
    now: i64,
) -> Checked {
    let verdict = match wakefulness(preview, now) {
        Wakefulness::Awake => Verdict::Enter { user, cookie },
        Wakefulness::Asleep | Wakefulness::Waking => Verdict::Waking { cookie },
    };
    Checked {
        verdict,
        visit: Some(Visit::of(preview, host, now)),
    }
}

/// The host's session cookie, else a hand-off code or share pass in the URL (each for this
/// host only). A session held wins: a code or pass someone else minted (a link an
/// attacker sends) never replaces who is signed in. A code is taken once; a value that does
/// not open is ignored.
async fn claim(
    login: &Login,
    state: &db::State,
    headers: &HeaderMap,
    original: &Original,
    preview: &HostPreview,
    now: i64,
) -> anyhow::Result<Claim> {
    let name = if original.https {
        SESSION_COOKIE
    } else {
        SESSION_COOKIE_PLAIN
    };
    // Every cookie of the name is tried: a sibling host may add one of its own beside ours.
    let held = cookies(headers, name)
        .filter_map(|value| login.sealer.open::<Session>(Purpose::Session, value))
        .find(|session| session.host == original.host && now < session.exp);
    match held.map(|session| session.who) {
        // A share session counts while its share does; then a sign-in may follow.
        Some(Who::Share { share }) if share_valid(state, &share, preview, now).await? => {
            return Ok(Claim::Held(Who::Share { share }));
        }
        Some(Who::Share { .. }) | None => {}
        Some(person) => return Ok(Claim::Held(person)),
    }
    if let Some(code) = original.param(HANDOFF_PARAM)
        && let Some(handoff) = login.sealer.open::<Handoff>(Purpose::Handoff, code)
        && handoff.host == original.host
        && now < handoff.exp
        && login
            .handoffs
            .take_in(state, &handoff.nonce, handoff.exp, now)
            .await
    {
        return Ok(Claim::Fresh(handoff.who));
    }
    Ok(Claim::Nobody)
}

async fn share_valid(
    state: &db::State,
    share: &str,
    preview: &HostPreview,
    now: i64,
) -> anyhow::Result<bool> {
    Ok(db::login::share(state, share)
        .await?
        .is_some_and(|row| row.preview_id == preview.id && row.is_valid(now)))
}

/// The values of every cookie named `name` in the request's `Cookie` headers.
pub fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then_some(value.trim_matches('"'))
        })
}

/// `Set-Cookie` for a preview host's session, host-only.
pub fn session_cookie(value: &str, https: bool, max_age: i64) -> String {
    if https {
        format!(
            "{SESSION_COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; Secure; SameSite=Lax"
        )
    } else {
        format!("{SESSION_COOKIE_PLAIN}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Lax")
    }
}

/// The hand-off code for `who` to `host`, good for [`super::HANDOFF_TTL`].
pub fn handoff(login: &Login, who: Who, host: &str, now: i64) -> String {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).expect("the system's random source");
    login.sealer.seal(
        Purpose::Handoff,
        &Handoff {
            who,
            host: host.to_owned(),
            nonce: hex::encode(nonce),
            exp: now + super::HANDOFF_TTL,
        },
    )
}

/// A share link to `host` naming share `share`: previewd's share page, the pass in the
/// fragment (`#`), which browsers never send to a server, so no proxy or server logs it and
/// the preview's host never sees it; the page posts it back to previewd, which answers with
/// a one-time hand-off code to the preview (`https` or not: the preview's scheme).
pub fn share_link(login: &Login, public_url: &str, share: &str, host: &str, https: bool) -> String {
    let pass = login.sealer.seal(
        Purpose::Share,
        &SharePass {
            share: share.to_owned(),
            host: host.to_owned(),
        },
    );
    let preview = format!("{}://{host}/", if https { "https" } else { "http" });
    format!(
        "{}/auth/share?rd={}#{pass}",
        public_url.trim_end_matches('/'),
        percent_encoding::utf8_percent_encode(&preview, percent_encoding::NON_ALPHANUMERIC)
    )
}
