//! What to do next for one preview: a pure decision from what previewd wants and what the
//! sink reports. The reconciler carries it out; nothing here touches the world.

use crate::preview::{Desired, ObservedState};

/// What the sink reports for a preview's helper Application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    Missing,
    /// Present; `hash` identifies what was applied (None when the sink cannot tell);
    /// `health` is Argo CD's verdict on it (None where nobody reports one: a directory).
    Present {
        hash: Option<String>,
        health: Option<Health>,
    },
    /// Deletion requested, finalizers still running (Argo CD's cascade).
    Deleting,
    /// An object of the expected name that carries another repository, PR or instance
    /// (`sink::Owner`): a conflict to report, never to write over or delete.
    Foreign {
        owner: String,
    },
}

/// Argo CD's verdict on the rendering previewd applied (see `argocd::verdict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Not (yet) synced and healthy at what previewd applied: a sync or a rollout runs, or
    /// Argo CD has not looked at the new rendering.
    Progressing,
    /// Synced, healthy, and the sync previewd asked for this rendering succeeded.
    Ready,
    /// Argo CD has nothing running and no sync of this rendering to show: previewd asks for
    /// one (`Sink::request_sync`). Argo CD syncs on its own only what is OutOfSync, so a
    /// rendering whose change reaches only hooks, or a redeploy, would otherwise never run.
    NeedsSync,
    /// The operation on this source failed (a hook, a resource, the project), or what it
    /// synced degraded: the message says what.
    Failed(String),
}

impl Observed {
    /// Argo CD's verdict; `None` where nobody reports one. Absent or deleting is progress.
    pub fn health(&self) -> Option<&Health> {
        match self {
            Self::Present { health, .. } => health.as_ref(),
            _ => Some(&Health::Progressing),
        }
    }
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
    /// The name is taken by another preview's (or anyone else's) Application: report it,
    /// write nothing.
    Conflict,
}

/// `desired_hash`: the Application previewd would apply now (None when nothing should run).
pub fn plan(desired: Desired, desired_hash: Option<&str>, observed: &Observed) -> Action {
    match (desired, observed) {
        (_, Observed::Foreign { .. }) => Action::Conflict,
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

/// The app's own Application waits behind a health gate: it is applied only while the helper
/// Application runs the current rendering and Argo CD reports it ready, its hooks (the
/// migration for this head) succeeded included. (A directory sink has nobody reporting;
/// there the app-of-apps orders the two by sync wave.)
pub fn plan_app(
    desired: Desired,
    helper_hash: Option<&str>,
    helper: &Observed,
    app_hash: Option<&str>,
    app: &Observed,
) -> Action {
    let gate_open = matches!(helper, Observed::Present { hash: Some(h), health: None | Some(Health::Ready) }
        if Some(h.as_str()) == helper_hash);
    match desired {
        Desired::Deployed if !gate_open => Action::Wait,
        _ => plan(desired, app_hash, app),
    }
}

/// The state a deployed preview is in, and the failure that put it there, from Argo CD's
/// verdicts on the helper Application and (if any) the app's own (`None`: nobody reports).
pub fn state<'a>(
    helper: Option<&'a Health>,
    app: Option<&'a Health>,
) -> (ObservedState, Option<&'a str>) {
    match (helper, app) {
        (Some(Health::Failed(message)), _) | (_, Some(Health::Failed(message))) => {
            (ObservedState::Failed, Some(message.as_str()))
        }
        (Some(Health::Progressing | Health::NeedsSync), _)
        | (_, Some(Health::Progressing | Health::NeedsSync)) => (ObservedState::Syncing, None),
        (Some(Health::Ready), _) => (ObservedState::Ready, None),
        (None, _) => (ObservedState::Applied, None),
    }
}

/// Which Application a teardown acts on next: the app first, the helpers once it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Teardown {
    DeleteApp,
    DeleteHelper,
    /// A deletion is running; look again later.
    Wait,
    /// Both are gone: confirm the rest of the ledger, then forget the preview.
    Confirm,
}

/// An Application of the expected name that is another's (`Observed::Foreign`) is, for this
/// preview, gone: never deleted.
pub fn plan_teardown(app: &Observed, helper: &Observed) -> Teardown {
    use Observed::{Deleting, Foreign, Missing, Present};
    match (app, helper) {
        (Present { .. }, _) => Teardown::DeleteApp,
        (Deleting, _) | (Missing | Foreign { .. }, Deleting) => Teardown::Wait,
        (Missing | Foreign { .. }, Present { .. }) => Teardown::DeleteHelper,
        (Missing | Foreign { .. }, Missing | Foreign { .. }) => Teardown::Confirm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(hash: &str, ready: Option<bool>) -> Observed {
        Observed::Present {
            hash: Some(hash.into()),
            health: ready.map(|r| {
                if r {
                    Health::Ready
                } else {
                    Health::Progressing
                }
            }),
        }
    }

    #[test]
    fn the_app_waits_until_the_helpers_are_ready_at_the_current_rendering() {
        let app = Observed::Missing;
        let plan =
            |helper: &Observed| plan_app(Desired::Deployed, Some("h2"), helper, Some("a"), &app);
        assert_eq!(plan(&Observed::Missing), Action::Wait);
        assert_eq!(plan(&ready("h2", Some(false))), Action::Wait);
        assert_eq!(
            plan(&ready("h1", Some(true))),
            Action::Wait,
            "status of the previous push"
        );
        assert_eq!(plan(&ready("h2", Some(true))), Action::Apply);
        assert_eq!(
            plan(&ready("h2", None)),
            Action::Apply,
            "directory: no one reports health"
        );
    }

    #[test]
    fn a_failed_migration_keeps_the_app_where_it_was() {
        let failed = Observed::Present {
            hash: Some("h2".into()),
            health: Some(Health::Failed("hook Job x-migrate failed".into())),
        };
        assert_eq!(
            plan_app(
                Desired::Deployed,
                Some("h2"),
                &failed,
                Some("a2"),
                &ready("a1", Some(true))
            ),
            Action::Wait
        );
    }

    #[test]
    fn a_running_app_is_left_alone_while_the_helpers_resync() {
        assert_eq!(
            plan_app(
                Desired::Deployed,
                Some("h2"),
                &ready("h2", Some(false)),
                Some("a2"),
                &ready("a1", Some(true))
            ),
            Action::Wait
        );
    }

    #[test]
    fn teardown_removes_the_app_first_then_the_helpers() {
        let present = ready("h", Some(true));
        assert_eq!(plan_teardown(&present, &present), Teardown::DeleteApp);
        assert_eq!(plan_teardown(&Observed::Deleting, &present), Teardown::Wait);
        assert_eq!(
            plan_teardown(&Observed::Missing, &present),
            Teardown::DeleteHelper
        );
        assert_eq!(
            plan_teardown(&Observed::Missing, &Observed::Deleting),
            Teardown::Wait
        );
        assert_eq!(
            plan_teardown(&Observed::Missing, &Observed::Missing),
            Teardown::Confirm
        );
    }

    #[test]
    fn another_previews_application_of_the_same_name_is_a_conflict_never_written_or_deleted() {
        let foreign = Observed::Foreign {
            owner: "repo \"acme.other\"".into(),
        };
        assert_eq!(
            plan(Desired::Deployed, Some("h"), &foreign),
            Action::Conflict
        );
        assert_eq!(plan(Desired::Absent, None, &foreign), Action::Conflict);
        assert_eq!(plan_teardown(&foreign, &foreign), Teardown::Confirm);
        assert_eq!(
            plan_teardown(&foreign, &present("h")),
            Teardown::DeleteHelper,
            "only ours is deleted"
        );
    }

    fn present(hash: &str) -> Observed {
        Observed::Present {
            hash: Some(hash.into()),
            health: None,
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
                    health: None
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
