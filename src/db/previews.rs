//! The reconciler's queries: a preview as it is reconciled, placement, sealed values, the
//! ledger, and the end of a preview.

use rusqlite::{OptionalExtension, params};

use super::HistoryRow;

use super::State;
use crate::plan::Observation;
use crate::preview::{Desired, EndReason, HistoryKind, InstallationId, ObservedState, PreviewKey};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewRow {
    pub id: i64,
    pub key: PreviewKey,
    pub title: String,
    pub author: String,
    pub head_sha: String,
    pub fork: bool,
    pub approved_sha: Option<String>,
    pub desired: Desired,
    pub observed: ObservedState,
    pub end_reason: Option<EndReason>,
    pub last_error: Option<String>,
    pub cluster: Option<String>,
    pub applied_hash: Option<String>,
    pub teardown_started_at: Option<i64>,
    pub seed_generation: i64,
    pub expires_at: i64,
    pub installation_id: Option<InstallationId>,
    pub keep: bool,
    pub redeploy_generation: i64,
    pub created_at: i64,
    /// When the head SHA last changed (previewd's clock).
    pub head_changed_at: i64,
    /// The names recorded at creation (`Names::to_json`); None for a preview from before
    /// names were recorded, until `record_names` gives it the ones it has.
    pub names: Option<String>,
    pub draft: bool,
    /// The PR carries its repository's `trigger_label`.
    pub labeled: bool,
    /// The writer whose `/preview deploy` opted the PR in past every gate.
    pub deploy_by: Option<String>,
    /// The first file `paths` matched (then the PR keeps its preview), and the head whose
    /// files were last listed.
    pub paths_file: Option<String>,
    pub paths_sha: Option<String>,
    /// The head a writer's `/preview deploy` let past `wait_for`.
    pub wait_override_sha: Option<String>,
    /// The template generation its database is cloned from (`None`: seeded), decided at seed
    /// generation `template_seed` (#16).
    pub template_generation: Option<i64>,
    pub template_seed: Option<i64>,
    /// Asleep since (`None`: awake): the app rendered at zero replicas.
    pub sleeping_since: Option<i64>,
    /// The last wake asked for, until the preview is ready again.
    pub woke_at: Option<i64>,
    /// Its change version (`db::changes`): stamped by each write that gives it work.
    pub version: i64,
}

impl PreviewRow {
    /// Whether `now` (read again) says what this row said, but for what a look records
    /// itself (the names, the clone decision, the observed state): nobody else changed it.
    pub fn unchanged_in(&self, now: &PreviewRow) -> bool {
        let mut now = now.clone();
        now.names.clone_from(&self.names);
        now.template_generation = self.template_generation;
        now.template_seed = self.template_seed;
        now.observed = self.observed;
        now.last_error.clone_from(&self.last_error);
        now.applied_hash.clone_from(&self.applied_hash);
        now == *self
    }
}

/// The head a PR's preview was last ended on purpose at (destroyed, expired, evicted), unless
/// the PR closed since.
pub async fn ended_on_purpose_at(
    state: &State,
    repo: &str,
    number: i64,
) -> sqlx::Result<Option<String>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::ended_on_purpose_at(pg, repo, number).await;
    }
    let pool = state.pool();
    let sha: Option<Option<String>> =
        sqlx::query_scalar("SELECT ended_sha FROM closed_prs WHERE repo = ?1 AND number = ?2")
            .bind(repo)
            .bind(number)
            .fetch_optional(pool)
            .await?;
    Ok(sha.flatten())
}

/// Records the names of a preview that has none recorded yet (never overwrites).
pub async fn record_names(state: &State, id: i64, names: &str) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::record_names(pg, id, names).await;
    }
    let pool = state.pool();
    sqlx::query("UPDATE previews SET names = ?2 WHERE id = ?1 AND names IS NULL")
        .bind(id)
        .bind(names)
        .execute(pool)
        .await
        .map(drop)
}

/// A PR's preview, by repository and number.
pub async fn preview_id(state: &State, repo: &str, number: u32) -> anyhow::Result<Option<i64>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::preview_id(pg, repo, number).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached("SELECT id FROM previews WHERE repo = ?1 AND number = ?2")?
            .query_row(params![repo, number], |r| r.get(0))
            .optional()
    })
}

pub async fn preview_ids(state: &State) -> sqlx::Result<Vec<i64>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::preview_ids(pg).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!("SELECT id FROM previews ORDER BY id")
        .fetch_all(pool)
        .await
}

/// A preview's columns, in the order the statements below select them.
pub(super) const COLUMNS: &str = "id, repo, number, title, author, head_sha, fork, approved_sha, desired, observed,
     end_reason, last_error, cluster, applied_hash, teardown_started_at, seed_generation, expires_at,
     installation_id, keep, redeploy_generation, created_at, head_changed_at, names,
     draft, labeled, deploy_by, paths_file, paths_sha, wait_override_sha,
     template_generation, template_seed, sleeping_since, woke_at, version";

/// `COLUMNS`, one name each.
const NAMES: [&str; 34] = [
    "id",
    "repo",
    "number",
    "title",
    "author",
    "head_sha",
    "fork",
    "approved_sha",
    "desired",
    "observed",
    "end_reason",
    "last_error",
    "cluster",
    "applied_hash",
    "teardown_started_at",
    "seed_generation",
    "expires_at",
    "installation_id",
    "keep",
    "redeploy_generation",
    "created_at",
    "head_changed_at",
    "names",
    "draft",
    "labeled",
    "deploy_by",
    "paths_file",
    "paths_sha",
    "wait_override_sha",
    "template_generation",
    "template_seed",
    "sleeping_since",
    "woke_at",
    "version",
];

/// The position of column `name` in `COLUMNS`, at compile time (`const { at("repo") }`): a
/// row is read by name, yet costs what a read by position costs (`db::connection::column`).
const fn at(name: &str) -> usize {
    super::connection::column(&NAMES, name)
}

impl PreviewRow {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(const { at("id") })?,
            key: PreviewKey::new(r.get(const { at("repo") })?, r.get(const { at("number") })?),
            title: r.get(const { at("title") })?,
            author: r.get(const { at("author") })?,
            head_sha: r.get(const { at("head_sha") })?,
            fork: r.get(const { at("fork") })?,
            approved_sha: r.get(const { at("approved_sha") })?,
            desired: r.get(const { at("desired") })?,
            observed: r.get(const { at("observed") })?,
            end_reason: r.get(const { at("end_reason") })?,
            last_error: r.get(const { at("last_error") })?,
            cluster: r.get(const { at("cluster") })?,
            applied_hash: r.get(const { at("applied_hash") })?,
            teardown_started_at: r.get(const { at("teardown_started_at") })?,
            seed_generation: r.get(const { at("seed_generation") })?,
            expires_at: r.get(const { at("expires_at") })?,
            installation_id: r.get(const { at("installation_id") })?,
            keep: r.get(const { at("keep") })?,
            redeploy_generation: r.get(const { at("redeploy_generation") })?,
            created_at: r.get(const { at("created_at") })?,
            head_changed_at: r.get(const { at("head_changed_at") })?,
            names: r.get(const { at("names") })?,
            draft: r.get(const { at("draft") })?,
            labeled: r.get(const { at("labeled") })?,
            deploy_by: r.get(const { at("deploy_by") })?,
            paths_file: r.get(const { at("paths_file") })?,
            paths_sha: r.get(const { at("paths_sha") })?,
            wait_override_sha: r.get(const { at("wait_override_sha") })?,
            template_generation: r.get(const { at("template_generation") })?,
            template_seed: r.get(const { at("template_seed") })?,
            sleeping_since: r.get(const { at("sleeping_since") })?,
            woke_at: r.get(const { at("woke_at") })?,
            version: r.get(const { at("version") })?,
        })
    }
}

/// Up to `limit` previews after id `after`, in id order: a full reconcile pass reads its
/// rows a page at a time, not one query per preview.
pub async fn preview_rows(
    state: &State,
    after: i64,
    limit: i64,
) -> anyhow::Result<Vec<PreviewRow>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::preview_rows(pg, after, limit).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM previews WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))?
        .query_map(params![after, limit], PreviewRow::read)?
        .collect()
    })
}

pub async fn preview_row(state: &State, id: i64) -> anyhow::Result<Option<PreviewRow>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::preview_row(pg, id).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(&format!("SELECT {COLUMNS} FROM previews WHERE id = ?1"))?
            .query_row(params![id], PreviewRow::read)
            .optional()
    })
}

/// Deployable previews still without a cluster, oldest first.
pub async fn unplaced(state: &State) -> anyhow::Result<Vec<PreviewRow>> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::unplaced(pg).await;
    }
    let db = state.inline();
    db.read(|conn| {
        conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM previews INDEXED BY previews_unplaced
             WHERE desired = 'deployed' AND cluster IS NULL ORDER BY created_at, id"
        ))?
        .query_map([], PreviewRow::read)?
        .collect()
    })
}

/// Records `seen` in one commit: the state, its history row, the ledger's confirmation.
/// Each was a commit of its own, and each commit is an fsync (issue #17: a new preview
/// made about 15).
pub async fn record_state(
    state: &State,
    id: i64,
    seen: &Observation<'_>,
    now: i64,
) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::record_state(pg, id, seen, now).await;
    }
    let db = state.inline();
    let noted = Noted::from(seen);
    db.write(move |tx| noted.write(tx, id, now)).await
}

/// An [`Observation`] the blocking thread of a write owns.
pub(super) struct Noted {
    pub(super) state: &'static str,
    pub(super) message: Option<String>,
    pub(super) history: Option<(HistoryKind, String)>,
    pub(super) ready_at_seed: Option<i64>,
}

impl From<&Observation<'_>> for Noted {
    fn from(seen: &Observation<'_>) -> Self {
        Noted {
            state: seen.state.as_str(),
            message: seen.message.map(str::to_owned),
            history: seen
                .history
                .zip(seen.message)
                .map(|(what, message)| (what, message.to_owned())),
            ready_at_seed: seen.ready_at_seed,
        }
    }
}

impl Noted {
    pub(super) fn write(
        &self,
        tx: &rusqlite::Transaction<'_>,
        id: i64,
        now: i64,
    ) -> rusqlite::Result<()> {
        if let Some(seed) = self.ready_at_seed {
            // Every applied ledger item is confirmed present; the clone made for this seed
            // generation is done, and the generation it came from no longer needed for it.
            tx.prepare_cached(
                "UPDATE ledger SET state = 'confirmed', confirmed_at = ?2
                 WHERE preview_id = ?1 AND state = 'applied'",
            )?
            .execute(params![id, now])?;
            tx.prepare_cached(
                "UPDATE previews SET template_confirmed = ?2 WHERE id = ?1 AND template_seed = ?2",
            )?
            .execute(params![id, seed])?;
        }
        if let Some((what, message)) = &self.history {
            super::history::write_of(tx, id, *what, message, now)?;
        }
        tx.prepare_cached(
            // A wake is over once the preview is ready again (the login stops showing the
            // waking page), or, where nobody reports health (a directory), once a look
            // settles on it written.
            "UPDATE previews SET observed = ?2, last_error = ?3, updated_at = ?4,
                 woke_at = CASE WHEN ?2 IN ('ready', 'applied') THEN NULL ELSE woke_at END
             WHERE id = ?1",
        )?
        .execute(params![id, self.state, self.message, now])
        .map(drop)
    }
}

/// Records what the reconciler saw; `applied_hash` only changes when `Some`.
pub async fn set_observed(
    state: &State,
    id: i64,
    observed: ObservedState,
    error: Option<&str>,
    applied_hash: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::set_observed(pg, id, observed, error, applied_hash, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE previews SET observed = ?2, last_error = ?3, applied_hash = COALESCE(?4, applied_hash), updated_at = ?5 WHERE id = ?1",
        id,
        observed,
        error,
        applied_hash,
        now,
    )
    .execute(pool)
    .await
    .map(drop)
}

/// Marks a teardown as begun (once), forgets what was applied, and says so in the history,
/// in one transaction. Returns false when it had already begun.
pub async fn start_teardown(state: &State, id: i64, now: i64) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::start_teardown(pg, id, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let done = sqlx::query!(
        "UPDATE previews SET teardown_started_at = ?2, observed = 'tearing_down', applied_hash = NULL
         WHERE id = ?1 AND teardown_started_at IS NULL",
        id,
        now
    )
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(false);
    }
    let row = sqlx::query!(
        r#"SELECT repo, number AS "number: u32", head_sha, end_reason AS "end_reason: EndReason"
           FROM previews WHERE id = ?1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await?;
    let reason = format!("PR {}", row.end_reason.map_or("closed", EndReason::as_str));
    let history = HistoryRow {
        head_sha: Some(&row.head_sha),
        ..HistoryRow::by_previewd(
            &row.repo,
            row.number,
            HistoryKind::TeardownStarted,
            &reason,
            now,
        )
    };
    super::history::add(&mut tx, &history).await?;
    tx.commit().await?;
    Ok(true)
}

/// A reopened PR's preview is no longer being torn down.
pub async fn clear_teardown(state: &State, id: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::clear_teardown(pg, id).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE previews SET teardown_started_at = NULL WHERE id = ?1",
        id
    )
    .execute(pool)
    .await
    .map(drop)
}

/// The end: deletes the row (ledger, secrets and commands go with it) and writes the final
/// history row, in one transaction, only if the preview is still meant to be absent.
pub async fn forget_preview(state: &State, id: i64, reason: &str, now: i64) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::forget_preview(pg, id, reason, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let row = sqlx::query!(
        r#"SELECT repo, number, head_sha, installation_id AS "installation_id: InstallationId",
                  end_reason AS "end_reason: EndReason"
           FROM previews WHERE id = ?1 AND desired = 'absent'"#,
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else { return Ok(false) };
    // Commands are answered even after their preview is gone (and one queued during the
    // teardown still runs): they are keyed by repo and number, not by the row.
    sqlx::query!(
        "UPDATE commands SET preview_id = NULL WHERE preview_id = ?1",
        id
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!("DELETE FROM previews WHERE id = ?1", id)
        .execute(&mut *tx)
        .await?;
    let number = u32::try_from(row.number).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let history = HistoryRow {
        head_sha: Some(&row.head_sha),
        ..HistoryRow::by_previewd(&row.repo, number, HistoryKind::Destroyed, reason, now)
    };
    super::history::add(&mut tx, &history).await?;
    super::mark_final_report(
        &mut tx,
        &row.repo,
        row.number,
        row.installation_id,
        &row.head_sha,
        row.end_reason,
        now,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// A history row by previewd about `key`, in a commit of its own.
pub async fn add_history_now(
    state: &State,
    key: &PreviewKey,
    what: HistoryKind,
    reason: &str,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return super::pg::previews::add_history_now(pg, key, what, reason, now).await;
    }
    let pool = state.pool();
    let row = HistoryRow::by_previewd(key.repo.as_str(), key.number, what, reason, now);
    super::history::add(&mut *pool.acquire().await?, &row).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_names_a_row_is_read_by_are_the_columns_selected() {
        let selected: Vec<&str> = COLUMNS.split(',').map(str::trim).collect();
        assert_eq!(selected, NAMES);
        assert_eq!(at("id"), 0);
        assert_eq!(at("version"), NAMES.len() - 1);
    }
}
