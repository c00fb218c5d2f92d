//! A sleeping preview's rendering: its app at zero replicas, its mail catcher stopped, the
//! rest as it was. A sleep is a rendering, not a scale behind Argo CD's back: live equals
//! target while asleep, so the app stays Synced, a self-heal has nothing to undo, and a
//! push (rendered awake) deploys it awake (argo-cd v3.5.1 controller/appcontroller.go
//! autoSync syncs only what is OutOfSync; controller/sync.go applies the target as given
//! unless RespectIgnoreDifferences).
//!
//! The sleep rides in `spec.source.helm.parameters` (Helm `--set`, over the values), never
//! in `valuesObject`: a list is replaced whole by an apply, server-side or merge alike,
//! where a key left out of `valuesObject` is removed only by an applier that tracks who
//! set it. Awake, the list is empty; asleep, it names the overrides. The rendering's hash
//! is taken without it and, asleep, has [`ASLEEP`] after it, so "the same but for the
//! sleep" is read off two hashes alone: such a change runs no hook (the sink asks for it
//! with the apply strategy, `sink::argocd::sync_request`) and leaves the app's health
//! gate open (`plan::step`).

use serde_json::{Value, json};

use super::{APPLIED_HASH, Stamped};

/// What a sleeping rendering's hash ends with.
pub const ASLEEP: &str = "-asleep";

/// The hash of `hash`'s awake twin (itself when awake).
pub fn awake_of(hash: &str) -> &str {
    hash.strip_suffix(ASLEEP).unwrap_or(hash)
}

/// Whether two renderings differ, if at all, only in whether the preview sleeps.
pub fn same_but_sleep(a: &str, b: &str) -> bool {
    awake_of(a) == awake_of(b)
}

/// The app asleep: `preview.asleep` for charts that follow previewd's contract, and what
/// `helm create`'s scaffold reads (helm v4.2.4 pkg/chart/v2/util/create.go: `replicas: {{
/// .Values.replicaCount }}` unless `autoscaling.enabled`, the HorizontalPodAutoscaler only
/// then).
const APP_ASLEEP: [(&str, &str); 3] = [
    ("replicaCount", "0"),
    ("autoscaling.enabled", "false"),
    ("preview.asleep", "true"),
];

/// The helpers asleep: the mail catcher at zero (helpers-chart templates/mail.yaml).
const MAIL_ASLEEP: [(&str, &str); 1] = [("mail.asleep", "true")];

pub fn override_app(app: &mut Stamped, asleep: bool) {
    set(app, &APP_ASLEEP, asleep);
}

/// The helpers have something to stop only with a mail catcher; otherwise a sleep leaves
/// their rendering as it is.
pub fn override_helper(helper: &mut Stamped, mail: bool, asleep: bool) {
    set(helper, if mail { &MAIL_ASLEEP[..] } else { &[] }, asleep);
}

fn set(rendering: &mut Stamped, overrides: &[(&str, &str)], asleep: bool) {
    let asleep = asleep && !overrides.is_empty();
    let parameters: Vec<Value> = overrides
        .iter()
        .filter(|_| asleep)
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    rendering.manifest["spec"]["source"]["helm"]["parameters"] = json!(parameters);
    if asleep {
        rendering.hash = format!("{}{ASLEEP}", rendering.hash);
        rendering.manifest["metadata"]["annotations"][APPLIED_HASH] = json!(rendering.hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_is_told_from_any_other_change_by_the_hashes_alone() {
        let awake = "9f2c";
        let asleep = format!("{awake}{ASLEEP}");
        assert!(same_but_sleep(awake, &asleep));
        assert!(same_but_sleep(&asleep, awake));
        assert!(same_but_sleep(awake, awake));
        assert!(
            !same_but_sleep("9f2c", "9f2d-asleep"),
            "a push while asleep"
        );
        assert_eq!(awake_of(&asleep), awake);
    }
}
