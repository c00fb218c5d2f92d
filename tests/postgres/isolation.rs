//! Previews are isolated from each other and from the server's own databases: a role
//! connects to its own database only, provisioning refuses while another database is open
//! to every role, and previews start from template0.

use super::*;

fn connects(pg: &Postgres, role: &str, database: &str) -> Result<(), String> {
    let output = pg
        .psql(role, database, &[])
        .args(["-c", "SELECT 1"])
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

#[test]
fn a_preview_role_connects_to_its_own_database_and_no_other() {
    let pg = Postgres::start();
    pg.create("octo_app_pr_15", "create");
    ok(
        &pg.provision("create", "octo_app_pr_16", "another-long-password"),
        "create",
    );
    pg.create("octo_app_pr_15", "create again");
    assert_eq!(connects(&pg, "octo_app_pr_15", "octo_app_pr_15"), Ok(()));
    for database in ["postgres", "template1", "octo_app_pr_16"] {
        let refused = connects(&pg, "octo_app_pr_15", database).unwrap_err();
        assert!(
            refused.contains(&format!("permission denied for database \"{database}\"")),
            "{database}: {refused}"
        );
    }
    // The admin, a superuser here, still connects everywhere.
    assert_eq!(connects(&pg, "postgres", "template1"), Ok(()));
}

/// Another database left open to every role would be open to every preview: provisioning
/// stops, saying which one, before it creates anything.
#[test]
fn provisioning_is_refused_while_another_database_is_open_to_every_role() {
    let pg = Postgres::start();
    pg.query("postgres", "CREATE DATABASE billing");
    let text = failed(&pg.provision("create", "octo_app_pr_17", PASSWORD));
    assert!(
        text.contains("every role may connect to database(s) billing"),
        "{text}"
    );
    assert_eq!(pg.roles_named("octo_app_pr_17"), "0");
    pg.query("postgres", "REVOKE CONNECT ON DATABASE billing FROM PUBLIC");
    pg.create("octo_app_pr_17", "create");
}

/// What is in template1 (an extension, a table someone added) stays out of previews.
#[test]
fn preview_databases_are_created_from_template0() {
    let pg = Postgres::start();
    pg.query("template1", "CREATE TABLE planted (secret text)");
    pg.create("octo_app_pr_18", "create");
    assert_eq!(
        pg.query(
            "octo_app_pr_18",
            "SELECT count(*) FROM pg_tables WHERE tablename = 'planted'"
        ),
        "0"
    );
}
