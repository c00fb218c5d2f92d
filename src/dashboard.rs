//! The dashboard: server-rendered HTML, no JavaScript, readable on a laptop and a phone.
//! Pure functions from the read model (`view`) to a page; every value is escaped.

use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::config::Access;
use crate::view::{Destroyed, Detail, Preview, ShareItem, Template, state_name};

const STYLE: &str = "
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:12px 20px}header a{color:#fff;text-decoration:none}
main{padding:16px 20px;max-width:1200px;margin:auto}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{padding:8px 10px;border-bottom:1px solid #d0d7de;text-align:left;vertical-align:top}
th{background:#eaeef2;font-weight:600}
.state{display:inline-block;padding:1px 8px;border-radius:10px;background:#ddf4ff;font-size:13px}
.state.ready{background:#dafbe1}.state.failed{background:#ffebe9}.state.queued,.state.awaiting_approval{background:#fff8c5}
.muted{color:#57606a;font-size:13px}code{font-size:13px}
@media (max-width:700px){table,thead,tbody,tr,th,td{display:block}thead{display:none}
tr{margin:0 0 12px;border:1px solid #d0d7de;border-radius:6px;background:#fff}
td{border:none;padding:4px 10px}td::before{content:attr(data-label) ': ';font-weight:600}}
";

/// Text made safe inside HTML (element content and quoted attribute values).
mod cost;

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Only http(s) links are made clickable.
fn href(url: &str) -> String {
    if url.starts_with("https://") || url.starts_with("http://") {
        escape(url)
    } else {
        "#".into()
    }
}

/// `2d 3h`, `5h 10m`, `4m`; `expired` at zero.
pub fn time_left(seconds: i64) -> String {
    if seconds <= 0 {
        return "expired".into();
    }
    crate::duration::roughly(seconds as u64)
}

fn age(seconds: i64) -> String {
    if seconds < 60 {
        return "just now".into();
    }
    format!("{} ago", time_left(seconds))
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\
         <header><a href=\"/\"><strong>previewd</strong></a></header><main>{body}</main></body></html>",
        escape(title)
    )
}

/// `/previews/<owner>/<repo>/<number>`, each part escaped.
fn detail_link(repo: &str, number: i64) -> String {
    format!(
        "/previews/{}/{number}",
        repo.split('/').map(escape).collect::<Vec<_>>().join("/"),
    )
}

/// The list of live previews, and the most recently destroyed ones.
/// One page of the live previews, and where the list goes on.
pub struct Listed<'a> {
    pub previews: &'a [Preview],
    /// Every live preview, on this page or another.
    pub live: i64,
    /// The first page (no cursor).
    pub first: bool,
    /// The cursor of the next page, if there is one.
    pub next: Option<&'a str>,
    /// The page size asked for, kept by the links (`None`: the default).
    pub limit: Option<u32>,
}

pub fn list_page(
    listed: &Listed<'_>,
    destroyed: &[Destroyed],
    templates: &[Template],
    now: i64,
) -> String {
    let previews = listed.previews;
    let shown = if previews.len() as i64 == listed.live {
        String::new()
    } else {
        format!(", {} on this page", previews.len())
    };
    let mut body = format!(
        "<h1>Preview environments</h1><p class=\"muted\">{} live{shown}</p>",
        listed.live
    );
    body += "<table><thead><tr><th>Repository</th><th>PR</th><th>Author</th><th>State</th>\
             <th>URL</th><th>Cluster</th><th>Requests</th><th>Saved by sleeping</th><th>Age</th>\
             <th>Time left</th></tr></thead><tbody>";
    for p in previews {
        let state = state_name(p.state);
        // Waiting for CI shows how long: a check that never completes is never silent.
        let shown = match p.waiting_since.or(p.sleeping_since) {
            Some(since) => format!("{} for {}", state.replace('_', " "), time_left(now - since)),
            None => state.replace('_', " "),
        };
        let left = if p.keep {
            format!("{} (kept)", time_left(p.seconds_left))
        } else {
            time_left(p.seconds_left)
        };
        body += &format!(
            "<tr><td data-label=\"Repository\"><a href=\"{}\">{}</a></td>\
             <td data-label=\"PR\"><a href=\"{}\">#{}</a> {}</td>\
             <td data-label=\"Author\">{}</td>\
             <td data-label=\"State\"><span class=\"state {}\">{}</span></td>\
             <td data-label=\"URL\"><a href=\"{}\">{}</a></td>\
             <td data-label=\"Cluster\">{}</td>\
             <td data-label=\"Requests\">{}</td>\
             <td data-label=\"Saved by sleeping\">{}</td>\
             <td data-label=\"Age\">{}</td>\
             <td data-label=\"Time left\">{}</td></tr>",
            detail_link(&p.repo, p.number),
            escape(&p.repo),
            href(&p.pr_url),
            p.number,
            escape(&p.title),
            escape(&p.author),
            escape(state),
            escape(&shown),
            href(&p.url),
            escape(&p.url).trim_start_matches("https://"),
            escape(p.cluster.as_deref().unwrap_or("")),
            escape(&cost::requests(&p.cost)),
            escape(&cost::saved(&p.cost)),
            age(now - p.created_at),
            escape(&left),
        );
    }
    if previews.is_empty() {
        body += "<tr><td colspan=\"10\" class=\"muted\">No live previews.</td></tr>";
    }
    body += "</tbody></table>";
    if listed.next.is_some() || !listed.first {
        body += "<p>";
        let limit = listed.limit.map(|n| format!("limit={n}"));
        if !listed.first {
            let query = limit.as_ref().map_or(String::new(), |l| format!("?{l}"));
            body += &format!("<a href=\"/{query}\">First page</a> ");
        }
        if let Some(next) = listed.next {
            // A cursor is URL-safe base64 (`view::cursor_after`); escaped all the same.
            let limit = limit
                .as_ref()
                .map_or(String::new(), |l| format!("&amp;{l}"));
            body += &format!("<a href=\"/?cursor={}{limit}\">Next page</a>", escape(next));
        }
        body += "</p>";
    }
    if !templates.is_empty() {
        body += "<h2>Template databases</h2><table><thead><tr><th>Repository</th>\
                 <th>Generation</th><th>State</th><th>Base</th><th>Size</th><th>Age</th><th></th></tr></thead><tbody>";
        for t in templates {
            body += &format!(
                "<tr><td data-label=\"Repository\">{}</td><td data-label=\"Generation\">{}</td>\
                 <td data-label=\"State\"><span class=\"state {}\">{}</span></td>\
                 <td data-label=\"Base\"><code>{}</code></td><td data-label=\"Size\">{}</td>\
                 <td data-label=\"Age\">{}</td><td class=\"muted\">{}</td></tr>",
                escape(&t.repo),
                t.generation,
                escape(t.state.as_str()),
                escape(t.state.as_str()),
                escape(t.base_sha.get(..7).unwrap_or(&t.base_sha)),
                t.size_bytes
                    .map_or_else(|| "—".to_owned(), crate::view::size),
                age(t.age_seconds),
                escape(t.message.as_deref().unwrap_or("")),
            );
        }
        body += "</tbody></table>";
    }
    if !destroyed.is_empty() {
        body += "<h2>Recently destroyed</h2><table><tbody>";
        for d in destroyed {
            body += &format!(
                "<tr><td><a href=\"{}\">{}#{}</a></td><td>{}</td><td class=\"muted\">{}</td></tr>",
                detail_link(&d.repo, d.number),
                escape(&d.repo),
                d.number,
                age(now - d.at),
                escape(&d.reason)
            );
        }
        body += "</tbody></table>";
    }
    page("previewd", &body)
}

/// One preview: its facts, who gets in (`access`, the repository's rule), its ledger and
/// history (the history also after it was destroyed).
pub fn detail_page(
    repo: &str,
    number: i64,
    detail: &Detail,
    access: Access,
    inbox: bool,
) -> String {
    let mut body = format!("<h1>{}#{number}</h1>", escape(repo));
    match &detail.preview {
        Some(p) => {
            let state = state_name(p.state);
            body += &format!(
                "<p><a href=\"{}\">{}</a></p><table><tbody>\
                 <tr><th>State</th><td><span class=\"state {}\">{}</span></td></tr>\
                 <tr><th>URL</th><td><a href=\"{}\">{}</a></td></tr>\
                 <tr><th>Author</th><td>{}</td></tr>\
                 <tr><th>Commit</th><td><code>{}</code></td></tr>\
                 <tr><th>Cluster</th><td>{}</td></tr>\
                 <tr><th>Time left</th><td>{}</td></tr>\
                 <tr><th>Sleep</th><td>{}</td></tr>\
                 <tr><th>Requests</th><td>{}</td></tr>\
                 <tr><th>Saved by sleeping</th><td>{}</td></tr>\
                 <tr><th>Who gets in</th><td>{}</td></tr>{}\
                 <tr><th>Share links</th><td>{}</td></tr>\
                 <tr><th>Last error</th><td>{}</td></tr></tbody></table>",
                href(&p.pr_url),
                escape(&p.title),
                escape(state),
                escape(&state.replace('_', " ")),
                href(&p.url),
                escape(&p.url),
                escape(&p.author),
                escape(&p.head_sha),
                escape(p.cluster.as_deref().unwrap_or("")),
                escape(&time_left(p.seconds_left)),
                escape(&sleep_text(p)),
                escape(&cost::requests(&p.cost)),
                escape(&cost::saved(&p.cost)),
                way_in(access, repo),
                mail_row(inbox, &p.url),
                shares(repo, number, &detail.shares),
                escape(p.last_error.as_deref().unwrap_or("")),
            );
        }
        None => {
            body += "<p class=\"muted\">This preview has been destroyed; its history remains.</p>"
        }
    }
    if !detail.ledger.is_empty() {
        body += "<h2>Ledger</h2><table><thead><tr><th>Kind</th><th>Namespace</th><th>Name</th><th>State</th><th>Detail</th></tr></thead><tbody>";
        for item in &detail.ledger {
            body += &format!(
                "<tr><td data-label=\"Kind\">{}</td><td data-label=\"Namespace\">{}</td><td data-label=\"Name\">{}</td>\
                 <td data-label=\"State\">{}</td><td data-label=\"Detail\">{}</td></tr>",
                escape(&item.kind),
                escape(&item.namespace),
                escape(&item.name),
                escape(item.state.as_str()),
                escape(item.detail.as_deref().unwrap_or(""))
            );
        }
        body += "</tbody></table>";
    }
    body += "<h2>History</h2><table><thead><tr><th>When</th><th>What</th><th>Who</th><th>Why</th></tr></thead><tbody>";
    for h in &detail.history {
        body += &format!(
            "<tr><td data-label=\"When\">{}</td><td data-label=\"What\">{}</td><td data-label=\"Who\">{}</td><td data-label=\"Why\">{}</td></tr>",
            escape(&crate::comment::stamp(h.at)),
            escape(&h.what),
            escape(&h.actor),
            escape(&h.reason)
        );
    }
    body += "</tbody></table>";
    page(&format!("{repo}#{number} — previewd"), &body)
}

/// The mail catcher's inbox, beside the preview on its host, for a repository with mail.
/// Since when it sleeps, or when it was last visited.
fn sleep_text(p: &Preview) -> String {
    match (p.sleeping_since, p.last_used_at) {
        (Some(since), _) => format!(
            "asleep since {}; opening it wakes it",
            crate::comment::stamp(since)
        ),
        (None, Some(at)) => format!("awake; last visited {}", crate::comment::stamp(at)),
        (None, None) => "awake; not visited yet".into(),
    }
}

fn mail_row(inbox: bool, url: &str) -> String {
    if !inbox {
        return String::new();
    }
    let inbox = format!(
        "{}{}",
        url.trim_end_matches('/'),
        crate::render::services::INBOX_PATH
    );
    format!(
        "<tr><th>Mail</th><td><a href=\"{}\">inbox</a> (what the app sent)</td></tr>",
        href(&inbox)
    )
}

/// How a reviewer gets into the preview: the login in front of it.
fn way_in(access: Access, repo: &str) -> String {
    let share = "or a writer's share link (<code>/preview share 24h</code>)";
    match access {
        Access::Repo => format!(
            "people who can read {} sign in with GitHub, {share}",
            escape(repo)
        ),
        Access::Org => format!(
            "members of the {} organisation sign in with GitHub, {share}",
            escape(repo.split_once('/').map_or(repo, |(owner, _)| owner))
        ),
        Access::Public => "anyone, without signing in".into(),
    }
}

/// How many share links are valid and until when (never a link: the page is read with
/// the token as Basic credentials, and a link is a pass for anyone); where the links are.
fn shares(repo: &str, number: i64, shares: &[ShareItem]) -> String {
    if shares.is_empty() {
        return "none (a writer makes one with <code>/preview share 24h</code>)".into();
    }
    let each: Vec<String> = shares
        .iter()
        .map(|s| {
            format!(
                "until {} (by {})",
                escape(&crate::comment::stamp(s.expires_at)),
                escape(&s.created_by)
            )
        })
        .collect();
    format!(
        "{} valid: {}<br><span class=\"muted\">The links: <code>GET /api/previews/{}/{number}/shares</code> \
         with the API token as a bearer token; <code>/preview unshare</code> revokes them all.</span>",
        shares.len(),
        each.join("; "),
        escape(&repo.to_ascii_lowercase()),
    )
}

/// A page saying why a request failed (`title` is the status's reason).
pub fn problem_page(title: &str, message: &str) -> String {
    page(
        &title.to_ascii_lowercase(),
        &format!("<p>{}.</p>", escape(message)),
    )
}

/// What every page may load: its own inline style and nothing else; no page may frame it
/// (clickjacking), and no browser may read it as anything but HTML.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

pub fn html_answer(status: StatusCode, html: String) -> Response {
    (
        status,
        [
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        Html(html),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comment::Shown;
    use crate::preview::{Desired, ObservedState};

    /// Every live preview, on one page.
    fn whole(previews: &[Preview]) -> Listed<'_> {
        Listed {
            previews,
            live: previews.len() as i64,
            first: true,
            next: None,
            limit: None,
        }
    }

    #[test]
    fn a_template_builds_failure_message_shows_as_text() {
        let t = Template {
            repo: "o/r".into(),
            generation: 2,
            state: crate::preview::GenState::Failed,
            base_sha: "f95f852bd8fca8fcc58a9a2d6c842781e32a215e".into(),
            cluster: "in-cluster".into(),
            database: "pv_o_r_tpl_2".into(),
            created_at: 0,
            ready_at: None,
            age_seconds: 7200,
            size_bytes: None,
            message: Some("hook <script>alert(1)</script> failed".into()),
        };
        let sized = Template {
            generation: 3,
            size_bytes: Some(262_144_000),
            ..t.clone()
        };
        let html = list_page(&whole(&[]), &[], &[t, sized], 100);
        assert!(html.contains("Template databases") && html.contains("<code>f95f852</code>"));
        assert!(
            html.contains("data-label=\"Size\">250 MB<") && html.contains("data-label=\"Size\">—<"),
            "a reported size, and none yet: {html}"
        );
        assert!(
            html.contains("&lt;script&gt;") && !html.contains("<script>"),
            "{html}"
        );
    }

    /// A ready preview of o/r#7 whose title and URL are `title` and `url`.
    fn ready(title: &str, author: &str, url: &str, cluster: Option<&str>) -> Preview {
        Preview {
            repo: "o/r".into(),
            number: 7,
            pr_url: "https://github.com/o/r/pull/7".into(),
            title: title.into(),
            author: author.into(),
            state: Shown::Ready,
            desired: Desired::Deployed,
            observed: ObservedState::Ready,
            url: url.into(),
            cluster: cluster.map(str::to_owned),
            head_sha: "ec26c3e".into(),
            created_at: 0,
            expires_at: 90_100,
            seconds_left: 90_000,
            keep: false,
            fork: false,
            last_error: None,
            end_reason: None,
            waiting_since: None,
            sleeping_since: None,
            last_used_at: None,
            cost: crate::view::Cost {
                pods: None,
                cpu_millis: None,
                memory_bytes: None,
                slept_seconds: 0,
                pod_seconds_saved: 0,
            },
        }
    }

    #[test]
    fn a_sleeping_preview_shows_for_how_long_what_it_requests_and_what_sleeping_saved() {
        let mut p = ready("t", "a", "https://h", None);
        p.state = Shown::Sleeping;
        p.sleeping_since = Some(100 - 7200);
        p.cost.cpu_millis = Some(350);
        p.cost.memory_bytes = Some(640 << 20);
        p.cost.pod_seconds_saved = 3 * 7200;
        let html = list_page(&whole(std::slice::from_ref(&p)), &[], &[], 100);
        assert!(html.contains(">sleeping for 2h<"), "{html}");
        assert!(
            html.contains("data-label=\"Requests\">350m CPU, 640 MiB<"),
            "{html}"
        );
        assert!(
            html.contains("data-label=\"Saved by sleeping\">6.0 pod-hours<"),
            "{html}"
        );
        let detail = Detail {
            preview: Some(p),
            ledger: vec![],
            history: vec![],
            shares: vec![],
        };
        let html = detail_page("o/r", 7, &detail, Access::Repo, false);
        assert!(html.contains("asleep since"), "{html}");
    }

    #[test]
    fn a_title_with_a_script_tag_shows_as_text() {
        let p = ready(
            "<script>alert(1)</script>",
            "a\"b",
            "javascript:alert(1)",
            Some("in-cluster"),
        );
        let html = list_page(&whole(std::slice::from_ref(&p)), &[], &[], 100);
        assert!(!html.contains("<script>"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("href=\"#\""), "only http(s) links are links");
        assert!(html.contains("1d 1h"));
    }

    #[test]
    fn a_previews_page_links_the_mail_inbox_of_a_repository_with_mail() {
        let p = ready("t", "a", "https://pv-o-r-1-pr-7.preview.example.com", None);
        let detail = Detail {
            preview: Some(p),
            ledger: Vec::new(),
            history: Vec::new(),
            shares: Vec::new(),
        };
        let with = detail_page("o/r", 7, &detail, Access::Repo, true);
        assert!(
            with.contains(
                "<a href=\"https://pv-o-r-1-pr-7.preview.example.com/__mail/\">inbox</a>"
            ),
            "{with}"
        );
        let without = detail_page("o/r", 7, &detail, Access::Repo, false);
        assert!(!without.contains("__mail"), "{without}");
    }

    #[test]
    fn a_previews_page_counts_its_share_links_and_says_where_they_are() {
        let none = shares("Codertocat/Hello-World", 2, &[]);
        assert!(none.starts_with("none"), "{none}");
        let two = [
            ShareItem {
                created_by: "alice".into(),
                created_at: 0,
                expires_at: 1_780_000_000,
            },
            ShareItem {
                created_by: "<b>api</b>".into(),
                created_at: 0,
                expires_at: 1_780_086_400,
            },
        ];
        let html = shares("Codertocat/Hello-World", 2, &two);
        assert!(html.starts_with("2 valid: until 2026-05-28 20:26 UTC (by alice); until 2026-05-29 20:26 UTC (by &lt;b&gt;api&lt;/b&gt;)"), "{html}");
        assert!(
            html.contains("GET /api/previews/codertocat/hello-world/2/shares"),
            "{html}"
        );
    }

    #[test]
    fn time_left_reads_like_a_person_says_it() {
        assert_eq!(time_left(0), "expired");
        assert_eq!(time_left(59), "1m");
        assert_eq!(time_left(3 * 3600 + 10 * 60), "3h 10m");
        assert_eq!(time_left(2 * 86_400 + 3 * 3600 + 59), "2d 3h");
    }
}
