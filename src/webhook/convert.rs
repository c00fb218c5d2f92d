//! octocrab's payload types converted into previewd's own events (pull requests, comment
//! commands, installations); CI events have their own minimal types (`ci`).

use octocrab::models::webhook_events::payload::{
    InstallationRepositoriesWebhookEventAction, InstallationWebhookEventAction,
    IssueCommentWebhookEventAction, PullRequestWebhookEventAction,
};
use octocrab::models::webhook_events::{WebhookEvent, WebhookEventPayload};

use super::{CommandComment, Event, InstallationChange, PrAction, PullRequestEvent, labels_after};
use crate::preview::{MAX_LABELS, PreviewKey, RepoName};

pub(super) fn convert(event: WebhookEvent) -> Result<Event, String> {
    let installation_id = event.installation.as_ref().map(|i| i.id().0);
    let sender = event
        .sender
        .as_ref()
        .map(|s| s.login.clone())
        .unwrap_or_default();
    let repository = event.repository.as_ref();
    match event.specific {
        WebhookEventPayload::Ping(_) => Ok(Event::Ping),
        WebhookEventPayload::PullRequest(p) => {
            let pr = &p.pull_request;
            let action = match p.action {
                PullRequestWebhookEventAction::Opened => PrAction::Opened,
                PullRequestWebhookEventAction::Reopened => PrAction::Reopened,
                PullRequestWebhookEventAction::Synchronize => PrAction::Synchronize,
                PullRequestWebhookEventAction::ReadyForReview => PrAction::ReadyForReview,
                PullRequestWebhookEventAction::ConvertedToDraft => PrAction::ConvertedToDraft,
                PullRequestWebhookEventAction::Closed => PrAction::Closed {
                    merged: pr.merged.unwrap_or(false),
                },
                PullRequestWebhookEventAction::Labeled => PrAction::Labeled,
                PullRequestWebhookEventAction::Unlabeled => PrAction::Unlabeled,
                PullRequestWebhookEventAction::Edited => PrAction::Edited,
                other => return Err(format!("unexpected action {other:?}")),
            };
            let base_repo = pr
                .base
                .repo
                .as_ref()
                .ok_or("pull_request.base.repo is missing")?;
            let full_name = repository
                .and_then(|r| r.full_name.clone())
                .or_else(|| base_repo.full_name.clone())
                .ok_or("repository.full_name is missing")?;
            let head_repo_id = pr.head.repo.as_ref().map(|r| r.id.0);
            Ok(Event::PullRequest(PullRequestEvent {
                action,
                key: PreviewKey::new(
                    full_name.parse().map_err(|e| format!("{e}"))?,
                    pr_number(p.number)?,
                ),
                repo_id: base_repo.id.0,
                installation_id,
                title: pr.title.clone().unwrap_or_default(),
                author: pr
                    .user
                    .as_ref()
                    .map(|u| u.login.clone())
                    .unwrap_or_default(),
                head_sha: pr
                    .head
                    .sha
                    .parse()
                    .map_err(|e| format!("pull_request.head.sha: {e}"))?,
                head_ref: pr.head.ref_field.clone(),
                base_ref: pr.base.ref_field.clone(),
                // Only a PR into the default branch names its head: a PR into an old release
                // branch must not give the template (which every later preview clones) its base.
                base_sha: base_repo
                    .default_branch
                    .as_deref()
                    .filter(|branch| *branch == pr.base.ref_field)
                    .and_then(|_| pr.base.sha.parse().ok()),
                fork: head_repo_id != Some(base_repo.id.0),
                draft: pr.draft.unwrap_or(false),
                labels: labels_after(
                    pr.labels
                        .iter()
                        .flatten()
                        .take(MAX_LABELS)
                        .map(|l| l.name.clone())
                        .collect(),
                    action,
                    p.label.as_ref().map(|l| l.name.as_str()),
                ),
                label: p.label.as_ref().map(|l| l.name.clone()),
                open: !matches!(pr.state, Some(octocrab::models::IssueState::Closed)),
                updated_at: pr.updated_at.map(|t| t.timestamp()),
                sender,
            }))
        }
        WebhookEventPayload::IssueComment(c) => {
            if c.action != IssueCommentWebhookEventAction::Created {
                return Ok(Event::Ignored("only new comments carry commands".into()));
            }
            if c.issue.pull_request.is_none() {
                return Ok(Event::Ignored(
                    "comment on an issue, not a pull request".into(),
                ));
            }
            // Bots (our App among them) and our own words (a token acts as a plain user).
            let ours = c
                .comment
                .body
                .as_deref()
                .is_some_and(|b| b.contains("<!-- previewd:"));
            if c.comment.user.r#type == "Bot" || ours {
                return Ok(Event::Ignored(format!(
                    "comment by bot {}",
                    c.comment.user.login
                )));
            }
            let Some(line) = crate::command::find_line(c.comment.body.as_deref().unwrap_or(""))
            else {
                return Ok(Event::Ignored("comment holds no /preview command".into()));
            };
            let full_name = repository
                .and_then(|r| r.full_name.clone())
                .ok_or("repository.full_name is missing")?;
            Ok(Event::Command(CommandComment {
                key: PreviewKey::new(
                    full_name.parse().map_err(|e| format!("{e}"))?,
                    pr_number(c.issue.number)?,
                ),
                installation_id,
                comment_id: c.comment.id.0,
                commented_at: Some(c.comment.created_at.timestamp()),
                actor: c.comment.user.login.clone(),
                association: c
                    .comment
                    .author_association
                    .as_ref()
                    .and_then(|a| serde_json::to_value(a).ok())
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "NONE".into()),
                line,
            }))
        }
        WebhookEventPayload::Installation(i) => {
            let installation = event
                .installation
                .as_ref()
                .ok_or("installation is missing")?;
            let id = installation.id().0;
            let account = match installation {
                octocrab::models::webhook_events::EventInstallation::Full(full) => {
                    full.account.login.clone()
                }
                _ => return Err("installation.account is missing".into()),
            };
            Ok(Event::Installation(match i.action {
                InstallationWebhookEventAction::Deleted
                | InstallationWebhookEventAction::Suspend => InstallationChange::Gone { id },
                _ => InstallationChange::Present {
                    id,
                    account,
                    repos: repo_names(
                        i.repositories
                            .iter()
                            .flatten()
                            .map(|r| r.full_name.as_str()),
                    )?,
                },
            }))
        }
        WebhookEventPayload::InstallationRepositories(i) => {
            let installation = event
                .installation
                .as_ref()
                .ok_or("installation is missing")?;
            let id = installation.id().0;
            Ok(Event::Installation(match i.action {
                InstallationRepositoriesWebhookEventAction::Added => {
                    InstallationChange::ReposAdded {
                        id,
                        account: match installation {
                            octocrab::models::webhook_events::EventInstallation::Full(full) => {
                                full.account.login.clone()
                            }
                            _ => sender,
                        },
                        repos: repo_names(
                            i.repositories_added.iter().map(|r| r.full_name.as_str()),
                        )?,
                    }
                }
                _ => InstallationChange::ReposRemoved {
                    id,
                    repos: repo_names(i.repositories_removed.iter().map(|r| r.full_name.as_str()))?,
                },
            }))
        }
        _ => Ok(Event::Ignored("event previewd does not act on".into())),
    }
}

fn pr_number(number: u64) -> Result<u32, String> {
    u32::try_from(number)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{number} is not a pull request number"))
}

fn repo_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<RepoName>, String> {
    names
        .map(|n| n.parse().map_err(|e| format!("{e}")))
        .collect()
}
