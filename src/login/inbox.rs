//! The mail catcher's inbox on a preview's host (`render::services::INBOX_PATH`): never
//! public. A `public` repository's preview lets anyone in, but its inbox holds what the app
//! mailed (sign-up links, password resets), so there it asks for a reader of the repository
//! (under `org`, members see it as they see the app; a writer's share link opens both). The path is compared as the proxy routes it, not as the client spelled it: nginx
//! decodes percent-escapes, merges slashes and resolves dot segments before it picks the
//! location (ngx_http_parse_complex_uri), so `/%5F%5Fmail/` reaches the inbox too.

use percent_encoding::percent_decode_str;

use crate::render::services::INBOX_PATH;

/// Whether `path_and_query` is routed to the inbox: its path, normalized as nginx does,
/// under `/__mail` (ASCII case ignored, which only ever asks for more).
pub fn is_inbox(path_and_query: &str) -> bool {
    let path = path_and_query.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode_str(path).decode_utf8_lossy();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    let inbox = INBOX_PATH.trim_matches('/');
    segments
        .first()
        .is_some_and(|first| first.eq_ignore_ascii_case(inbox))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inbox_is_recognised_however_the_client_spells_its_path() {
        for path in [
            "/__mail/",
            "/__mail",
            "/__mail/api/v1/messages?limit=50",
            "/%5F%5Fmail/",
            "/%5f%5fmail/view/latest",
            "//__mail/",
            "/./__mail/",
            "/app/../__mail/",
            "/%2e%2e/__mail/",
            "/__MAIL/",
            "/__mail%2Fapi",
        ] {
            assert!(is_inbox(path), "{path}");
        }
    }

    #[test]
    fn the_apps_own_paths_are_not_the_inbox() {
        for path in [
            "/",
            "/mail/",
            "/app/__mail/",
            "/__mailbox/",
            "/?next=/__mail/",
            "/#/__mail/",
        ] {
            assert!(!is_inbox(path), "{path}");
        }
    }
}
