//! What the sticky comment and replies say of who gets into a preview: the access line
//! (the login in front of it) and the reply to a share, which never holds the link.

use super::{escape, when};
use crate::command::ShareCap;
use crate::config::Access;
use crate::preview::PreviewKey;

/// How a reviewer gets into a preview of `repo` under `rule`: the login in front of it.
pub fn way_in(rule: Access, repo: &str) -> String {
    let ask = "or ask a writer for a share link: `/preview share 24h`";
    match rule {
        Access::Repo => format!(
            "Sign in with GitHub (people who can read {}), {ask}",
            escape(repo)
        ),
        Access::Org => format!(
            "Sign in with GitHub (members of the {} organisation), {ask}",
            escape(repo.split_once('/').map_or(repo, |(owner, _)| owner))
        ),
        Access::Public => "Open to anyone, no sign-in".into(),
    }
}

/// The reply to a share: that a link was made, until when, and where a writer gets it;
/// never the link (a PR comment is public to everyone who reads the PR, and kept).
pub(super) fn shared(
    at: &str,
    until: i64,
    now: i64,
    cap: Option<ShareCap>,
    preview: &PreviewKey,
    public_url: Option<&str>,
) -> String {
    let capped = match cap {
        None => "",
        Some(ShareCap::Longest) => ", the longest a share link lasts",
        Some(ShareCap::PreviewExpiry) => ", when the preview expires: a link never outlives it",
    };
    let path = format!(
        "{}/{}/{}",
        preview.repo.owner(),
        preview.repo.name(),
        preview.number
    );
    let base = public_url.unwrap_or("").trim_end_matches('/');
    let page = match public_url {
        Some(_) => format!("[previewd's dashboard page of this PR]({base}/previews/{path})"),
        None => format!("previewd's dashboard page of this PR (`/previews/{path}`)"),
    };
    format!(
        "{at}: made a share link to this preview, valid until {}{capped}. \
         Whoever holds it gets in without signing in, so it is not posted here: \
         a writer gets it from previewd's API with the API token, `GET {base}/api/previews/{path}/shares`; \
         {page} shows how many links are valid and until when. `/preview unshare` revokes every link.",
        when(until, now)
    )
}
