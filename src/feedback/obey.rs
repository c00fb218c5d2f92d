//! Running `/preview` commands, on the feedback worker (never inside the reconciler: asking
//! GitHub for write access may wait on a rate limit): parsed, authorized (author, then
//! `author_association`, then GitHub's word on write access), applied to the state in one
//! transaction with their history row, and answered on the PR. Someone with standing gets
//! eyes, a short reply, then rocket or confused; anyone else one reaction at most; nobody
//! more than their hourly bound (`feedback::answer_for`).

use std::time::Duration;

use anyhow::Context;
use tracing::Instrument;

use super::{installation, shape};
use crate::command::{self, Asker, Command, Gate};
use crate::comment::{self, Outcome};
use crate::config::Policy;
use crate::db::{self, CommandRow, Effect, PreviewRow};
use crate::feedback::{self, Answer, Feedback};
use crate::github::GitHubError;
use crate::preview::{
    CommandStatus, Desired, EndReason, HistoryKind, ObservedState, PreviewKey, RepoName,
};

/// Marks our reply to one command, so a retried post finds it instead of posting twice.
fn reply_marker(comment_id: i64) -> String {
    format!("<!-- previewd:reply {comment_id} -->")
}

impl Feedback {
    /// Runs every queued command once, tells the reconciler about the previews they
    /// changed, and answers them; returns those previews.
    pub async fn obey(&self) -> anyhow::Result<Vec<PreviewKey>> {
        let mut touched = Vec::new();
        for command in db::pending_commands(&self.state).await? {
            let span = tracing::info_span!("command", preview = %command.key(), id = command.id);
            match self.run_command(&command).instrument(span).await {
                Ok(Some(_)) => {
                    let key = command.key();
                    self.changed(&key);
                    touched.push(key);
                }
                Ok(None) => {}
                // GitHub could not confirm write access: the command waits for the next pass
                // (a held installation's said once, by the client).
                Err(e) => match e.downcast_ref::<GitHubError>() {
                    Some(held @ GitHubError::Held { .. }) => {
                        feedback::log_transient(held, "running a command");
                    }
                    _ => {
                        tracing::warn!(command = command.id, error = %format!("{e:#}"), "command not run yet");
                    }
                },
            }
        }
        self.answer_commands().await;
        Ok(touched)
    }

    async fn run_command(&self, cmd: &CommandRow) -> anyhow::Result<Option<i64>> {
        let now = self.clock.now();
        let row = match db::preview_id(&self.state, cmd.repo.as_str(), cmd.number).await? {
            Some(id) => db::preview_row(&self.state, id).await?,
            None => None,
        };
        let parsed = match command::parse(&cmd.line) {
            Ok(parsed) => parsed,
            Err(error) => {
                let author = row.as_ref().map_or("", |r| r.author.as_str());
                self.record_standing(cmd, author, false).await?;
                self.finish(
                    cmd,
                    None,
                    &[],
                    CommandStatus::Failed,
                    HistoryKind::CommandInvalid,
                    Outcome::Invalid(error),
                    now,
                )
                .await?;
                return Ok(None);
            }
        };
        let (author, fork) = match &row {
            Some(row) => (row.author.clone(), row.fork),
            // Unknown PR: nobody is its author here, and it is treated as a fork.
            None => (String::new(), true),
        };
        let asker = Asker {
            login: &cmd.actor,
            association: &cmd.association,
        };
        let gate = command::gate(parsed, &asker, &author, fork);
        let allowed = match gate {
            Gate::Allowed => true,
            Gate::NeedsWrite => self.has_write(cmd).await?,
        };
        let confirmed = allowed && gate == Gate::NeedsWrite;
        self.record_standing(cmd, &author, confirmed).await?;
        if !allowed {
            let outcome = Outcome::Refused {
                actor: &cmd.actor,
                command: parsed,
            };
            self.finish(
                cmd,
                None,
                &[],
                CommandStatus::Refused,
                HistoryKind::CommandRefused,
                outcome,
                now,
            )
            .await?;
            tracing::info!(actor = cmd.actor, line = cmd.line, "command refused");
            return Ok(None);
        }
        let asked = self.asked(cmd, parsed, row.as_ref(), now).await?;
        let (effects, outcome) = decide(asked);
        if let Some(row) = &row {
            tracing::info!(
                actor = cmd.actor,
                ?parsed,
                preview_id = row.id,
                "command accepted"
            );
        }
        let id = row.as_ref().map(|r| r.id);
        // Only what did something earns a rocket; the rest is answered, and confused.
        let status = if outcome.did_something() {
            CommandStatus::Done
        } else {
            CommandStatus::Failed
        };
        if !self
            .finish(
                cmd,
                id,
                &effects,
                status,
                HistoryKind::Command,
                outcome,
                now,
            )
            .await?
        {
            // The approval's guard held (a push between reading and writing): say so.
            self.finish(
                cmd,
                id,
                &[],
                CommandStatus::Failed,
                HistoryKind::Command,
                Outcome::ChangedSinceApproval,
                now,
            )
            .await?;
        }
        Ok(id)
    }

    /// What deciding `parsed` reads, gathered: the row, the repository's policy, and the
    /// two things only the state or GitHub's checks can say (`status`, a template's base).
    async fn asked<'a>(
        &'a self,
        cmd: &'a CommandRow,
        parsed: Command,
        row: Option<&'a PreviewRow>,
        now: i64,
    ) -> anyhow::Result<Asked<'a>> {
        // `status` tells CI's verdict too, which the row alone does not hold.
        let status = match (row, parsed) {
            (Some(row), Command::Status) => {
                Some(comment::status(&self.full_status_view(row).await?))
            }
            _ => None,
        };
        // `refresh-template` needs a commit of the default branch to build from.
        let template_base_known = match (row, parsed) {
            (Some(row), Command::RefreshTemplate) => {
                db::template_repo(&self.state, row.key.repo.as_str())
                    .await?
                    .is_some()
            }
            _ => false,
        };
        let repo: Option<&RepoName> = row.map(|r| &r.key.repo);
        Ok(Asked {
            command: parsed,
            actor: &cmd.actor,
            // When the approver looked: the comment's own time, the clock the push's is in.
            seen_at: cmd.commented_at.unwrap_or(cmd.created_at),
            now,
            preview: row,
            policy: repo
                .and_then(|repo| self.config.policy_for(repo))
                .unwrap_or(&self.config.defaults),
            template: repo.is_some_and(|repo| self.config.template_for(repo).is_some()),
            template_base_known,
            status,
            public_url: self.config.public_url.as_deref(),
        })
    }

    /// Whether the commenter has standing (`feedback::standing`), recorded before the
    /// outcome: it decides how the command is answered, and the PR's author may be gone by
    /// then (a destroy).
    async fn record_standing(
        &self,
        cmd: &CommandRow,
        author: &str,
        confirmed: bool,
    ) -> anyhow::Result<()> {
        let asker = Asker {
            login: &cmd.actor,
            association: &cmd.association,
        };
        let standing = feedback::standing(&asker, author, confirmed);
        Ok(db::set_standing(&self.state, cmd.id, standing).await?)
    }

    /// Write access, confirmed by GitHub. Without credentials only a repository's OWNER
    /// (whose association GitHub vouches for) passes: nothing else can be confirmed.
    async fn has_write(&self, cmd: &CommandRow) -> anyhow::Result<bool> {
        let Some(github) = &self.github else {
            return Ok(cmd.association == "OWNER");
        };
        let permission = match github
            .permission(&cmd.repo, installation(cmd.installation_id), &cmd.actor)
            .await
        {
            // GitHub will not say (the App may not read collaborators, the repository is
            // gone): nobody is confirmed, and asking again every pass would change nothing.
            Err(e) if e.is_permanent() => {
                tracing::warn!(command = cmd.id, error = %e, "GitHub will not confirm write access; refused");
                return Ok(false);
            }
            other => other.context("asking GitHub for the commenter's permission")?,
        };
        Ok(permission.can_write())
    }

    /// The effects, the outcome (its reply) and the history row, in one transaction. Share
    /// links are rows of their own, made or revoked here as the outcome says: a share past
    /// `MAX_SHARES` (another made meanwhile) is answered as such, and an unshare says how
    /// many it revoked.
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        cmd: &CommandRow,
        preview: Option<i64>,
        effects: &[Effect<'_>],
        mut status: CommandStatus,
        what: HistoryKind,
        mut outcome: Outcome<'_>,
        now: i64,
    ) -> anyhow::Result<bool> {
        let mut tx = db::begin(&self.state).await?;
        if let Some(id) = preview {
            for effect in effects {
                let applied = db::command_effect(&mut tx, id, effect, now).await?;
                // A guard held (a push since the command was read): nothing is done.
                if !applied && matches!(effect, Effect::Approve { .. } | Effect::Deploy { .. }) {
                    return Ok(false); // rolled back
                }
            }
            if let Outcome::Shared { until, .. } = outcome {
                // Only the share's id is stored; its link is sealed from it when asked for.
                let made = db::login::create_share_in(&mut tx, id, &cmd.actor, now, until).await?;
                if made.is_none() {
                    outcome = Outcome::TooManyShares {
                        max: db::login::MAX_SHARES,
                    };
                    status = CommandStatus::Failed;
                }
            }
            if let Outcome::Unshared { revoked } = &mut outcome {
                *revoked = db::login::revoke_shares_in(&mut tx, id, now).await?;
            }
        }
        let reply = comment::reply(&outcome, &cmd.actor);
        // Already run (by another process on this state): its effects are rolled back.
        if db::finish_command(&mut tx, cmd, status, what, &reply, now).await? {
            tx.commit().await?;
        }
        Ok(true)
    }

    /// Answers every command that ran, as `feedback::answer_for` allows: for someone with
    /// standing, eyes when it was accepted, the reply (once: found by its marker if an earlier
    /// try may have posted it), then rocket or confused; for anyone else one reaction; past
    /// the actor's hourly bound, nothing. A held installation's answers wait; one GitHub
    /// keeps refusing for good is given up after `feedback::PERMANENT_TRIES`.
    async fn answer_commands(&self) {
        let Ok(unanswered) = db::unanswered_commands(&self.state).await else {
            return;
        };
        for cmd in unanswered {
            let now = self.clock.now();
            let Some(github) = &self.github else {
                self.log_unreported(cmd.repo.as_str(), i64::from(cmd.number));
                let _ = db::mark_answered(&self.state, cmd.id, "silent", now).await;
                continue;
            };
            let answered = db::answers_since(&self.state, &cmd.actor, now - 3600)
                .await
                .unwrap_or(i64::MAX);
            // Ran before standing was recorded: the association alone, as it was then.
            let standing = cmd.standing.unwrap_or(matches!(
                cmd.association.as_str(),
                "OWNER" | "MEMBER" | "COLLABORATOR"
            ));
            let answer = feedback::answer_for(standing, cmd.status, answered);
            let result = match answer {
                Answer::Silent => {
                    tracing::debug!(
                        command = cmd.id,
                        actor = cmd.actor,
                        "over the actor's bound: not answered"
                    );
                    Ok("silent")
                }
                Answer::Reaction(content) => {
                    self.react(github, &cmd, content).await.map(|()| "reacted")
                }
                Answer::Full => self.answer(github, &cmd).await.map(|()| "replied"),
            };
            match result {
                Ok(how) => {
                    let _ = db::mark_answered(&self.state, cmd.id, how, now).await;
                }
                Err(e) if e.is_permanent() => {
                    let failures = db::answer_failed(&self.state, cmd.id)
                        .await
                        .unwrap_or(i64::MAX);
                    if failures >= feedback::PERMANENT_TRIES {
                        tracing::warn!(command = cmd.id, error = %e, "GitHub keeps refusing this command's answer; given up");
                        let _ = db::mark_answered(&self.state, cmd.id, "given_up", now).await;
                    }
                }
                Err(e) => feedback::log_transient(&e, "answering a command on GitHub"),
            }
        }
    }

    /// One reaction on the command's comment.
    async fn react(
        &self,
        github: &crate::github::GitHub,
        cmd: &CommandRow,
        content: &str,
    ) -> Result<(), GitHubError> {
        let comment_id = u64::try_from(cmd.comment_id).map_err(|_| shape("comment id"))?;
        github
            .react(
                &cmd.repo,
                installation(cmd.installation_id),
                comment_id,
                content,
            )
            .await
    }

    async fn answer(
        &self,
        github: &crate::github::GitHub,
        cmd: &CommandRow,
    ) -> Result<(), GitHubError> {
        let (repo, number) = (&cmd.repo, cmd.number);
        let installation = installation(cmd.installation_id);
        let comment_id = u64::try_from(cmd.comment_id).map_err(|_| shape("comment id"))?;
        let accepted = cmd.status == CommandStatus::Done;
        if accepted {
            github.react(repo, installation, comment_id, "eyes").await?;
        }
        if cmd.reply_comment_id.is_none() {
            let marker = reply_marker(cmd.comment_id);
            let login = github.login().await?.to_owned();
            let existing = github
                .comments(repo, installation, number)
                .await?
                .into_iter()
                .find(|c| c.author == login && c.body.contains(&marker));
            let id = match existing {
                Some(found) => found.id,
                None => {
                    let body = format!("{marker}\n{}", cmd.reply.as_deref().unwrap_or_default());
                    github
                        .create_comment(repo, installation, number, &body)
                        .await?
                }
            };
            let _ = db::set_reply_comment(&self.state, cmd.id, id as i64).await;
        }
        let done = if accepted { "rocket" } else { "confused" };
        github.react(repo, installation, comment_id, done).await?;
        Ok(())
    }
}

/// Everything an authorized command's decision reads.
struct Asked<'a> {
    command: Command,
    actor: &'a str,
    /// When the commenter looked at the PR (a fork's approval names what they saw).
    seen_at: i64,
    now: i64,
    preview: Option<&'a PreviewRow>,
    /// The repository's policy (the defaults for one no longer configured).
    policy: &'a Policy,
    /// The repository builds a template database.
    template: bool,
    /// A commit of the default branch is known to build the template from.
    template_base_known: bool,
    /// For `status`: the preview's status as the sticky comment says it, CI's verdict in.
    status: Option<String>,
    /// previewd's own address (`public_url`), where a share's link is fetched.
    public_url: Option<&'a str>,
}

/// What an authorized command does: its effects on the preview and the reply. Pure.
fn decide(asked: Asked<'_>) -> (Vec<Effect<'_>>, Outcome<'_>) {
    let Asked {
        command: parsed,
        actor,
        seen_at,
        now,
        policy,
        ..
    } = asked;
    let status = || {
        asked
            .status
            .clone()
            .unwrap_or_else(comment::no_preview_status)
    };
    let Some(row) = asked.preview else {
        return match parsed {
            Command::Help => (vec![], Outcome::Help),
            Command::Status => (vec![], Outcome::Status(status())),
            Command::Destroy => (vec![], Outcome::AlreadyGone),
            _ => (vec![], Outcome::NoPreview),
        };
    };
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    let lifetime_end = row.created_at.saturating_add(secs(policy.max_lifetime));
    let live = row.desired != Desired::Absent;
    match parsed {
        Command::Help => (vec![], Outcome::Help),
        Command::Status => (vec![], Outcome::Status(status())),
        Command::Destroy if !live => (vec![], Outcome::AlreadyGone),
        // Being torn down: only a destroyed (not a closed or merged) PR's preview may come back.
        _ if !live
            && (parsed != Command::Deploy || row.end_reason != Some(EndReason::Destroyed)) =>
        {
            (vec![], Outcome::NoPreview)
        }
        Command::Extend(by) => {
            let until = row
                .expires_at
                .max(now)
                .saturating_add(secs(by))
                .min(lifetime_end);
            let capped = until == lifetime_end;
            (
                vec![Effect::ExpireAt(until)],
                Outcome::Extended { until, capped, now },
            )
        }
        Command::Destroy => (vec![Effect::Destroy], Outcome::Destroying),
        Command::Keep if !policy.allow_keep => (vec![], Outcome::KeepNotAllowed),
        Command::Keep => {
            let until = now.saturating_add(secs(policy.keep_for)).min(lifetime_end);
            (
                vec![Effect::Keep(true), Effect::ExpireAt(until)],
                Outcome::Kept { until, now },
            )
        }
        Command::Unkeep => {
            let until = now.saturating_add(secs(policy.ttl)).min(lifetime_end);
            (
                vec![Effect::Keep(false), Effect::ExpireAt(until)],
                Outcome::Unkept,
            )
        }
        Command::Reseed => (vec![Effect::Reseed], Outcome::Reseeding),
        Command::Sleep if row.sleeping_since.is_some() => (vec![], Outcome::AlreadyAsleep),
        Command::Sleep => (vec![Effect::Sleep], Outcome::Sleeping),
        Command::Wake if row.sleeping_since.is_none() => (vec![], Outcome::AlreadyAwake),
        Command::Wake => (vec![Effect::Wake], Outcome::Waking),
        Command::RefreshTemplate if !asked.template => (vec![], Outcome::NoTemplate),
        Command::RefreshTemplate if !asked.template_base_known => (vec![], Outcome::NoTemplateBase),
        Command::RefreshTemplate => (
            vec![Effect::RefreshTemplate { by: actor }],
            Outcome::RefreshingTemplate,
        ),
        Command::Redeploy => (vec![Effect::Redeploy], Outcome::Redeploying),
        // Made, or counted, in `finish`'s transaction (share rows are no preview effect).
        Command::Share(asked_for) => match command::share_until(now, asked_for, row.expires_at) {
            (until, _) if until <= now => (vec![], Outcome::ShareExpiring),
            (until, cap) => (
                vec![],
                Outcome::Shared {
                    until,
                    now,
                    cap,
                    preview: &row.key,
                    public_url: asked.public_url,
                },
            ),
        },
        Command::Unshare => (vec![], Outcome::Unshared { revoked: 0 }),
        Command::Approve(named) => approve(row, named, seen_at),
        Command::Deploy => deploy(&asked, row, live),
    }
}

/// `/preview approve [SHA]`: a fork's code runs only as the commit the maintainer names,
/// never as whatever the head is when the command runs (a push seconds before the comment):
/// the name must prefix the head, and the full head it prefixes is what is approved
/// (`Effect::Approve` writes it only while it is still the head).
fn approve(
    row: &PreviewRow,
    named: Option<command::ShaPrefix>,
    seen_at: i64,
) -> (Vec<Effect<'_>>, Outcome<'_>) {
    match named {
        _ if !row.fork => (vec![], Outcome::NotAFork),
        None => (
            vec![],
            Outcome::ApprovalNeedsCommit {
                head: &row.head_sha,
            },
        ),
        Some(named) if !named.names(&row.head_sha) => (
            vec![],
            Outcome::NotTheHead {
                named,
                head: &row.head_sha,
            },
        ),
        // A push after the comment: the approver cannot have seen this head. Ties are
        // refused too: GitHub's clocks count whole seconds.
        Some(_) if row.head_changed_at >= seen_at => (vec![], Outcome::ChangedSinceApproval),
        Some(_) => (
            vec![Effect::Approve {
                sha: &row.head_sha,
                seen_at,
            }],
            Outcome::Approved { sha: &row.head_sha },
        ),
    }
}

/// `/preview deploy` on a PR whose preview is live, or was destroyed.
fn deploy<'a>(
    asked: &Asked<'a>,
    row: &'a PreviewRow,
    live: bool,
) -> (Vec<Effect<'a>>, Outcome<'a>) {
    let (actor, seen_at, now, policy) = (asked.actor, asked.seen_at, asked.now, asked.policy);
    let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    // On a fork, deploying is no approval: it names no commit.
    if row.fork && row.approved_sha.as_deref() != Some(row.head_sha.as_str()) {
        let outcome = Outcome::ApprovalNeedsCommit {
            head: &row.head_sha,
        };
        return (vec![], outcome);
    }
    // Back from a destroy: a fresh lifetime of `ttl` from now. So for a PR that gets its
    // first preview now (opted out until this command): its lifetime starts now.
    if !live || row.desired == Desired::OptedOut {
        let lifetime_end = if live {
            now.saturating_add(secs(policy.max_lifetime))
        } else {
            row.created_at.saturating_add(secs(policy.max_lifetime))
        };
        let effects = vec![
            Effect::Deploy {
                by: actor,
                seen_at,
                past_failed_wait: false,
            },
            Effect::ExpireAt(now.saturating_add(secs(policy.ttl)).min(lifetime_end)),
        ];
        return (effects, Outcome::Deploying);
    }
    // Past every gate: the trigger, paths, an ignored author, and a failed wait for CI on
    // the head the writer saw (a wait still running stays: the image may not exist yet).
    let effects = vec![Effect::Deploy {
        by: actor,
        seen_at,
        past_failed_wait: row.observed == ObservedState::CiFailed,
    }];
    (effects, Outcome::Deploying)
}

#[cfg(test)]
mod tests;
