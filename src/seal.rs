//! Sealing secrets for one cluster, byte for byte as the bitnami-labs sealed-secrets
//! controller unseals them (`pkg/crypto/crypto.go`), and the inverse for tests and for
//! operators debugging a preview.
//!
//! One value: `base64(len(W) as u16 BE || W || AES-256-GCM(K, nonce 0, value))`, where
//! `W = RSA-OAEP-SHA256(cert key, K, label)` and `K` is 32 fresh random bytes per value
//! (the zero nonce is safe only because `K` is never reused). The label binds the value to
//! where it may be unsealed: `namespace/name` (strict), `namespace`, or nothing (cluster-wide).

use std::collections::BTreeMap;

use aes_gcm::aead::{Aead, KeyInit};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rsa::oaep::DecryptingKey;
use rsa::pkcs1::{DecodeRsaPrivateKey, DecodeRsaPublicKey};
use rsa::pkcs8::DecodePrivateKey;
use rsa::sha2::Sha256;
use rsa::traits::Decryptor;
use rsa::{PrivateKey, PublicKey};
use serde_json::{Value, json};
use sha2::Digest;

pub const NAMESPACE_WIDE: &str = "sealedsecrets.bitnami.com/namespace-wide";
pub const CLUSTER_WIDE: &str = "sealedsecrets.bitnami.com/cluster-wide";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only this name in this namespace.
    Strict,
    /// Any name in this namespace.
    NamespaceWide,
    /// Anywhere on the cluster.
    ClusterWide,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::NamespaceWide => "namespace-wide",
            Self::ClusterWide => "cluster-wide",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Strict, Self::NamespaceWide, Self::ClusterWide]
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// The OAEP label the controller derives from the SealedSecret's own metadata.
    pub fn label(self, namespace: &str, name: &str) -> String {
        match self {
            Self::Strict => format!("{namespace}/{name}"),
            Self::NamespaceWide => namespace.to_owned(),
            Self::ClusterWide => String::new(),
        }
    }

    /// As the controller reads it: cluster-wide wins over namespace-wide; only `"true"` counts.
    pub fn of_annotations(annotations: &Value) -> Self {
        let set = |key: &str| annotations.get(key).and_then(Value::as_str) == Some("true");
        if set(CLUSTER_WIDE) {
            Self::ClusterWide
        } else if set(NAMESPACE_WIDE) {
            Self::NamespaceWide
        } else {
            Self::Strict
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("not a PEM certificate: {0}")]
    BadCertificate(String),
    #[error("the certificate's key is not RSA: {0}")]
    NotRsa(String),
    #[error(
        "the sealing certificate expired at {expired} (Unix time); fetch the controller's current certificate"
    )]
    Expired { expired: i64 },
    #[error("not a PEM RSA private key (PKCS#1 or PKCS#8)")]
    BadPrivateKey,
    #[error("encryption failed: {0}")]
    Encrypt(String),
    #[error("template value {0} is more than literal text and {{{{ .KEY }}}} of a sealed value")]
    Template(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnsealError {
    #[error("not standard padded base64")]
    Base64,
    #[error("too short to hold a sealed value")]
    Truncated,
    #[error("no key opens it for label {label:?} (wrong key, scope, name or namespace)")]
    WrongKeyOrLabel { label: String },
    #[error("the sealed data was altered")]
    Tampered,
    #[error("template data beyond literal text and {{{{ .KEY }}}} of a sealed value")]
    Template,
}

/// A controller's public certificate: what previewd seals with.
#[derive(Clone, Debug)]
pub struct SealingCert {
    key: PublicKey,
    /// OpenSSH-style `SHA256:<base64>` of the key, as the controller's key registry names
    /// keys; changes when the controller renews its key.
    pub fingerprint: String,
    /// Unix seconds.
    pub not_after: i64,
}

impl SealingCert {
    /// Reads the first certificate of `pem` (as kubeseal does) and refuses an expired one.
    /// Only the key and the expiry are read: the controller's certificates carry a
    /// KeyUsage some parsers reject.
    pub fn from_pem(pem: &str, now: i64) -> Result<Self, SealError> {
        let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
            .map_err(|e| SealError::BadCertificate(e.to_string()))?;
        let cert = parsed
            .parse_x509()
            .map_err(|e| SealError::BadCertificate(e.to_string()))?;
        let spki = cert.public_key();
        let key = PublicKey::from_pkcs1_der(&spki.subject_public_key.data)
            .map_err(|e| SealError::NotRsa(e.to_string()))?;
        let not_after = cert.validity().not_after.timestamp();
        if not_after <= now {
            return Err(SealError::Expired { expired: not_after });
        }
        Ok(Self::from_public_key(key, not_after))
    }

    /// For a key previewd holds itself (the local development key pair).
    pub fn from_public_key(key: PublicKey, not_after: i64) -> Self {
        Self {
            fingerprint: fingerprint(&key),
            key,
            not_after,
        }
    }
}

/// SHA-256 over the SSH wire encoding of the key (`ssh-rsa`, e, n as mpints).
pub fn fingerprint(key: &PublicKey) -> String {
    use rsa::traits::PublicKeyParts;
    let mut blob = Vec::new();
    let mut put = |bytes: &[u8]| {
        blob.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        blob.extend_from_slice(bytes);
    };
    // mpint: big-endian, no leading zero bytes, one zero byte if the top bit is set.
    let mpint = |n: &rsa::BoxedUint| {
        let bytes = n.to_be_bytes();
        let significant = &bytes[bytes.iter().take_while(|b| **b == 0).count()..];
        if significant.first().is_some_and(|b| b & 0x80 != 0) {
            [&[0u8][..], significant].concat()
        } else {
            significant.to_vec()
        }
    };
    put(b"ssh-rsa");
    put(&mpint(key.e()));
    put(&mpint(key.n().as_ref()));
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(sha2::Sha256::digest(&blob))
    )
}

/// Seals one value for `scope` at `namespace`/`name`, with randomness from the OS.
pub fn seal_value(
    cert: &SealingCert,
    scope: Scope,
    namespace: &str,
    name: &str,
    value: &[u8],
) -> Result<String, SealError> {
    let mut session_key = [0u8; 32];
    getrandom::fill(&mut session_key).map_err(|e| SealError::Encrypt(e.to_string()))?;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| SealError::Encrypt(e.to_string()))?;
    let label = scope.label(namespace, name);
    let wrapped = oaep::encrypt(&cert.key, label.as_bytes(), &session_key, seed)
        .map_err(|e| SealError::Encrypt(e.to_owned()))?;
    let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&session_key));
    let sealed = cipher
        .encrypt(Nonce::from_slice(&[0u8; 12]), value)
        .map_err(|e| SealError::Encrypt(e.to_string()))?;
    let length =
        u16::try_from(wrapped.len()).map_err(|_| SealError::Encrypt("RSA key too large".into()))?;
    let mut out = Vec::with_capacity(2 + wrapped.len() + sealed.len());
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(&wrapped);
    out.extend_from_slice(&sealed);
    Ok(STANDARD.encode(out))
}

/// Opens one value with any of `keys` (the controller tries each key it holds).
pub fn unseal_value(
    keys: &[PrivateKey],
    scope: Scope,
    namespace: &str,
    name: &str,
    value: &str,
) -> Result<Vec<u8>, UnsealError> {
    let cleaned: String = value.chars().filter(|c| *c != '\n' && *c != '\r').collect();
    let raw = STANDARD.decode(cleaned).map_err(|_| UnsealError::Base64)?;
    let (length, rest) = raw.split_first_chunk::<2>().ok_or(UnsealError::Truncated)?;
    let length = usize::from(u16::from_be_bytes(*length));
    if rest.len() < length + 16 {
        return Err(UnsealError::Truncated);
    }
    let (wrapped, sealed) = rest.split_at(length);
    let label = scope.label(namespace, name);
    let session_key = keys
        .iter()
        .find_map(|key| {
            DecryptingKey::<Sha256>::new_with_label(key.clone(), label.clone().into_bytes())
                .decrypt(wrapped)
                .ok()
        })
        .ok_or(UnsealError::WrongKeyOrLabel { label })?;
    if session_key.len() != 32 {
        return Err(UnsealError::Tampered);
    }
    let cipher = Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(&session_key));
    cipher
        .decrypt(Nonce::from_slice(&[0u8; 12]), sealed)
        .map_err(|_| UnsealError::Tampered)
}

pub fn private_key_from_pem(pem: &str) -> Result<PrivateKey, SealError> {
    PrivateKey::from_pkcs1_pem(pem)
        .or_else(|_| PrivateKey::from_pkcs8_pem(pem))
        .map_err(|_| SealError::BadPrivateKey)
}

/// A Secret to seal: plaintext values, held only in memory.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretSpec {
    pub name: String,
    pub namespace: String,
    pub scope: Scope,
    pub type_: String,
    pub labels: BTreeMap<String, String>,
    /// Sealed, one RSA-OAEP operation each.
    pub data: BTreeMap<String, Vec<u8>>,
    /// Values anyone who reads the Application may see (a host, a port, a certificate):
    /// carried in `spec.template.data`, which the controller copies into the Secret
    /// (`sealedsecret_expansion.go` `Unseal`). Sealing them cost an RSA-4096 operation and
    /// 700 bytes of every Application read each (issue #17).
    pub public: BTreeMap<String, String>,
    /// Values the controller builds from the sealed ones, as `seal::template` renders them
    /// (`{{ .KEY }}` of a key in `data`): a connection URL around its password, with no
    /// RSA operation of its own.
    pub templates: BTreeMap<String, String>,
}

impl SecretSpec {
    /// Adds values anyone who reads the Application may see: names, a host, a port, a
    /// certificate. Never a password, a key or a token: those are `data`, sealed.
    pub fn with_public<const N: usize>(mut self, public: [(&str, String); N]) -> Self {
        self.public
            .extend(public.into_iter().map(|(k, v)| (k.to_owned(), v)));
        self
    }
}

impl std::fmt::Debug for SecretSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names of the keys only: the values never reach a log line.
        f.debug_struct("SecretSpec")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("scope", &self.scope)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .field("public", &self.public.keys().collect::<Vec<_>>())
            .field("templates", &self.templates.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Seals the secret values of `spec` for `cert`, and passes its public ones through as
/// template data — unless one could be read as a template, which is sealed instead.
pub fn seal_secret(
    cert: &SealingCert,
    spec: &SecretSpec,
) -> Result<crate::render::SealedSecret, SealError> {
    if let Some((key, _)) = spec
        .templates
        .iter()
        .find(|(_, text)| template::render(text, &spec.data).is_none())
    {
        return Err(SealError::Template(key.clone()));
    }
    let (templated, public): (Vec<_>, Vec<_>) = spec
        .public
        .iter()
        .partition(|(_, value)| !template::is_literal(value));
    let encrypted_data = spec
        .data
        .iter()
        .map(|(key, value)| (key, value.as_slice()))
        .chain(templated.into_iter().map(|(k, v)| (k, v.as_bytes())))
        .map(|(key, value)| {
            Ok((
                key.clone(),
                seal_value(cert, spec.scope, &spec.namespace, &spec.name, value)?,
            ))
        })
        .collect::<Result<_, SealError>>()?;
    Ok(crate::render::SealedSecret {
        name: spec.name.clone(),
        namespace: spec.namespace.clone(),
        scope: spec.scope.as_str(),
        type_: spec.type_.clone(),
        labels: spec.labels.clone(),
        encrypted_data,
        template_data: public
            .into_iter()
            .chain(&spec.templates)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

/// The SealedSecret object, as `kubeseal` writes it: the scope annotation on both the
/// object and its template (the controller reads the object's).
pub fn sealed_secret_object(sealed: &crate::render::SealedSecret) -> Value {
    let annotations = match Scope::parse(sealed.scope) {
        Some(Scope::NamespaceWide) => json!({ NAMESPACE_WIDE: "true" }),
        Some(Scope::ClusterWide) => json!({ CLUSTER_WIDE: "true" }),
        _ => json!({}),
    };
    let mut metadata = json!({"name": sealed.name, "namespace": sealed.namespace});
    if annotations.as_object().is_some_and(|a| !a.is_empty()) {
        metadata["annotations"] = annotations;
    }
    json!({
        "apiVersion": "bitnami.com/v1alpha1",
        "kind": "SealedSecret",
        "metadata": metadata,
        "spec": {
            "encryptedData": sealed.encrypted_data,
            "template": template(&metadata, sealed),
        },
    })
}

fn template(metadata: &Value, sealed: &crate::render::SealedSecret) -> Value {
    let mut template = json!({
        "metadata": template_metadata(metadata, &sealed.labels),
        "type": sealed.type_,
    });
    if !sealed.template_data.is_empty() {
        template["data"] = json!(sealed.template_data);
    }
    template
}

fn template_metadata(metadata: &Value, labels: &BTreeMap<String, String>) -> Value {
    let mut template = metadata.clone();
    if !labels.is_empty() {
        template["labels"] = json!(labels);
    }
    template
}

/// Opens a SealedSecret object into the Secret the controller would make; the error names
/// every value that does not open.
pub fn unseal_object(
    keys: &[PrivateKey],
    object: &Value,
) -> Result<Value, Vec<(String, UnsealError)>> {
    let metadata = &object["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let namespace = metadata["namespace"].as_str().unwrap_or_default();
    let scope = Scope::of_annotations(&metadata["annotations"]);
    let mut opened = BTreeMap::new();
    let mut failures = Vec::new();
    for (key, value) in object["spec"]["encryptedData"]
        .as_object()
        .into_iter()
        .flatten()
    {
        match unseal_value(
            keys,
            scope,
            namespace,
            name,
            value.as_str().unwrap_or_default(),
        ) {
            Ok(plain) => {
                opened.insert(key.clone(), plain);
            }
            Err(e) => failures.push((key.clone(), e)),
        }
    }
    let template = &object["spec"]["template"];
    // Only what `seal_secret` writes: literal text, or `{{ .KEY }}` of a sealed value.
    let mut rendered = BTreeMap::new();
    for (key, value) in template["data"].as_object().into_iter().flatten() {
        match value.as_str().and_then(|v| template::render(v, &opened)) {
            Some(text) => {
                rendered.insert(key.clone(), text);
            }
            None => failures.push((key.clone(), UnsealError::Template)),
        }
    }
    if !failures.is_empty() {
        return Err(failures);
    }
    opened.extend(rendered);
    let data: serde_json::Map<_, _> = opened
        .into_iter()
        .map(|(key, plain)| (key, json!(STANDARD.encode(plain))))
        .collect();
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": template["type"].as_str().unwrap_or("Opaque"),
        "data": data,
    }))
}

mod oaep;
pub mod template;
#[cfg(test)]
mod tests;
