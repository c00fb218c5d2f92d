//! Each cluster's sealing certificate: read from `sealing_cert`, or, for the implicit
//! default cluster, previewd's own key pair kept beside the state; and rotation: a cluster
//! whose certificate changed gets its live previews re-sealed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rsa::PrivateKey;
use rsa::pkcs8::{EncodePrivateKey, LineEnding};
use sqlx::SqlitePool;

use crate::config::{Cluster, Config};
use crate::seal::SealingCert;

/// The local key pair is RSA-4096 with a 10-year certificate, like the controller's own.
const LOCAL_KEY_BITS: usize = 4096;
const LOCAL_CERT_SECS: i64 = 10 * 365 * 86_400;

/// Where the local key pair lives: beside the state, named after it.
pub fn local_key_paths(state: &Path) -> (PathBuf, PathBuf) {
    let stem = state
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("previewd");
    let dir = state.parent().unwrap_or(Path::new(""));
    (
        dir.join(format!("{stem}-sealing.key")),
        dir.join(format!("{stem}-sealing.crt")),
    )
}

/// Loads every cluster's certificate. `create_local` makes the local key pair if missing
/// (`serve`); otherwise a cluster without a certificate maps to an error the caller reports.
pub fn sealing_certs(
    config: &Config,
    now: i64,
    create_local: bool,
) -> BTreeMap<String, anyhow::Result<SealingCert>> {
    config
        .clusters
        .iter()
        .map(|cluster| {
            (
                cluster.name.clone(),
                cluster_cert(cluster, &config.state, now, create_local),
            )
        })
        .collect()
}

fn cluster_cert(
    cluster: &Cluster,
    state: &Path,
    now: i64,
    create_local: bool,
) -> anyhow::Result<SealingCert> {
    let path = match &cluster.sealing_cert {
        Some(path) => path.clone(),
        None if cluster.local_sealing => {
            let (key, cert) = local_key_paths(state);
            if !cert.exists() {
                anyhow::ensure!(
                    create_local,
                    "no local sealing key yet ({} is created by `previewd serve`)",
                    cert.display()
                );
                create_local_key_pair(&key, &cert, now)?;
                tracing::warn!(
                    key = %key.display(),
                    cert = %cert.display(),
                    "created a local sealing key pair: previews on {} are sealed with it; give its key to that cluster's sealed-secrets controller, or set [[clusters]] sealing_cert",
                    cluster.name
                );
            }
            cert
        }
        None => anyhow::bail!("cluster {} has no sealing_cert", cluster.name),
    };
    let pem = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading the sealing certificate of cluster {} ({})",
            cluster.name,
            path.display()
        )
    })?;
    SealingCert::from_pem(&pem, now).with_context(|| {
        format!(
            "sealing certificate of cluster {} ({})",
            cluster.name,
            path.display()
        )
    })
}

/// RSA-4096 key (PKCS#8 PEM, mode 0600) and a self-signed certificate for it.
fn create_local_key_pair(key_path: &Path, cert_path: &Path, now: i64) -> anyhow::Result<()> {
    let key = PrivateKey::new(&mut getrandom::SysRng, LOCAL_KEY_BITS)
        .context("generating the local sealing key")?;
    let pkcs8 = key
        .to_pkcs8_der()
        .context("encoding the local sealing key")?;
    let signer = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
        &pkcs8.as_bytes().into(),
        &rcgen::PKCS_RSA_SHA256,
    )
    .context("loading the local sealing key for signing")?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "previewd local sealing key");
    params.not_before = time::OffsetDateTime::from_unix_timestamp(now - 3600)?;
    params.not_after = time::OffsetDateTime::from_unix_timestamp(now + LOCAL_CERT_SECS)?;
    let cert = params
        .self_signed(&signer)
        .context("signing the local sealing certificate")?;
    if let Some(dir) = key_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_private(key_path, key.to_pkcs8_pem(LineEnding::LF)?.as_bytes())?;
    std::fs::write(cert_path, cert.pem())
        .with_context(|| format!("writing {}", cert_path.display()))?;
    Ok(())
}

/// Creates `path` (it must not exist) readable by its owner only, and syncs it.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(())
}

/// What a rotation check did for one cluster.
#[derive(Debug, PartialEq, Eq)]
pub enum Rotation {
    FirstSeen,
    Unchanged,
    /// The certificate changed: this many live previews keep what was sealed for the old one.
    Renewed {
        previews: u64,
    },
}

/// Records `cert` for `cluster`; when it differs from the one seen before, says so in the
/// history of each of the cluster's live previews. Their sealed values stay as they are: the
/// sealed-secrets controller keeps every key it ever had (a renewal adds one) and still opens
/// them, while re-sealing would mean new database passwords that the running pods do not
/// have. Only values sealed from now on use the new certificate. One transaction.
pub async fn check_rotation(
    pool: &SqlitePool,
    cluster: &str,
    cert: &SealingCert,
    now: i64,
) -> anyhow::Result<Rotation> {
    let mut tx = crate::db::begin_write(pool).await?;
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
        cert.fingerprint,
        cert.not_after,
        now,
    )
    .execute(&mut *tx)
    .await?;
    let rotation = match previous {
        None => Rotation::FirstSeen,
        Some(old) if old == cert.fingerprint => Rotation::Unchanged,
        Some(old) => {
            let reason = format!(
                "cluster {cluster} sealing key changed from {old} to {}: sealed values kept (the controller keeps its old keys); new ones are sealed for the new key",
                cert.fingerprint
            );
            let previews = sqlx::query!(
                "INSERT INTO history (repo, number, what, actor, reason, at)
                 SELECT p.repo, p.number, 'resealed', 'previewd', ?2, ?3 FROM previews p
                 WHERE p.cluster = ?1 AND p.desired != 'absent'
                   AND EXISTS (SELECT 1 FROM sealed_secrets s WHERE s.preview_id = p.id)",
                cluster,
                reason,
                now,
            )
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tracing::warn!(
                cluster,
                previews,
                "sealing certificate changed: live previews keep their sealed values"
            );
            Rotation::Renewed { previews }
        }
    };
    tx.commit().await?;
    Ok(rotation)
}
