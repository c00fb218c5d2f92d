//! Placement: which cluster a new preview lands on (least loaded with room, for life), and
//! the repository's and author's caps, which queue a newcomer or evict for it.

use std::collections::HashMap;

use super::Reconciler;
use crate::config::{Config, DatabaseMode};
use crate::db::{self, Placement, PreviewRow};
use crate::preview::ObservedState;

impl Reconciler {
    /// Gives each deployable preview without a cluster the least loaded one with room, in
    /// arrival order; the rest wait, visibly, as `queued`. Returns the previews placed.
    pub(super) async fn place_waiting(&self) -> anyhow::Result<Vec<i64>> {
        let waiting = db::unplaced(&self.state).await?;
        if waiting.is_empty() {
            return Ok(Vec::new());
        }
        let mut load = db::cluster_load(&self.state).await?;
        let mut placements = Vec::with_capacity(waiting.len());
        let mut placed_now: HashMap<String, i64> = HashMap::new();
        let mut evicted = Vec::new();
        for row in &waiting {
            let mut placement = Placement {
                id: row.id,
                cluster: None,
                already_queued: row.observed == ObservedState::Queued,
                seeded_at: None,
            };
            match self.quota(row, &placed_now).await? {
                Quota::Room => {}
                Quota::Full => {
                    placements.push(placement);
                    continue;
                }
                Quota::Evicted(victim, cluster) => {
                    evicted.push(victim);
                    // Its slot is free now. Not the state's counts read again: they lack
                    // what this pass placed before it, which are written at its end.
                    if let Some((_, used)) = load.iter_mut().find(|(c, _)| *c == cluster) {
                        *used -= 1;
                    }
                }
            }
            placement.cluster = place(&self.config, &load);
            if let Some(cluster) = &placement.cluster {
                match load.iter_mut().find(|(c, _)| c == cluster) {
                    Some((_, used)) => *used += 1,
                    None => load.push((cluster.clone(), 1)),
                }
                *placed_now
                    .entry(format!("repo:{}", row.key.repo))
                    .or_default() += 1;
                *placed_now
                    .entry(format!("author:{}", row.author))
                    .or_default() += 1;
                placement.seeded_at = self.seeds_without_a_template(row)?;
            }
            placements.push(placement);
        }
        let placed: Vec<i64> = placements
            .iter()
            .filter(|p| p.cluster.is_some())
            .map(|p| p.id)
            .collect();
        // One transaction for the whole queue: placement must not cost a commit per preview.
        db::record_placements(&self.state, placements, self.clock.now()).await?;
        Ok(placed.into_iter().chain(evicted).collect())
    }

    /// A preview whose repository has no template seeds its database: decided with its
    /// placement, at its seed generation, rather than in a commit of its own at its first
    /// rendering (`Reconciler::clone_source` decides the same, and decides the rest).
    fn seeds_without_a_template(&self, row: &PreviewRow) -> anyhow::Result<Option<i64>> {
        let repo = &row.key.repo;
        let undecided = row.template_seed != Some(row.seed_generation);
        Ok((self.config.database.mode != DatabaseMode::Off
            && undecided
            && self.config.template_for(repo).is_none())
        .then_some(row.seed_generation))
    }

    /// The repository's and the author's caps: room, full (wait in the queue), or room made
    /// by evicting the least recently active unpinned preview (`at_cap = "evict"`).
    async fn quota(
        &self,
        row: &PreviewRow,
        placed_now: &HashMap<String, i64>,
    ) -> anyhow::Result<Quota> {
        let policy = self
            .config
            .policy_for(&row.key.repo)
            .unwrap_or(&self.config.defaults);
        if policy.max_per_repo.is_none() && policy.max_per_author.is_none() {
            return Ok(Quota::Room);
        }
        let (repo_live, author_live) =
            db::live_counts(&self.state, row.key.repo.as_str(), &row.author).await?;
        let now_placed = |key: String| placed_now.get(&key).copied().unwrap_or(0);
        let repo_live = repo_live + now_placed(format!("repo:{}", row.key.repo));
        let author_live = author_live + now_placed(format!("author:{}", row.author));
        let repo_full = policy
            .max_per_repo
            .is_some_and(|cap| repo_live >= i64::from(cap));
        let author_full = policy
            .max_per_author
            .is_some_and(|cap| author_live >= i64::from(cap));
        if !repo_full && !author_full {
            return Ok(Quota::Room);
        }
        if policy.at_cap == crate::config::AtCap::Queue {
            return Ok(Quota::Full);
        }
        let by_author = !repo_full;
        let Some((victim, victim_repo, victim_number, cluster)) =
            db::eviction_victim(&self.state, row.key.repo.as_str(), &row.author, by_author).await?
        else {
            return Ok(Quota::Full); // everything at the cap is pinned
        };
        let newcomer = row.key.to_string();
        let reason = format!(
            "evicted for {newcomer}: at the cap, and the least recently active unpinned preview"
        );
        if db::evict(
            &self.state,
            victim,
            &reason,
            &crate::comment::evicted(&newcomer),
            self.clock.now(),
        )
        .await?
        {
            tracing::info!(victim = %format!("{victim_repo}#{victim_number}"), %newcomer, "evicted");
            Ok(Quota::Evicted(victim, cluster))
        } else {
            Ok(Quota::Full)
        }
    }
}

enum Quota {
    Room,
    Full,
    /// Room made: this preview, on this cluster, was evicted (its teardown is the
    /// reconciler's next step).
    Evicted(i64, String),
}

/// Placement: the least loaded cluster with room (`capacity` unset = unlimited); ties go to
/// the first configured. A preview stays on its cluster for life.
pub fn place(config: &Config, load: &[(String, i64)]) -> Option<String> {
    let used = |name: &str| load.iter().find(|(c, _)| c == name).map_or(0, |(_, n)| *n);
    config
        .clusters
        .iter()
        .filter(|c| c.capacity.is_none_or(|cap| used(&c.name) < i64::from(cap)))
        .min_by_key(|c| used(&c.name))
        .map(|c| c.name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::from_toml(
            "[[clusters]]\nname = \"a\"\nserver = \"https://a\"\ncapacity = 2\n[[clusters]]\nname = \"b\"\nserver = \"https://b\"\ncapacity = 1\n",
            Vec::new(),
        )
        .unwrap()
    }

    #[test]
    fn new_previews_go_to_the_least_loaded_cluster_with_room() {
        assert_eq!(place(&config(), &[]).as_deref(), Some("a"));
        assert_eq!(place(&config(), &[("a".into(), 1)]).as_deref(), Some("b"));
        assert_eq!(
            place(&config(), &[("a".into(), 1), ("b".into(), 1)]).as_deref(),
            Some("a")
        );
    }

    #[test]
    fn with_every_cluster_full_a_preview_waits() {
        assert_eq!(place(&config(), &[("a".into(), 2), ("b".into(), 1)]), None);
    }
}
