//! Asking GitHub what the gates need and webhooks do not say, on the feedback worker (a rate
//! limit holds only that installation, never the reconciler): a PR's files for `paths` when
//! its head is new to previewd, and a head's checks for `wait_for` when a preview starts
//! waiting and once per resync (a lost check webhook must not leave it waiting for ever).
//! What GitHub answers is recorded, then the reconciler is told.

use super::installation;
use tracing::Instrument;

use crate::checks::CheckReport;
use crate::config::Trigger;
use crate::db::{self, LookUp, PathsFound};
use crate::feedback::Feedback;
use crate::github::GitHub;
use crate::intent;
use crate::preview::{PreviewKey, RepoName};

/// Look-ups per pass: a burst of new PRs is worked through over a few passes.
const PER_PASS: i64 = 50;

impl Feedback {
    /// Every look-up due, once each. A failed look-up of checks is retried at the next
    /// resync, never on every pass; files are listed again unless GitHub refused for good.
    pub async fn look_up(&self) {
        let Some(github) = self.github.clone() else {
            return;
        };
        let gated = self.gated_repos();
        if gated.files.is_empty() && gated.checks.is_empty() {
            return;
        }
        let due = match db::lookups_due(&self.state, &gated, PER_PASS).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "reading the look-ups due failed; next pass");
                return;
            }
        };
        for look in due {
            let Ok(repo) = look.repo.parse::<RepoName>() else {
                continue;
            };
            let Ok(number) = u32::try_from(look.number) else {
                continue;
            };
            let key = PreviewKey::new(repo, number);
            if github
                .held(&key.repo, installation(look.installation_id))
                .is_some()
            {
                continue;
            }
            let span = tracing::info_span!("look_up", preview = %key);
            let changed = if look.files {
                self.look_at_files(&github, &look, &key)
                    .instrument(span)
                    .await
            } else {
                self.look_at_checks(&github, &look, &key)
                    .instrument(span)
                    .await
            };
            if changed {
                self.changed(&key);
            }
        }
    }

    /// The repositories whose `paths` and whose `wait_for` need GitHub's word. Under
    /// `trigger = "comment"` only a writer's `/preview deploy` admits a PR (past `paths`
    /// too): its files are never listed.
    fn gated_repos(&self) -> db::Gated {
        let with = |f: fn(&crate::config::Gates) -> bool| {
            self.config
                .repos
                .iter()
                .filter(|r| f(&r.policy.gates))
                .map(|r| r.name.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        db::Gated {
            files: with(|g| g.paths.is_some() && g.trigger != Trigger::Comment),
            labeled: with(|g| g.paths.is_some() && g.trigger == Trigger::Label),
            checks: with(|g| !g.wait_for.is_empty()),
        }
    }

    /// Lists the PR's files and records what `paths` makes of them. Returns whether the
    /// preview now wants to be deployed.
    async fn look_at_files(&self, github: &GitHub, look: &LookUp, key: &PreviewKey) -> bool {
        let Some(policy) = self.config.policy_for(&key.repo) else {
            return false;
        };
        let Some(paths) = &policy.gates.paths else {
            return false;
        };
        let Ok(Some(row)) = db::preview_row(&self.state, look.id).await else {
            return false;
        };
        if row.head_sha != look.head_sha {
            return false;
        }
        // Only `paths` may stand between this PR and a preview: another gate answers first,
        // and listing its files would change nothing. An ignored author stays one: this head
        // is marked listed (a missing label is left out of the look-ups until it is given).
        if intent::OptOut::of(&policy.gates, &row.author, row.labeled).is_some() {
            let _ = db::files_looked(&self.state, look.id, &look.head_sha).await;
            return false;
        }
        let files = match github
            .pull_files(&key.repo, installation(look.installation_id), key.number)
            .await
        {
            Ok(files) => files,
            // GitHub will not list them (the PR is gone, no permission): not asked again
            // for this head. Anything else (an outage holds the installation) is retried.
            Err(e) if e.is_permanent() => {
                tracing::warn!(preview = %key, error = %e, "GitHub will not list the PR's files; asked again at the next push");
                let _ = db::files_looked(&self.state, look.id, &look.head_sha).await;
                return false;
            }
            Err(e) => {
                tracing::warn!(preview = %key, error = %e, "listing the PR's files failed; retried");
                return false;
            }
        };
        let verdict = paths.verdict(&files);
        tracing::info!(preview = %key, sha = &look.head_sha[..7], ?verdict, "PR files listed");
        let file = match &verdict {
            crate::paths::PathsVerdict::Matched(file) => Some(file.as_str()),
            crate::paths::PathsVerdict::NoMatch { .. } => None,
        };
        let approved_head = row.approved_sha.as_deref() == Some(row.head_sha.as_str());
        let now = self.clock.now();
        let found = PathsFound {
            id: look.id,
            repo: key.repo.as_str(),
            number: key.number,
            sha: &look.head_sha,
            file,
            admit: intent::base_gate(row.fork, approved_head, row.draft, policy),
            needs_label: policy.gates.trigger == Trigger::Label,
            expires_at: now.saturating_add(i64::try_from(policy.ttl.as_secs()).unwrap_or(i64::MAX)),
        };
        match db::record_paths(&self.state, &found, now).await {
            Ok(admitted) => admitted || file.is_none(),
            Err(e) => {
                tracing::warn!(preview = %key, error = %e, "recording the PR's files failed");
                false
            }
        }
    }

    /// Looks up the head's checks and records each named one. Returns whether any report
    /// was new.
    async fn look_at_checks(&self, github: &GitHub, look: &LookUp, key: &PreviewKey) -> bool {
        let Some(policy) = self.config.policy_for(&key.repo) else {
            return false;
        };
        let Ok(sha) = look.head_sha.parse() else {
            return false;
        };
        let reports: Vec<CheckReport> = match github
            .commit_checks(
                &key.repo,
                installation(look.installation_id),
                &sha,
                &policy.gates.wait_for,
            )
            .await
        {
            Ok(reports) => reports,
            Err(e) => {
                // Nothing changes: the preview keeps waiting, visibly; the resync asks again.
                tracing::warn!(preview = %key, error = %e, "looking up the head's checks failed; tried again at the next resync");
                let _ = db::checks_looked(&self.state, look.id, &look.head_sha).await;
                return false;
            }
        };
        let recorded = db::record_checks(&self.state, key.repo.as_str(), &look.head_sha, &reports)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(preview = %key, error = %e, "recording the head's checks failed");
                false
            });
        let _ = db::checks_looked(&self.state, look.id, &look.head_sha).await;
        recorded
    }
}
