//! A sleeping preview's rendering: its app at zero replicas, its mail catcher stopped, the
//! rest as it was. A sleep is a rendering, not a scale behind Argo CD's back: live equals
//! target while asleep, so the app stays Synced, a self-heal has nothing to undo, and a
//! push (rendered awake) deploys it awake (argo-cd v3.5.1 controller/appcontroller.go
//! autoSync syncs only what is OutOfSync; controller/sync.go applies the target as given
//! unless RespectIgnoreDifferences).
//!
//! Its identity is its awake twin's hash with [`ASLEEP`] after it, so that "the same but
//! for the sleep" is read off two hashes alone: such a change runs no hook (the sink asks
//! for it with the apply strategy, `sink::argocd::sync_request`) and leaves the app's
//! health gate open (`plan::step`).

use serde_json::{Value, json};

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

/// Names a sleeping rendering after its awake twin's hash `awake`.
pub fn restamp(rendering: &mut super::Stamped, awake: &str) {
    rendering.hash = format!("{awake}{ASLEEP}");
    rendering.manifest["metadata"]["annotations"][super::APPLIED_HASH] =
        json!(rendering.hash.clone());
}

/// The app's values while asleep, over what it gets awake: `preview.asleep` for charts
/// that follow previewd's contract, and what `helm create`'s scaffold reads
/// (helm v4.2.4 pkg/chart/v2/util/create.go: `replicas: {{ .Values.replicaCount }}` unless
/// `autoscaling.enabled`, and the HorizontalPodAutoscaler only then).
pub fn app_values(values: &mut Value) {
    values["preview"]["asleep"] = json!(true);
    values["replicaCount"] = json!(0);
    values["autoscaling"] = json!({"enabled": false});
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
