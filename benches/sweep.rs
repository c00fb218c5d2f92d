//! Sweep benchmark: one real sweep pass (lease, due query, expiries and warnings recorded,
//! delivery pruning) over a state of 10,000 and 100,000 tracked previews, first with nothing
//! due, then with a few hundred expiring. Orphan detection lists every Application, so it
//! runs every tenth pass and is not part of these figures.
//!
//! Run: `cargo bench --bench sweep` (option: `-- --due 300`).

use std::sync::Arc;
use std::time::Instant;

use previewd::clock::ManualClock;
use previewd::config::Config;
use previewd::sweep::{Pass, Sweeper};

const NOW: i64 = 1_800_000_000;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default, |w| w[1].parse().expect("a number"))
}

/// Peak resident memory of this process so far (kB), from /proc.
fn peak_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// `total` live previews across 50 repositories; `due` of them past their expiry, none in
/// a warning window (their expiries are 2 to 12 days away).
async fn state(dir: &std::path::Path, total: usize, due: usize) -> sqlx::SqlitePool {
    let pool = previewd::db::open(&dir.join("previewd.db")).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for i in 0..total {
        let expires = if i < due {
            NOW - 60 - i as i64
        } else {
            NOW + 2 * 86_400 + (i as i64 * 7919) % (10 * 86_400)
        };
        sqlx::query(
            "INSERT INTO previews (repo, number, repo_id, title, author, head_sha, head_ref, base_ref,
                 fork, draft, desired, observed, cluster, pr_updated_at, created_at, updated_at, expires_at)
             VALUES (?1, ?2, 1, 'bench', ?3, 'ec26c3e57ca3a959ca5aad62de7213c562f8c821', 'b', 'main',
                 0, 0, 'deployed', 'ready', 'in-cluster', ?4, ?4, ?4, ?5)",
        )
        .bind(format!("org/repo-{}", i % 50))
        .bind((i / 50 + 1) as i64)
        .bind(format!("dev-{}", i % 400))
        .bind(NOW - 86_400)
        .bind(expires)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    // The setup's own WAL is checkpointed now, not during the measured passes.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&pool)
        .await
        .unwrap();
    pool
}

async fn measure(total: usize, due: usize) {
    let dir = tempfile::tempdir().unwrap();
    let pool = state(dir.path(), total, 0).await;
    let config = Config::from_toml("[defaults]\nwarn_before = \"24h\"\n", Vec::new()).unwrap();
    let clock = Arc::new(ManualClock::at(NOW));
    let sweeper = Sweeper::new(pool.clone(), config.clone(), clock.clone());
    sweeper.pass(Pass::Record).await.unwrap(); // warms the page cache and the statement cache
    let mut idle = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        sweeper.pass(Pass::Record).await.unwrap();
        idle.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    idle.sort_by(f64::total_cmp);
    drop(sweeper);
    pool.close().await;

    let dir = tempfile::tempdir().unwrap();
    let pool = state(dir.path(), total, due).await;
    let sweeper = Sweeper::new(pool.clone(), config, clock);
    let started = Instant::now();
    let (_, report) = sweeper.pass(Pass::Record).await.unwrap().unwrap();
    let busy = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(report.expired, due);
    println!(
        "{total:>7} previews: nothing due p50 {:.1} ms, max {:.1} ms; {due} expiring {busy:.0} ms ({:.2} ms each); peak RSS so far {} MiB",
        idle[idle.len() / 2],
        idle[idle.len() - 1],
        busy / due as f64,
        peak_kb() / 1024
    );
}

fn main() {
    let due = arg("--due", 300);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "previewd sweep benchmark (SQLite WAL, synchronous=FULL), {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    runtime.block_on(async {
        measure(10_000, due).await;
        measure(100_000, due).await;
    });
}
