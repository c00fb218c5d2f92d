//! Sealing end to end: the `seal` and `unseal` commands, secrets in rendered previews, the
//! per-cluster certificates and what happens when a controller renews its key.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Delivery, TestApp};
use previewd::clusters::{self, LocalKeys, Rotation};
use previewd::seal::SealingCert;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sealed");
const NOW: i64 = common::NOW;

fn previewd(args: &[&str], dir: &Path) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_previewd"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

fn test_cert() -> SealingCert {
    SealingCert::from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-cert.pem")).unwrap(),
        NOW,
    )
    .unwrap()
}

#[test]
fn seal_then_unseal_returns_every_value_for_every_scope() {
    let dir = tempfile::tempdir().unwrap();
    let blob = dir.path().join("blob.bin");
    std::fs::write(&blob, [0u8, 159, 146, 150, 255]).unwrap();
    for scope in ["strict", "namespace-wide", "cluster-wide"] {
        let cert = format!("{FIXTURES}/test-cert.pem");
        let blob_arg = format!("BLOB=@{}", blob.display());
        let (ok, sealed, err) = previewd(
            &[
                "seal",
                "--cert",
                &cert,
                "--namespace",
                "pv-ns",
                "--name",
                "db",
                "--scope",
                scope,
                "PASSWORD=hunter2",
                "EMPTY=",
                &blob_arg,
            ],
            dir.path(),
        );
        assert!(ok, "{scope}: {err}");
        assert!(!sealed.contains("hunter2"));
        std::fs::write(dir.path().join("sealed.yaml"), &sealed).unwrap();
        let key = format!("{FIXTURES}/test-key.pem");
        let (ok, secret, err) = previewd(
            &["unseal", "--key", &key, "--file", "sealed.yaml"],
            dir.path(),
        );
        assert!(ok, "{scope}: {err}");
        let secret: serde_json::Value =
            serde_yaml_ng::from_str(secret.trim_start_matches("---\n")).unwrap();
        let data = &secret["data"];
        assert_eq!(
            base64_decode(data["PASSWORD"].as_str().unwrap()),
            b"hunter2",
            "{scope}"
        );
        assert_eq!(
            base64_decode(data["EMPTY"].as_str().unwrap()),
            b"",
            "{scope}"
        );
        assert_eq!(
            base64_decode(data["BLOB"].as_str().unwrap()),
            [0u8, 159, 146, 150, 255],
            "binary values survive"
        );
    }
}

#[test]
fn unseal_fails_naming_each_value_that_does_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let moved = std::fs::read_to_string(format!("{FIXTURES}/strict.yaml"))
        .unwrap()
        .replace("namespace: pv-octo-repo-42", "namespace: elsewhere");
    std::fs::write(dir.path().join("moved.yaml"), moved).unwrap();
    let key = format!("{FIXTURES}/test-key.pem");
    let (ok, _, err) = previewd(
        &["unseal", "--key", &key, "--file", "moved.yaml"],
        dir.path(),
    );
    assert!(!ok);
    for value in ["DATABASE_URL", "EMPTY", "PGPASSWORD"] {
        assert!(
            err.contains(&format!("elsewhere/preview-db {value}:")),
            "{err}"
        );
    }
}

#[test]
fn seal_refuses_an_expired_certificate_and_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = previewd(
        &[
            "seal",
            "--cert",
            "missing.pem",
            "--namespace",
            "n",
            "--name",
            "x",
            "K=v",
        ],
        dir.path(),
    );
    assert!(!ok && err.contains("missing.pem"), "{err}");
    let cert = format!("{FIXTURES}/test-cert.pem");
    let (ok, _, err) = previewd(
        &[
            "seal",
            "--cert",
            &cert,
            "--namespace",
            "Bad_NS",
            "--name",
            "x",
            "K=v",
        ],
        dir.path(),
    );
    assert!(!ok && err.contains("Bad_NS"), "{err}");
    let (ok, _, err) = previewd(
        &[
            "seal",
            "--cert",
            &cert,
            "--namespace",
            "n",
            "--name",
            "x",
            "novalue",
        ],
        dir.path(),
    );
    assert!(!ok && err.contains("KEY=VALUE"), "{err}");
    // An expired certificate: sealing for a controller that no longer holds the key would
    // produce secrets nothing can open.
    let expired = SealingCert::from_pem(
        &std::fs::read_to_string(&cert).unwrap(),
        test_cert().not_after + 1,
    );
    assert!(expired.unwrap_err().to_string().contains("expired"));
}

#[test]
fn rendered_previews_carry_their_secrets_sealed_for_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[[clusters]]\nname = \"eu-1\"\nserver = \"https://eu-1.example.com\"\nsealing_cert = \"{FIXTURES}/test-cert.pem\"\n"
    );
    let application = render_opened(dir.path(), &config);
    let sealed = application["spec"]["source"]["helm"]["valuesObject"]["sealedSecrets"]
        .as_array()
        .unwrap();
    assert_eq!(
        sealed.len(),
        2,
        "connection Secret in the preview namespace, password in the provisioner's"
    );
    let (mut password, mut verifier) = (None, None);
    for entry in sealed {
        let secret = unseal_entry(entry);
        let value = |k: &str| {
            secret["data"][k]
                .as_str()
                .map(|v| String::from_utf8(base64_decode(v)).unwrap())
        };
        password = password.or(value("PGPASSWORD"));
        verifier = verifier.or(value("VERIFIER"));
        if let Some(url) = value("DATABASE_URL") {
            assert!(
                url.starts_with("postgres://pv_codertocat_hello_world_4d960c3af87af320_pr_2:")
                    && url.ends_with(
                        "@postgres.previewd-system.svc:5432/pv_codertocat_hello_world_4d960c3af87af320_pr_2"
                    ),
                "{url}"
            );
        }
    }
    let (password, verifier) = (password.unwrap(), verifier.unwrap());
    assert_eq!(password.len(), 32);
    // The provisioner gets the verifier of the app's password, never the password.
    let salt = base64_decode(verifier.split(['$', ':']).nth(2).unwrap());
    assert_eq!(
        verifier,
        previewd::secrets::scram_verifier(&password, &salt.try_into().unwrap()),
        "the role's verifier is the app's password's"
    );
}

/// Renders the fixture `pull_request.opened` with `config` (written as previewd.toml in
/// `dir`) through the binary and returns the helper Application.
fn render_opened(dir: &Path, config: &str) -> serde_json::Value {
    std::fs::write(dir.join("previewd.toml"), config).unwrap();
    let event = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/github/pull_request.opened.json"
    );
    let (ok, yaml, err) = previewd(&["render", "--event", event], dir);
    assert!(ok, "{err}");
    serde_yaml_ng::from_str(yaml.trim_start_matches("---\n")).unwrap()
}

/// Opens one `sealedSecrets` entry of the chart values with the test key.
fn unseal_entry(entry: &serde_json::Value) -> serde_json::Value {
    let object = previewd::seal::sealed_secret_object(&previewd::render::SealedSecret {
        name: entry["name"].as_str().unwrap().into(),
        namespace: entry["namespace"].as_str().unwrap().into(),
        scope: "strict",
        type_: entry["type"].as_str().unwrap().into(),
        labels: Default::default(),
        encrypted_data: serde_json::from_value(entry["encryptedData"].clone()).unwrap(),
        template_data: serde_json::from_value(entry["templateData"].clone()).unwrap_or_default(),
    });
    let pem = std::fs::read_to_string(format!("{FIXTURES}/test-key.pem")).unwrap();
    let key = previewd::seal::private_key_from_pem(&pem).unwrap();
    previewd::seal::unseal_object(&[key], &object).unwrap()
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[test]
fn the_default_cluster_gets_a_local_key_pair_created_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("previewd.db");
    let config = previewd::config::Config::from_toml(
        "",
        vec![("PREVIEWD_STATE".into(), state.display().to_string())],
    )
    .unwrap();
    let first = clusters::sealing_certs(&config, NOW, LocalKeys::Existing)
        .remove("in-cluster")
        .unwrap();
    assert!(
        first.unwrap_err().to_string().contains("previewd serve"),
        "render never creates keys"
    );
    let created = clusters::sealing_certs(&config, NOW, LocalKeys::Create)
        .remove("in-cluster")
        .unwrap()
        .unwrap();
    let again = clusters::sealing_certs(&config, NOW, LocalKeys::Create)
        .remove("in-cluster")
        .unwrap()
        .unwrap();
    assert_eq!(created.fingerprint, again.fingerprint);
    let (key, _) = clusters::local_key_paths(&state);
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions())
            & 0o777,
        0o600
    );
    // And the pair works: what is sealed with the certificate opens with the key.
    let private =
        previewd::seal::private_key_from_pem(&std::fs::read_to_string(key).unwrap()).unwrap();
    let value = previewd::seal::seal_value(&created, previewd::seal::Scope::Strict, "n", "s", b"x")
        .unwrap();
    assert_eq!(
        previewd::seal::unseal_value(&[private], previewd::seal::Scope::Strict, "n", "s", &value)
            .unwrap(),
        b"x"
    );
}

#[test]
fn a_configured_cluster_needs_an_unexpired_certificate() {
    let config = previewd::config::Config::from_toml(
        &format!("[[clusters]]\nname = \"a\"\nserver = \"https://a\"\nsealing_cert = \"{FIXTURES}/test-cert.pem\"\n[[clusters]]\nname = \"b\"\nserver = \"https://b\"\n"),
        Vec::new(),
    )
    .unwrap();
    let mut certs = clusters::sealing_certs(&config, test_cert().not_after + 1, LocalKeys::Create);
    assert!(format!("{:#}", certs.remove("a").unwrap().unwrap_err()).contains("expired"));
    assert!(
        certs
            .remove("b")
            .unwrap()
            .unwrap_err()
            .to_string()
            .contains("cluster b has no sealing_cert")
    );
}

#[tokio::test]
async fn a_renewed_controller_key_keeps_the_sealed_values_of_live_previews() {
    let app = TestApp::start().await;
    for n in [1, 2, 3] {
        app.send(&Delivery::fixture("pull_request.opened").number(n))
            .await;
    }
    // Previews 1 and 2 on eu-1 (2 is closed), 3 on us-1; each has sealed values.
    for (n, cluster) in [(1, "eu-1"), (2, "eu-1"), (3, "us-1")] {
        sqlx::query("UPDATE previews SET cluster = ?1 WHERE number = ?2")
            .bind(cluster)
            .bind(n)
            .execute(app.pool())
            .await
            .unwrap();
        sqlx::query("INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at) SELECT id, 'ns', 'db', 'strict', 'old', '{}', 0 FROM previews WHERE number = ?1")
            .bind(n)
            .execute(app.pool())
            .await
            .unwrap();
    }
    app.execute("UPDATE previews SET desired = 'absent' WHERE number = 2")
        .await;

    let old = test_cert();
    let other = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
    let new = SealingCert::from_public_key(other.to_public_key(), i64::MAX);
    assert_eq!(
        clusters::check_rotation(app.state(), "eu-1", &old, NOW)
            .await
            .unwrap(),
        Rotation::FirstSeen
    );
    assert_eq!(
        clusters::check_rotation(app.state(), "eu-1", &old, NOW)
            .await
            .unwrap(),
        Rotation::Unchanged
    );
    assert_eq!(
        clusters::check_rotation(app.state(), "eu-1", &new, NOW)
            .await
            .unwrap(),
        Rotation::Renewed { previews: 1 }
    );
    assert_eq!(
        clusters::check_rotation(app.state(), "eu-1", &new, NOW)
            .await
            .unwrap(),
        Rotation::Unchanged
    );

    let remaining: Vec<i64> = app.scalars("SELECT p.number FROM sealed_secrets s JOIN previews p ON p.id = s.preview_id ORDER BY p.number").await;
    assert_eq!(
        remaining,
        [1, 2, 3],
        "running pods hold the passwords inside: nothing is sealed anew"
    );
    let history = app.history("codertocat/hello-world", 1).await;
    let last = history.last().unwrap();
    assert_eq!((last.0.as_str(), last.1.as_str()), ("resealed", "previewd"));
    assert!(last.2.contains(&new.fingerprint), "{last:?}");
    assert!(last.2.contains("kept"), "{last:?}");
}

#[test]
fn sealed_tls_mode_carries_a_certificate_from_the_preview_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, ca_key) = previewd::ca::PreviewCa::generate(
        "test CA",
        &["preview.localhost".into()],
        NOW - 86_400,
        10 * 365 * 86_400,
    )
    .unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca.cert_pem()).unwrap();
    std::fs::write(dir.path().join("ca.key"), ca_key).unwrap();
    let config = format!(
        "[tls]\nmode = \"sealed\"\nca_cert = \"ca.crt\"\nca_key = \"ca.key\"\n[database]\nmode = \"off\"\n\
         [[clusters]]\nname = \"eu-1\"\nserver = \"https://eu-1.example.com\"\nsealing_cert = \"{FIXTURES}/test-cert.pem\"\n"
    );
    let application = render_opened(dir.path(), &config);
    let values = &application["spec"]["source"]["helm"]["valuesObject"];
    let entry = &values["sealedSecrets"][0];
    assert_eq!(
        (entry["type"].as_str(), entry["name"].as_str()),
        (
            Some("kubernetes.io/tls"),
            values["tls"]["secretName"].as_str()
        )
    );
    let secret = unseal_entry(entry);
    let chain =
        String::from_utf8(base64_decode(secret["data"]["tls.crt"].as_str().unwrap())).unwrap();
    std::fs::write(dir.path().join("chain.pem"), &chain).unwrap();
    let output = Command::new("openssl")
        .args([
            "verify",
            "-CAfile",
            "ca.crt",
            "-untrusted",
            "chain.pem",
            "chain.pem",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let san = Command::new("openssl")
        .args([
            "x509",
            "-noout",
            "-ext",
            "subjectAltName",
            "-in",
            "chain.pem",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&san.stdout)
            .contains("DNS:pv-codertocat-hello-world-4d960c3af87af320-pr-2.preview.localhost")
    );
}

/// The reconciler, after a renewal, keeps applying what the old certificate sealed: the
/// database password the running pods have must not change under them.
#[tokio::test]
async fn after_a_renewal_the_reconciler_keeps_the_old_sealed_values() {
    let app = TestApp::start().await;
    app.send(&Delivery::fixture("pull_request.opened")).await;
    std::sync::Arc::new(common::directory_reconciler(&app))
        .pass()
        .await
        .unwrap();
    let sealed = || async {
        sqlx::query_as::<_, (String, String)>(
            "SELECT name, encrypted_data FROM sealed_secrets ORDER BY name",
        )
        .fetch_all(app.pool())
        .await
        .unwrap()
    };
    let before = sealed().await;
    assert!(!before.is_empty());

    let other = rsa::PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
    let renewed = SealingCert::from_public_key(other.to_public_key(), i64::MAX);
    let reconciler = std::sync::Arc::new(common::directory_reconciler_sealing_with(&app, &renewed));
    // A push: the Application is rendered again, under the renewed certificate.
    app.send(&Delivery::push(
        "1111111111111111111111111111111111111111",
        "2030-01-01T00:00:00Z",
    ))
    .await;
    reconciler.pass().await.unwrap();
    assert_eq!(sealed().await, before, "nothing sealed anew");
    let rendered = std::fs::read_to_string(
        app.dir
            .path()
            .join("rendered/pv-codertocat-hello-world-4d960c3af87af320-pr-2-helpers.yaml"),
    )
    .unwrap();
    assert!(
        rendered.contains("1111111111111111111111111111111111111111"),
        "the push was applied"
    );
    fn leaves(value: &serde_json::Value, out: &mut Vec<String>) {
        match value {
            serde_json::Value::String(s) if s.len() > 40 => out.push(s.clone()),
            serde_json::Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
            _ => {}
        }
    }
    let mut ciphertexts = Vec::new();
    for (_, data) in &before {
        leaves(&serde_json::from_str(data).unwrap(), &mut ciphertexts);
    }
    assert!(!ciphertexts.is_empty());
    for ciphertext in ciphertexts {
        assert!(rendered.contains(&ciphertext), "old sealed value kept");
    }
}
