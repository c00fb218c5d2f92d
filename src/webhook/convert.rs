//! octocrab's payload types converted into previewd's own events: pings and installations,
//! rare enough that octocrab's full models cost nothing that matters; the frequent events
//! have minimal types of their own (`pull`, `ci`, `push`).

use octocrab::models::webhook_events::payload::{
    InstallationRepositoriesWebhookEventAction, InstallationWebhookEventAction,
};
use octocrab::models::webhook_events::{WebhookEvent, WebhookEventPayload};

use super::{Event, InstallationChange};
use crate::preview::RepoName;

pub(super) fn convert(event: WebhookEvent) -> Result<Event, String> {
    let sender = event
        .sender
        .as_ref()
        .map(|s| s.login.clone())
        .unwrap_or_default();
    match event.specific {
        WebhookEventPayload::Ping(_) => Ok(Event::Ping),
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

fn repo_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<Vec<RepoName>, String> {
    names
        .map(|n| n.parse().map_err(|e| format!("{e}")))
        .collect()
}
