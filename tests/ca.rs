//! Preview certificates from the preview CA, checked by `openssl` as a client would.

use std::process::Command;

use previewd::ca::{MARGIN_SECS, PreviewCa};

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

fn leaf_of(chain: &str) -> String {
    let end = "-----END CERTIFICATE-----";
    chain[..chain.find(end).unwrap() + end.len()].to_owned() + "\n"
}

#[test]
fn issued_certificates_verify_against_the_ca_with_the_right_name_and_validity() {
    let (ca, ca_key) = PreviewCa::generate("previewd preview CA", NOW, 365 * 86_400).unwrap();
    // A CA loaded back from its PEM files issues just the same.
    let ca = PreviewCa::load(&ca.cert_pem, &ca_key).unwrap();
    let expires_at = NOW + 3 * 86_400;
    let issued = ca
        .issue("octo-app-pr-7.preview.example.com", NOW, expires_at)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let (ca_path, leaf_path) = (dir.path().join("ca.pem"), dir.path().join("leaf.pem"));
    std::fs::write(&ca_path, &ca.cert_pem).unwrap();
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
    let (ca, _) = PreviewCa::generate("one", NOW, 86_400 * 30).unwrap();
    let (other, _) = PreviewCa::generate("two", NOW, 86_400 * 30).unwrap();
    let issued = ca
        .issue("a.preview.example.com", NOW, NOW + 86_400)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("other.pem"), &other.cert_pem).unwrap();
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
    assert!(PreviewCa::load(&ca.cert_pem, "not a key").is_err());
}
