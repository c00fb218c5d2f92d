//! What to do next for one preview: a pure decision from what previewd wants and what the
//! sink reports. The reconciler carries it out; nothing here touches the world.

use crate::preview::Desired;

/// What the sink reports for a preview's helper Application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Missing,
    /// Present; `hash` identifies what was applied (None when the sink cannot tell);
    /// `ready` is Argo CD's verdict on it (None where nobody reports one: a directory).
    Present {
        hash: Option<String>,
        ready: Option<bool>,
    },
    /// Deletion requested, finalizers still running (Argo CD's cascade).
    Deleting,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write the desired Application (create or update).
    Apply,
    /// Ask for deletion; confirmation comes on a later pass.
    Delete,
    /// Deletion is confirmed: delete the preview's row (children cascade), keep history.
    Forget,
    /// Nothing to write now; look again later (deleting, or waiting for a gate).
    Wait,
    /// Converged.
    Nothing,
}

/// `desired_hash`: the Application previewd would apply now (None when nothing should run).
pub fn plan(desired: Desired, desired_hash: Option<&str>, observed: &Observed) -> Action {
    match (desired, observed) {
        (Desired::Absent, Observed::Missing) => Action::Forget,
        (Desired::Absent, Observed::Deleting) => Action::Wait,
        (Desired::Absent, Observed::Present { .. }) => Action::Delete,
        // A preview that may not be updated (a fork's unapproved push, a draft): what runs
        // stays as it was; teardown comes only from a close, a command or an expiry.
        (Desired::AwaitingApproval | Desired::Draft, _) => Action::Nothing,
        // Reopened while its teardown still runs: let the deletion finish, then recreate.
        (Desired::Deployed, Observed::Deleting) => Action::Wait,
        (Desired::Deployed, Observed::Missing) => Action::Apply,
        (Desired::Deployed, Observed::Present { hash, .. }) => {
            if hash.is_some() && hash.as_deref() == desired_hash {
                Action::Nothing
            } else {
                Action::Apply
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(hash: &str) -> Observed {
        Observed::Present {
            hash: Some(hash.into()),
            ready: None,
        }
    }

    #[test]
    fn a_new_preview_is_applied() {
        assert_eq!(
            plan(Desired::Deployed, Some("a"), &Observed::Missing),
            Action::Apply
        );
    }

    #[test]
    fn unchanged_input_makes_no_write() {
        assert_eq!(
            plan(Desired::Deployed, Some("a"), &present("a")),
            Action::Nothing
        );
    }

    #[test]
    fn a_new_push_is_applied() {
        assert_eq!(
            plan(Desired::Deployed, Some("b"), &present("a")),
            Action::Apply
        );
        assert_eq!(
            plan(
                Desired::Deployed,
                Some("b"),
                &Observed::Present {
                    hash: None,
                    ready: None
                }
            ),
            Action::Apply
        );
    }

    #[test]
    fn a_closed_pr_is_deleted_then_forgotten_once_gone() {
        assert_eq!(plan(Desired::Absent, None, &present("a")), Action::Delete);
        assert_eq!(
            plan(Desired::Absent, None, &Observed::Deleting),
            Action::Wait
        );
        assert_eq!(
            plan(Desired::Absent, None, &Observed::Missing),
            Action::Forget
        );
    }

    #[test]
    fn reopened_during_teardown_waits_then_deploys_again() {
        assert_eq!(
            plan(Desired::Deployed, Some("a"), &Observed::Deleting),
            Action::Wait
        );
        assert_eq!(
            plan(Desired::Deployed, Some("a"), &Observed::Missing),
            Action::Apply
        );
    }

    #[test]
    fn unapproved_pushes_and_drafts_change_nothing_on_the_cluster() {
        for desired in [Desired::AwaitingApproval, Desired::Draft] {
            assert_eq!(plan(desired, None, &present("a")), Action::Nothing);
            assert_eq!(plan(desired, None, &Observed::Missing), Action::Nothing);
        }
    }
}
