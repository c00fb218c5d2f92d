//! CI deliveries (`check_run`, `check_suite`, `status`, `workflow_run`) as [`CheckEvent`]s.
//!
//! These arrive for every CI job, several per push, so only the few fields previewd keeps
//! are read, borrowed from the body where they hold no escapes; octocrab's full models would
//! build every nested object (and may refuse these payloads: they were never run through
//! them). Routing by action happens before, in [`super::parse`].

use std::borrow::Cow;

use serde::Deserialize;

use super::CheckEvent;
use crate::checks::{CheckReport, Source, state_of};

/// Longest check name, status context, workflow name or GitHub word kept. These are compared
/// with `[[repos]] wait_for` by equality and shown on the dashboard. A longer one is
/// malformed, never cut: two names sharing the first 200 bytes would become one check, and
/// one job's success could stand for another's failure.
const MAX_NAME: usize = 200;
/// Longest link kept. A link only helps a person find the run, so a longer one is dropped
/// (the report stands, without a link) rather than the report rejected, and never cut,
/// which would point somewhere else.
const MAX_URL: usize = 2_000;

#[derive(Deserialize)]
struct Repository<'a> {
    #[serde(borrow)]
    full_name: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Installation {
    id: u64,
}

#[derive(Deserialize)]
struct CheckRunPayload<'a> {
    #[serde(borrow)]
    check_run: CheckRun<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    installation: Option<Installation>,
}

#[derive(Deserialize)]
struct CheckRun<'a> {
    #[serde(borrow)]
    head_sha: Cow<'a, str>,
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    conclusion: Option<Cow<'a, str>>,
    #[serde(borrow)]
    html_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    started_at: Option<Cow<'a, str>>,
    #[serde(borrow)]
    completed_at: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct CheckSuitePayload<'a> {
    #[serde(borrow)]
    check_suite: CheckSuite<'a>,
    #[serde(borrow)]
    repository: Repository<'a>,
    installation: Option<Installation>,
}

#[derive(Deserialize)]
struct CheckSuite<'a> {
    #[serde(borrow)]
    head_sha: Cow<'a, str>,
}

#[derive(Deserialize)]
struct StatusPayload<'a> {
    #[serde(borrow)]
    sha: Cow<'a, str>,
    #[serde(borrow)]
    context: Cow<'a, str>,
    #[serde(borrow)]
    state: Cow<'a, str>,
    #[serde(borrow)]
    target_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    updated_at: Cow<'a, str>,
    #[serde(borrow)]
    repository: Repository<'a>,
    installation: Option<Installation>,
}

#[derive(Deserialize)]
struct WorkflowRunPayload<'a> {
    #[serde(borrow)]
    workflow_run: WorkflowRun<'a>,
    #[serde(borrow)]
    workflow: Option<Workflow<'a>>,
    #[serde(borrow)]
    repository: Repository<'a>,
    installation: Option<Installation>,
}

#[derive(Deserialize)]
struct WorkflowRun<'a> {
    #[serde(borrow)]
    head_sha: Cow<'a, str>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    conclusion: Option<Cow<'a, str>>,
    #[serde(borrow)]
    html_url: Option<Cow<'a, str>>,
    #[serde(borrow)]
    updated_at: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Workflow<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
}

/// Converts a CI delivery whose action [`super::parse`] routed here; the error says what is
/// missing or wrong.
pub(super) fn convert(event: &str, body: &[u8]) -> Result<CheckEvent, String> {
    let shape = |e: serde_json::Error| e.to_string();
    match event {
        "check_run" => {
            let p: CheckRunPayload<'_> = serde_json::from_slice(body).map_err(shape)?;
            let run = p.check_run;
            let (at_field, at) = match (run.completed_at, run.started_at) {
                (Some(done), _) => ("check_run.completed_at", done),
                (None, Some(started)) => ("check_run.started_at", started),
                (None, None) => {
                    return Err("check_run has neither completed_at nor started_at".into());
                }
            };
            let report = CheckReport {
                source: Source::CheckRun,
                name: name("check_run.name", &run.name)?,
                state: state_of(&run.status, run.conclusion.as_deref()),
                conclusion: word(
                    "check_run.conclusion",
                    run.conclusion.as_deref().unwrap_or(run.status.as_ref()),
                )?,
                url: url(run.html_url),
                at: unix_seconds(at_field, &at)?,
            };
            check_event(
                p.repository,
                p.installation,
                "check_run.head_sha",
                &run.head_sha,
                Some(report),
            )
        }
        "check_suite" => {
            let p: CheckSuitePayload<'_> = serde_json::from_slice(body).map_err(shape)?;
            check_event(
                p.repository,
                p.installation,
                "check_suite.head_sha",
                &p.check_suite.head_sha,
                None,
            )
        }
        "status" => {
            let p: StatusPayload<'_> = serde_json::from_slice(body).map_err(shape)?;
            let report = CheckReport {
                source: Source::Status,
                name: name("context", &p.context)?,
                state: state_of(&p.state, None),
                conclusion: word("state", &p.state)?,
                url: url(p.target_url),
                at: unix_seconds("updated_at", &p.updated_at)?,
            };
            check_event(p.repository, p.installation, "sha", &p.sha, Some(report))
        }
        "workflow_run" => {
            let p: WorkflowRunPayload<'_> = serde_json::from_slice(body).map_err(shape)?;
            let run = p.workflow_run;
            // `wait_for` names the workflow (`name:` in its file). The run's `name` usually
            // repeats it but is empty in some payloads (the recorded one): only a fallback.
            let workflow_name = p
                .workflow
                .and_then(|w| w.name)
                .filter(|n| !n.is_empty())
                .or(run.name)
                .unwrap_or_default();
            let report = CheckReport {
                source: Source::Workflow,
                name: name("workflow.name (and workflow_run.name)", &workflow_name)?,
                state: state_of(&run.status, run.conclusion.as_deref()),
                conclusion: word(
                    "workflow_run.conclusion",
                    run.conclusion.as_deref().unwrap_or(run.status.as_ref()),
                )?,
                url: url(run.html_url),
                at: unix_seconds("workflow_run.updated_at", &run.updated_at)?,
            };
            check_event(
                p.repository,
                p.installation,
                "workflow_run.head_sha",
                &run.head_sha,
                Some(report),
            )
        }
        other => Err(format!("{other} is not a CI event")),
    }
}

fn check_event(
    repository: Repository<'_>,
    installation: Option<Installation>,
    sha_field: &str,
    sha: &str,
    report: Option<CheckReport>,
) -> Result<CheckEvent, String> {
    Ok(CheckEvent {
        repo: repository
            .full_name
            .parse()
            .map_err(|e| format!("repository.full_name: {e}"))?,
        installation_id: installation.map(|i| i.id),
        sha: sha.parse().map_err(|e| format!("{sha_field}: {e}"))?,
        report,
    })
}

/// A name `wait_for` can match: not empty, at most [`MAX_NAME`] bytes.
fn name(field: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err(format!("{field} is empty"));
    }
    word(field, value)
}

/// One of GitHub's words (a status, a conclusion), bounded like a name.
fn word(field: &str, value: &str) -> Result<String, String> {
    if value.len() > MAX_NAME {
        return Err(format!(
            "{field} is {} bytes; previewd keeps at most {MAX_NAME}",
            value.len()
        ));
    }
    Ok(value.to_owned())
}

fn url(value: Option<Cow<'_, str>>) -> Option<String> {
    value
        .filter(|u| !u.is_empty() && u.len() <= MAX_URL)
        .map(Cow::into_owned)
}

/// An RFC 3339 time (`2019-05-15T15:21:12Z`, `…+00:00`, `….000Z`) as Unix seconds.
fn unix_seconds(field: &str, text: &str) -> Result<i64, String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(time::OffsetDateTime::unix_timestamp)
        .map_err(|e| format!("{field} {text:?} is not an RFC 3339 time: {e}"))
}

#[cfg(test)]
mod tests;
