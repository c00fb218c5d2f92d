//! What to do next for one preview: a pure decision from what previewd wants and what the
//! sink reports. The reconciler carries it out; nothing here touches the world.

use crate::checks::Wait;
use crate::preview::{Desired, HistoryKind, ObservedState};
use crate::render::sleep::same_but_sleep;

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

/// Argo CD's verdict on the rendering previewd applied (see `sink::argocd::verdict`).
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
        // No preview wanted yet (a gate): one that runs (a gate changed in the file) stays.
        (Desired::AwaitingApproval | Desired::Draft | Desired::OptedOut, _) => Action::Nothing,
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

/// One preview's whole next step: what to do with each Application, where the preview then
/// stands, and whether to look again soon. The reconciler carries it out as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub helper: Act,
    /// The app's own Application, for a repository that configures one.
    pub app: Option<Act>,
    /// The state the preview is in once the actions are done (unless one is a conflict,
    /// which is reported instead), and the failure that put it there.
    pub state: ObservedState,
    pub message: Option<String>,
    /// Argo CD may still be syncing or retrying: look again soon rather than at the resync.
    pub requeue: bool,
}

/// What a look found that changes a preview's recorded state (`db::record_state` and
/// `db::record_applied` write it, the latter on the commit of an apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observation<'a> {
    pub state: ObservedState,
    pub message: Option<&'a str>,
    /// A history row of this kind, `message` its reason (once per distinct failure).
    pub history: Option<HistoryKind>,
    /// Ready at this seed generation: every applied ledger item is confirmed present, and
    /// the clone (if any) made for this seed generation is done.
    pub ready_at_seed: Option<i64>,
}

/// Where a preview's row says it stood when it was last looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded<'a> {
    pub state: ObservedState,
    pub error: Option<&'a str>,
    /// The seed generation the preview runs (`/preview reseed` moves it on).
    pub seed_generation: i64,
}

impl Step {
    /// What this step says about the preview that its row does not: `None` when the state
    /// and its failure are as recorded. A failure goes to the history once per distinct
    /// message, not once per look; a preview ready now is ready at the row's seed generation.
    pub fn observation(&self, recorded: Recorded<'_>) -> Option<Observation<'_>> {
        let message = self.message.as_deref();
        if recorded.state == self.state && recorded.error == message {
            return None;
        }
        Some(Observation {
            state: self.state,
            message,
            history: message.map(|_| match self.state {
                ObservedState::CiFailed => HistoryKind::CiFailed,
                _ => HistoryKind::Failed,
            }),
            ready_at_seed: (self.state == ObservedState::Ready).then_some(recorded.seed_generation),
        })
    }

    /// The step of a preview previewd put to sleep: settled (or, where nobody reports,
    /// written) is `Sleeping`, not `Ready`.
    pub fn asleep(mut self, asleep: bool) -> Self {
        if asleep && matches!(self.state, ObservedState::Ready | ObservedState::Applied) {
            self.state = ObservedState::Sleeping;
        }
        self
    }

    /// Whether carrying this step out writes an Application (and so needs its manifests).
    pub fn writes(&self) -> bool {
        self.helper.action == Action::Apply
            || self
                .app
                .as_ref()
                .is_some_and(|app| app.action == Action::Apply)
    }

    /// Nothing to write, nothing to ask of Argo CD, nothing to look at soon, and the preview
    /// already recorded as `state` with `message` (what it was last seen as).
    pub fn changes_nothing(&self, state: ObservedState, message: Option<&str>) -> bool {
        let idle = |act: &Act| act.action == Action::Nothing && !act.sync;
        idle(&self.helper)
            && self.app.as_ref().is_none_or(idle)
            && !self.requeue
            && self.state == state
            && self.message.as_deref() == message
    }
}

/// What to do with one Application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Act {
    pub action: Action,
    /// Ask Argo CD to sync its current rendering (`Health::NeedsSync`).
    pub sync: bool,
}

/// The step of a preview that is not being torn down. `helper_hash`: the helper Application
/// previewd would apply now (None when nothing may run; while `wait` holds the image back, a
/// rendering without what runs it); `app`: the app's rendering hash and what the sink reports
/// of it; `reports_health`: whether the sink reports Argo CD's verdicts (a directory does
/// not); `wait`: whether the PR's image may run (`checks::verdict`).
pub fn step(
    desired: Desired,
    helper_hash: Option<&str>,
    helper: &Observed,
    app: Option<(&str, &Observed)>,
    reports_health: bool,
    wait: &Wait,
) -> Step {
    let action = plan(desired, helper_hash, helper);
    // What the helper Application is once this step's action is done.
    let (helper_now, sync) = match (&action, helper_hash) {
        (Action::Apply, Some(hash)) => {
            // A sleep or a wake runs no hook (`render::sleep`): what the helpers were ready
            // for, the migration at this head, still holds, and the app need not wait.
            let flip = matches!(helper, Observed::Present { hash: Some(h), health: Some(Health::Ready) }
                if same_but_sleep(h, hash));
            let health = if flip {
                Health::Ready
            } else {
                Health::Progressing
            };
            (
                Observed::Present {
                    hash: Some(hash.to_owned()),
                    health: reports_health.then_some(health),
                },
                false,
            )
        }
        _ => synced(helper),
    };
    let helper_act = Act { action, sync };
    let mut app_health = None;
    let app_act = app.map(|(app_hash, app)| {
        // The app runs the PR's image: not before CI built it. What runs stays as it was.
        if desired == Desired::Deployed && *wait != Wait::Passed {
            return Act {
                action: Action::Wait,
                sync: false,
            };
        }
        let action = plan_app(desired, helper_hash, &helper_now, Some(app_hash), app);
        let (health, sync) = match action {
            Action::Nothing => {
                let (app, sync) = synced(app);
                (app.health().cloned(), sync)
            }
            _ => (Some(Health::Progressing), false),
        };
        app_health = health;
        Act { action, sync }
    });
    let (state, message) = match desired {
        Desired::Deployed => state(helper_now.health(), app_health.as_ref()),
        Desired::AwaitingApproval => (ObservedState::AwaitingApproval, None),
        Desired::Draft => (ObservedState::Draft, None),
        Desired::OptedOut => (ObservedState::OptedOut, None),
        // A teardown is `plan_teardown`'s; here nothing more is written.
        Desired::Absent => (ObservedState::TearingDown, None),
    };
    // Argo CD still works on the helpers (or failed them): look again soon, whatever CI says.
    let requeue = matches!(state, ObservedState::Syncing | ObservedState::Failed);
    let message = message.map(str::to_owned);
    // A failing helper says so first; otherwise CI's verdict is where the preview stands.
    let (state, message) = match wait {
        _ if desired != Desired::Deployed || state == ObservedState::Failed => (state, message),
        Wait::Passed => (state, message),
        Wait::Waiting { .. } => (ObservedState::WaitingForCi, None),
        Wait::Failed {
            name,
            conclusion,
            url,
        } => (
            ObservedState::CiFailed,
            Some(match url {
                Some(url) => format!("check {name} ended {conclusion}: {url}"),
                None => format!("check {name} ended {conclusion}"),
            }),
        ),
    };
    Step {
        helper: helper_act,
        app: app_act,
        requeue,
        message,
        state,
    }
}

/// `observed` once a sync it needs is asked for (then in progress), and whether to ask.
fn synced(observed: &Observed) -> (Observed, bool) {
    match observed {
        Observed::Present {
            hash,
            health: Some(Health::NeedsSync),
        } => (
            Observed::Present {
                hash: hash.clone(),
                health: Some(Health::Progressing),
            },
            true,
        ),
        other => (other.clone(), false),
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
mod tests;
