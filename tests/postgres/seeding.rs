//! The seed Job's script: seeding is idempotent, a reseed restores the rows, and a failed
//! seed leaves nothing behind.

use super::*;

#[test]
fn seeding_twice_adds_no_rows_and_a_reseed_restores_them() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_9", "create");
    let files = PathBuf::from(format!("{ROOT}/seeds/example"));
    let first = ok(&pg.seed("octo_app_pr_9", &files, 1), "first seed");
    assert!(first.contains("seeded generation 1"), "{first}");
    let second = ok(&pg.seed("octo_app_pr_9", &files, 1), "second seed");
    assert!(second.contains("already seeded"), "{second}");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "3"
    );
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM previewd_seed"),
        "1"
    );

    // A reviewer deletes a row; the next sync does not bring it back, a reseed does.
    pg.query("octo_app_pr_9", "DELETE FROM example_users WHERE id = 2");
    ok(&pg.seed("octo_app_pr_9", &files, 1), "seed after delete");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "2"
    );
    ok(&pg.seed("octo_app_pr_9", &files, 2), "reseed");
    assert_eq!(
        pg.query("octo_app_pr_9", "SELECT count(*) FROM example_users"),
        "3"
    );
    assert_eq!(
        pg.query(
            "octo_app_pr_9",
            "SELECT string_agg(generation::text, ',' ORDER BY generation) FROM previewd_seed"
        ),
        "1,2"
    );
}

#[test]
fn a_failed_seed_leaves_nothing_behind_and_is_retried() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_10", "create");
    let files = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path().join("001-table.sql"),
        "CREATE TABLE t (id int PRIMARY KEY);\nINSERT INTO t VALUES (1);\n",
    )
    .unwrap();
    std::fs::write(
        files.path().join("002-broken.sql"),
        "INSERT INTO missing_table VALUES (1);\n",
    )
    .unwrap();
    assert!(!pg.seed("octo_app_pr_10", files.path(), 1).status.success());
    assert_eq!(
        pg.query(
            "octo_app_pr_10",
            "SELECT count(*) FROM pg_tables WHERE tablename = 't'"
        ),
        "0"
    );
    assert_eq!(
        pg.query("octo_app_pr_10", "SELECT count(*) FROM previewd_seed"),
        "0"
    );
    std::fs::write(
        files.path().join("002-broken.sql"),
        "INSERT INTO t VALUES (2) ON CONFLICT DO NOTHING;\n",
    )
    .unwrap();
    ok(&pg.seed("octo_app_pr_10", files.path(), 1), "fixed seed");
    assert_eq!(pg.query("octo_app_pr_10", "SELECT count(*) FROM t"), "2");
}
