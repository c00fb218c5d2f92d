//! The template databases (#16) as the API and the dashboard show them: every generation of
//! every repository, with its base commit, state and age.

use serde::Serialize;
use sqlx::SqlitePool;

use crate::db;
use crate::naming::Names;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Template {
    pub repo: String,
    pub generation: i64,
    pub state: String,
    pub base_sha: String,
    pub cluster: String,
    pub database: String,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    pub age_seconds: i64,
    pub message: Option<String>,
}

pub async fn templates(pool: &SqlitePool, now: i64) -> anyhow::Result<Vec<Template>> {
    db::all_generations(pool)
        .await?
        .into_iter()
        .map(|row| {
            let names: Names = serde_json::from_str(&row.names).map_err(|e| {
                anyhow::anyhow!(
                    "the recorded names of {}'s template generation {} are unreadable: {e}",
                    row.repo,
                    row.generation
                )
            })?;
            Ok(Template {
                age_seconds: now.saturating_sub(row.created_at).max(0),
                database: names.database,
                repo: row.repo,
                generation: row.generation,
                state: row.state,
                base_sha: row.base_sha,
                cluster: row.cluster,
                created_at: row.created_at,
                ready_at: row.ready_at,
                message: row.message,
            })
        })
        .collect()
}
