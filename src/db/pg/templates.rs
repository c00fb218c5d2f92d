//! `db::templates` on PostgreSQL: each repository's template generations, their ledger and
//! sealed secrets, and which generation each preview's database was cloned from.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row};

use super::word_of;
use crate::db::secrets::{secret_to_store, stored_secret};
use crate::db::{NewGeneration, TemplateRepoRow, TemplateRow};
use crate::ledger::Entry;
use crate::preview::GenState;
use crate::render::SealedSecret;

pub async fn template_used(pool: &PgPool, repo: &str, now: i64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE template_repos SET last_used_at = $2,
                destroy = CASE WHEN destroy = 'idle' THEN NULL ELSE destroy END
          WHERE repo = $1",
    )
    .bind(repo)
    .bind(now)
    .execute(pool)
    .await
    .map(drop)
}

pub async fn template_repo(pool: &PgPool, repo: &str) -> sqlx::Result<Option<TemplateRepoRow>> {
    let row = sqlx::query(
        "SELECT repo, base_sha, refresh, refresh_by, destroy, last_used_at
           FROM template_repos WHERE repo = $1",
    )
    .bind(repo)
    .fetch_optional(pool)
    .await?;
    row.map(|r| {
        Ok(TemplateRepoRow {
            repo: r.try_get("repo")?,
            base_sha: r.try_get("base_sha")?,
            refresh: r.try_get("refresh")?,
            refresh_by: r.try_get("refresh_by")?,
            destroy: r.try_get("destroy")?,
            last_used_at: r.try_get("last_used_at")?,
        })
    })
    .transpose()
}

pub async fn template_repos(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT repo FROM template_repos UNION SELECT repo FROM templates ORDER BY 1",
    )
    .fetch_all(pool)
    .await
}

const GENERATION: &str = "SELECT id, repo, generation, base_sha, cluster, names, state, message,
        applied_hash, created_at, ready_at, size_bytes FROM templates";

fn generation_of(r: &PgRow) -> sqlx::Result<TemplateRow> {
    let state: String = r.try_get("state")?;
    Ok(TemplateRow {
        id: r.try_get("id")?,
        repo: r.try_get("repo")?,
        generation: r.try_get("generation")?,
        base_sha: r.try_get("base_sha")?,
        cluster: r.try_get("cluster")?,
        names: r.try_get("names")?,
        state: word_of::<GenState>(&state)?,
        message: r.try_get("message")?,
        applied_hash: r.try_get("applied_hash")?,
        created_at: r.try_get("created_at")?,
        ready_at: r.try_get("ready_at")?,
        size_bytes: r.try_get("size_bytes")?,
    })
}

pub async fn generations(pool: &PgPool, repo: &str) -> sqlx::Result<Vec<TemplateRow>> {
    let sql = format!("{GENERATION} WHERE repo = $1 ORDER BY generation DESC");
    let rows = sqlx::query(&sql).bind(repo).fetch_all(pool).await?;
    rows.iter().map(generation_of).collect()
}

pub async fn all_generations(pool: &PgPool) -> sqlx::Result<Vec<TemplateRow>> {
    let sql = format!("{GENERATION} ORDER BY repo, generation DESC LIMIT 1000");
    let rows = sqlx::query(&sql).fetch_all(pool).await?;
    rows.iter().map(generation_of).collect()
}

/// `db::templates::start_generation` says why the number is past every one ever started.
pub async fn start_generation(
    pool: &PgPool,
    new: NewGeneration<'_>,
    names: impl FnOnce(i64) -> anyhow::Result<String>,
    now: i64,
) -> anyhow::Result<(i64, i64)> {
    let mut tx = pool.begin().await?;
    let used: i64 = sqlx::query_scalar(
        "SELECT GREATEST(coalesce((SELECT last_generation FROM template_repos WHERE repo = $1), 0),
                         coalesce((SELECT max(generation) FROM templates WHERE repo = $1), 0))",
    )
    .bind(new.repo)
    .fetch_one(&mut *tx)
    .await?;
    let generation = new.at_least.max(used + 1);
    let names = names(generation)?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO templates (repo, generation, base_sha, cluster, names, state, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, 'building', $6, $6) RETURNING id",
    )
    .bind(new.repo)
    .bind(generation)
    .bind(new.base_sha)
    .bind(new.cluster)
    .bind(&names)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE template_repos SET refresh = 0, refresh_by = NULL, last_generation = $2, updated_at = $3
          WHERE repo = $1",
    )
    .bind(new.repo)
    .bind(generation)
    .bind(now)
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
    sqlx::query(
        "UPDATE templates SET state = $2, message = $3, updated_at = $4,
                ready_at = CASE WHEN $2 = 'ready' THEN coalesce(ready_at, $4) ELSE ready_at END
          WHERE id = $1",
    )
    .bind(id)
    .bind(to.as_str())
    .bind(message)
    .bind(now)
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
        sqlx::query(
            "INSERT INTO template_ledger (template_id, kind, namespace, name, state, created_at)
             VALUES ($1, $2, $3, $4, 'applied', $5) ON CONFLICT DO NOTHING",
        )
        .bind(id)
        .bind(&e.kind)
        .bind(&e.namespace)
        .bind(&e.name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    if let Some(hash) = hash {
        sqlx::query("UPDATE templates SET applied_hash = $2, updated_at = $3 WHERE id = $1")
            .bind(id)
            .bind(hash)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

pub async fn generation_ledger(
    pool: &PgPool,
    id: i64,
) -> sqlx::Result<Vec<(String, Option<String>, String, String)>> {
    sqlx::query_as(
        "SELECT kind, namespace, name, state FROM template_ledger WHERE template_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await
}

pub async fn forget_generation(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM templates WHERE id = $1")
        .bind(id)
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
    let done = sqlx::query(
        "UPDATE template_repos SET destroy = $2, refresh = 0, updated_at = $3 WHERE repo = $1",
    )
    .bind(repo)
    .bind(reason)
    .bind(now)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() > 0)
}

pub async fn generation_secrets(pool: &PgPool, id: i64) -> sqlx::Result<Vec<SealedSecret>> {
    let rows: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT namespace, name, scope, encrypted_data FROM template_secrets
          WHERE template_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let secrets: Option<Vec<_>> = rows
        .into_iter()
        .map(|(namespace, name, scope, data)| stored_secret(name, namespace, &scope, &data))
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
    sqlx::query("DELETE FROM template_secrets WHERE template_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE templates SET report_digest = $2 WHERE id = $1")
        .bind(id)
        .bind(report_digest)
        .execute(&mut *tx)
        .await?;
    for secret in secrets {
        sqlx::query(
            "INSERT INTO template_secrets (template_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id)
        .bind(&secret.namespace)
        .bind(&secret.name)
        .bind(secret.scope)
        .bind(fingerprint)
        .bind(secret_to_store(secret))
        .bind(now)
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
    let digest: Option<Option<Vec<u8>>> = sqlx::query_scalar(
        "SELECT report_digest FROM templates
          WHERE repo = $1 AND generation = $2 AND state IN ('building', 'ready')",
    )
    .bind(repo)
    .bind(generation)
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
    sqlx::query(
        "UPDATE templates SET size_bytes = $3, size_at = $4 WHERE repo = $1 AND generation = $2",
    )
    .bind(repo)
    .bind(generation)
    .bind(bytes)
    .bind(now)
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
    sqlx::query("UPDATE previews SET template_generation = $2, template_seed = $3 WHERE id = $1")
        .bind(id)
        .bind(generation)
        .bind(seed)
        .execute(pool)
        .await?;
    Ok(())
}

pub async fn clones_pending(pool: &PgPool, repo: &str, generation: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM previews
          WHERE repo = $1 AND template_generation = $2 AND desired <> 'absent'
            AND template_confirmed IS DISTINCT FROM template_seed",
    )
    .bind(repo)
    .bind(generation)
    .fetch_one(pool)
    .await
}

pub async fn live_previews(pool: &PgPool, repo: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM previews WHERE repo = $1 AND desired = 'deployed'")
        .bind(repo)
        .fetch_one(pool)
        .await
}

/// `db::templates::seed_instead`: the previews it reseeds are stamped for the reconciler
/// (`db::changes`) in the same statement that clears their generation.
pub async fn seed_instead(pool: &PgPool, repo: &str, generation: i64) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let version: i64 = sqlx::query_scalar(
        "UPDATE change_counter SET version = version + 1 WHERE id = 1 RETURNING version",
    )
    .fetch_one(&mut *tx)
    .await?;
    let done = sqlx::query(
        "UPDATE previews SET template_generation = NULL, version = $3
          WHERE repo = $1 AND template_generation = $2 AND desired <> 'absent'
            AND template_confirmed IS DISTINCT FROM template_seed",
    )
    .bind(repo)
    .bind(generation)
    .bind(version)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}
