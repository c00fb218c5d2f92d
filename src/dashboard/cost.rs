//! What a preview asks of its cluster and what sleeping saved, as the dashboard writes it.

use crate::view::Cost;

/// `250m CPU, 512 MiB` as the quota counted it awake; `—` before it was counted.
pub fn requests(cost: &Cost) -> String {
    match (cost.cpu_millis, cost.memory_bytes) {
        (Some(cpu), Some(memory)) => format!("{} CPU, {}", cpu_text(cpu), memory_text(memory)),
        _ => "—".into(),
    }
}

/// Pod-hours sleeping saved, to a tenth; `—` when nothing was saved.
pub fn saved(cost: &Cost) -> String {
    if cost.pod_seconds_saved <= 0 {
        return "—".into();
    }
    format!("{:.1} pod-hours", cost.pod_seconds_saved as f64 / 3600.0)
}

fn cpu_text(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

fn memory_text(bytes: i64) -> String {
    const MIB: i64 = 1 << 20;
    if bytes >= 1 << 30 && bytes % (1 << 30) == 0 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", (bytes + MIB - 1) / MIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(cpu: Option<i64>, memory: Option<i64>, saved: i64) -> Cost {
        Cost {
            pods: Some(2),
            cpu_millis: cpu,
            memory_bytes: memory,
            slept_seconds: 0,
            pod_seconds_saved: saved,
        }
    }

    #[test]
    fn requests_and_savings_read_as_a_person_writes_them() {
        assert_eq!(
            requests(&cost(Some(350), Some(640 << 20), 0)),
            "350m CPU, 640 MiB"
        );
        assert_eq!(
            requests(&cost(Some(2000), Some(2 << 30), 0)),
            "2 CPU, 2 GiB"
        );
        assert_eq!(requests(&cost(None, None, 0)), "—");
        assert_eq!(saved(&cost(None, None, 0)), "—");
        assert_eq!(
            saved(&cost(None, None, 2 * 3 * 3600 + 360)),
            "6.1 pod-hours"
        );
    }
}
