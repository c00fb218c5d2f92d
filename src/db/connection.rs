//! How the state's file is opened, by either driver: one list of settings for sqlx's pool and
//! for the rusqlite connections (`db::inline`, `db::write`), and what their errors mean.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use rusqlite::Connection;
use sqlx::sqlite::SqliteConnectOptions;

/// WAL so readers never block the writer; `synchronous=FULL` so a commit survives power
/// loss; foreign keys so teardown cascades. Every connection, of either driver, runs these.
const PRAGMAS: &[(&str, &str)] = &[
    ("journal_mode", "WAL"),
    ("synchronous", "FULL"),
    ("foreign_keys", "ON"),
];

/// How long a statement waits for another connection's (or process's: a CLI) write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The pool's options (`db::open`).
pub(super) fn options(path: &Path) -> SqliteConnectOptions {
    PRAGMAS.iter().fold(
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .busy_timeout(BUSY_TIMEOUT),
        |options, (key, value)| options.pragma(*key, *value),
    )
}

/// A rusqlite connection with the pool's settings. The state must already be migrated
/// (`db::open`).
pub fn open(path: &Path) -> anyhow::Result<Connection> {
    let conn = Connection::open(path)
        .with_context(|| format!("opening state {} for writing", path.display()))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    for (key, value) in PRAGMAS {
        conn.pragma_update(None, key, value)?;
    }
    // Every statement a connection runs, prepared once.
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// A text column (by name or index) as one of previewd's enums (stored as their serde names).
pub(super) fn text_enum<T: serde::de::DeserializeOwned>(
    row: &rusqlite::Row<'_>,
    column: impl rusqlite::RowIndex,
) -> rusqlite::Result<T> {
    use serde::de::IntoDeserializer;
    let column = column.idx(row.as_ref())?;
    let text = row.get_ref(column)?.as_str()?;
    T::deserialize(text.into_deserializer()).map_err(|e: serde::de::value::Error| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// The position of `name` in `names`, in a `const` block: rusqlite's own lookup by name
/// scans the statement's column names on every call, which made an idle pass over 5,000
/// previews 1.46× slower (docs/benchmarks.md). A name not in `names` does not compile.
pub(super) const fn column(names: &[&str], name: &str) -> usize {
    let mut i = 0;
    while i < names.len() {
        if same(names[i].as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("no such column");
}

/// `a == b`, in a `const fn`.
const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The database was busy past the busy timeout (SQLITE_BUSY, SQLITE_LOCKED and their
/// extended codes) or no pooled connection came free: a reason to try again shortly, never
/// a failure to record or to show on a pull request.
pub fn is_busy(error: &sqlx::Error) -> bool {
    match error {
        // PostgreSQL's SQLSTATEs for a transaction that lost to another and may be run
        // again: a deadlock, a serialization failure, a lock not available.
        sqlx::Error::Database(e)
            if e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some() =>
        {
            matches!(e.code().as_deref(), Some("40P01" | "40001" | "55P03"))
        }
        sqlx::Error::Database(e) => e
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            // Extended result codes keep the primary code in their low byte.
            .is_some_and(|code| matches!(code & 0xff, 5 | 6)),
        sqlx::Error::PoolTimedOut => true,
        _ => false,
    }
}

/// [`is_busy`], for rusqlite's errors.
pub(crate) fn is_busy_rusqlite(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// [`is_busy`] anywhere in an error's chain (for errors wrapped in context).
pub fn is_busy_error(error: &anyhow::Error) -> bool {
    error.chain().any(|e| {
        e.downcast_ref::<sqlx::Error>().is_some_and(is_busy)
            || e.downcast_ref::<rusqlite::Error>()
                .is_some_and(is_busy_rusqlite)
    })
}

/// rusqlite reads and writes the stored words as their text (`preview::stored`), and the
/// newtypes as what they wrap, checked.
mod columns {
    use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

    use crate::preview::{
        CommandStatus, Desired, EndReason, HistoryKind, InstallationId, LedgerState, ObservedState,
        RepoName,
    };

    macro_rules! as_text {
        ($($ty:ty),*) => {$(
            impl FromSql for $ty {
                fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                    value.as_str()?.parse().map_err(|e| FromSqlError::Other(Box::new(e)))
                }
            }

            impl ToSql for $ty {
                fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                    Ok(ToSqlOutput::from(self.as_str()))
                }
            }
        )*};
    }

    as_text!(EndReason, HistoryKind, LedgerState, CommandStatus, RepoName);

    macro_rules! as_enum_text {
        ($($ty:ty),*) => {$(
            impl FromSql for $ty {
                fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                    use serde::de::IntoDeserializer;
                    let text = value.as_str()?;
                    <$ty as serde::Deserialize>::deserialize(text.into_deserializer())
                        .map_err(|e: serde::de::value::Error| FromSqlError::Other(Box::new(e)))
                }
            }

            impl ToSql for $ty {
                fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                    Ok(ToSqlOutput::from(self.as_str()))
                }
            }
        )*};
    }

    as_enum_text!(Desired, ObservedState);

    impl FromSql for InstallationId {
        fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
            value.as_i64().map(InstallationId)
        }
    }

    impl ToSql for InstallationId {
        fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
            Ok(ToSqlOutput::from(self.0))
        }
    }
}

/// sqlx reads and writes the newtypes as what they wrap, checked (the stored words derive
/// `sqlx::Type` where they are declared).
mod sqlx_columns {
    use sqlx::encode::IsNull;
    use sqlx::error::BoxDynError;
    use sqlx::sqlite::{SqliteTypeInfo, SqliteValueRef};
    use sqlx::{Decode, Encode, Sqlite, Type};

    use crate::preview::{InstallationId, RepoName};

    impl Type<Sqlite> for RepoName {
        fn type_info() -> SqliteTypeInfo {
            <&str as Type<Sqlite>>::type_info()
        }

        fn compatible(ty: &SqliteTypeInfo) -> bool {
            <&str as Type<Sqlite>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Sqlite> for RepoName {
        fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
            Ok(<&str as Decode<Sqlite>>::decode(value)?.parse()?)
        }
    }

    impl<'q> Encode<'q, Sqlite> for RepoName {
        fn encode_by_ref(
            &self,
            buf: &mut <Sqlite as sqlx::Database>::ArgumentBuffer<'q>,
        ) -> Result<IsNull, BoxDynError> {
            <String as Encode<Sqlite>>::encode(self.as_str().to_owned(), buf)
        }
    }

    impl Type<Sqlite> for InstallationId {
        fn type_info() -> SqliteTypeInfo {
            <i64 as Type<Sqlite>>::type_info()
        }

        fn compatible(ty: &SqliteTypeInfo) -> bool {
            <i64 as Type<Sqlite>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Sqlite> for InstallationId {
        fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
            Ok(InstallationId(<i64 as Decode<Sqlite>>::decode(value)?))
        }
    }

    impl<'q> Encode<'q, Sqlite> for InstallationId {
        fn encode_by_ref(
            &self,
            buf: &mut <Sqlite as sqlx::Database>::ArgumentBuffer<'q>,
        ) -> Result<IsNull, BoxDynError> {
            <i64 as Encode<Sqlite>>::encode(self.0, buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::preview::{EndReason, InstallationId};

    #[test]
    fn a_column_is_found_by_its_whole_name_only() {
        let names = ["id", "repo", "repo_id"];
        assert_eq!(super::column(&names, "repo"), 1);
        assert_eq!(super::column(&names, "repo_id"), 2);
        assert!(std::panic::catch_unwind(|| super::column(&names, "rep")).is_err());
    }

    #[test]
    fn a_stored_installation_out_of_range_still_reads_and_names_none() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let id: InstallationId = conn.query_row("SELECT -1", [], |r| r.get(0)).unwrap();
        assert_eq!(id.for_github(), None);
        let id: InstallationId = conn.query_row("SELECT 42", [], |r| r.get(0)).unwrap();
        assert_eq!(id.for_github(), Some(42));
    }

    #[test]
    fn an_unknown_word_is_a_read_error_that_names_it() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let read: rusqlite::Result<EndReason> =
            conn.query_row("SELECT 'vanished'", [], |r| r.get(0));
        let error = read.unwrap_err().to_string();
        assert!(error.contains("\"vanished\""), "{error}");
    }
}
