//! The dashboard's routes: the list of previews and one preview's page, rendered by
//! `dashboard` from the read model.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;

use crate::app::App;
use crate::dashboard;
use crate::view::{self, Destroyed};

use super::error::Error;

pub async fn index(State(app): State<Arc<App>>) -> Result<Response, Error> {
    let now = app.clock.now();
    let read = async {
        let previews = view::list(&app.pool, &app.config, now, &Default::default()).await?;
        let destroyed =
            crate::db::recently_destroyed(&app.pool, crate::db::RECENTLY_DESTROYED_SHOWN).await?;
        let destroyed: Vec<Destroyed> = destroyed.into_iter().map(Destroyed::from).collect();
        let templates = view::templates(&app.pool, now).await?;
        anyhow::Ok((previews, destroyed, templates))
    };
    let (previews, destroyed, templates) = read.await.map_err(|e| Error::State(e).page())?;
    let html = dashboard::list_page(&previews, &destroyed, &templates, now);
    Ok(dashboard::html_answer(StatusCode::OK, html))
}

pub async fn preview(
    State(app): State<Arc<App>>,
    Path((owner, repo, number)): Path<(String, String, i64)>,
) -> Result<Response, Error> {
    let full = format!("{owner}/{repo}");
    let now = app.clock.now();
    let detail = view::detail(&app.pool, &app.config, now, &full, number)
        .await
        .map_err(|e| Error::State(e).page())?
        .ok_or(Error::NotFound("previewd has no record of this pull request").page())?;
    let html = dashboard::detail_page(&full, number, &detail);
    Ok(dashboard::html_answer(StatusCode::OK, html))
}
