//! Who may enter a repository's previews, asked of GitHub at most once per person,
//! repository and `login.access_cache`: the answers are kept (bounded), and people who ask
//! at once for the same answer wait for one look-up.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::Access as Rule;
use crate::db::login::HostPreview;
use crate::github::{GitHub, Permission};
use crate::preview::RepoName;

use super::Person;

/// Answers kept at once (person × repository).
const MAX_ANSWERS: usize = 50_000;
/// A look-up that failed is not asked again for this long: a stream of requests for one
/// person and repository costs GitHub one call while it fails.
const FAILED_FOR: Duration = Duration::from_secs(30);

/// GitHub's answer for one person and repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Allowed,
    Refused,
    /// GitHub could not be asked (no credentials, an outage, a rate limit).
    Unknown(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    login: String,
    repo: RepoName,
    rule: &'static str,
}

pub struct Access {
    github: Option<Arc<GitHub>>,
    ttl: Duration,
    answers: std::sync::Mutex<HashMap<Key, (Instant, bool)>>,
    flights: std::sync::Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
    /// Look-ups that failed lately, and why.
    failed: std::sync::Mutex<HashMap<Key, (Instant, String)>>,
    /// Look-ups sent to GitHub (for the metrics and the tests).
    pub lookups: AtomicU64,
}

impl Access {
    pub fn new(github: Option<Arc<GitHub>>, ttl: Duration) -> Self {
        Self {
            github,
            ttl,
            answers: Default::default(),
            flights: Default::default(),
            failed: Default::default(),
            lookups: AtomicU64::new(0),
        }
    }

    /// Whether `person` may enter `preview`, whose repository's rule is `rule`.
    pub async fn may_enter(&self, person: &Person, preview: &HostPreview, rule: Rule) -> Answer {
        let installation = preview.installation.and_then(|i| i.for_github());
        self.may_read(person, &preview.key.repo, installation, rule)
            .await
    }

    /// Whether `person` passes `rule` for `repo` (its installation, when known, saves
    /// GitHub a look-up of it).
    pub async fn may_read(
        &self,
        person: &Person,
        repo: &RepoName,
        installation: Option<u64>,
        rule: Rule,
    ) -> Answer {
        if rule == Rule::Public {
            return Answer::Allowed;
        }
        let key = Key {
            login: person.login.to_ascii_lowercase(),
            repo: repo.clone(),
            rule: rule.as_str(),
        };
        if let Some(allowed) = self.fresh(&key) {
            return allowed.into();
        }
        let flight = self
            .flights
            .lock()
            .expect("flights")
            .entry(key.clone())
            .or_default()
            .clone();
        let _turn = flight.lock().await;
        // Whoever held the turn before may have asked already.
        if let Some(allowed) = self.fresh(&key) {
            return allowed.into();
        }
        let failed = self.failed.lock().expect("failed").get(&key).cloned();
        if let Some((_, why)) = failed.filter(|(at, _)| at.elapsed() < FAILED_FOR) {
            return self.stale_or(&key, why);
        }
        let asked = self.ask(&key, installation, rule).await;
        self.flights.lock().expect("flights").remove(&key);
        match asked {
            Ok(allowed) => {
                self.keep(key, allowed);
                allowed.into()
            }
            Err(why) => {
                let mut failed = self.failed.lock().expect("failed");
                if failed.len() >= MAX_ANSWERS {
                    failed.retain(|_, (at, _)| at.elapsed() < FAILED_FOR);
                }
                if failed.len() < MAX_ANSWERS {
                    failed.insert(key.clone(), (Instant::now(), why.clone()));
                }
                drop(failed);
                self.stale_or(&key, why)
            }
        }
    }

    /// While GitHub fails, an answer serves one more cache period: someone removed there is
    /// out within twice `login.access_cache`, even then.
    fn stale_or(&self, key: &Key, why: String) -> Answer {
        match self.answers.lock().expect("answers").get(key) {
            Some((at, allowed)) if at.elapsed() < self.ttl * 2 => {
                tracing::warn!(reason = %why, "GitHub not asked: the last answer serves");
                (*allowed).into()
            }
            _ => Answer::Unknown(why),
        }
    }

    fn fresh(&self, key: &Key) -> Option<bool> {
        let answers = self.answers.lock().expect("answers");
        answers
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, allowed)| *allowed)
    }

    fn keep(&self, key: Key, allowed: bool) {
        let mut answers = self.answers.lock().expect("answers");
        if answers.len() >= MAX_ANSWERS {
            answers.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if answers.len() >= MAX_ANSWERS {
                // Still full of fresh answers: the oldest tenth goes, not everyone's.
                let mut ages: Vec<Instant> = answers.values().map(|(at, _)| *at).collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 10];
                answers.retain(|_, (at, _)| *at > cut);
            }
        }
        answers.insert(key, (Instant::now(), allowed));
    }

    async fn ask(&self, key: &Key, installation: Option<u64>, rule: Rule) -> Result<bool, String> {
        let Some(github) = &self.github else {
            return Err("previewd has no GitHub credentials to ask with".into());
        };
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let repo = &key.repo;
        let asked = match rule {
            Rule::Org => {
                github
                    .org_member(repo, installation, repo.owner(), &key.login)
                    .await
            }
            _ => github
                .permission_now(repo, installation, &key.login)
                .await
                .map(|p| p != Permission::None),
        };
        asked.map_err(|e| e.to_string())
    }
}

impl From<bool> for Answer {
    fn from(allowed: bool) -> Self {
        if allowed {
            Answer::Allowed
        } else {
            Answer::Refused
        }
    }
}
