//! Every SQL statement previewd's source holds prepares against the migrated schema of its
//! store: SQLite's for all but `db::pg`'s, PostgreSQL's (a throwaway server) for those.
//! sqlx's macros check theirs at compile time; the rusqlite statements (the intake writer's,
//! the inline reads and writes) and sqlx's runtime `query()` strings (the PostgreSQL ones
//! composed at run time among them) are checked here, so a renamed column cannot wait for
//! the one test that happens to run that statement.

#[allow(dead_code)]
#[path = "common/pg.rs"]
mod pg;
#[path = "support/rust_files.rs"]
mod rust_files;

use std::path::{Path, PathBuf};

use rust_files::rust_files;

/// Which store a file's statements are for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    Sqlite,
    Postgres,
    /// `migrate-state` reads one and writes the other: tests/migrate.rs runs it whole.
    Both,
}

fn store_of(relative: &Path) -> Store {
    if relative.starts_with("db/pg") || relative == Path::new("db/pg.rs") {
        Store::Postgres
    } else if relative == Path::new("cli/migrate.rs") {
        Store::Both
    } else {
        Store::Sqlite
    }
}

/// The statements of the non-test code under `src/` for `store` (a unit test may prepare a
/// wrong one on purpose), with the file each came from.
fn statements_for(store: Store) -> Vec<(PathBuf, String)> {
    statements()
        .into_iter()
        .filter(|(file, _)| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
            store_of(file.strip_prefix(&src).expect("under src")) == store
        })
        .collect()
}

fn statements() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let columns = previews_columns(&src);
    let mut found = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        if relative
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs")
        {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        // Unit tests sit at the end of each file.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for literal in literals(text) {
            let sql = literal.replace("{COLUMNS}", &columns);
            if is_statement(&sql) {
                found.push((file.clone(), sql));
            }
        }
    }
    found
}

/// `db/previews.rs`' `COLUMNS`, which its statements splice in with `format!`.
fn previews_columns(src: &Path) -> String {
    let text = std::fs::read_to_string(src.join("db/previews.rs")).expect("previews.rs");
    literals(&text)
        .into_iter()
        .find(|l| l.trim_start().starts_with("id, repo, number"))
        .expect("a COLUMNS literal in db/previews.rs")
}

/// Every string literal, plain (`"…"`, escapes kept as written) or raw (`r"…"`, `r#"…"#`).
fn literals(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'\'' => {
                // A char literal ('"', '\'') or a lifetime: skip what a char literal spans.
                let end = text[i + 1..].find('\'').map(|n| i + 1 + n);
                i = match end {
                    Some(end) if end - i <= 3 || text[i + 1..end].starts_with('\\') => end + 1,
                    _ => i + 1,
                };
            }
            b'r' if matches!(bytes.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_')) =>
            {
                let hashes = bytes[i + 1..].iter().take_while(|b| **b == b'#').count();
                let open = i + 1 + hashes;
                if bytes.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = text[open + 1..].find(&close).expect("a closed raw string") + open + 1;
                found.push(text[open + 1..end].to_owned());
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while bytes[j] != b'"' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                found.push(text[i + 1..j].replace("\\\n", " ").replace("\\\"", "\""));
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    found
}

/// A whole statement (not a fragment such as `"SELECT 1"` in prose, or a `format!` with
/// placeholders other than `COLUMNS`).
fn is_statement(sql: &str) -> bool {
    let head = sql.trim_start().to_ascii_uppercase();
    let verb = ["SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH "]
        .iter()
        .any(|v| head.starts_with(v));
    verb && !sql.contains('{')
}

#[tokio::test]
async fn every_statement_in_the_source_prepares_against_the_migrated_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    previewd::db::open(&path).await.unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let statements = statements_for(Store::Sqlite);
    // The count keeps the reader honest: a lexer that finds nothing passes nothing.
    assert!(
        statements.len() > 120,
        "only {} statements found",
        statements.len()
    );
    let refused: Vec<String> = statements
        .iter()
        .filter_map(|(file, sql)| {
            let error = conn.prepare(sql).err()?;
            Some(format!("{}: {error}\n  {sql}", file.display()))
        })
        .collect();
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[tokio::test]
async fn every_postgresql_statement_prepares_against_the_postgresql_schema() {
    use sqlx::Executor;
    let url = pg::server().fresh_database();
    let store = previewd::config::Store::parse(&url).unwrap();
    previewd::db::State::open(&store)
        .await
        .unwrap()
        .close()
        .await;
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    let statements = statements_for(Store::Postgres);
    assert!(
        statements.len() > 100,
        "only {} statements found",
        statements.len()
    );
    let mut refused = Vec::new();
    for (file, sql) in &statements {
        if let Err(error) = conn.prepare(sql.as_str()).await {
            refused.push(format!("{}: {error}\n  {sql}", file.display()));
        }
    }
    assert!(refused.is_empty(), "{}", refused.join("\n"));
}

#[test]
fn statements_are_checked_against_their_own_store() {
    assert_eq!(store_of(Path::new("db/pg/write.rs")), Store::Postgres);
    assert_eq!(store_of(Path::new("db/pg.rs")), Store::Postgres);
    assert_eq!(store_of(Path::new("db/write.rs")), Store::Sqlite);
    assert_eq!(store_of(Path::new("db/pgsql.rs")), Store::Sqlite);
    assert_eq!(store_of(Path::new("cli/migrate.rs")), Store::Both);
}

#[test]
fn the_reader_finds_plain_raw_and_spliced_statements_but_not_fragments() {
    let text = r####"let a = "SELECT id FROM previews WHERE repo = ?1"; // "DELETE FROM x"
let b = r#"UPDATE t SET "v" = 1"#; let c = '"'; let d = "the state";
let e = format!("SELECT {COLUMNS} FROM previews"); let f = format!("SELECT {x}");"####;
    let found: Vec<String> = literals(text)
        .into_iter()
        .map(|l| l.replace("{COLUMNS}", "id"))
        .filter(|l| is_statement(l))
        .collect();
    assert_eq!(
        found,
        vec![
            "SELECT id FROM previews WHERE repo = ?1",
            "UPDATE t SET \"v\" = 1",
            "SELECT id FROM previews"
        ]
    );
}

#[test]
fn a_renamed_column_is_refused() {
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE previews (id INTEGER, repo TEXT)")
        .unwrap();
    assert!(conn.prepare("SELECT id, repo FROM previews").is_ok());
    assert!(conn.prepare("SELECT id, repository FROM previews").is_err());
}
