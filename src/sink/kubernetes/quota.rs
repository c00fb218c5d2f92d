//! What a preview namespace's ResourceQuota counts in use (`status.used`, kept by the
//! quota controller from the pods that exist): the cost the dashboard shows, read as
//! Kubernetes writes quantities.

use anyhow::Context;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::Api;

use super::KubeSink;

/// Pods, CPU in thousandths of a core and memory in bytes, as a quota counted them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Used {
    pub pods: i64,
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

impl KubeSink {
    /// The quota `name` of `namespace` on previewd's own cluster; `None` when it is not
    /// there (the preview runs on another cluster), not counted yet, or not readable.
    pub async fn quota_used(&self, namespace: &str, name: &str) -> anyhow::Result<Option<Used>> {
        let quotas: Api<ResourceQuota> = Api::namespaced(self.api.clone().into_client(), namespace);
        let quota = match quotas.get_opt(name).await {
            Ok(quota) => quota,
            Err(kube::Error::Api(status)) if status.code == 403 => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading ResourceQuota {name}")),
        };
        let Some(used) = quota.and_then(|q| q.status).and_then(|s| s.used) else {
            return Ok(None);
        };
        let get = |key: &str| used.get(key).map(|q| q.0.as_str());
        Ok(Some(Used {
            pods: get("pods").and_then(|q| quantity(q, 1)).unwrap_or(0),
            cpu_millis: get("requests.cpu")
                .and_then(|q| quantity(q, 1000))
                .unwrap_or(0),
            memory_bytes: get("requests.memory")
                .and_then(|q| quantity(q, 1))
                .unwrap_or(0),
        }))
    }
}

/// A Kubernetes quantity times `scale`, rounded up (apimachinery resource.Quantity: a
/// decimal number and a suffix, binary `Ki`..`Ei` or decimal `m`, `k`, `M`..`E`); `None` for
/// what it cannot read.
pub fn quantity(text: &str, scale: i64) -> Option<i64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        _ => return None,
    };
    let value: f64 = number.parse().ok()?;
    // Rounded up as the API rounds a fraction of its unit, but not for float noise
    // (0.35 × 1000 is 350.00000000000006).
    let exact = value * factor * scale as f64;
    let scaled = if (exact - exact.round()).abs() < 1e-6 {
        exact.round()
    } else {
        exact.ceil()
    };
    (scaled.is_finite() && scaled >= 0.0 && scaled < i64::MAX as f64).then_some(scaled as i64)
}

#[cfg(test)]
mod tests {
    use super::quantity;

    #[test]
    fn quantities_are_read_as_the_quota_controller_writes_them() {
        assert_eq!(quantity("350m", 1000), Some(350));
        assert_eq!(quantity("2", 1000), Some(2000));
        assert_eq!(quantity("1.5", 1000), Some(1500));
        assert_eq!(quantity("640Mi", 1), Some(640 << 20));
        assert_eq!(quantity("1Gi", 1), Some(1 << 30));
        assert_eq!(quantity("500M", 1), Some(500_000_000));
        assert_eq!(quantity("3", 1), Some(3));
        assert_eq!(quantity("0", 1), Some(0));
        assert_eq!(quantity("1e3", 1), None);
        assert_eq!(quantity("lots", 1), None);
    }
}
