//! `db::certs` on PostgreSQL: each cluster's sealing certificate as last seen.

use sqlx::PgPool;

use crate::db::Rotation;
use crate::preview::HistoryKind;

/// `db::record_sealing_cert`: the certificate and, when it replaced another, a history row
/// for each live preview on the cluster holding sealed values, in one transaction. The
/// previous fingerprint is read `FOR UPDATE`, so two replicas seeing a renewal at once
/// write its history rows once.
pub async fn record_sealing_cert(
    pool: &PgPool,
    cluster: &str,
    fingerprint: &str,
    not_after: i64,
    now: i64,
) -> sqlx::Result<Rotation> {
    let mut tx = pool.begin().await?;
    let previous: Option<String> = sqlx::query_scalar!(
        "SELECT fingerprint FROM cluster_certs WHERE cluster = $1 FOR UPDATE",
        cluster
    )
    .fetch_optional(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO cluster_certs (cluster, fingerprint, not_after, seen_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (cluster) DO UPDATE SET fingerprint = $2, not_after = $3, seen_at = $4",
        cluster,
        fingerprint,
        not_after,
        now
    )
    .execute(&mut *tx)
    .await?;
    let rotation = match previous {
        None => Rotation::FirstSeen,
        Some(old) if old == fingerprint => Rotation::Unchanged,
        Some(old) => {
            let reason = crate::db::certs::renewal_reason(cluster, &old, fingerprint);
            let previews = super::history::add_for_sealed_on(
                &mut tx,
                cluster,
                HistoryKind::Resealed,
                &reason,
                now,
            )
            .await?;
            Rotation::Renewed { previews }
        }
    };
    tx.commit().await?;
    Ok(rotation)
}
