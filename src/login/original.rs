//! The request a proxy asks about, as each proxy sends it: ingress-nginx's `auth-url`
//! (`X-Original-URL`), Traefik's ForwardAuth (`X-Forwarded-Proto`/`-Host`/`-Uri`), or Envoy's
//! external authorization (the original `Host`, and the original path after
//! `/auth/check`). The proxy sets these itself, replacing what a client sent; where two
//! of them disagree the request is refused rather than guessed at.

use axum::http::HeaderMap;

/// Longest original URL read: browsers send up to ~8 KB of path and query.
const MAX_URL: usize = 8192;

/// The query parameter carrying a sign-in's one-time code to the preview host.
pub const HANDOFF_PARAM: &str = "__previewd";
/// The query parameter carrying a share link's pass.
pub const SHARE_PARAM: &str = "__previewd_share";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    pub https: bool,
    /// Lower-case, without the port.
    pub host: String,
    /// With the port, as the browser wrote it (`Host`).
    pub authority: String,
    /// Path and query, as requested.
    pub path_and_query: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("the proxy sent no original URL or host")]
    Missing,
    #[error("the original URL is not a URL")]
    BadUrl,
    #[error("the proxy's headers name two different hosts")]
    Conflicting,
}

/// Which kind of proxy asks, by the route it asks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// ingress-nginx (`/auth/check`): it sets `X-Original-URL` itself on every check.
    Nginx,
    /// Traefik and Envoy (`/auth/forward`): `X-Forwarded-Host`/`-Uri`/`-Proto` (Traefik
    /// sets them), else the `Host` and the path appended to the route (Envoy). They pass
    /// a client's other headers on, so a client's `X-Original-URL` is never read here.
    Forwarding,
}

impl Original {
    /// From the headers of a check, and what follows the route's path (Envoy's original
    /// path and query).
    pub fn from_headers(
        headers: &HeaderMap,
        rest: Option<&str>,
        proxy: Proxy,
    ) -> Result<Self, Unreadable> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let first = |value: &str| value.split(',').next().unwrap_or("").trim().to_owned();
        let forwarded_host = text("x-forwarded-host").map(first);
        let original = match proxy {
            Proxy::Nginx => Self::from_url(text("x-original-url").ok_or(Unreadable::Missing)?)?,
            Proxy::Forwarding => match &forwarded_host {
                Some(host) => {
                    let uri = text("x-forwarded-uri");
                    // Envoy appends the path it routed; `X-Forwarded-*` beside it may be the
                    // client's own (a public preview's `/__mail/` claimed as `/`): two
                    // paths, no guess. A bare `/` is Traefik's address with a slash.
                    if let (Some(rest), Some(uri)) = (rest, uri)
                        && rest != "/"
                        && rest != uri
                    {
                        return Err(Unreadable::Conflicting);
                    }
                    Self::from_parts(
                        text("x-forwarded-proto").map(first).as_deref(),
                        host,
                        uri.or(rest).unwrap_or("/"),
                    )?
                }
                None => Self::from_parts(
                    text("x-forwarded-proto").map(first).as_deref(),
                    text("host").ok_or(Unreadable::Missing)?,
                    rest.unwrap_or("/"),
                )?,
            },
        };
        // A proxy's own `X-Forwarded-Host` beside the URL it names: two hosts, no guess.
        if let Some(host) = forwarded_host.filter(|host| !host.is_empty())
            && split_port(&host.to_ascii_lowercase())
                .0
                .trim_end_matches('.')
                != original.host
        {
            return Err(Unreadable::Conflicting);
        }
        Ok(original)
    }

    /// `http(s)://authority/path?query`, read as browsers send it: a path and query may
    /// hold characters a strict URI parser refuses (`<`, `"`), which are not the client's
    /// mistake to be answered with an error a proxy turns into a 500.
    pub fn from_url(url: &str) -> Result<Self, Unreadable> {
        if url.len() > MAX_URL {
            return Err(Unreadable::BadUrl);
        }
        let (scheme, rest) = url.split_once("://").ok_or(Unreadable::BadUrl)?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(Unreadable::BadUrl),
        };
        let cut = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(cut);
        let path = path.split('#').next().unwrap_or("");
        let path = match path.chars().next() {
            None => "/".to_owned(),
            Some('?') => format!("/{path}"),
            Some(_) => path.to_owned(),
        };
        Self::from_parts(Some(if https { "https" } else { "http" }), authority, &path)
    }

    fn from_parts(proto: Option<&str>, authority: &str, path: &str) -> Result<Self, Unreadable> {
        let authority = authority.trim().to_ascii_lowercase();
        if authority.is_empty()
            || authority.len() > 300
            || authority.contains(['@', '/', '\\', '?', '#'])
            || authority
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
            || path.len() > MAX_URL
            || !path.starts_with('/')
            || path.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Unreadable::BadUrl);
        }
        let (host, port) = split_port(&authority);
        if host.is_empty() || port == Some("") {
            return Err(Unreadable::BadUrl);
        }
        let host = host.trim_end_matches('.').to_owned();
        Ok(Self {
            https: proto.is_none_or(|p| p.eq_ignore_ascii_case("https")),
            host,
            authority,
            path_and_query: path.to_owned(),
        })
    }

    /// The port the browser named, if any.
    pub fn port(&self) -> Option<&str> {
        split_port(&self.authority).1
    }

    /// The value of query parameter `name`, when present once.
    pub fn param(&self, name: &str) -> Option<&str> {
        let query = self.path_and_query.split_once('?')?.1;
        let query = query.split('#').next().unwrap_or("");
        let mut found = query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .filter(|(key, _)| *key == name)
            .map(|(_, value)| value);
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The URL as requested, without a hand-off code or share pass (and with `extra`
    /// added, when given).
    pub fn url_without_passes(&self, extra: Option<(&str, &str)>) -> String {
        let (path, query) = self
            .path_and_query
            .split_once('?')
            .unwrap_or((&self.path_and_query, ""));
        let added = extra.map(|(name, value)| format!("{name}={value}"));
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or("");
                !pair.is_empty() && key != HANDOFF_PARAM && key != SHARE_PARAM
            })
            .chain(added.as_deref())
            .collect();
        match kept.is_empty() {
            true => format!("{}{path}", self.origin()),
            false => format!("{}{path}?{}", self.origin(), kept.join("&")),
        }
    }

    pub fn origin(&self) -> String {
        format!(
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.authority
        )
    }
}

/// `host:port` → (`host`, port text); an IPv6 literal keeps its brackets.
pub fn split_port(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.split_once("]:") {
            Some((host, port)) => (&authority[..host.len() + 1], Some(port)),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => (host, Some(port)),
        _ => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn ingress_nginx_names_the_original_url() {
        let found = Original::from_headers(
            &headers(&[
                (
                    "x-original-url",
                    "https://PV-A.preview.example.com/cart?x=1",
                ),
                ("host", "previewd.example.com"),
            ]),
            None,
            Proxy::Nginx,
        )
        .unwrap();
        assert_eq!(found.host, "pv-a.preview.example.com");
        assert_eq!(found.path_and_query, "/cart?x=1");
        assert!(found.https);
    }

    #[test]
    fn traefik_names_host_uri_and_proto() {
        let found = Original::from_headers(
            &headers(&[
                ("x-forwarded-host", "pv-a.preview.example.com"),
                ("x-forwarded-uri", "/a?b=c"),
                ("x-forwarded-proto", "http"),
            ]),
            None,
            Proxy::Forwarding,
        )
        .unwrap();
        assert_eq!(found.host, "pv-a.preview.example.com");
        assert!(!found.https);
    }

    #[test]
    fn envoy_sends_the_original_host_and_path() {
        let found = Original::from_headers(
            &headers(&[("host", "pv-a.preview.example.com:8443")]),
            Some("/x"),
            Proxy::Forwarding,
        )
        .unwrap();
        assert_eq!(found.host, "pv-a.preview.example.com");
        assert_eq!(found.authority, "pv-a.preview.example.com:8443");
        assert_eq!(found.path_and_query, "/x");
    }

    #[test]
    fn a_forwarded_host_that_disagrees_with_the_original_url_is_refused() {
        let refused = Original::from_headers(
            &headers(&[
                ("x-original-url", "https://pv-a.preview.example.com/"),
                ("x-forwarded-host", "pv-b.preview.example.com"),
            ]),
            None,
            Proxy::Nginx,
        );
        assert_eq!(refused, Err(Unreadable::Conflicting));
    }

    #[test]
    fn userinfo_and_odd_urls_are_not_read_as_a_host() {
        for url in [
            "https://pv-a.preview.example.com@evil.example/",
            "javascript:alert(1)",
            "//pv-a.preview.example.com/",
            "https:///x",
        ] {
            assert!(
                Original::from_headers(&headers(&[("x-original-url", url)]), None, Proxy::Nginx)
                    .is_err(),
                "{url}"
            );
        }
        assert_eq!(
            Original::from_headers(&HeaderMap::new(), None, Proxy::Nginx),
            Err(Unreadable::Missing)
        );
    }

    #[test]
    fn the_url_without_passes_keeps_everything_else() {
        let url = Original::from_url("https://h.example/p?a=1&__previewd=c&__previewd_share=s&b=2")
            .unwrap();
        assert_eq!(url.url_without_passes(None), "https://h.example/p?a=1&b=2");
        let bare = Original::from_url("https://h.example/p?__previewd=c").unwrap();
        assert_eq!(bare.url_without_passes(None), "https://h.example/p");
        assert_eq!(
            bare.url_without_passes(Some(("__previewd", "d"))),
            "https://h.example/p?__previewd=d"
        );
    }

    #[test]
    fn a_forwarding_proxy_never_reads_a_clients_original_url() {
        // Envoy passes the client's own headers on: `Host` is the proxy's word.
        let found = Original::from_headers(
            &headers(&[
                ("host", "pv-private.preview.example.com"),
                ("x-original-url", "https://pv-public.preview.example.com/"),
            ]),
            Some("/admin"),
            Proxy::Forwarding,
        )
        .unwrap();
        assert_eq!(found.host, "pv-private.preview.example.com");
    }

    #[test]
    fn a_trailing_dot_names_the_same_host() {
        let found = Original::from_headers(
            &headers(&[
                ("x-forwarded-host", "pv-a.preview.example.com."),
                ("x-forwarded-uri", "/"),
            ]),
            None,
            Proxy::Forwarding,
        )
        .unwrap();
        assert_eq!(found.host, "pv-a.preview.example.com");
    }

    #[test]
    fn characters_browsers_send_raw_are_read_not_refused() {
        let found =
            Original::from_url("https://pv-a.preview.example.com/q?x=<b>&y=a\"b|{}").unwrap();
        assert_eq!(found.path_and_query, "/q?x=<b>&y=a\"b|{}");
        let bare = Original::from_url("https://pv-a.preview.example.com?x=1").unwrap();
        assert_eq!(bare.path_and_query, "/?x=1");
    }

    #[test]
    fn a_parameter_counts_only_when_given_once() {
        let once = Original::from_url("https://h.example/p?a=1&__previewd=code").unwrap();
        assert_eq!(once.param(HANDOFF_PARAM), Some("code"));
        let twice = Original::from_url("https://h.example/p?__previewd=a&__previewd=b").unwrap();
        assert_eq!(twice.param(HANDOFF_PARAM), None);
    }
}
