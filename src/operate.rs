//! The operator's commands — `previewd list`, `show` and `destroy` — reading the same state
//! and the same read model (`view`) as the API.

use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::dashboard::time_left;
use crate::preview::PreviewKey;
use crate::view::{self, Preview, state_name};
use anyhow::{Context, bail};

/// How long `destroy` follows a teardown before handing back (it goes on regardless).
const FOLLOW_FOR: Duration = Duration::from_secs(15 * 60);

pub async fn list(config: &Config, json: bool) -> anyhow::Result<()> {
    let pool = crate::db::open(&config.state).await?;
    let previews = view::list(&pool, config, SystemClock.now(), &Default::default()).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "previews": previews }))?
        );
        return Ok(());
    }
    print!("{}", table(&previews));
    Ok(())
}

/// The list as aligned columns.
pub fn table(previews: &[Preview]) -> String {
    let mut rows = vec![[
        "PREVIEW".to_owned(),
        "AUTHOR".into(),
        "STATE".into(),
        "CLUSTER".into(),
        "TIME LEFT".into(),
        "URL".into(),
    ]];
    for p in previews {
        rows.push([
            format!("{}#{}", p.repo, p.number),
            p.author.clone(),
            state_name(p.state).to_owned(),
            p.cluster.clone().unwrap_or_else(|| "-".into()),
            time_left(p.seconds_left),
            p.url.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    if previews.is_empty() {
        out += "(no previews)\n";
    }
    out
}

pub async fn show(config: &Config, preview: &str) -> anyhow::Result<()> {
    let key: PreviewKey = preview.parse().context("expected OWNER/REPO#N")?;
    let pool = crate::db::open(&config.state).await?;
    let Some(detail) = view::detail(
        &pool,
        config,
        SystemClock.now(),
        key.repo.as_str(),
        i64::from(key.number),
    )
    .await?
    else {
        bail!("previewd has no record of {key}");
    };
    match &detail.preview {
        Some(p) => {
            println!("{key}  {}", p.title);
            for (label, value) in [
                ("state", Some(state_name(p.state))),
                ("url", Some(p.url.as_str())),
                ("pr", Some(p.pr_url.as_str())),
                ("author", Some(p.author.as_str())),
                ("commit", Some(p.head_sha.as_str())),
                ("cluster", p.cluster.as_deref()),
                ("last error", p.last_error.as_deref()),
            ] {
                if let Some(value) = value {
                    println!("  {label:<11}{value}");
                }
            }
            println!("  {:<11}{}", "time left", time_left(p.seconds_left));
        }
        None => println!("{key}  (destroyed; its history remains)"),
    }
    if !detail.ledger.is_empty() {
        println!("ledger:");
        for item in &detail.ledger {
            println!("  {:<12}{:<40}{}", item.kind, item.name, item.state);
        }
    }
    println!("history:");
    for h in &detail.history {
        println!(
            "  {}  {:<18}{:<12}{}",
            crate::comment::stamp(h.at),
            h.what,
            h.actor,
            h.reason
        );
    }
    Ok(())
}

/// Records the teardown (with the operator as its actor), then follows it until the
/// preview is gone, printing each step.
pub async fn destroy(
    config: &Config,
    preview: &str,
    actor: &str,
    follow: bool,
) -> anyhow::Result<()> {
    let key: PreviewKey = preview.parse().context("expected OWNER/REPO#N")?;
    let pool = crate::db::open(&config.state).await?;
    let repo = key.repo.as_str();
    let number = i64::from(key.number);
    match crate::db::request_destroy(&pool, repo, number, actor, SystemClock.now()).await? {
        None => bail!("previewd has no live preview for {key}"),
        Some(false) => println!("{key} is already being torn down"),
        Some(true) => println!("{key}: teardown recorded (by {actor})"),
    }
    if !follow {
        return Ok(());
    }
    let started = Instant::now();
    let mut last = String::new();
    let mut hinted = false;
    while started.elapsed() < FOLLOW_FOR {
        let Some(row) = crate::db::preview_summary(&pool, repo, number).await? else {
            println!("{key}: destroyed; everything it provisioned is gone");
            return Ok(());
        };
        let ledger = crate::db::ledger(&pool, row.id).await?;
        let waiting: Vec<String> = ledger
            .iter()
            .filter(|l| l.state != "gone" && l.state != "kept")
            .map(|l| format!("{} {} ({})", l.kind, l.name, l.state))
            .collect();
        let now = format!(
            "{}: {}; waiting for {}",
            key,
            row.observed,
            if waiting.is_empty() {
                "the reconciler".into()
            } else {
                waiting.join(", ")
            }
        );
        if now != last {
            println!("{now}");
            last = now;
        }
        use crate::preview::ObservedState::{TeardownStuck, TearingDown};
        let untouched = !matches!(row.observed, TearingDown | TeardownStuck);
        if !hinted && untouched && started.elapsed() > Duration::from_secs(10) {
            println!("(nothing has picked it up yet: is `previewd serve` running on this state?)");
            hinted = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "{key}: still tearing down; it goes on without this command (see `previewd show {key}`)"
    );
    Ok(())
}

/// `previewd templates`: every generation of every repository's template database.
pub async fn templates(config: &Config) -> anyhow::Result<()> {
    let pool = crate::db::open(&config.state).await?;
    let now = SystemClock.now();
    let rows = crate::db::all_generations(&pool).await?;
    if rows.is_empty() {
        println!("no template databases");
        return Ok(());
    }
    println!(
        "{:<40} {:>4} {:<9} {:<8} {:<8} {:<10} message",
        "repository", "gen", "state", "base", "size", "age"
    );
    for row in rows {
        let age = crate::duration::format(std::time::Duration::from_secs(
            u64::try_from(now.saturating_sub(row.created_at)).unwrap_or(0),
        ));
        println!(
            "{:<40} {:>4} {:<9} {:<8} {:<8} {:<10} {}",
            row.repo,
            row.generation,
            row.state,
            row.base_sha.get(..7).unwrap_or(&row.base_sha),
            row.size_bytes
                .map_or_else(|| "-".to_owned(), crate::view::size),
            age,
            row.message.unwrap_or_default()
        );
    }
    Ok(())
}

/// `previewd destroy-template OWNER/REPO`: records that every generation is to go.
pub async fn destroy_template(config: &Config, repo: &str) -> anyhow::Result<()> {
    let repo: crate::preview::RepoName = repo.parse().context("expected OWNER/REPO")?;
    let pool = crate::db::open(&config.state).await?;
    if !crate::db::destroy_template(&pool, repo.as_str(), "destroyed", SystemClock.now()).await? {
        bail!("previewd keeps no template database for {repo}");
    }
    println!("{repo}: every template generation will be dropped by the running previewd");
    Ok(())
}
