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
