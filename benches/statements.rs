//! A look's statements, run the two ways previewd has: through sqlx's pool (a hop to the
//! connection's thread and back, and a ping as it returns) and inline (`db::Inline`,
//! rusqlite on the caller's thread). The same state, the same SQL, on a runtime of
//! previewd's shape (two workers); CPU of the whole process per statement, and wall time.
//!
//! Run: `cargo bench --bench statements` (option: `-- --reads 20000`).

use std::time::Instant;

use previewd::db::{self, State};
use previewd::plan::Observation;
use previewd::preview::ObservedState;

const NOW: i64 = 1_800_000_000;
const PREVIEWS: i64 = 2_000;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

/// This process's CPU time so far (user and system), in seconds, from /proc (10 ms ticks:
/// each figure below is over a second or more).
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

struct Figure {
    cpu_us: f64,
    wall_us: f64,
}

async fn measure<F: std::future::Future<Output = ()>>(
    n: usize,
    mut op: impl FnMut(i64) -> F,
) -> Figure {
    let (cpu0, wall0) = (cpu(), Instant::now());
    for i in 0..n {
        op(1 + (i as i64 * 7919) % PREVIEWS).await;
    }
    Figure {
        cpu_us: (cpu() - cpu0) * 1e6 / n as f64,
        wall_us: wall0.elapsed().as_secs_f64() * 1e6 / n as f64,
    }
}

fn print(what: &str, pool: &Figure, inline: &Figure) {
    println!(
        "{what:<40} pool {:>7.1} µs CPU ({:>6.1} wall)   inline {:>6.1} µs CPU ({:>6.1} wall)   {:.1}×",
        pool.cpu_us,
        pool.wall_us,
        inline.cpu_us,
        inline.wall_us,
        pool.cpu_us / inline.cpu_us
    );
}

fn main() {
    let reads = arg("--reads", 20_000);
    let writes = reads / 4;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let pool = db::open(&dir.path().join("previewd.db")).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        for i in 1..=PREVIEWS {
            sqlx::query(
                "INSERT INTO previews (id, repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
                     fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
                 VALUES (?1, 'acme/api', ?1, 1, 'bench', 'dev', 'ec26c3e57ca3a959ca5aad62de7213c562f8c821',
                     'b', 'main', 0, 0, 'deployed', 'ready', 'east', 1, 1, 1, ?2)",
            )
            .bind(i)
            .bind(NOW)
            .execute(&mut *tx)
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        let state = State::from(&pool);
        // The query `db::preview_row` runs, as the pool ran it before (issue #17).
        let row_sql = "SELECT id, repo, number, title, author, head_sha, fork, approved_sha, desired, observed,
             end_reason, last_error, cluster, applied_hash, teardown_started_at, seed_generation, expires_at,
             installation_id, keep, redeploy_generation, created_at, head_changed_at, names,
             draft, labeled, deploy_by, paths_file, paths_sha, wait_override_sha,
             template_generation, template_seed FROM previews WHERE id = ?1";
        println!("{reads} reads and {writes} write transactions over {PREVIEWS} previews, per statement:");
        for _ in 0..3 {
            let by_pool = measure(reads, |id| {
                let pool = pool.clone();
                async move {
                    let row = sqlx::query(row_sql).bind(id).fetch_optional(&pool).await.unwrap();
                    assert!(row.is_some());
                }
            })
            .await;
            let by_inline = measure(reads, |id| {
                let state = state.clone();
                async move {
                    let row = db::preview_row(&state, id).await.unwrap();
                    assert!(row.is_some());
                }
            })
            .await;
            print("a preview's row", &by_pool, &by_inline);
            // `db::record_state` as it was: BEGIN IMMEDIATE, the update, COMMIT (each a hop).
            let by_pool = measure(writes, |id| {
                let pool = pool.clone();
                async move {
                    let mut tx = db::begin_write(&State::from(&pool)).await.unwrap();
                    sqlx::query("UPDATE previews SET observed = ?2, last_error = ?3, updated_at = ?4 WHERE id = ?1")
                        .bind(id)
                        .bind("syncing")
                        .bind(None::<String>)
                        .bind(NOW)
                        .execute(&mut *tx)
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
            })
            .await;
            let by_inline = measure(writes, |id| {
                let state = state.clone();
                async move {
                    let seen = Observation {
                        state: ObservedState::Syncing,
                        message: None,
                        history: None,
                        ready_at_seed: None,
                    };
                    db::record_state(&state, id, &seen, NOW).await.unwrap();
                }
            })
            .await;
            print("a state recorded (a commit: fsync)", &by_pool, &by_inline);
        }
    });
}
