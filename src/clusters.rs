//! Each cluster's sealing certificate: read from `sealing_cert`, or, for the implicit
//! default cluster, previewd's own key pair kept beside the state; and rotation: a cluster
//! whose certificate changed gets its live previews re-sealed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rsa::PrivateKey;
use rsa::pkcs8::{EncodePrivateKey, LineEnding};

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

/// What may become of a key pair previewd keeps beside the state (the local sealing key,
/// the preview CA): only `serve` makes one that is missing (and renews the CA); the other
/// commands use what is there, so that no command but `serve` leaves key material behind.
/// A named mode, not a bare `bool`, so a call site says which it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalKeys {
    /// Make what is missing, renew what is due (`serve`).
    Create,
    /// Use only what exists: a missing one is an error the caller reports.
    Existing,
}

/// Loads every cluster's certificate. With [`LocalKeys::Create`] the local key pair is made
/// if missing (`serve`); otherwise a cluster without a certificate maps to an error the
/// caller reports.
pub fn sealing_certs(
    config: &Config,
    now: i64,
    local: LocalKeys,
) -> BTreeMap<String, anyhow::Result<SealingCert>> {
    config
        .clusters
        .iter()
        .map(|cluster| {
            (
                cluster.name.clone(),
                cluster_cert(cluster, &config.state, now, local),
            )
        })
        .collect()
}

fn cluster_cert(
    cluster: &Cluster,
    state: &crate::config::Store,
    now: i64,
    local: LocalKeys,
) -> anyhow::Result<SealingCert> {
    let path = match &cluster.sealing_cert {
        Some(path) => path.clone(),
        None if cluster.local_sealing => {
            let state = state.file().ok_or_else(|| {
                anyhow::anyhow!(
                    "cluster {} needs a sealing_cert with a PostgreSQL state",
                    cluster.name
                )
            })?;
            let (key, cert) = local_key_paths(state);
            repair_pair(&key, &cert)?;
            if !cert.exists() {
                anyhow::ensure!(
                    local == LocalKeys::Create,
                    "no local sealing key yet ({} is created by `previewd serve`)",
                    cert.display()
                );
                create_local_key_pair(&key, &cert, now)?;
                // The fix is in the message; the files follow it as fields of their own.
                tracing::warn!(
                    cluster = %cluster.name,
                    key_file = %key.display(),
                    cert_file = %cert.display(),
                    "created a local sealing key pair, and previews on this cluster are sealed \
                     with it: give key_file to its sealed-secrets controller, or set this \
                     cluster's sealing_cert to the controller's certificate (kubeseal \
                     --fetch-cert)."
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
    write_pair(
        key_path,
        cert_path,
        key.to_pkcs8_pem(LineEnding::LF)?.as_bytes(),
        cert.pem().as_bytes(),
    )
}

/// Writes a key and its certificate so that a crash at any point leaves either the old pair
/// (or none) or the new one, never a key without its certificate nor a certificate with
/// someone else's key. Both go to `<name>.new` files first (the key 0600), synced; then the
/// key is renamed into place, then the certificate: a `<cert>.new` left without its
/// `<key>.new` means the key was renamed, and `repair_pair` completes the certificate's
/// rename. The certificate is the pair's commit point: a key without one is a leftover
/// that the next write replaces (rename(2) replaces atomically, where creating the file
/// anew failed on it).
pub(crate) fn write_pair(
    key_path: &Path,
    cert_path: &Path,
    key: &[u8],
    cert: &[u8],
) -> anyhow::Result<()> {
    let (key_new, cert_new) = (pending(key_path), pending(cert_path));
    if let Some(dir) = key_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    write_synced(&key_new, key, 0o600)?;
    write_synced(&cert_new, cert, 0o644)?;
    sync_dir(key_path)?;
    rename(&key_new, key_path)?;
    rename(&cert_new, cert_path)?;
    sync_dir(key_path)
}

/// Finishes or undoes what a crash interrupted in `write_pair` (see there), and makes a
/// key written by an older version private.
pub(crate) fn repair_pair(key_path: &Path, cert_path: &Path) -> anyhow::Result<()> {
    let (key_new, cert_new) = (pending(key_path), pending(cert_path));
    if key_new.exists() {
        // Interrupted before the key's rename: the old pair (if any) is intact.
        remove_if_present(&key_new)?;
        remove_if_present(&cert_new)?;
    } else if cert_new.exists() {
        // Interrupted between the renames: the certificate was synced before the key moved.
        rename(&cert_new, cert_path)?;
    }
    sync_dir(key_path)?;
    if key_path.exists() {
        crate::db::make_private(key_path)?;
    }
    Ok(())
}

fn pending(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    name.into()
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    // A leftover `.new` from a crash keeps its mode through open(2): set it again.
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    file.write_all(bytes)?;
    file.sync_all()
        .with_context(|| format!("syncing {}", path.display()))
}

fn rename(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("renaming {} to {}", from.display(), to.display()))
}

fn remove_if_present(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// Makes the renames in `path`'s directory durable.
fn sync_dir(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

pub use crate::db::Rotation;

/// Records `cert` for `cluster`; when it differs from the one seen before, says so in the
/// history of each of the cluster's live previews (`db::record_sealing_cert`). Their sealed
/// values stay as they are: the sealed-secrets controller keeps every key it ever had (a
/// renewal adds one) and still opens them, while re-sealing would mean new database
/// passwords that the running pods do not have. Only values sealed from now on use the new
/// certificate.
pub async fn check_rotation(
    state: &crate::db::State,
    cluster: &str,
    cert: &SealingCert,
    now: i64,
) -> anyhow::Result<Rotation> {
    let rotation = crate::db::record_sealing_cert(
        state,
        cluster,
        cert.fingerprint.as_str(),
        cert.not_after,
        now,
    )
    .await?;
    if let Rotation::Renewed { previews } = rotation {
        tracing::warn!(
            cluster,
            previews,
            "sealing certificate changed: live previews keep their sealed values"
        );
    }
    Ok(rotation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn a_pair_write_interrupted_at_any_point_leaves_one_whole_pair() {
        let dir = tempfile::tempdir().unwrap();
        let (key, cert) = (dir.path().join("x.key"), dir.path().join("x.crt"));
        write_pair(&key, &cert, b"key A", b"cert A").unwrap();
        let (key_new, cert_new) = (pending(&key), pending(&cert));

        // Cut short while writing the new files: the old pair stays.
        std::fs::write(&key_new, b"key B, half").unwrap();
        repair_pair(&key, &cert).unwrap();
        assert_eq!((read(&key), read(&cert)), ("key A".into(), "cert A".into()));
        assert!(!key_new.exists() && !cert_new.exists());

        // Between the renames: the new key is in place, so its certificate follows it.
        std::fs::write(&key, b"key B").unwrap();
        std::fs::write(&cert_new, b"cert B").unwrap();
        repair_pair(&key, &cert).unwrap();
        assert_eq!((read(&key), read(&cert)), ("key B".into(), "cert B".into()));
        assert!(!cert_new.exists());

        // A leftover key replaced by a later write, with the key private.
        std::fs::remove_file(&cert).unwrap();
        write_pair(&key, &cert, b"key C", b"cert C").unwrap();
        assert_eq!((read(&key), read(&cert)), ("key C".into(), "cert C".into()));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
