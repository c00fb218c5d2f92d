//! `db::templates` on PostgreSQL: each repository's template generations, their ledger and
//! sealed secrets, and which generation each preview's database was cloned from.

use sqlx::PgPool;

use super::word_of;
use crate::db::secrets::{secret_to_store, stored_secret};
use crate::db::{NewGeneration, TemplateRepoRow, TemplateRow};
use crate::ledger::Entry;
use crate::preview::GenState;
use crate::render::SealedSecret;

pub async fn template_used(pool: &PgPool, repo: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE template_repos SET last_used_at = $2,
                destroy = CASE WHEN destroy = 'idle' THEN NULL ELSE destroy END
          WHERE repo = $1",
        repo,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn template_repo(pool: &PgPool, repo: &str) -> sqlx::Result<Option<TemplateRepoRow>> {
    sqlx::query_as!(
        TemplateRepoRow,
        "SELECT repo, base_sha, refresh, refresh_by, destroy, last_used_at
           FROM template_repos WHERE repo = $1",
        repo
    )
    .fetch_optional(pool)
    .await
}

pub async fn template_repos(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    // Both sides are NOT NULL columns; a UNION's column is an expression to PostgreSQL.
    sqlx::query_scalar!(
        r#"SELECT repo AS "repo!" FROM template_repos UNION SELECT repo FROM templates ORDER BY 1"#
    )
    .fetch_all(pool)
    .await
}

/// A generation's row as selected, its state still the stored word.
struct GenerationRow {
    id: i64,
    repo: String,
    generation: i64,
    base_sha: String,
    cluster: String,
    names: String,
    state: String,
    message: Option<String>,
    applied_hash: Option<String>,
    created_at: i64,
    ready_at: Option<i64>,
    size_bytes: Option<i64>,
}

fn generation_of(r: GenerationRow) -> sqlx::Result<TemplateRow> {
    Ok(TemplateRow {
        id: r.id,
        repo: r.repo,
        generation: r.generation,
        base_sha: r.base_sha,
        cluster: r.cluster,
        names: r.names,
        state: word_of::<GenState>(&r.state)?,
        message: r.message,
        applied_hash: r.applied_hash,
        created_at: r.created_at,
        ready_at: r.ready_at,
        size_bytes: r.size_bytes,
    })
}

pub async fn generations(pool: &PgPool, repo: &str) -> sqlx::Result<Vec<TemplateRow>> {
    let rows = sqlx::query_as!(
        GenerationRow,
        "SELECT id, repo, generation, base_sha, cluster, names, state, message,
                applied_hash, created_at, ready_at, size_bytes
           FROM templates WHERE repo = $1 ORDER BY generation DESC",
        repo
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(generation_of).collect()
}

pub async fn all_generations(pool: &PgPool) -> sqlx::Result<Vec<TemplateRow>> {
    let rows = sqlx::query_as!(
        GenerationRow,
        "SELECT id, repo, generation, base_sha, cluster, names, state, message,
                applied_hash, created_at, ready_at, size_bytes
           FROM templates ORDER BY repo, generation DESC LIMIT 1000"
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(generation_of).collect()
}

/// `db::templates::start_generation` says why the number is past every one ever started.
pub async fn start_generation(
    pool: &PgPool,
    new: NewGeneration<'_>,
    names: impl FnOnce(i64) -> anyhow::Result<String>,
    now: i64,
) -> anyhow::Result<(i64, i64)> {
    let mut tx = pool.begin().await?;
    // Never NULL: both arguments are coalesced to 0.
    let used: i64 = sqlx::query_scalar!(
        r#"SELECT GREATEST(coalesce((SELECT last_generation FROM template_repos WHERE repo = $1), 0),
                         coalesce((SELECT max(generation) FROM templates WHERE repo = $1), 0)) AS "used!""#,
        new.repo
    )
    .fetch_one(&mut *tx)
    .await?;
    let generation = new.at_least.max(used + 1);
    let names = names(generation)?;
    let id: i64 = sqlx::query_scalar!(
        "INSERT INTO templates (repo, generation, base_sha, cluster, names, state, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'building', $6, $6) RETURNING id",
        new.repo,
        generation,
        new.base_sha,
        new.cluster,
        &names,
        now
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "UPDATE template_repos SET refresh = 0, refresh_by = NULL, last_generation = $2, updated_at = $3
          WHERE repo = $1",
        new.repo,
        generation,
        now
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((id, generation))
}

pub async fn set_generation_state(
    pool: &PgPool,
    id: i64,
    to: GenState,
    message: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE templates SET state = $2, message = $3, updated_at = $4,
                ready_at = CASE WHEN $2 = 'ready' THEN coalesce(ready_at, $4) ELSE ready_at END
          WHERE id = $1",
        id,
        to.as_str(),
        message,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn record_generation_applied(
    pool: &PgPool,
    id: i64,
    entries: &[Entry],
    hash: Option<&str>,
    now: i64,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    for e in entries {
        sqlx::query!(
            "INSERT INTO template_ledger (template_id, kind, namespace, name, state, created_at)
             VALUES ($1, $2, $3, $4, 'applied', $5) ON CONFLICT DO NOTHING",
            id,
            &e.kind,
            &e.namespace,
            &e.name,
            now
        )
        .execute(&mut *tx)
        .await?;
    }
    if let Some(hash) = hash {
        sqlx::query!(
            "UPDATE templates SET applied_hash = $2, updated_at = $3 WHERE id = $1",
            id,
            hash,
            now
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

pub async fn generation_ledger(
    pool: &PgPool,
    id: i64,
) -> sqlx::Result<Vec<(String, Option<String>, String, String)>> {
    let rows = sqlx::query!(
        "SELECT kind, namespace, name, state FROM template_ledger WHERE template_id = $1 ORDER BY id",
        id
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.kind, r.namespace, r.name, r.state))
        .collect())
}

pub async fn forget_generation(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM templates WHERE id = $1", id)
        .execute(pool)
        .await
        .map(drop)
}

pub async fn destroy_template(
    pool: &PgPool,
    repo: &str,
    reason: &str,
    now: i64,
) -> sqlx::Result<bool> {
    let done = sqlx::query!(
        "UPDATE template_repos SET destroy = $2, refresh = 0, updated_at = $3 WHERE repo = $1",
        repo,
        reason,
        now
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn generation_secrets(pool: &PgPool, id: i64) -> sqlx::Result<Vec<SealedSecret>> {
    let rows = sqlx::query!(
        "SELECT namespace, name, scope, encrypted_data FROM template_secrets
          WHERE template_id = $1 ORDER BY id",
        id
    )
    .fetch_all(pool)
    .await?;
    let secrets: Option<Vec<_>> = rows
        .into_iter()
        .map(|r| stored_secret(r.name, r.namespace, &r.scope, &r.encrypted_data))
        .collect();
    Ok(secrets.unwrap_or_default())
}

pub async fn store_generation_secrets(
    pool: &PgPool,
    id: i64,
    secrets: &[SealedSecret],
    report_digest: Option<&[u8]>,
    fingerprint: &str,
    now: i64,
) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query!("DELETE FROM template_secrets WHERE template_id = $1", id)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "UPDATE templates SET report_digest = $2 WHERE id = $1",
        id,
        report_digest
    )
    .execute(&mut *tx)
    .await?;
    for secret in secrets {
        sqlx::query!(
            "INSERT INTO template_secrets (template_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            id,
            &secret.namespace,
            &secret.name,
            secret.scope,
            fingerprint,
            secret_to_store(secret),
            now
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

pub async fn report_digest(
    pool: &PgPool,
    repo: &str,
    generation: i64,
) -> sqlx::Result<Option<Vec<u8>>> {
    let digest: Option<Option<Vec<u8>>> = sqlx::query_scalar!(
        "SELECT report_digest FROM templates
          WHERE repo = $1 AND generation = $2 AND state IN ('building', 'ready')",
        repo,
        generation
    )
    .fetch_optional(pool)
    .await?;
    Ok(digest.flatten())
}

pub async fn record_template_size(
    pool: &PgPool,
    repo: &str,
    generation: i64,
    bytes: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE templates SET size_bytes = $3, size_at = $4 WHERE repo = $1 AND generation = $2",
        repo,
        generation,
        bytes,
        now
    )
    .execute(pool)
    .await
    .map(drop)
}

pub async fn decide_clone(
    pool: &PgPool,
    id: i64,
    generation: Option<i64>,
    seed: i64,
) -> anyhow::Result<()> {
    sqlx::query!(
        "UPDATE previews SET template_generation = $2, template_seed = $3 WHERE id = $1",
        id,
        generation,
        seed
    )
    .execute(pool)
    .await?;
    Ok(())
}

pub async fn clones_pending(pool: &PgPool, repo: &str, generation: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM previews
          WHERE repo = $1 AND template_generation = $2 AND desired <> 'absent'
            AND template_confirmed IS DISTINCT FROM template_seed"#,
        repo,
        generation
    )
    .fetch_one(pool)
    .await
}

pub async fn live_previews(pool: &PgPool, repo: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM previews WHERE repo = $1 AND desired = 'deployed'"#,
        repo
    )
    .fetch_one(pool)
    .await
}

/// `db::templates::seed_instead`: the previews it reseeds are stamped for the reconciler
/// (`db::changes`) in the same statement that clears their generation.
pub async fn seed_instead(pool: &PgPool, repo: &str, generation: i64) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let version: i64 = sqlx::query_scalar!(
        "UPDATE change_counter SET version = version + 1 WHERE id = 1 RETURNING version"
    )
    .fetch_one(&mut *tx)
    .await?;
    let done = sqlx::query!(
        "UPDATE previews SET template_generation = NULL, version = $3
          WHERE repo = $1 AND template_generation = $2 AND desired <> 'absent'
            AND template_confirmed IS DISTINCT FROM template_seed",
        repo,
        generation,
        version
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
