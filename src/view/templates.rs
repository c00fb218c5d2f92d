//! The template databases (#16) as the API and the dashboard show them: every generation of
//! every repository, with its base commit, state, size and age.

use serde::Serialize;

use crate::db;
use crate::preview::GenState;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Template {
    pub repo: String,
    pub generation: i64,
    pub state: GenState,
    pub base_sha: String,
    pub cluster: String,
    pub database: String,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    pub age_seconds: i64,
    /// As the generation's size Job reported it; none until then (or with no `public_url`
    /// to report to).
    pub size_bytes: Option<i64>,
    pub message: Option<String>,
}

pub async fn templates(state: &crate::db::State, now: i64) -> anyhow::Result<Vec<Template>> {
    db::all_generations(state)
        .await?
        .into_iter()
        .map(|row| {
            let names = row.names()?;
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
                size_bytes: row.size_bytes,
                message: row.message,
            })
        })
        .collect()
}

/// A size as people read it: whole bytes, kB, MB, GB or TB, in powers of 1,024 (PostgreSQL's
/// units, though `pg_size_pretty` switches units later).
pub fn size(bytes: i64) -> String {
    let mut value = bytes as f64;
    for unit in ["bytes", "kB", "MB", "GB"] {
        if value < 1024.0 {
            return if unit == "bytes" {
                format!("{bytes} bytes")
            } else {
                format!("{value:.0} {unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{value:.0} TB")
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_pg_size_pretty_writes_them() {
        assert_eq!(super::size(0), "0 bytes");
        assert_eq!(super::size(1023), "1023 bytes");
        assert_eq!(super::size(8 * 1024), "8 kB");
        assert_eq!(super::size(262_144_000), "250 MB");
        assert_eq!(super::size(3 << 40), "3 TB");
    }
}
