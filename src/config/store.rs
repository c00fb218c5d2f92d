//! `state`: an SQLite file (the embedded default, one replica) or a PostgreSQL URL (several
//! replicas share it), and where the files previewd makes for itself go with each.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use secrecy::{ExposeSecret, SecretString};

/// Where the state lives.
#[derive(Clone)]
pub enum Store {
    /// An SQLite file, created and migrated at start. One process writes it: one replica.
    Sqlite(PathBuf),
    /// A PostgreSQL database (`postgresql://user:password@host/db`), migrated at start. Every
    /// replica takes deliveries into it; the Lease says which one does the work.
    Postgres(SecretString),
}

/// What `state` is not.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotAStore(String);

impl Store {
    /// `state` as written: a `postgres://` or `postgresql://` URL, or a file's path.
    pub fn parse(text: &str) -> Result<Self, NotAStore> {
        if !is_url(text) {
            return Ok(Store::Sqlite(PathBuf::from(text)));
        }
        sqlx::postgres::PgConnectOptions::from_str(text)
            // sqlx's error quotes the URL, password and all: say only what kind it is.
            .map_err(|_| NotAStore("not a PostgreSQL URL sqlx can connect with".into()))?;
        Ok(Store::Postgres(SecretString::from(text.to_owned())))
    }

    /// The SQLite file, if that is the store.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Store::Sqlite(path) => Some(path),
            Store::Postgres(_) => None,
        }
    }

    /// Whether several replicas may share it.
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    /// Where a file previewd makes for itself goes (a key pair, the preview CA): beside an
    /// SQLite state, named after it (`previewd.db` -> `previewd-{suffix}`). A PostgreSQL state
    /// has no "beside": every replica must read the same key, so `configured` must be set
    /// (config validation refuses the start otherwise; this is the same refusal, later).
    pub fn beside(&self, suffix: &str, configured: &str) -> anyhow::Result<PathBuf> {
        let Store::Sqlite(state) = self else {
            anyhow::bail!(
                "with a PostgreSQL state, {configured} must be set: every replica must use the same one"
            );
        };
        let stem = state
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("previewd");
        let dir = state.parent().unwrap_or(Path::new(""));
        Ok(dir.join(format!("{stem}-{suffix}")))
    }

    /// The URL, to connect with. Never logged: [`fmt::Display`] is what may be shown.
    pub fn url(&self) -> Option<&str> {
        match self {
            Store::Postgres(url) => Some(url.expose_secret()),
            Store::Sqlite(_) => None,
        }
    }
}

fn is_url(text: &str) -> bool {
    text.starts_with("postgres://") || text.starts_with("postgresql://")
}

/// `state` with any password in it masked, for logs and `config explain`.
pub fn shown(text: &str) -> String {
    if !is_url(text) {
        return text.to_owned();
    }
    match url::Url::parse(text) {
        Ok(mut url) => {
            if url.password().is_some() {
                let _ = url.set_password(Some("***"));
            }
            url.set_query(url.query().map(|_| "…"));
            url.to_string()
        }
        Err(_) => "(a PostgreSQL URL; hidden)".to_owned(),
    }
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Store::Sqlite(path) => write!(f, "{}", path.display()),
            Store::Postgres(url) => f.write_str(&shown(url.expose_secret())),
        }
    }
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Store({self})")
    }
}

impl PartialEq<PathBuf> for Store {
    fn eq(&self, other: &PathBuf) -> bool {
        self.file() == Some(other.as_path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_an_sqlite_file_and_a_url_is_postgresql() {
        assert_eq!(
            Store::parse("previewd.db").unwrap(),
            PathBuf::from("previewd.db")
        );
        let pg = Store::parse("postgresql://previewd:hunter2@db:5432/previewd").unwrap();
        assert!(pg.is_shared());
        assert_eq!(
            pg.url(),
            Some("postgresql://previewd:hunter2@db:5432/previewd")
        );
        assert!(Store::parse("postgres://db/previewd").unwrap().is_shared());
    }

    #[test]
    fn a_url_sqlx_cannot_read_is_refused_without_repeating_it() {
        let error = Store::parse("postgresql://previewd:hunter2@db:notaport/x").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn the_password_is_never_shown() {
        let pg =
            Store::parse("postgresql://previewd:hunter2@db:5432/previewd?sslmode=require").unwrap();
        for text in [pg.to_string(), format!("{pg:?}")] {
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("db:5432/previewd"), "{text}");
        }
        // A password can also ride in the query (libpq's `password=`).
        let query = shown("postgresql://db/previewd?password=hunter2");
        assert!(!query.contains("hunter2"), "{query}");
    }

    #[test]
    fn files_go_beside_an_sqlite_state_and_must_be_configured_with_postgresql() {
        let sqlite = Store::parse("/var/lib/previewd/state.db").unwrap();
        assert_eq!(
            sqlite.beside("ca.crt", "tls.ca_cert").unwrap(),
            PathBuf::from("/var/lib/previewd/state-ca.crt")
        );
        let pg = Store::parse("postgresql://db/previewd").unwrap();
        let refused = pg.beside("ca.crt", "tls.ca_cert").unwrap_err().to_string();
        assert!(refused.contains("tls.ca_cert must be set"), "{refused}");
    }
}
