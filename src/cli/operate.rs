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
    let state = crate::db::State::open(&config.state).await?;
    let previews = view::list(&state, config, SystemClock.now(), &Default::default()).await?;
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
    let mut out = columns(&rows, "");
    if previews.is_empty() {
        out += "(no previews)\n";
    }
    out
}

pub async fn show(config: &Config, preview: &str) -> anyhow::Result<()> {
    let key: PreviewKey = preview.parse().context("expected OWNER/REPO#N")?;
    let state = crate::db::State::open(&config.state).await?;
    let Some(detail) = view::detail(
        &state,
        config,
        SystemClock.now(),
        key.repo.as_str(),
        i64::from(key.number),
    )
    .await?
    else {
        bail!("previewd has no record of {key}");
    };
    print!("{}", detail_text(&key, &detail));
    Ok(())
}

/// `show`'s text: the preview, then its ledger and history as aligned columns (a long
/// name pushes its row's next column on, never into it).
pub fn detail_text(key: &PreviewKey, detail: &view::Detail) -> String {
    let mut out = String::new();
    match &detail.preview {
        Some(p) => {
            out += &format!("{key}  {}\n", p.title);
            let time = time_left(p.seconds_left);
            let mut rows = Vec::new();
            for (label, value) in [
                ("state", Some(state_name(p.state))),
                ("url", Some(p.url.as_str())),
                ("pr", Some(p.pr_url.as_str())),
                ("author", Some(p.author.as_str())),
                ("commit", Some(p.head_sha.as_str())),
                ("cluster", p.cluster.as_deref()),
                ("last error", p.last_error.as_deref()),
                ("time left", Some(time.as_str())),
            ] {
                if let Some(value) = value {
                    rows.push(vec![label.to_owned(), value.to_owned()]);
                }
            }
            out += &columns(&rows, "  ");
        }
        None => out += &format!("{key}  (destroyed; its history remains)\n"),
    }
    if !detail.ledger.is_empty() {
        out += "ledger:\n";
        let rows: Vec<Vec<String>> = detail
            .ledger
            .iter()
            .map(|item| {
                let name = if item.namespace.is_empty() {
                    item.name.clone()
                } else {
                    format!("{}/{}", item.namespace, item.name)
                };
                let mut row = vec![item.kind.clone(), name, item.state.to_string()];
                row.extend(item.detail.clone());
                row
            })
            .collect();
        out += &columns(&rows, "  ");
    }
    out += "history:\n";
    let rows: Vec<Vec<String>> = detail
        .history
        .iter()
        .map(|h| {
            vec![
                crate::comment::stamp(h.at),
                h.what.clone(),
                h.actor.clone(),
                h.reason.clone(),
            ]
        })
        .collect();
    out += &columns(&rows, "  ");
    out
}

/// `rows` as columns two spaces apart, each as wide as its widest cell, after `indent`.
fn columns<R: AsRef<[String]>>(rows: &[R], indent: &str) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.as_ref().iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .as_ref()
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out += indent;
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    out
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
    let state = crate::db::State::open(&config.state).await?;
    let repo = key.repo.as_str();
    match crate::db::request_destroy(&state, repo, key.number, actor, SystemClock.now()).await? {
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
        let Some(row) = crate::db::preview_summary(&state, repo, i64::from(key.number)).await?
        else {
            println!("{key}: destroyed; everything it provisioned is gone");
            return Ok(());
        };
        let ledger = crate::db::ledger(&state, row.id).await?;
        let waiting: Vec<String> = ledger
            .iter()
            .filter(|l| !l.state.is_final())
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
    let state = crate::db::State::open(&config.state).await?;
    let now = SystemClock.now();
    let rows = crate::db::all_generations(&state).await?;
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
    let state = crate::db::State::open(&config.state).await?;
    if !crate::db::destroy_template(&state, repo.as_str(), "destroyed", SystemClock.now()).await? {
        bail!("previewd keeps no template database for {repo}");
    }
    println!("{repo}: every template generation will be dropped by the running previewd");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Detail, HistoryItem, LedgerItem};

    fn item(kind: &str, namespace: &str, name: &str, state: &str) -> LedgerItem {
        LedgerItem {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
            state: state.parse().expect("a ledger state"),
            detail: None,
        }
    }

    #[test]
    fn show_keeps_every_ledger_and_history_column_apart_however_long_the_names() {
        let detail = Detail {
            preview: None,
            ledger: vec![
                item(
                    "Application",
                    "argocd",
                    "pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers",
                    "applied",
                ),
                item(
                    "PostgreSQL database",
                    "",
                    "pv_codertocat_hello_world_4d960c3af87af320_pr_2",
                    "applied",
                ),
            ],
            history: vec![HistoryItem {
                at: 1_700_000_000,
                what: "deploy-requested".into(),
                actor: "a-very-long-github-login-name".into(),
                reason: "opened".into(),
                head_sha: None,
            }],
            shares: Vec::new(),
        };
        let key: PreviewKey = "codertocat/hello-world#2".parse().unwrap();
        let text = detail_text(&key, &detail);
        for glued in [
            "helpersapplied",
            "pr_2applied",
            "requesteda-very",
            "nameopened",
        ] {
            assert!(!text.contains(glued), "{glued} in\n{text}");
        }
        insta::assert_snapshot!(text);
    }
}
