//! Template databases (#16) in the state: each repository's generations, with their ledger
//! and sealed secrets, what the next one is built from, and which generation each preview's
//! database was cloned from.

use super::{State, pg};
use crate::ledger::Entry;
use crate::preview::GenState;
use crate::render::SealedSecret;

/// One generation, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRow {
    pub id: i64,
    pub repo: String,
    pub generation: i64,
    pub base_sha: String,
    pub cluster: String,
    pub names: String,
    pub state: GenState,
    pub message: Option<String>,
    pub applied_hash: Option<String>,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    /// The database's size on its server, as its size Job reported it (bytes).
    pub size_bytes: Option<i64>,
}

impl TemplateRow {
    /// The generation's recorded names (never recomputed: `Names::template` may change).
    pub fn names(&self) -> anyhow::Result<crate::naming::Names> {
        serde_json::from_str(&self.names).map_err(|e| {
            anyhow::anyhow!(
                "the recorded names of {}'s template generation {} are unreadable: {e}",
                self.repo,
                self.generation
            )
        })
    }
}

/// What a repository's next generation is built from, and whether one is wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRepoRow {
    pub repo: String,
    pub base_sha: String,
    /// 0: nothing asked; 1: a push moved the base; 2: a writer asked (at once).
    pub refresh: i64,
    pub refresh_by: Option<String>,
    /// Why every generation is to go (`destroy-template`, idle, left `[[repos]]`).
    pub destroy: Option<String>,
    pub last_used_at: i64,
}

/// A preview of `repo` was created (or lived): the template is in use, and is wanted back
/// if it was dropped for being idle.
pub async fn template_used(state: &State, repo: &str, now: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::template_used(pg, repo, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE template_repos SET last_used_at = ?2,
                destroy = CASE WHEN destroy = 'idle' THEN NULL ELSE destroy END
          WHERE repo = ?1",
        repo,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn template_repo(state: &State, repo: &str) -> sqlx::Result<Option<TemplateRepoRow>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::template_repo(pg, repo).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        TemplateRepoRow,
        r#"SELECT repo AS "repo!", base_sha, refresh, refresh_by, destroy, last_used_at
             FROM template_repos WHERE repo = ?1"#,
        repo
    )
    .fetch_optional(pool)
    .await
}

/// Every repository with a template record or a generation: what the template pass visits
/// (a destroyed template keeps its record: a writer's refresh builds it again from its base).
pub async fn template_repos(state: &State) -> sqlx::Result<Vec<String>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::template_repos(pg).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"SELECT repo AS "repo!" FROM template_repos
           UNION SELECT repo FROM templates ORDER BY 1"#
    )
    .fetch_all(pool)
    .await
}

/// `repo`'s generations, newest first.
pub async fn generations(state: &State, repo: &str) -> sqlx::Result<Vec<TemplateRow>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::generations(pg, repo).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        TemplateRow,
        r#"SELECT id AS "id!", repo, generation, base_sha, cluster, names, state AS "state: GenState", message,
                  applied_hash, created_at, ready_at, size_bytes
             FROM templates WHERE repo = ?1 ORDER BY generation DESC"#,
        repo
    )
    .fetch_all(pool)
    .await
}

/// Every generation of every repository (the API and the dashboard), newest first.
pub async fn all_generations(state: &State) -> sqlx::Result<Vec<TemplateRow>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::all_generations(pg).await;
    }
    let pool = state.pool();
    sqlx::query_as!(
        TemplateRow,
        r#"SELECT id AS "id!", repo, generation, base_sha, cluster, names, state AS "state: GenState", message,
                  applied_hash, created_at, ready_at, size_bytes
             FROM templates ORDER BY repo, generation DESC LIMIT 1000"#
    )
    .fetch_all(pool)
    .await
}

/// A generation to start: `repo`'s next, numbered `at_least` or more (`reconcile::templates::decide::plan`'s).
#[derive(Debug, Clone, Copy)]
pub struct NewGeneration<'a> {
    pub repo: &'a str,
    pub at_least: i64,
    pub base_sha: &'a str,
    pub cluster: &'a str,
}

/// Records `new.repo`'s next generation (building), named `names(number)`, and takes the
/// refresh request that asked for it, in one transaction; returns its id and number. The
/// number is past every generation the repository ever started
/// (`template_repos.last_generation`, which outlives `destroy-template` and the idle drop,
/// both of which forget every row), so a generation is never named as an earlier one, whose
/// database may still be on the server.
pub async fn start_generation(
    state: &State,
    new: NewGeneration<'_>,
    names: impl FnOnce(i64) -> anyhow::Result<String>,
    now: i64,
) -> anyhow::Result<(i64, i64)> {
    if let Some(pg) = state.postgres() {
        return pg::templates::start_generation(pg, new, names, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    let used = sqlx::query_scalar!(
        r#"SELECT max(coalesce((SELECT last_generation FROM template_repos WHERE repo = ?1), 0),
                      coalesce((SELECT max(generation) FROM templates WHERE repo = ?1), 0)) AS "n!: i64""#,
        new.repo
    )
    .fetch_one(&mut *tx)
    .await?;
    let generation = new.at_least.max(used + 1);
    let names = names(generation)?;
    let id = sqlx::query_scalar!(
        r#"INSERT INTO templates (repo, generation, base_sha, cluster, names, state, created_at, updated_at)
           VALUES (?1, ?2, ?3, ?4, ?5, 'building', ?6, ?6) RETURNING id AS "id!""#,
        new.repo,
        generation,
        new.base_sha,
        new.cluster,
        names,
        now,
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE template_repos SET refresh = 0, refresh_by = NULL, last_generation = ?2, updated_at = ?3
          WHERE repo = ?1",
        new.repo,
        generation,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((id, generation))
}

/// A generation's state (and message); `ready` also stamps when.
pub async fn set_generation_state(
    state: &State,
    id: i64,
    to: GenState,
    message: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::set_generation_state(pg, id, to, message, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE templates SET state = ?2, message = ?3, updated_at = ?4,
                ready_at = CASE WHEN ?2 = 'ready' THEN coalesce(ready_at, ?4) ELSE ready_at END
          WHERE id = ?1",
        id,
        to,
        message,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

/// What a generation's Application provisions (before it is applied), and the rendering
/// that was applied (after).
pub async fn record_generation_applied(
    state: &State,
    id: i64,
    entries: &[Entry],
    hash: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::record_generation_applied(pg, id, entries, hash, now).await;
    }
    let mut tx = super::begin_write(state).await?;
    for e in entries {
        sqlx::query!(
            "INSERT INTO template_ledger (template_id, kind, namespace, name, state, created_at)
             VALUES (?1, ?2, ?3, ?4, 'applied', ?5) ON CONFLICT DO NOTHING",
            id,
            e.kind,
            e.namespace,
            e.name,
            now
        )
        .execute(&mut *tx)
        .await?;
    }
    if let Some(hash) = hash {
        sqlx::query!(
            "UPDATE templates SET applied_hash = ?2, updated_at = ?3 WHERE id = ?1",
            id,
            hash,
            now
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// A generation's ledger: (kind, namespace, name, state).
pub async fn generation_ledger(
    state: &State,
    id: i64,
) -> sqlx::Result<Vec<(String, Option<String>, String, String)>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::generation_ledger(pg, id).await;
    }
    let pool = state.pool();
    let rows = sqlx::query!(
        "SELECT kind, namespace, name, state FROM template_ledger WHERE template_id = ?1 ORDER BY id",
        id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.kind, r.namespace, r.name, r.state))
        .collect())
}

/// A generation is gone from the cluster: its row goes, and its ledger and secrets with it.
pub async fn forget_generation(state: &State, id: i64) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::forget_generation(pg, id).await;
    }
    let pool = state.pool();
    sqlx::query!("DELETE FROM templates WHERE id = ?1", id)
        .execute(pool)
        .await
        .map(drop)
}

/// Every generation of `repo` is to go (`reason`: destroyed, idle, unlisted).
pub async fn destroy_template(
    state: &State,
    repo: &str,
    reason: &str,
    now: i64,
) -> sqlx::Result<bool> {
    if let Some(pg) = state.postgres() {
        return pg::templates::destroy_template(pg, repo, reason, now).await;
    }
    let pool = state.pool();
    let done = sqlx::query!(
        "UPDATE template_repos SET destroy = ?2, refresh = 0, updated_at = ?3 WHERE repo = ?1",
        repo,
        reason,
        now
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The stored sealed values of a generation (as `sealed_secrets` for previews).
pub async fn generation_secrets(state: &State, id: i64) -> sqlx::Result<Vec<SealedSecret>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::generation_secrets(pg, id).await;
    }
    let pool = state.pool();
    let rows = sqlx::query!(
        "SELECT namespace, name, scope, encrypted_data FROM template_secrets WHERE template_id = ?1 ORDER BY id",
        id
    )
    .fetch_all(pool)
    .await?;
    let secrets: Option<Vec<_>> = rows
        .into_iter()
        .map(|r| super::secrets::stored_secret(r.name, r.namespace, &r.scope, &r.encrypted_data))
        .collect();
    Ok(secrets.unwrap_or_default())
}

/// Stores a generation's sealed Secrets and the digest of its report token (the token is
/// among the sealed values, never stored in the clear), in one transaction.
pub async fn store_generation_secrets(
    state: &State,
    id: i64,
    secrets: &[SealedSecret],
    report_digest: Option<&[u8]>,
    fingerprint: &str,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::store_generation_secrets(
            pg,
            id,
            secrets,
            report_digest,
            fingerprint,
            now,
        )
        .await;
    }
    let mut tx = super::begin_write(state).await?;
    sqlx::query!("DELETE FROM template_secrets WHERE template_id = ?1", id)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "UPDATE templates SET report_digest = ?2 WHERE id = ?1",
        id,
        report_digest
    )
    .execute(&mut *tx)
    .await?;
    for secret in secrets {
        let stored = super::secrets::secret_to_store(secret);
        sqlx::query!(
            "INSERT INTO template_secrets (template_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            id,
            secret.namespace,
            secret.name,
            secret.scope,
            fingerprint,
            stored,
            now,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// The report-token digest of `repo`'s generation `generation`, while it is building or
/// ready (a retiring or failed generation takes no report).
pub async fn report_digest(
    state: &State,
    repo: &str,
    generation: i64,
) -> sqlx::Result<Option<Vec<u8>>> {
    if let Some(pg) = state.postgres() {
        return pg::templates::report_digest(pg, repo, generation).await;
    }
    let pool = state.pool();
    let digest = sqlx::query_scalar!(
        "SELECT report_digest FROM templates
          WHERE repo = ?1 AND generation = ?2 AND state IN ('building', 'ready')",
        repo,
        generation
    )
    .fetch_optional(pool)
    .await?;
    Ok(digest.flatten())
}

/// Records the size a generation's size Job measured.
pub async fn record_template_size(
    state: &State,
    repo: &str,
    generation: i64,
    bytes: i64,
    now: i64,
) -> sqlx::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::record_template_size(pg, repo, generation, bytes, now).await;
    }
    let pool = state.pool();
    sqlx::query!(
        "UPDATE templates SET size_bytes = ?3, size_at = ?4 WHERE repo = ?1 AND generation = ?2",
        repo,
        generation,
        bytes,
        now
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Records that the preview's database comes from `generation` (`None`: seeded), decided at
/// seed generation `seed`.
pub async fn decide_clone(
    state: &State,
    id: i64,
    generation: Option<i64>,
    seed: i64,
) -> anyhow::Result<()> {
    if let Some(pg) = state.postgres() {
        return pg::templates::decide_clone(pg, id, generation, seed).await;
    }
    let db = state.inline();
    db.write(move |tx| {
        tx.prepare_cached(
            "UPDATE previews SET template_generation = ?2, template_seed = ?3 WHERE id = ?1",
        )?
        .execute(rusqlite::params![id, generation, seed])
        .map(drop)
    })
    .await
}

/// Previews of `repo` whose clone of `generation` is decided but not seen done: the
/// generation must stay until they are.
pub async fn clones_pending(state: &State, repo: &str, generation: i64) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::templates::clones_pending(pg, repo, generation).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!: i64" FROM previews
            WHERE repo = ?1 AND template_generation = ?2 AND desired <> 'absent'
              AND template_confirmed IS NOT template_seed"#,
        repo,
        generation
    )
    .fetch_one(pool)
    .await
}

/// `repo`'s deployed previews (the template is in use while there are any; a PR opted out,
/// a draft or an unapproved fork has no database).
pub async fn live_previews(state: &State, repo: &str) -> sqlx::Result<i64> {
    if let Some(pg) = state.postgres() {
        return pg::templates::live_previews(pg, repo).await;
    }
    let pool = state.pool();
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!: i64" FROM previews WHERE repo = ?1 AND desired = 'deployed'"#,
        repo
    )
    .fetch_one(pool)
    .await
}

/// `repo`'s previews still waiting to clone `generation`, which is being dropped, are seeded
/// instead (`template_generation` cleared at the same decision).
pub async fn seed_instead(state: &State, repo: &str, generation: i64) -> sqlx::Result<u64> {
    if let Some(pg) = state.postgres() {
        return pg::templates::seed_instead(pg, repo, generation).await;
    }
    let mut tx = super::begin_write(state).await?;
    // Stamped for the reconciler (`db::changes`) before the statement that changes them:
    // after it, what picked them out is gone.
    sqlx::query("UPDATE change_counter SET version = version + 1 WHERE id = 1")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "UPDATE previews SET version = (SELECT version FROM change_counter WHERE id = 1)
          WHERE repo = ?1 AND template_generation = ?2 AND desired <> 'absent'
            AND template_confirmed IS DISTINCT FROM template_seed",
    )
    .bind(repo)
    .bind(generation)
    .execute(&mut *tx)
    .await?;
    let done = sqlx::query!(
        "UPDATE previews SET template_generation = NULL
          WHERE repo = ?1 AND template_generation = ?2 AND desired <> 'absent'
            AND template_confirmed IS NOT template_seed",
        repo,
        generation
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
