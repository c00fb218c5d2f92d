//! What one preview namespace may hold, as the helpers' chart renders it
//! (`templates/resources.yaml`: a ResourceQuota and a LimitRange).

use serde_json::{Value, json};

use crate::config::Resources;

/// `resources` of the helpers' values, written as Kubernetes writes quantities back, so the
/// live objects compare equal to what was applied.
pub fn values(resources: &Resources) -> Value {
    json!({
        "cpu": resources.cpu.to_string(),
        "memory": resources.memory.to_string(),
        "pods": resources.pods,
        "containerCpu": resources.container_cpu.to_string(),
        "containerMemory": resources.container_memory.to_string(),
    })
}
