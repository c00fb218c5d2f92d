//! The dashboard's routes: the list of previews and one preview's page, rendered by
//! `dashboard` from the read model.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use crate::dashboard;
use crate::server::app::App;
use crate::server::viewer::Viewer;
use crate::view::{self, Destroyed, Paging};

use super::error::Error;

/// The dashboard: a page of previews (`limit`, default 100, and `cursor`, as in the API)
/// with a link to the next, so 5,000 live previews cost a page's rendering, not 5,000 rows.
pub async fn index(
    State(app): State<Arc<App>>,
    Extension(viewer): Extension<Viewer>,
    paging: Result<Query<Paging>, QueryRejection>,
) -> Result<Response, Error> {
    let Query(paging) = paging.map_err(|e| Error::from(e).page())?;
    let limit = view::page_limit(&paging).map_err(|e| Error::from(e).page())?;
    let after = paging
        .cursor
        .as_deref()
        .map(view::parse_cursor)
        .transpose()
        .map_err(|e| Error::from(e).page())?;
    let after = after.as_ref().map(|(repo, n)| (repo.as_str(), *n));
    let now = app.clock.now();
    let read = async {
        let filters = Default::default();
        // One more than shown: a full last page links to no empty one after it.
        let page = viewer.page(&app, &filters, limit + 1, after).await?;
        // A person is told how many they see, never how many there are.
        let live = match viewer {
            Viewer::Operator => crate::db::count_previews(&app.state).await?,
            Viewer::Person(_) => {
                i64::try_from(page.previews.len().min(limit as usize)).unwrap_or(i64::MAX)
            }
        };
        let destroyed =
            crate::db::recently_destroyed(&app.state, crate::db::RECENTLY_DESTROYED_SHOWN).await?;
        let destroyed: Vec<Destroyed> = destroyed.into_iter().map(Destroyed::from).collect();
        let templates = view::templates(&app.state, now).await?;
        anyhow::Ok((page, live, destroyed, templates))
    };
    let (mut page, live, destroyed, templates) = read.await.map_err(|e| Error::State(e).page())?;
    let destroyed = viewer
        .keep_readable(&app, destroyed, |d| d.repo.as_str())
        .await;
    let templates = viewer
        .keep_readable(&app, templates, |t| t.repo.as_str())
        .await;
    let more = page.previews.len() > limit as usize;
    page.previews.truncate(limit as usize);
    let next = match page.previews.last() {
        Some(last) if more => Some(view::cursor_after(&last.repo, last.number)),
        _ => None,
    };
    let listed = dashboard::Listed {
        previews: &page.previews,
        live,
        first: after.is_none(),
        next: next.as_deref(),
        limit: paging.limit,
    };
    let html = dashboard::list_page(&listed, &destroyed, &templates, now);
    Ok(dashboard::html_answer(StatusCode::OK, html))
}

pub async fn preview(
    State(app): State<Arc<App>>,
    Extension(viewer): Extension<Viewer>,
    Path((owner, repo, number)): Path<(String, String, i64)>,
) -> Result<Response, Error> {
    let full = format!("{owner}/{repo}");
    let now = app.clock.now();
    // The state first: GitHub is asked only about repositories previewd has records of.
    let detail = view::detail(&app.state, &app.config, now, &full, number)
        .await
        .map_err(|e| Error::State(e).page())?
        .ok_or(Error::NotFound("previewd has no record of this pull request").page())?;
    if !viewer.may_read(&app, &full.to_ascii_lowercase()).await {
        return Err(Error::NotFound("previewd has no record of this pull request").page());
    }
    let repo: Option<crate::preview::RepoName> = full.parse().ok();
    let access = repo
        .as_ref()
        .and_then(|repo| app.config.policy_for(repo))
        .map_or(app.config.defaults.access, |policy| policy.access);
    let inbox = repo.is_some_and(|repo| {
        crate::render::services::inbox_url(&app.config, &app.config.app_for(&repo), "").is_some()
    });
    let html = dashboard::detail_page(&full, number, &detail, access, inbox);
    Ok(dashboard::html_answer(StatusCode::OK, html))
}
