//! The preview CA: issues each preview a certificate for its host, valid for the preview's
//! lifetime plus a margin; the alternative to cert-manager for clusters without it, or to
//! stay clear of Let's Encrypt's rate limits. Keys are ECDSA P-256.
//!
//! People add this CA to their browsers, so what it may vouch for is bounded: a critical
//! name-constraints extension permits only the configured preview domains (RFC 5280
//! section 4.2.1.10: a dNSName constraint covers the name and every name below it), and it
//! lives for previews, not years: two of the longest leaf lifetimes, at least 90 days.
//!
//! Rotation (the CA previewd makes beside the state): a CA is renewed when less than one
//! leaf lifetime remains, or when the configured domains changed, at start and before an
//! issue. Every leaf ends before its CA does (an issue that would outlive the CA is
//! refused), so the leaves of the previous CA stay valid to their end: keep trusting it
//! until its `notAfter`, and trust the new one as soon as it appears (the log says so). A
//! configured CA (`tls.ca_cert`) is the operator's to renew and to constrain.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::RwLock;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType,
};
use time::OffsetDateTime;

use crate::clusters::LocalKeys;

/// Issued certificates stay valid this long after the preview's latest possible end (its
/// max_lifetime, which no extension passes): slack for the sweep and the teardown, so that
/// a preview never serves an expired certificate, and little more than its life.
pub const MARGIN_SECS: i64 = 86_400;
/// Clock skew allowance at the start.
const BACKDATE_SECS: i64 = 3_600;
/// The shortest CA lifetime, so that people re-trust a new CA at most every few months.
pub const MIN_CA_SECS: i64 = 90 * 86_400;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("the preview CA's key or certificate is not usable: {0}")]
    Load(String),
    #[error("cannot issue a certificate for {host:?}: {message}")]
    Issue { host: String, message: String },
}

/// The CA in use.
struct Current {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    not_after: i64,
    /// Its permitted DNS subtrees (empty: it has no name constraints).
    domains: Vec<String>,
}

/// Where a CA previewd made lives, and what it must permit, so that previewd renews it.
struct Renewal {
    key: PathBuf,
    cert: PathBuf,
    domains: Vec<String>,
    leaf_secs: i64,
}

pub struct PreviewCa {
    current: RwLock<Current>,
    renewal: Option<Renewal>,
}

/// A certificate and its private key, in PEM.
pub struct Issued {
    /// The leaf, then the CA.
    pub chain_pem: String,
    pub key_pem: String,
    /// The CA that issued it.
    pub ca_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Issued { key: .. }")
    }
}

impl std::fmt::Debug for PreviewCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreviewCa { key: .. }")
    }
}

impl PreviewCa {
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        Ok(Self {
            current: RwLock::new(Current::load(cert_pem, key_pem)?),
            renewal: None,
        })
    }

    /// A new CA permitted to vouch for `domains` (and names below them) only, valid from
    /// now for `valid_secs`: returns it with its key in PEM.
    pub fn generate(
        name: &str,
        domains: &[String],
        now: i64,
        valid_secs: i64,
    ) -> Result<(Self, String), CaError> {
        let (current, key_pem) = Current::generate(name, domains, now, valid_secs)?;
        Ok((
            Self {
                current: RwLock::new(current),
                renewal: None,
            },
            key_pem,
        ))
    }

    /// The CA's certificate in PEM (the one issuing now).
    pub fn cert_pem(&self) -> String {
        self.read().cert_pem.clone()
    }

    /// A server certificate for `host`, valid from now until `expires_at` plus the margin.
    /// Refused for a host outside the CA's domains, or when it would outlive the CA (which
    /// a CA previewd made is renewed for first).
    pub fn issue(&self, host: &str, now: i64, expires_at: i64) -> Result<Issued, CaError> {
        let failed = |message: String| CaError::Issue {
            host: host.into(),
            message,
        };
        let not_after = expires_at + MARGIN_SECS;
        self.renew_if_due(now, not_after)
            .map_err(|e| failed(format!("{e:#}")))?;
        let current = self.read();
        if !current.domains.is_empty() && !current.domains.iter().any(|d| within(host, d)) {
            return Err(failed(format!(
                "it is outside the preview CA's domains ({})",
                current.domains.join(", ")
            )));
        }
        if not_after > current.not_after {
            return Err(failed(format!(
                "the preview CA ends at {} (Unix time), before the certificate would; renew it",
                current.not_after
            )));
        }
        let rcgen_failed = |e: rcgen::Error| failed(e.to_string());
        let key = KeyPair::generate().map_err(rcgen_failed)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(rcgen_failed)?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = vec![SanType::DnsName(host.try_into().map_err(rcgen_failed)?)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = at(now - BACKDATE_SECS)?;
        params.not_after = at(not_after)?;
        let cert = params
            .signed_by(&key, &current.issuer)
            .map_err(rcgen_failed)?;
        Ok(Issued {
            chain_pem: format!("{}{}", cert.pem(), current.cert_pem),
            key_pem: key.serialize_pem(),
            ca_pem: current.cert_pem.clone(),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Current> {
        // A panic while renewing leaves the previous CA in place, which is still whole.
        self.current.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Renews a CA previewd made when a leaf ending at `leaf_not_after` would outlive it.
    fn renew_if_due(&self, now: i64, leaf_not_after: i64) -> anyhow::Result<()> {
        let Some(renewal) = &self.renewal else {
            return Ok(());
        };
        let reason = |current: &Current| {
            renewal_reason(
                current.not_after,
                &current.domains,
                &renewal.domains,
                now,
                renewal.leaf_secs.max(leaf_not_after - now),
            )
        };
        if reason(&self.read()).is_none() {
            return Ok(());
        }
        // Again under the write lock: another issue may have renewed it meanwhile.
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        if let Some(reason) = reason(&current) {
            *current = renewal.renew(now, &reason)?;
        }
        Ok(())
    }
}

impl Current {
    fn load(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let (not_after, domains) = facts(cert_pem)?;
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::Load(e.to_string()))?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| CaError::Load(e.to_string()))?;
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_owned(),
            not_after,
            domains,
        })
    }

    fn generate(
        name: &str,
        domains: &[String],
        now: i64,
        valid_secs: i64,
    ) -> Result<(Self, String), CaError> {
        if domains.is_empty() {
            return Err(CaError::Load(
                "a preview CA needs the domains it may vouch for".into(),
            ));
        }
        let key = KeyPair::generate().map_err(|e| CaError::Load(e.to_string()))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        // rcgen marks the extension critical, as RFC 5280 requires of a CA's.
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: domains
                .iter()
                .map(|d| GeneralSubtree::DnsName(d.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        params.not_before = at(now - BACKDATE_SECS)?;
        params.not_after = at(now + valid_secs)?;
        let cert = params
            .self_signed(&key)
            .map_err(|e| CaError::Load(e.to_string()))?;
        let key_pem = key.serialize_pem();
        Ok((
            Self {
                issuer: Issuer::new(params, key),
                cert_pem: cert.pem(),
                not_after: now + valid_secs,
                domains: domains.to_vec(),
            },
            key_pem,
        ))
    }
}

impl Renewal {
    /// A new CA, written over the old one atomically (the old one's leaves need only its
    /// certificate, which people already trust).
    fn renew(&self, now: i64, reason: &str) -> anyhow::Result<Current> {
        let (current, key_pem) = Current::generate(
            "previewd preview CA",
            &self.domains,
            now,
            ca_lifetime(self.leaf_secs),
        )?;
        crate::clusters::write_pair(
            &self.key,
            &self.cert,
            key_pem.as_bytes(),
            current.cert_pem.as_bytes(),
        )?;
        tracing::warn!(
            cert = %self.cert.display(),
            not_after = current.not_after,
            reason,
            "made a new preview CA: browsers trust its certificates once they trust it; keep trusting the previous one until it ends"
        );
        Ok(current)
    }
}

/// Why a CA ending at `not_after` and permitting `has` must be renewed, to permit `wanted`
/// and to outlive a leaf lasting `leaf_secs` from `now`; `None` when it may stay.
pub fn renewal_reason(
    not_after: i64,
    has: &[String],
    wanted: &[String],
    now: i64,
    leaf_secs: i64,
) -> Option<String> {
    if has != wanted {
        return Some(format!(
            "it permits [{}], the configured domains are [{}]",
            has.join(", "),
            wanted.join(", ")
        ));
    }
    (not_after - now < leaf_secs).then(|| {
        format!("it ends at {not_after} (Unix time), before a certificate issued now would")
    })
}

/// How long a CA lives: two of the longest leaf lifetimes (it is renewed when one is
/// left), and at least `MIN_CA_SECS`.
pub fn ca_lifetime(leaf_secs: i64) -> i64 {
    (2 * leaf_secs).max(MIN_CA_SECS)
}

/// The longest a leaf lives: the longest max_lifetime of any policy, plus the margin and
/// the backdating (a preview's certificate is valid through its max_lifetime).
pub fn leaf_lifetime(config: &crate::config::Config) -> i64 {
    let longest = std::iter::once(&config.defaults)
        .chain(config.repos.iter().map(|r| &r.policy))
        .map(|p| i64::try_from(p.max_lifetime.as_secs()).unwrap_or(i64::MAX / 4))
        .max()
        .unwrap_or(0);
    longest.saturating_add(MARGIN_SECS + BACKDATE_SECS)
}

/// The domains previews are served under: `defaults.domain` and every `[[repos]]` domain,
/// sorted, without repeats.
pub fn domains(config: &crate::config::Config) -> Vec<String> {
    std::iter::once(&config.defaults)
        .chain(config.repos.iter().map(|r| &r.policy))
        .map(|p| p.domain.to_ascii_lowercase())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `host` is `domain` or below it, label-wise (RFC 5280 dNSName constraints).
fn within(host: &str, domain: &str) -> bool {
    let (host, domain) = (host.to_ascii_lowercase(), domain.to_ascii_lowercase());
    host == domain || host.ends_with(&format!(".{domain}"))
}

/// A CA certificate's `notAfter` and permitted DNS subtrees (sorted; empty for none).
fn facts(cert_pem: &str) -> Result<(i64, Vec<String>), CaError> {
    let unusable = |e: String| CaError::Load(e);
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| unusable(e.to_string()))?;
    let cert = pem.parse_x509().map_err(|e| unusable(e.to_string()))?;
    let mut domains: Vec<String> = cert
        .name_constraints()
        .map_err(|e| unusable(e.to_string()))?
        .and_then(|ext| ext.value.permitted_subtrees.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|subtree| match subtree.base {
            x509_parser::extensions::GeneralName::DNSName(name) => Some(name.to_ascii_lowercase()),
            _ => None,
        })
        .collect();
    domains.sort();
    domains.dedup();
    Ok((cert.validity().not_after.timestamp(), domains))
}

/// The preview CA for `tls.mode = "sealed"`: the configured one, or one kept beside the
/// state (made and renewed with [`LocalKeys::Create`], by `serve`). `None` in the other TLS
/// modes.
pub fn from_config(
    config: &crate::config::Config,
    now: i64,
    local: LocalKeys,
) -> anyhow::Result<Option<PreviewCa>> {
    use anyhow::Context;
    if config.tls.mode != crate::config::TlsMode::Sealed {
        return Ok(None);
    }
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let (domains, leaf_secs) = (domains(config), leaf_lifetime(config));
    if let (Some(cert), Some(key)) = (&config.tls.ca_cert, &config.tls.ca_key) {
        let ca = PreviewCa::load(&read(cert)?, &read(key)?)?;
        let current = ca.read();
        let reason = renewal_reason(
            current.not_after,
            &current.domains,
            &domains,
            now,
            leaf_secs,
        );
        drop(current);
        if let Some(reason) = reason {
            tracing::warn!(cert = %cert.display(), reason, "the configured preview CA should be replaced: give it name constraints for exactly the preview domains and a lifetime of one to a few leaf lifetimes");
        }
        return Ok(Some(ca));
    }
    let (cert, key) = (
        config.state.beside("ca.crt", "tls.ca_cert")?,
        config.state.beside("ca.key", "tls.ca_key")?,
    );
    let renewal = Renewal {
        key: key.clone(),
        cert: cert.clone(),
        domains,
        leaf_secs,
    };
    let create = local == LocalKeys::Create;
    if create {
        crate::clusters::repair_pair(&key, &cert)?;
    }
    let current = if cert.exists() {
        Current::load(&read(&cert)?, &read(&key)?)?
    } else {
        anyhow::ensure!(
            create,
            "no preview CA yet ({} is created by `previewd serve`)",
            cert.display()
        );
        renewal.renew(now, "there was none")?
    };
    let ca = PreviewCa {
        current: RwLock::new(current),
        // Only `serve` writes the state; the CLI issues from what is there.
        renewal: create.then_some(renewal),
    };
    ca.renew_if_due(now, now)?;
    Ok(Some(ca))
}

fn at(unix: i64) -> Result<OffsetDateTime, CaError> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|e| CaError::Load(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_within_a_domain_label_by_label() {
        assert!(within("pr-7.preview.example.com", "preview.example.com"));
        assert!(within("Preview.Example.com", "preview.example.com"));
        assert!(!within("xpreview.example.com", "preview.example.com"));
        assert!(!within(
            "preview.example.com.evil.net",
            "preview.example.com"
        ));
    }

    #[test]
    fn renewal_is_due_when_a_leaf_no_longer_fits_or_the_domains_differ() {
        let d = vec!["preview.example.com".to_owned()];
        assert_eq!(renewal_reason(1_000, &d, &d, 0, 1_000), None);
        assert!(renewal_reason(999, &d, &d, 0, 1_000).is_some());
        assert!(renewal_reason(5_000, &[], &d, 0, 1_000).is_some());
        assert_eq!(ca_lifetime(86_400), MIN_CA_SECS);
        assert_eq!(ca_lifetime(60 * 86_400), 120 * 86_400);
    }
}
