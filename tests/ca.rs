//! Preview certificates from the preview CA, checked by `openssl` as a client would; what
//! the CA may vouch for, how long it lives, and its renewal.

use std::path::Path;
use std::process::Command;

use previewd::ca::{MARGIN_SECS, PreviewCa};
use previewd::clusters::LocalKeys;
use previewd::config::Config;

const NOW: i64 = 1_795_910_400; // 2026-11-29T00:00:00Z

fn openssl(args: &[&str]) -> (bool, String) {
    let output = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is needed: run scripts/test");
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn domain() -> Vec<String> {
    vec!["preview.example.com".into()]
}

fn leaf_of(chain: &str) -> String {
    let end = "-----END CERTIFICATE-----";
    chain[..chain.find(end).unwrap() + end.len()].to_owned() + "\n"
}

#[test]
fn issued_certificates_verify_against_the_ca_with_the_right_name_and_validity() {
    let (ca, ca_key) =
        PreviewCa::generate("previewd preview CA", &domain(), NOW, 365 * 86_400).unwrap();
    // A CA loaded back from its PEM files issues just the same.
    let ca = PreviewCa::load(&ca.cert_pem(), &ca_key).unwrap();
    let expires_at = NOW + 3 * 86_400;
    let issued = ca
        .issue("octo-app-pr-7.preview.example.com", NOW, expires_at)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (ca_path, leaf_path) = (dir.path().join("ca.pem"), dir.path().join("leaf.pem"));
    std::fs::write(&ca_path, ca.cert_pem()).unwrap();
    std::fs::write(&leaf_path, leaf_of(&issued.chain_pem)).unwrap();
    let (ca_arg, leaf_arg) = (ca_path.to_str().unwrap(), leaf_path.to_str().unwrap());

    let attime = (NOW + 60).to_string();
    let (ok, out) = openssl(&[
        "verify",
        "-attime",
        &attime,
        "-purpose",
        "sslserver",
        "-CAfile",
        ca_arg,
        leaf_arg,
    ]);
    assert!(ok, "{out}");

    let (_, san) = openssl(&["x509", "-noout", "-ext", "subjectAltName", "-in", leaf_arg]);
    assert!(
        san.contains("DNS:octo-app-pr-7.preview.example.com"),
        "{san}"
    );

    // Valid through the preview's expiry plus the margin, and not after it.
    let after_margin = (expires_at + MARGIN_SECS + 60).to_string();
    let (ok, out) = openssl(&[
        "verify",
        "-attime",
        &after_margin,
        "-CAfile",
        ca_arg,
        leaf_arg,
    ]);
    assert!(!ok && out.contains("expired"), "{out}");
    let before_margin = (expires_at + MARGIN_SECS - 60).to_string();
    assert!(
        openssl(&[
            "verify",
            "-attime",
            &before_margin,
            "-CAfile",
            ca_arg,
            leaf_arg
        ])
        .0
    );

    // The key matches the certificate.
    let key_path = dir.path().join("leaf.key");
    std::fs::write(&key_path, &issued.key_pem).unwrap();
    let (_, from_cert) = openssl(&["x509", "-noout", "-pubkey", "-in", leaf_arg]);
    let (_, from_key) = openssl(&["pkey", "-pubout", "-in", key_path.to_str().unwrap()]);
    assert_eq!(from_cert, from_key);
}

#[test]
fn another_ca_does_not_vouch_for_a_preview_certificate() {
    let (ca, _) = PreviewCa::generate("one", &domain(), NOW, 86_400 * 30).unwrap();
    let (other, _) = PreviewCa::generate("two", &domain(), NOW, 86_400 * 30).unwrap();
    let issued = ca
        .issue("a.preview.example.com", NOW, NOW + 86_400)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("other.pem"), other.cert_pem()).unwrap();
    std::fs::write(dir.path().join("leaf.pem"), leaf_of(&issued.chain_pem)).unwrap();
    let attime = (NOW + 60).to_string();
    let (ok, _) = openssl(&[
        "verify",
        "-attime",
        &attime,
        "-CAfile",
        dir.path().join("other.pem").to_str().unwrap(),
        dir.path().join("leaf.pem").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(PreviewCa::load(&ca.cert_pem(), "not a key").is_err());
}

/// Two domains: the default one and a repository's own.
const TWO_DOMAINS: &str = r#"
    [tls]
    mode = "sealed"
    [defaults]
    domain = "preview.example.com"
    [[repos]]
    name = "octo/app"
    [[repos]]
    name = "octo/docs"
    domain = "review.example.org"
"#;

fn config_in(dir: &Path, toml: &str) -> Config {
    let toml = format!("state = {:?}\n{toml}", dir.join("previewd.db"));
    Config::from_toml(&toml, Vec::new()).unwrap()
}

/// `openssl verify` of `leaf` against `ca` at `at`, for a TLS server.
fn verify(dir: &Path, ca: &str, leaf: &str, at: i64) -> (bool, String) {
    let (ca_path, leaf_path) = (dir.join("verify-ca.pem"), dir.join("verify-leaf.pem"));
    std::fs::write(&ca_path, ca).unwrap();
    std::fs::write(&leaf_path, leaf).unwrap();
    openssl(&[
        "verify",
        "-attime",
        &at.to_string(),
        "-purpose",
        "sslserver",
        "-CAfile",
        ca_path.to_str().unwrap(),
        leaf_path.to_str().unwrap(),
    ])
}

/// A leaf for `host` signed with the CA's key directly, as whoever stole the key could.
fn forged(ca_pem: &str, ca_key: &str, host: &str) -> String {
    let key = rcgen::KeyPair::from_pem(ca_key).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(ca_pem, key).unwrap();
    let mut params = rcgen::CertificateParams::new(vec![host.to_owned()]).unwrap();
    params.not_before = time::OffsetDateTime::from_unix_timestamp(NOW - 3600).unwrap();
    params.not_after = time::OffsetDateTime::from_unix_timestamp(NOW + 86_400).unwrap();
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    params.signed_by(&leaf_key, &issuer).unwrap().pem()
}

#[test]
fn the_ca_previewd_makes_vouches_only_for_the_configured_domains_and_for_months() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), TWO_DOMAINS);
    let ca = previewd::ca::from_config(&config, NOW, LocalKeys::Create)
        .unwrap()
        .unwrap();
    let ca_pem = std::fs::read_to_string(dir.path().join("previewd-ca.crt")).unwrap();
    let ca_key = std::fs::read_to_string(dir.path().join("previewd-ca.key")).unwrap();
    assert_eq!(ca.cert_pem(), ca_pem);

    let (_, pem) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
    let cert = pem.parse_x509().unwrap();
    let constraints = cert
        .name_constraints()
        .unwrap()
        .expect("the CA has name constraints");
    assert!(
        constraints.critical,
        "clients that do not know them must refuse the CA"
    );
    assert!(constraints.value.excluded_subtrees.is_none());
    let permitted: Vec<String> = constraints
        .value
        .permitted_subtrees
        .as_ref()
        .unwrap()
        .iter()
        .map(|subtree| match subtree.base {
            x509_parser::extensions::GeneralName::DNSName(name) => name.to_owned(),
            ref other => panic!("only DNS names are permitted, not {other:?}"),
        })
        .collect();
    assert_eq!(permitted, ["preview.example.com", "review.example.org"]);
    // 14-day previews: leaves last 15 days and an hour; the CA twice that, at least 90 days.
    let validity = cert.validity();
    assert_eq!(validity.not_before.timestamp(), NOW - 3600);
    assert_eq!(validity.not_after.timestamp(), NOW + 90 * 86_400);

    for inside in [
        "octo-app-pr-7.preview.example.com",
        "octo-docs-pr-2.review.example.org",
    ] {
        let issued = ca.issue(inside, NOW, NOW + 14 * 86_400).unwrap();
        // A leaf outlives its preview's latest end by a day of sweep and teardown at most.
        let leaf = leaf_of(&issued.chain_pem);
        let (_, pem) = x509_parser::pem::parse_x509_pem(leaf.as_bytes()).unwrap();
        let leaf_end = pem.parse_x509().unwrap().validity().not_after.timestamp();
        assert!(leaf_end <= NOW + 15 * 86_400, "{inside} until {leaf_end}");
        let (ok, out) = verify(dir.path(), &ca_pem, &leaf_of(&issued.chain_pem), NOW + 60);
        assert!(ok, "{inside}: {out}");
        let (ok, out) = verify(
            dir.path(),
            &ca_pem,
            &forged(&ca_pem, &ca_key, inside),
            NOW + 60,
        );
        assert!(ok, "{inside}: {out}");
    }
    for outside in [
        "www.example.net",
        "preview.example.com.evil.net",
        "example.com",
    ] {
        let (ok, out) = verify(
            dir.path(),
            &ca_pem,
            &forged(&ca_pem, &ca_key, outside),
            NOW + 60,
        );
        assert!(
            !ok && out.contains("permitted subtree violation"),
            "{outside}: {out}"
        );
        let refused = ca
            .issue(outside, NOW, NOW + 86_400)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("outside the preview CA's domains"),
            "{refused}"
        );
    }
}

fn ca_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("previewd-ca.crt")).unwrap()
}

/// A CA is renewed once less than one leaf lifetime is left, so every leaf ends before its
/// CA; the previous CA's leaves keep verifying against it to their end.
#[test]
fn the_ca_is_renewed_before_a_leaf_could_outlive_it_and_its_old_leaves_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_in(dir.path(), TWO_DOMAINS);
    let leaf_secs = 14 * 86_400 + MARGIN_SECS + 3600;
    let first = previewd::ca::from_config(&config, NOW, LocalKeys::Create)
        .unwrap()
        .unwrap();
    let first_pem = ca_file(dir.path());
    let old_leaf = first
        .issue("a.preview.example.com", NOW, NOW + 14 * 86_400)
        .unwrap();

    // A start while one leaf lifetime still fits keeps the CA.
    let due = NOW + 90 * 86_400 - leaf_secs;
    let kept = previewd::ca::from_config(&config, due - 60, LocalKeys::Create)
        .unwrap()
        .unwrap();
    assert_eq!(kept.cert_pem(), first_pem);
    // A start after that makes a new one, beside the state.
    let renewed = previewd::ca::from_config(&config, due + 60, LocalKeys::Create)
        .unwrap()
        .unwrap();
    assert_ne!(renewed.cert_pem(), first_pem);
    assert_eq!(renewed.cert_pem(), ca_file(dir.path()));

    // A long-running previewd renews before issuing, too.
    let issued = kept
        .issue("b.preview.example.com", due + 120, due + 120 + 14 * 86_400)
        .unwrap();
    assert_ne!(issued.ca_pem, first_pem);
    assert_eq!(issued.ca_pem, ca_file(dir.path()));
    let (ok, out) = verify(
        dir.path(),
        &issued.ca_pem,
        &leaf_of(&issued.chain_pem),
        due + 120 + 14 * 86_400 + MARGIN_SECS - 60,
    );
    assert!(ok, "{out}");

    // The first CA's leaf is valid to its last minute.
    let (ok, out) = verify(
        dir.path(),
        &first_pem,
        &leaf_of(&old_leaf.chain_pem),
        NOW + 14 * 86_400 + MARGIN_SECS - 60,
    );
    assert!(ok, "{out}");
}

#[test]
fn the_ca_is_renewed_when_the_domains_change_or_when_it_has_no_name_constraints() {
    let dir = tempfile::tempdir().unwrap();
    let first =
        previewd::ca::from_config(&config_in(dir.path(), TWO_DOMAINS), NOW, LocalKeys::Create)
            .unwrap()
            .unwrap();
    let one_domain = "[tls]\nmode = \"sealed\"\n[defaults]\ndomain = \"preview.example.com\"\n";
    let renewed =
        previewd::ca::from_config(&config_in(dir.path(), one_domain), NOW, LocalKeys::Create)
            .unwrap()
            .unwrap();
    assert_ne!(renewed.cert_pem(), first.cert_pem());
    assert!(
        renewed
            .issue("a.review.example.org", NOW, NOW + 86_400)
            .is_err()
    );

    // What an older previewd made: five years, no constraints.
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.not_after = time::OffsetDateTime::from_unix_timestamp(NOW + 5 * 365 * 86_400).unwrap();
    let old = params.self_signed(&key).unwrap().pem();
    std::fs::write(dir.path().join("previewd-ca.crt"), &old).unwrap();
    std::fs::write(dir.path().join("previewd-ca.key"), key.serialize_pem()).unwrap();
    let renewed =
        previewd::ca::from_config(&config_in(dir.path(), one_domain), NOW, LocalKeys::Create)
            .unwrap()
            .unwrap();
    assert_ne!(renewed.cert_pem(), old);
}

/// An operator's CA is theirs to renew: a certificate that would outlive it is refused
/// rather than issued to fail before its preview ends.
#[test]
fn a_configured_ca_issues_nothing_that_would_outlive_it() {
    let (ca, key) = PreviewCa::generate("operator CA", &domain(), NOW, 10 * 86_400).unwrap();
    let ca = PreviewCa::load(&ca.cert_pem(), &key).unwrap();
    let refused = ca
        .issue("a.preview.example.com", NOW, NOW + 14 * 86_400)
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("before the certificate would"),
        "{refused}"
    );
    assert!(ca.issue("a.preview.example.com", NOW, NOW + 86_400).is_ok());
}
