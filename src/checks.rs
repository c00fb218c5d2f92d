//! CI results on a PR's head commit, and whether a preview may run its image: a pure
//! decision from `[[repos]] wait_for` and the newest report of each named check.
//!
//! A name is a check run's (in GitHub Actions, the job's name), a commit status's context or
//! a workflow's name: GitHub reports each through its own event (`check_run`, `status`,
//! `workflow_run`) and its own listing, and previewd keeps, per head SHA and name, only the
//! newest report, so deliveries that arrive out of order (a `completed` before its
//! `in_progress`) converge, and a re-run (a newer report of the same name) replaces a failure.

use serde::{Deserialize, Serialize};

/// Where a report came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "TEXT", rename_all = "snake_case")]
pub enum Source {
    CheckRun,
    Status,
    Workflow,
}

/// What a report says of its check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "TEXT", rename_all = "snake_case")]
pub enum CheckState {
    /// Queued, in progress, or a status still `pending`.
    Pending,
    Succeeded,
    /// Anything but success once complete: failure, cancelled, timed out, skipped, an
    /// error status... (`conclusion` keeps GitHub's word).
    Failed,
}

/// One report of one named check on one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    pub source: Source,
    pub name: String,
    pub state: CheckState,
    /// GitHub's word: `success`, `failure`, `cancelled`, `timed_out`, `pending`, `error`...
    pub conclusion: String,
    /// Where a person sees it (the check's or the run's page, a status's target).
    pub url: Option<String>,
    /// GitHub's time of this report (Unix seconds): completion, start, or update.
    pub at: i64,
}

impl CheckReport {
    /// Whether this report replaces `old` of the same name: it is newer, or as new and
    /// complete where `old` is not (GitHub's clocks count whole seconds).
    pub fn supersedes(&self, old: &CheckReport) -> bool {
        self.at > old.at
            || (self.at == old.at
                && old.state == CheckState::Pending
                && self.state != CheckState::Pending)
    }
}

/// Maps GitHub's words to a state: a check run's or workflow run's `status` and
/// `conclusion`, or a commit status's `state` (passed as `status`, with no conclusion).
pub fn state_of(status: &str, conclusion: Option<&str>) -> CheckState {
    match (status, conclusion) {
        ("success", None) | ("completed", Some("success")) => CheckState::Succeeded,
        ("completed", Some(_)) | ("failure" | "error", None) => CheckState::Failed,
        _ => CheckState::Pending,
    }
}

/// Whether a preview may run its image yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing to wait for, or every named check succeeded on the head.
    Passed,
    /// These named checks have not succeeded yet (not reported, or still running).
    Waiting { pending: Vec<String> },
    /// A named check failed: the preview is `ci_failed` until a newer report succeeds.
    Failed {
        name: String,
        conclusion: String,
        url: Option<String>,
    },
}

/// The verdict for `wait_for` given the newest report of each name on the head commit.
/// A failure wins over anything still running: the preview says what broke at once.
pub fn verdict(wait_for: &[String], reports: &[CheckReport]) -> Wait {
    let newest = |name: &str| {
        reports
            .iter()
            .filter(|r| r.name == name)
            .reduce(|a, b| if b.supersedes(a) { b } else { a })
    };
    let mut pending = Vec::new();
    for name in wait_for {
        match newest(name) {
            Some(r) if r.state == CheckState::Succeeded => {}
            Some(r) if r.state == CheckState::Failed => {
                return Wait::Failed {
                    name: name.clone(),
                    conclusion: r.conclusion.clone(),
                    url: r.url.clone(),
                };
            }
            _ => pending.push(name.clone()),
        }
    }
    if pending.is_empty() {
        Wait::Passed
    } else {
        Wait::Waiting { pending }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(name: &str, state: CheckState, at: i64) -> CheckReport {
        CheckReport {
            source: Source::CheckRun,
            name: name.into(),
            state,
            conclusion: match state {
                CheckState::Pending => "in_progress",
                CheckState::Succeeded => "success",
                CheckState::Failed => "failure",
            }
            .into(),
            url: Some(format!("https://github.com/octo/app/runs/{at}")),
            at,
        }
    }

    fn wait_for(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn nothing_named_is_nothing_to_wait_for() {
        assert_eq!(verdict(&[], &[]), Wait::Passed);
    }

    #[test]
    fn a_named_check_not_reported_yet_is_waited_for() {
        let reports = [report("lint", CheckState::Succeeded, 5)];
        assert_eq!(
            verdict(&wait_for(&["build-image"]), &reports),
            Wait::Waiting {
                pending: vec!["build-image".into()]
            }
        );
    }

    #[test]
    fn every_named_check_succeeded_passes() {
        let reports = [
            report("build-image", CheckState::Succeeded, 5),
            report("migrations-lint", CheckState::Succeeded, 6),
        ];
        let names = wait_for(&["build-image", "migrations-lint"]);
        assert_eq!(verdict(&names, &reports), Wait::Passed);
    }

    #[test]
    fn a_completion_delivered_before_its_start_still_passes() {
        let reports = [
            report("build-image", CheckState::Succeeded, 20),
            report("build-image", CheckState::Pending, 10),
        ];
        assert_eq!(verdict(&wait_for(&["build-image"]), &reports), Wait::Passed);
    }

    #[test]
    fn a_rerun_that_succeeds_replaces_the_failure() {
        let failed = [report("build-image", CheckState::Failed, 10)];
        assert!(matches!(
            verdict(&wait_for(&["build-image"]), &failed),
            Wait::Failed { ref name, .. } if name == "build-image"
        ));
        let rerun = [
            report("build-image", CheckState::Failed, 10),
            report("build-image", CheckState::Pending, 30),
        ];
        assert!(matches!(
            verdict(&wait_for(&["build-image"]), &rerun),
            Wait::Waiting { .. }
        ));
        let passed = [
            report("build-image", CheckState::Failed, 10),
            report("build-image", CheckState::Succeeded, 40),
        ];
        assert_eq!(verdict(&wait_for(&["build-image"]), &passed), Wait::Passed);
    }

    #[test]
    fn a_failure_is_said_while_other_checks_still_run() {
        let reports = [report("test", CheckState::Failed, 10)];
        let got = verdict(&wait_for(&["build-image", "test"]), &reports);
        assert_eq!(
            got,
            Wait::Failed {
                name: "test".into(),
                conclusion: "failure".into(),
                url: Some("https://github.com/octo/app/runs/10".into()),
            }
        );
    }

    #[test]
    fn at_the_same_second_a_completion_beats_a_start() {
        let start = report("build-image", CheckState::Pending, 10);
        let done = report("build-image", CheckState::Succeeded, 10);
        assert!(done.supersedes(&start));
        assert!(!start.supersedes(&done));
    }

    #[test]
    fn github_words_map_to_states() {
        assert_eq!(
            state_of("completed", Some("success")),
            CheckState::Succeeded
        );
        for conclusion in [
            "failure",
            "cancelled",
            "timed_out",
            "skipped",
            "action_required",
        ] {
            assert_eq!(
                state_of("completed", Some(conclusion)),
                CheckState::Failed,
                "{conclusion}"
            );
        }
        assert_eq!(state_of("in_progress", None), CheckState::Pending);
        assert_eq!(state_of("queued", None), CheckState::Pending);
        // Commit statuses: `state` alone.
        assert_eq!(state_of("success", None), CheckState::Succeeded);
        assert_eq!(state_of("failure", None), CheckState::Failed);
        assert_eq!(state_of("error", None), CheckState::Failed);
        assert_eq!(state_of("pending", None), CheckState::Pending);
    }
}
