//! The read model: previews, their ledgers and histories as people and tools see them.
//! Typed, serialized as the API's JSON (`server::openapi` describes it, a test holds the two
//! together), and the same values the dashboard, the CLI and the metrics read. Built from
//! `db` rows; pure. Reading them from the state is `read`.

use serde::{Serialize, Serializer};

use crate::comment::Shown;
use crate::config::Config;
use crate::db::{HistoryEntry, LedgerRow, PreviewSummary};
use crate::naming::Names;
use crate::preview::{Desired, LedgerState, ObservedState, PreviewKey};

pub mod read;
mod templates;

pub use read::{
    DEFAULT_LIMIT, Filters, MAX_LIMIT, Paging, PagingError, cursor_after, detail, list, page,
    page_limit, parse_cursor,
};
pub use templates::{Template, size, templates};

/// One preview as the API, the dashboard and the CLI show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preview {
    /// `owner/name`, lower-case.
    pub repo: String,
    pub number: i64,
    pub pr_url: String,
    pub title: String,
    pub author: String,
    #[serde(serialize_with = "state_as_name")]
    pub state: Shown,
    pub desired: Desired,
    pub observed: ObservedState,
    /// `https://<host>`, or `https://` when no host can be named.
    pub url: String,
    pub cluster: Option<String>,
    pub head_sha: String,
    pub created_at: i64,
    pub expires_at: i64,
    /// Never negative: an expired preview has zero left.
    pub seconds_left: i64,
    pub keep: bool,
    pub fork: bool,
    pub last_error: Option<String>,
    pub end_reason: Option<String>,
    /// Waiting for CI (`wait_for`) on the head since then: never silently stuck.
    pub waiting_since: Option<i64>,
    /// Asleep since then (`None`: awake); the last request the login let through (recorded
    /// at most once a minute).
    pub sleeping_since: Option<i64>,
    pub last_used_at: Option<i64>,
    /// What it costs and what sleeping saved.
    pub cost: Cost,
}

/// What a preview asks of its cluster, as its namespace's ResourceQuota last counted it
/// awake (`None` until counted: a directory sink never counts), and what sleeping saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cost {
    pub pods: Option<i64>,
    pub cpu_millis: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// Seconds asleep in all, the sleep under way included.
    pub slept_seconds: i64,
    /// Pods the sleeps kept from running, times their seconds, the sleep under way included.
    pub pod_seconds_saved: i64,
}

impl Cost {
    fn of(p: &PreviewSummary, now: i64) -> Self {
        let current = p.sleeping_since.map_or(0, |since| (now - since).max(0));
        let saved = p.saved_pod_seconds + current * p.used_pods.unwrap_or(0);
        Self {
            pods: p.used_pods,
            cpu_millis: p.used_cpu_millis,
            memory_bytes: p.used_memory_bytes,
            slept_seconds: p.slept_seconds + current,
            pod_seconds_saved: saved,
        }
    }
}

/// One thing a preview provisioned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerItem {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub state: LedgerState,
    pub detail: Option<String>,
}

/// One step of a PR's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryItem {
    pub at: i64,
    pub what: String,
    pub actor: String,
    pub reason: String,
    pub head_sha: Option<String>,
}

/// One valid share link of a preview: who made it and until when, never the link (the
/// token's `GET .../shares` gives that).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShareItem {
    pub created_by: String,
    pub created_at: i64,
    pub expires_at: i64,
}

/// One PR: its preview (`None` once destroyed), ledger, newest history and valid share
/// links.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    pub preview: Option<Preview>,
    pub ledger: Vec<LedgerItem>,
    pub history: Vec<HistoryItem>,
    pub shares: Vec<ShareItem>,
}

/// One page of previews and the cursor of the next (`None` after the last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    pub previews: Vec<Preview>,
    pub next: Option<String>,
}

/// A recently destroyed preview, for the dashboard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destroyed {
    pub repo: String,
    pub number: i64,
    pub at: i64,
    pub reason: String,
}

/// The state a person sees (`ready`, `queued`, `tearing_down`, ...).
pub fn state_name(shown: Shown) -> &'static str {
    match shown {
        Shown::Queued => "queued",
        Shown::AwaitingApproval => "awaiting_approval",
        Shown::Draft => "draft",
        Shown::OptedOut => "opted_out",
        Shown::WaitingForCi => "waiting_for_ci",
        Shown::CiFailed => "ci_failed",
        Shown::Deploying => "deploying",
        Shown::Rendered => "rendered",
        Shown::Ready => "ready",
        Shown::Sleeping => "sleeping",
        Shown::Failed => "failed",
        Shown::TearingDown => "tearing_down",
        Shown::Destroyed => "destroyed",
    }
}

fn state_as_name<S: Serializer>(shown: &Shown, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state_name(*shown))
}

/// github.com for api.github.com, the server for a GHES `/api/v3`, else the URL itself.
pub fn github_web(config: &Config) -> String {
    let api = config.github.api_url.trim_end_matches('/');
    if api == "https://api.github.com" {
        return "https://github.com".into();
    }
    api.strip_suffix("/api/v3").unwrap_or(api).to_owned()
}

impl Preview {
    /// The preview of row `p` at `now`, its names as recorded (never recomputed).
    pub fn of(p: &PreviewSummary, config: &Config, now: i64) -> Self {
        let host = p
            .repo
            .parse()
            .ok()
            .and_then(|repo| {
                let number = u32::try_from(p.number).ok()?;
                let key = PreviewKey::new(repo, number);
                let domain = &config
                    .policy_for(&key.repo)
                    .unwrap_or(&config.defaults)
                    .domain;
                Some(Names::recorded(p.names.as_deref(), &key, domain).ok()?.host)
            })
            .unwrap_or_default();
        let (state, desired, observed) = (Shown::of(p.desired, p.observed), p.desired, p.observed);
        Self {
            repo: p.repo.clone(),
            number: p.number,
            pr_url: format!("{}/{}/pull/{}", github_web(config), p.repo, p.number),
            title: p.title.clone(),
            author: p.author.clone(),
            state,
            desired,
            observed,
            url: format!("https://{host}"),
            cluster: p.cluster.clone(),
            head_sha: p.head_sha.clone(),
            created_at: p.created_at,
            expires_at: p.expires_at,
            seconds_left: (p.expires_at - now).max(0),
            keep: p.keep,
            fork: p.fork,
            last_error: p.last_error.clone(),
            end_reason: p.end_reason.clone(),
            waiting_since: (observed == ObservedState::WaitingForCi).then_some(p.head_changed_at),
            sleeping_since: p.sleeping_since,
            last_used_at: p.last_used_at,
            cost: Cost::of(p, now),
        }
    }
}

impl From<&LedgerRow> for LedgerItem {
    fn from(r: &LedgerRow) -> Self {
        Self {
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            state: r.state,
            detail: r.detail.clone(),
        }
    }
}

impl From<&crate::db::login::Share> for ShareItem {
    fn from(s: &crate::db::login::Share) -> Self {
        Self {
            created_by: s.created_by.clone(),
            created_at: s.created_at,
            expires_at: s.expires_at,
        }
    }
}

impl From<&HistoryEntry> for HistoryItem {
    fn from(h: &HistoryEntry) -> Self {
        Self {
            at: h.at,
            what: h.what.clone(),
            actor: h.actor.clone(),
            reason: h.reason.clone(),
            head_sha: h.head_sha.clone(),
        }
    }
}

impl From<(String, i64, i64, String)> for Destroyed {
    fn from((repo, number, at, reason): (String, i64, i64, String)) -> Self {
        Self {
            repo,
            number,
            at,
            reason,
        }
    }
}

/// Previews by shown state and cluster (from `db::preview_counts`' rows of desired,
/// observed, cluster and count), for the metrics.
pub fn counts(rows: Vec<(Desired, ObservedState, String, i64)>) -> Vec<(String, String, i64)> {
    let mut counted: std::collections::BTreeMap<(&'static str, String), i64> = Default::default();
    for (desired, observed, cluster, n) in rows {
        let shown = Shown::of(desired, observed);
        *counted.entry((state_name(shown), cluster)).or_default() += n;
    }
    counted
        .into_iter()
        .map(|((state, cluster), n)| (state.to_owned(), cluster, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_in_the_same_shown_state_and_cluster_are_counted_together() {
        let rows = vec![
            (Desired::Deployed, ObservedState::Ready, "eu".into(), 2),
            (Desired::Deployed, ObservedState::Syncing, "eu".into(), 1),
            (Desired::Deployed, ObservedState::Pending, "eu".into(), 3),
            (Desired::Absent, ObservedState::Ready, "eu".into(), 1),
        ];
        assert_eq!(
            counts(rows),
            [
                ("deploying".to_owned(), "eu".to_owned(), 4),
                ("ready".into(), "eu".into(), 2),
                ("tearing_down".into(), "eu".into(), 1),
            ]
        );
    }
}
