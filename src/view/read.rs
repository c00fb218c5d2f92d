//! Reading the read model from the state: a page of previews (filtered, keyset-paged by an
//! opaque cursor), every preview, and one PR's detail.

use serde::Deserialize;

use crate::config::Config;
use crate::db;

use super::{Detail, HistoryItem, LedgerItem, Page, Preview, ShareItem, state_name};

#[derive(Debug, Default, Deserialize)]
pub struct Filters {
    pub repo: Option<String>,
    pub author: Option<String>,
    pub state: Option<String>,
    pub cluster: Option<String>,
}

/// Previews per page when the request names no `limit`, and the most it may ask for.
pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 500;

/// `?limit=&cursor=`: the page size and where the page starts (the `next` of the last one).
#[derive(Debug, Default, Deserialize)]
pub struct Paging {
    pub limit: Option<u32>,
    pub cursor: Option<String>,
}

/// A request's paging the API refuses (400): the caller's mistake, never a 5xx.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PagingError {
    #[error("limit must be between 1 and {MAX_LIMIT}")]
    Limit,
    #[error("cursor is not one this API gave out")]
    Cursor,
}

/// The page size asked for, refused beyond [`MAX_LIMIT`] (a silent clamp would let a
/// client believe it has everything).
pub fn page_limit(paging: &Paging) -> Result<u32, PagingError> {
    match paging.limit.unwrap_or(DEFAULT_LIMIT) {
        n @ 1..=MAX_LIMIT => Ok(n),
        _ => Err(PagingError::Limit),
    }
}

/// The opaque cursor after `(repo, number)`: base64url of `number:repo`.
pub fn cursor_after(repo: &str, number: i64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{number}:{repo}"))
}

/// The `(repo, number)` a cursor continues after.
pub fn parse_cursor(cursor: &str) -> Result<(String, i64), PagingError> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|_| PagingError::Cursor)?;
    let text = String::from_utf8(bytes).map_err(|_| PagingError::Cursor)?;
    let (number, repo) = text.split_once(':').ok_or(PagingError::Cursor)?;
    let number = number.parse().map_err(|_| PagingError::Cursor)?;
    Ok((repo.to_owned(), number))
}

/// A page of the previews matching `filters`: at most `limit`, after `after`. The state is
/// known only once a row is read, so with `state` a page can hold fewer than `limit`;
/// `next` is still where the following page starts.
pub async fn page(
    state: &crate::db::State,
    config: &Config,
    now: i64,
    filters: &Filters,
    limit: u32,
    after: Option<(&str, i64)>,
) -> anyhow::Result<Page> {
    let repo = filters.repo.as_deref().map(str::to_ascii_lowercase);
    let filter = db::PreviewFilter {
        repo: repo.as_deref(),
        author: filters.author.as_deref(),
        cluster: filters.cluster.as_deref(),
        after,
    };
    let rows = db::previews(state, &filter, i64::from(limit)).await?;
    let next = match rows.last() {
        Some(last) if rows.len() == limit as usize => Some(cursor_after(&last.repo, last.number)),
        _ => None,
    };
    let previews = rows
        .iter()
        .map(|p| Preview::of(p, config, now))
        .filter(|p| {
            filters
                .state
                .as_deref()
                .is_none_or(|s| state_name(p.state) == s)
        })
        .collect();
    Ok(Page { previews, next })
}

/// Every preview matching `filters` (the CLI, the dashboard), a bounded page at a time.
pub async fn list(
    state: &crate::db::State,
    config: &Config,
    now: i64,
    filters: &Filters,
) -> anyhow::Result<Vec<Preview>> {
    let mut all = Vec::new();
    let mut after: Option<(String, i64)> = None;
    loop {
        let after_ref = after.as_ref().map(|(r, n)| (r.as_str(), *n));
        let page = page(state, config, now, filters, MAX_LIMIT, after_ref).await?;
        all.extend(page.previews);
        match page.next {
            Some(next) => after = Some(parse_cursor(&next)?),
            None => return Ok(all),
        }
    }
}

/// One PR's preview (or `None` once destroyed), its ledger and its history; `None` when
/// previewd never knew the PR.
pub async fn detail(
    state: &crate::db::State,
    config: &Config,
    now: i64,
    repo: &str,
    number: i64,
) -> anyhow::Result<Option<Detail>> {
    let repo = repo.to_ascii_lowercase();
    let preview = db::preview_summary(state, &repo, number).await?;
    let history = db::history(state, &repo, number).await?;
    if preview.is_none() && history.is_empty() {
        return Ok(None);
    }
    let (ledger, shares) = match &preview {
        Some(p) => (
            db::ledger(state, p.id).await?,
            db::login::valid_shares(state, p.id, now).await?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    Ok(Some(Detail {
        preview: preview.map(|p| Preview::of(&p, config, now)),
        ledger: ledger.iter().map(LedgerItem::from).collect(),
        history: history.iter().map(HistoryItem::from).collect(),
        shares: shares.iter().map(ShareItem::from).collect(),
    }))
}
