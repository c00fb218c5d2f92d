//! The feedback worker: everything previewd says to GitHub (the sticky comment, deployment
//! statuses, notices, answers to commands) and the commands that need GitHub's word on
//! write access, run beside the reconciler, never inside it. The reconciler only writes
//! state and wakes this worker; the worker reads what is owed from the database. A rate
//! limit or an outage holds only the installation it came from (`GitHub::held`), so it may
//! delay comments, never a deploy or a teardown; and what GitHub refuses for good is given
//! up after `PERMANENT_TRIES`, not retried on every pass.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::command::Asker;
use crate::config::Config;
use crate::db;
use crate::github::{GitHub, GitHubError};
use crate::preview::{CommandStatus, InstallationId, PreviewKey};
use crate::work::Work;

/// The worker looks at what is owed at least this often, woken or not.
pub const RESYNC: Duration = Duration::from_secs(30);
/// A report, notice or answer GitHub refuses for good (404, 410, 422, a 403 that is no rate
/// limit) this many times in a row is final: recorded, logged once, never sent again.
pub const PERMANENT_TRIES: i64 = 3;
/// Answers (of any kind) to one actor within an hour, for someone with standing: enough for
/// a maintainer working through a backlog; past it, the sticky comment still tells.
pub const ANSWERS_PER_HOUR: i64 = 30;
/// The same for anyone else (each answer is one reaction): a stranger's flood of comments
/// costs at most this many calls an hour.
pub const OUTSIDER_ANSWERS_PER_HOUR: i64 = 3;

pub struct Feedback {
    pub(crate) state: db::State,
    pub(crate) config: Config,
    pub(crate) clock: Arc<dyn Clock>,
    /// `None` without credentials: commands still run, nothing is sent.
    pub(crate) github: Option<Arc<GitHub>>,
    /// Tells the reconciler a command changed a preview.
    work: Option<Work>,
    /// The previews the reconciler looked at, to be reported on.
    nudge: Arc<Nudge>,
    /// Previews whose skipped report was logged (once each).
    unreported: Mutex<HashSet<(String, i64)>>,
}

impl Feedback {
    pub fn new(
        state: impl Into<db::State>,
        config: Config,
        clock: Arc<dyn Clock>,
        github: Option<Arc<GitHub>>,
    ) -> Self {
        Self {
            state: state.into(),
            config,
            clock,
            github,
            work: None,
            nudge: Arc::new(Nudge::default()),
            unreported: Mutex::new(HashSet::new()),
        }
    }

    /// Tells `work` of the previews commands change (the notifier intake uses).
    pub fn notifying(mut self, work: Work) -> Self {
        self.work = Some(work);
        self
    }

    /// What the reconciler tells about the previews it looked at.
    pub fn nudge(&self) -> Arc<Nudge> {
        self.nudge.clone()
    }

    /// Runs until `cancel`: commands and the reports of the previews the
    /// reconciler looked at whenever it says so (and when a held installation is let go),
    /// and of every preview at start and every `RESYNC`.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let mut everything = tokio::time::interval(RESYNC);
        loop {
            let release = self.github.as_ref().and_then(|g| g.next_release());
            let all = tokio::select! {
                _ = everything.tick() => true,
                () = self.nudge.notify.notified() => false,
                () = tokio::time::sleep(release.unwrap_or(RESYNC)) => false,
                () = cancel.cancelled() => return,
            };
            // Looked at once; a failed look owes everything.
            let owed = match all {
                true => db::Owed::EVERYTHING,
                false => db::owed(&self.state).await.unwrap_or(db::Owed::EVERYTHING),
            };
            if owed.commands
                && let Err(e) = self.obey().await
            {
                tracing::warn!(error = %format!("{e:#}"), "running commands failed; retrying on the next pass");
            }
            self.look_up().await;
            let ids = self.nudge.take();
            if all {
                self.report().await;
            } else {
                self.report_owed(&ids, owed).await;
            }
        }
    }

    /// `id`'s report waits for its installation's hold: tried when that ends.
    pub(crate) fn owe(&self, id: i64) {
        self.nudge.previews.lock().expect("nudge").insert(id);
    }

    pub(crate) fn changed(&self, key: &PreviewKey) {
        if let Some(work) = &self.work {
            work.notify(key.clone());
        }
    }

    /// With no GitHub credentials, each preview's first skipped report is logged; the rest
    /// are silent.
    pub(crate) fn log_unreported(&self, repo: &str, number: i64) {
        let mut seen = self.unreported.lock().expect("unreported set");
        if seen.insert((repo.to_owned(), number)) {
            tracing::info!(
                repo,
                number,
                "GitHub reporting is off (no github.token or App credentials): not reporting on this PR"
            );
        }
    }
}

/// The reconciler's word to the worker: these previews changed (or were looked at).
#[derive(Default)]
pub struct Nudge {
    previews: Mutex<BTreeSet<i64>>,
    notify: Notify,
}

impl Nudge {
    pub fn looked_at(&self, ids: &[i64]) {
        self.previews.lock().expect("nudge").extend(ids);
        // One permit is kept while the worker is busy: a nudge during its pass is not lost.
        self.notify.notify_one();
    }

    fn take(&self) -> Vec<i64> {
        std::mem::take(&mut *self.previews.lock().expect("nudge"))
            .into_iter()
            .collect()
    }
}

/// Whether the commenter has standing on this PR: its author, a writer by association, or
/// one GitHub just confirmed (`confirmed`). Anyone may comment on a public PR; only they
/// are answered with comments of previewd's.
pub fn standing(asker: &Asker, pr_author: &str, confirmed: bool) -> bool {
    confirmed
        || (!pr_author.is_empty() && asker.login.eq_ignore_ascii_case(pr_author))
        || matches!(asker.association, "OWNER" | "MEMBER" | "COLLABORATOR")
}

/// How a command that ran is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Eyes (when accepted), the reply, then rocket or confused.
    Full,
    /// This one reaction, no comment.
    Reaction(&'static str),
    /// Nothing at all.
    Silent,
}

/// The answer to a command with `status` (`done`, `failed`, `refused`) from someone with or
/// without `standing`, who was answered `answered` times in the last hour.
pub fn answer_for(standing: bool, status: CommandStatus, answered: i64) -> Answer {
    let bound = if standing {
        ANSWERS_PER_HOUR
    } else {
        OUTSIDER_ANSWERS_PER_HOUR
    };
    if answered >= bound {
        Answer::Silent
    } else if standing {
        Answer::Full
    } else if status == CommandStatus::Done {
        Answer::Reaction("rocket")
    } else {
        Answer::Reaction("confused")
    }
}

/// A failure that passes: a held installation is said once, when the hold starts (by the
/// client), not by every item it holds; a write refused by the fence, once, when the Lease
/// was lost (by `lease`).
pub(crate) fn log_transient(error: &GitHubError, what: &str) {
    if matches!(error, GitHubError::Held { .. }) {
        tracing::debug!(error = %error, "{what}: waiting for the installation's hold");
    } else if matches!(error, GitHubError::Fenced(_)) {
        tracing::debug!(error = %error, "{what}: left to the replica holding the Lease");
    } else {
        tracing::warn!(error = %error, "{what} failed; retrying later");
    }
}

/// The installation GitHub's calls take (`None` where none was recorded).
fn installation(id: Option<InstallationId>) -> Option<u64> {
    id.and_then(InstallationId::for_github)
}

/// A stored value GitHub's API cannot be called with: the state holds what it should not.
fn shape(what: &str) -> GitHubError {
    GitHubError::Shape {
        path: what.into(),
        message: "not stored as expected".into(),
    }
}

mod look;
mod obey;
mod report;

#[cfg(test)]
mod tests {
    use super::*;

    fn asker<'a>(login: &'a str, association: &'a str) -> Asker<'a> {
        Asker { login, association }
    }

    #[test]
    fn the_author_writers_and_the_confirmed_have_standing_and_strangers_do_not() {
        assert!(standing(&asker("Alice", "NONE"), "alice", false));
        assert!(standing(&asker("bob", "MEMBER"), "alice", false));
        assert!(standing(&asker("carol", "CONTRIBUTOR"), "alice", true));
        assert!(!standing(&asker("mallory", "CONTRIBUTOR"), "alice", false));
        assert!(
            !standing(&asker("mallory", "NONE"), "", false),
            "no PR: no author"
        );
    }

    #[test]
    fn an_outsider_gets_one_reaction_then_nothing_past_the_bound() {
        assert_eq!(
            answer_for(false, CommandStatus::Done, 0),
            Answer::Reaction("rocket")
        );
        assert_eq!(
            answer_for(false, CommandStatus::Refused, 2),
            Answer::Reaction("confused")
        );
        assert_eq!(
            answer_for(false, CommandStatus::Done, OUTSIDER_ANSWERS_PER_HOUR),
            Answer::Silent
        );
        assert_eq!(answer_for(true, CommandStatus::Refused, 0), Answer::Full);
        assert_eq!(
            answer_for(true, CommandStatus::Done, ANSWERS_PER_HOUR - 1),
            Answer::Full
        );
        assert_eq!(
            answer_for(true, CommandStatus::Done, ANSWERS_PER_HOUR),
            Answer::Silent
        );
    }
}
