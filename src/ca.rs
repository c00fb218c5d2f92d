//! The preview CA: issues each preview a certificate for its host, valid for the preview's
//! lifetime plus a margin; the alternative to cert-manager for clusters without it, or to
//! stay clear of Let's Encrypt's rate limits. Keys are ECDSA P-256.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::OffsetDateTime;

/// Issued certificates stay valid this long after the preview's expiry, so that an
/// extension near the end never leaves a preview with an expired certificate.
pub const MARGIN_SECS: i64 = 7 * 86_400;
/// Clock skew allowance at the start.
const BACKDATE_SECS: i64 = 3_600;

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("the preview CA's key or certificate is not usable: {0}")]
    Load(String),
    #[error("cannot issue a certificate for {host:?}: {message}")]
    Issue { host: String, message: String },
}

pub struct PreviewCa {
    issuer: Issuer<'static, KeyPair>,
    /// PEM, sent along with each leaf so clients can build the chain.
    pub cert_pem: String,
}

/// A certificate and its private key, in PEM.
pub struct Issued {
    /// The leaf, then the CA.
    pub chain_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Issued { key: .. }")
    }
}

impl PreviewCa {
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Self, CaError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| CaError::Load(e.to_string()))?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| CaError::Load(e.to_string()))?;
        Ok(Self {
            issuer,
            cert_pem: cert_pem.to_owned(),
        })
    }

    /// A new CA (for development, or a first start): returns it with its key in PEM.
    pub fn generate(name: &str, now: i64, valid_secs: i64) -> Result<(Self, String), CaError> {
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
            },
            key_pem,
        ))
    }

    /// A server certificate for `host`, valid from now until `expires_at` plus the margin.
    pub fn issue(&self, host: &str, now: i64, expires_at: i64) -> Result<Issued, CaError> {
        let failed = |e: rcgen::Error| CaError::Issue {
            host: host.into(),
            message: e.to_string(),
        };
        let key = KeyPair::generate().map_err(failed)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(failed)?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.subject_alt_names = vec![SanType::DnsName(host.try_into().map_err(failed)?)];
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = at(now - BACKDATE_SECS)?;
        params.not_after = at(expires_at + MARGIN_SECS)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(failed)?;
        Ok(Issued {
            chain_pem: format!("{}{}", cert.pem(), self.cert_pem),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The preview CA for `tls.mode = "sealed"`: the configured one, or one kept beside the
/// state (made when `create_local`, for development). `None` in the other TLS modes.
pub fn from_config(
    config: &crate::config::Config,
    now: i64,
    create_local: bool,
) -> anyhow::Result<Option<PreviewCa>> {
    use anyhow::Context;
    if config.tls.mode != crate::config::TlsMode::Sealed {
        return Ok(None);
    }
    let (cert_path, key_path) = match (&config.tls.ca_cert, &config.tls.ca_key) {
        (Some(cert), Some(key)) => (cert.clone(), key.clone()),
        _ => {
            let stem = config
                .state
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("previewd");
            let dir = config.state.parent().unwrap_or(std::path::Path::new(""));
            let (cert, key) = (
                dir.join(format!("{stem}-ca.crt")),
                dir.join(format!("{stem}-ca.key")),
            );
            crate::clusters::repair_pair(&key, &cert)?;
            if !cert.exists() {
                anyhow::ensure!(
                    create_local,
                    "no preview CA yet ({} is created by `previewd serve`)",
                    cert.display()
                );
                let (ca, ca_key) = PreviewCa::generate(
                    "previewd preview CA (development)",
                    now,
                    5 * 365 * 86_400,
                )?;
                crate::clusters::write_pair(
                    &key,
                    &cert,
                    ca_key.as_bytes(),
                    ca.cert_pem.as_bytes(),
                )?;
                tracing::warn!(cert = %cert.display(), "created a development preview CA: browsers will not trust it until you add it");
            }
            (cert, key)
        }
    };
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    Ok(Some(PreviewCa::load(
        &read(&cert_path)?,
        &read(&key_path)?,
    )?))
}

fn at(unix: i64) -> Result<OffsetDateTime, CaError> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|e| CaError::Load(e.to_string()))
}
