//! The state file on disk: private to its owner before SQLite opens it.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// Restricts an existing file to its owner (files from older versions, made under the
/// umask, are often world-readable).
pub fn make_private(path: &Path) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .with_context(|| format!("reading {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
                .with_context(|| format!("making {} private", path.display()))?;
        }
    }
    Ok(())
}

/// Makes sure the SQLite state and its `-wal`/`-shm` files are private before SQLite opens
/// them: it creates the database 0644 (less the umask), and gives the WAL and shared-memory
/// files the database file's mode (sqlite src/os_unix.c, findCreateFileMode), so creating
/// it 0600 first is enough for new files; existing ones are tightened.
pub fn make_state_private(state: &Path) -> anyhow::Result<()> {
    if let Some(dir) = state.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(state)
        .with_context(|| format!("creating {}", state.display()))?;
    let name = state.as_os_str().to_owned();
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut path = name.clone();
        path.push(suffix);
        let path = PathBuf::from(path);
        if path.exists() {
            make_private(&path)?;
        }
    }
    Ok(())
}

/// A `previewd serve` on an SQLite state holds this for as long as it runs: a shared
/// `flock` on the state file (SQLite's own locks are `fcntl` locks, which `flock` does not
/// touch on Linux). `previewd migrate-state` takes it exclusively, so it copies nothing a
/// live writer is changing, and no serve starts on the state while it copies.
pub struct Serving(#[allow(dead_code)] std::fs::File);

/// Why the state's file lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Busy {
    #[error("{0} is being copied by previewd migrate-state")]
    Migrating(String),
    #[error("a previewd serve is running on {0}: stop it (kubectl scale --replicas=0) first")]
    Serving(String),
    #[error("opening {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn lock_file(state: &Path) -> Result<std::fs::File, Busy> {
    std::fs::File::open(state).map_err(|source| Busy::Io {
        path: state.display().to_string(),
        source,
    })
}

/// `serve`'s hold on `state` (shared: tests may run several on one file).
pub fn hold_serving(state: &Path) -> Result<Serving, Busy> {
    let file = lock_file(state)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(Serving(file)),
        Err(_) => Err(Busy::Migrating(state.display().to_string())),
    }
}

/// `migrate-state`'s hold on `state`: exclusive, refused while any serve holds it.
pub fn hold_alone(state: &Path) -> Result<Serving, Busy> {
    let file = lock_file(state)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Serving(file)),
        Err(_) => Err(Busy::Serving(state.display().to_string())),
    }
}
