//! What to do next with one repository's template database (#16): a pure decision from the
//! configuration, the recorded generations and the previews that use them. The reconciler
//! carries it out (`reconcile::templates`); nothing here touches the world.

use crate::config::TemplatePolicy;
pub use crate::preview::GenState;

/// One recorded generation, as deciding needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gen {
    pub id: i64,
    pub generation: i64,
    pub base_sha: String,
    pub state: GenState,
    pub created_at: i64,
    /// Previews whose clone of it is decided but not seen done.
    pub clones_pending: i64,
}

/// What is known of the repository's template besides its generations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The newest default-branch head seen.
    pub base_sha: String,
    /// 0: nothing asked; 1: a push moved the base; 2: a writer asked.
    pub refresh: i64,
    /// Every generation is to go, and why.
    pub destroy: Option<String>,
    pub last_used_at: i64,
}

/// The whole decision for one repository.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Start this generation, at this base SHA.
    pub build: Option<(i64, String)>,
    /// Delete these generations (ids): superseded, failed and superseded, or destroyed.
    pub retire: Vec<i64>,
    /// Mark the template destroyed, for this reason (idle, or the repository left).
    pub destroy: Option<&'static str>,
    /// These generations (ids) have been building past `BUILD_DEADLINE`: failed.
    pub time_out: Vec<i64>,
}

/// A generation still building after this long has failed: Argo CD's sync has no deadline
/// of its own (a Job waiting on a Secret that never unseals waits for ever), and a building
/// generation holds back the next one. Three of the chart's 30-minute Job deadlines.
pub const BUILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3 * 3600);

/// The generation previews clone now: the newest ready one.
pub fn current(gens: &[Gen]) -> Option<&Gen> {
    gens.iter()
        .filter(|g| g.state == GenState::Ready)
        .max_by_key(|g| g.generation)
}

/// `policy`: the repository's `database_template` (None: it is off, or the repository left
/// `[[repos]]`); `wanted`: None until a preview or a push named a base; `live`: the
/// repository's previews that are not gone.
pub fn plan(
    policy: Option<TemplatePolicy>,
    wanted: Option<&Wanted>,
    gens: &[Gen],
    live: i64,
    now: i64,
) -> Plan {
    let mut plan = Plan::default();
    let destroyed = wanted.and_then(|w| w.destroy.as_deref()).is_some();
    let Some(policy) = policy.filter(|_| !destroyed) else {
        if !destroyed && (wanted.is_some() || !gens.is_empty()) {
            plan.destroy = Some("unlisted");
        }
        // Every generation goes, once no preview still waits for its clone.
        plan.retire = retirable(gens, |g| g.clones_pending == 0 || destroyed);
        return plan;
    };
    let Some(wanted) = wanted else {
        return plan;
    };
    let idle_for = now.saturating_sub(wanted.last_used_at);
    if live == 0 && idle_for >= i64::try_from(policy.idle.as_secs()).unwrap_or(i64::MAX) {
        plan.destroy = Some("idle");
        plan.retire = retirable(gens, |_| true);
        return plan;
    }
    let newest = gens.iter().max_by_key(|g| g.generation);
    let deadline = i64::try_from(BUILD_DEADLINE.as_secs()).unwrap_or(i64::MAX);
    plan.time_out = gens
        .iter()
        .filter(|g| g.state == GenState::Building && now.saturating_sub(g.created_at) >= deadline)
        .map(|g| g.id)
        .collect();
    // A writer's refresh starts over whatever is building; otherwise one build at a time.
    let building = wanted.refresh != 2
        && gens
            .iter()
            .any(|g| g.state == GenState::Building && !plan.time_out.contains(&g.id));
    let refresh_due = |newest: &Gen| {
        let age = now.saturating_sub(newest.created_at);
        wanted.refresh == 2
            || (wanted.refresh == 1
                && newest.base_sha != wanted.base_sha
                && age >= i64::try_from(policy.refresh.as_secs()).unwrap_or(i64::MAX))
    };
    if !building {
        match newest {
            None => plan.build = Some((1, wanted.base_sha.clone())),
            Some(newest) if refresh_due(newest) => {
                plan.build = Some((newest.generation + 1, wanted.base_sha.clone()));
            }
            Some(_) => {}
        }
    }
    // Older than the current generation (ready or failed): no new clone comes from it, and
    // once its pending clones are done, nothing needs it. A failed generation newer than the
    // current one stays (it says why the template did not move) until a newer one exists.
    let current = current(gens).map_or(0, |g| g.generation);
    let newest = newest.map_or(0, |g| g.generation);
    plan.retire = retirable(gens, |g| {
        let superseded = match g.state {
            GenState::Ready => g.generation < current,
            GenState::Failed => g.generation < newest,
            GenState::Building if plan.time_out.contains(&g.id) => g.generation < newest,
            // A new build (a writer's refresh) replaces one still building.
            GenState::Building => plan.build.is_some(),
            GenState::Retiring => false,
        };
        superseded && g.clones_pending == 0
    });
    plan
}

/// The ids of `gens` that `may` go, the ones already going included.
fn retirable(gens: &[Gen], may: impl Fn(&Gen) -> bool) -> Vec<i64> {
    gens.iter()
        .filter(|g| g.state == GenState::Retiring || may(g))
        .map(|g| g.id)
        .collect()
}

#[cfg(test)]
mod tests;
