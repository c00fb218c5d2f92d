//! `db::secrets` on PostgreSQL: a preview's sealed values as stored, and new ones written.

use sqlx::{PgConnection, PgPool};

use crate::db::NewSecrets;
use crate::db::secrets::stored_secret;

/// `db::sealed_secrets`: a row that cannot be read makes the whole set empty.
pub async fn sealed_secrets(
    pool: &PgPool,
    id: i64,
) -> anyhow::Result<Vec<(crate::render::SealedSecret, String)>> {
    let rows = sqlx::query!(
        "SELECT namespace, name, scope, cert_fingerprint, encrypted_data
         FROM sealed_secrets WHERE preview_id = $1 ORDER BY id",
        id
    )
    .fetch_all(pool)
    .await?;
    let secrets: Option<Vec<_>> = rows
        .into_iter()
        .map(|r| {
            let secret = stored_secret(r.name, r.namespace, &r.scope, &r.encrypted_data)?;
            Some((secret, r.cert_fingerprint))
        })
        .collect();
    Ok(secrets.unwrap_or_default())
}

/// `NewSecrets::write`: replaces the preview's stored values, in the caller's transaction.
pub async fn write_new(
    conn: &mut PgConnection,
    secrets: &NewSecrets,
    id: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query!("DELETE FROM sealed_secrets WHERE preview_id = $1", id)
        .execute(&mut *conn)
        .await?;
    for (namespace, name, scope, stored, fingerprint) in &secrets.rows {
        sqlx::query!(
            "INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            id,
            namespace,
            name,
            *scope,
            fingerprint,
            stored,
            now
        )
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
