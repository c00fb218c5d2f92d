//! Each cluster's sealing certificate as last seen, so a renewal is noticed (and told in the
//! history of the previews whose values were sealed for the old one).

use super::State;
use super::history::add_for_sealed_on;
use crate::preview::HistoryKind;

/// What recording a cluster's certificate found.
#[derive(Debug, PartialEq, Eq)]
pub enum Rotation {
    FirstSeen,
    Unchanged,
    /// The certificate changed: this many live previews keep what was sealed for the old one.
    Renewed {
        previews: u64,
    },
}

/// Records `fingerprint` as `cluster`'s certificate and, when it replaces another, a history
/// row for each live preview on the cluster that holds sealed values. One transaction.
pub async fn record_sealing_cert(
    state: &State,
    cluster: &str,
    fingerprint: &str,
    not_after: i64,
    now: i64,
) -> sqlx::Result<Rotation> {
    if let Some(pg) = state.postgres() {
        return super::pg::certs::record_sealing_cert(pg, cluster, fingerprint, not_after, now)
            .await;
    }
    let mut tx = super::begin_write(state).await?;
    let previous = sqlx::query_scalar!(
        "SELECT fingerprint FROM cluster_certs WHERE cluster = ?1",
        cluster
    )
    .fetch_optional(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO cluster_certs (cluster, fingerprint, not_after, seen_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (cluster) DO UPDATE SET fingerprint = ?2, not_after = ?3, seen_at = ?4",
        cluster,
        fingerprint,
        not_after,
        now,
    )
    .execute(&mut *tx)
    .await?;
    let rotation = match previous {
        None => Rotation::FirstSeen,
        Some(old) if old == fingerprint => Rotation::Unchanged,
        Some(old) => {
            let reason = renewal_reason(cluster, &old, fingerprint);
            let previews =
                add_for_sealed_on(&mut tx, cluster, HistoryKind::Resealed, &reason, now).await?;
            Rotation::Renewed { previews }
        }
    };
    tx.commit().await?;
    Ok(rotation)
}

/// The history's reason for a renewal, on either store.
pub(super) fn renewal_reason(cluster: &str, old: &str, fingerprint: &str) -> String {
    format!(
        "cluster {cluster} sealing key changed from {old} to {fingerprint}: sealed values kept (the controller keeps its old keys); new ones are sealed for the new key"
    )
}
