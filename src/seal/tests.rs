//! Sealing against known answers from an independent implementation, and the ways a sealed
//! value must refuse to open.

use super::*;

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/sealed/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn test_key() -> PrivateKey {
    private_key_from_pem(&fixture("test-key.pem")).unwrap()
}

fn test_cert() -> SealingCert {
    SealingCert::from_pem(&fixture("test-cert.pem"), 1_795_910_400).unwrap()
}

fn sealed_object(name: &str) -> Value {
    serde_yaml_ng::from_str(&fixture(&format!("{name}.yaml"))).unwrap()
}

/// `expected.json` values as bytes: `data` is UTF-8 text, `dataBase64` binary.
fn expected(name: &str) -> BTreeMap<String, Vec<u8>> {
    let expected: Value = serde_json::from_str(&fixture(&format!("{name}.expected.json"))).unwrap();
    let secret = &expected[0];
    let text = secret["data"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().as_bytes().to_vec()));
    let binary = secret["dataBase64"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), STANDARD.decode(v.as_str().unwrap()).unwrap()));
    text.chain(binary).collect()
}

fn opened(secret: &Value) -> BTreeMap<String, Vec<u8>> {
    secret["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), STANDARD.decode(v.as_str().unwrap()).unwrap()))
        .collect()
}

#[test]
fn known_answers_unseal_for_every_scope_binary_and_empty_values() {
    for name in ["strict", "namespace-wide", "cluster-wide", "binary"] {
        let secret = unseal_object(&[test_key()], &sealed_object(name))
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(opened(&secret), expected(name), "{name}");
    }
    assert_eq!(expected("strict")["EMPTY"], b"");
}

#[test]
fn the_sealing_certificate_is_read_with_its_fingerprint_and_expiry() {
    let cert = test_cert();
    assert_eq!(
        cert.fingerprint,
        "SHA256:Um+YrFtgOjvhwdRX/bdtamNMDS3vzBnR8ILbfbJumxY"
    );
    assert!(cert.not_after > 1_795_910_400);
}

#[test]
fn an_expired_certificate_is_refused() {
    let expiry = test_cert().not_after;
    let error = SealingCert::from_pem(&fixture("test-cert.pem"), expiry + 1).unwrap_err();
    assert_eq!(error, SealError::Expired { expired: expiry });
    assert!(SealingCert::from_pem("not a certificate", 0).is_err());
}

#[test]
fn sealed_values_open_for_their_scope_and_nowhere_else() {
    let (cert, keys) = (test_cert(), [test_key()]);
    let strict = seal_value(&cert, Scope::Strict, "ns", "db", b"hunter2").unwrap();
    assert_eq!(
        unseal_value(&keys, Scope::Strict, "ns", "db", &strict).unwrap(),
        b"hunter2"
    );
    assert!(matches!(
        unseal_value(&keys, Scope::Strict, "ns", "renamed", &strict),
        Err(UnsealError::WrongKeyOrLabel { .. })
    ));
    assert!(matches!(
        unseal_value(&keys, Scope::Strict, "other-ns", "db", &strict),
        Err(UnsealError::WrongKeyOrLabel { .. })
    ));

    let wide = seal_value(&cert, Scope::NamespaceWide, "ns", "db", b"v").unwrap();
    assert_eq!(
        unseal_value(&keys, Scope::NamespaceWide, "ns", "any-name", &wide).unwrap(),
        b"v"
    );
    assert!(unseal_value(&keys, Scope::NamespaceWide, "other-ns", "db", &wide).is_err());

    let anywhere = seal_value(&cert, Scope::ClusterWide, "ns", "db", b"").unwrap();
    assert_eq!(
        unseal_value(&keys, Scope::ClusterWide, "elsewhere", "x", &anywhere).unwrap(),
        b""
    );
}

#[test]
fn every_value_gets_its_own_session_key() {
    let cert = test_cert();
    let a = seal_value(&cert, Scope::Strict, "ns", "db", b"same").unwrap();
    let b = seal_value(&cert, Scope::Strict, "ns", "db", b"same").unwrap();
    assert_ne!(a, b);
    // Layout: 2-byte length (512 for RSA-4096), the wrapped key, the value and a 16-byte tag.
    let raw = STANDARD.decode(&a).unwrap();
    assert_eq!((&raw[..2], raw.len()), (&[2u8, 0][..], 2 + 512 + 4 + 16));
}

#[test]
fn a_value_sealed_for_another_clusters_key_does_not_open() {
    let other = PrivateKey::new(&mut getrandom::SysRng, 2048).unwrap();
    let other_cert = SealingCert::from_public_key(other.to_public_key(), i64::MAX);
    let value = seal_value(&other_cert, Scope::Strict, "ns", "db", b"x").unwrap();
    assert!(matches!(
        unseal_value(&[test_key()], Scope::Strict, "ns", "db", &value),
        Err(UnsealError::WrongKeyOrLabel { .. })
    ));
    // With both keys held (a controller after a renewal), it opens.
    assert_eq!(
        unseal_value(&[test_key(), other], Scope::Strict, "ns", "db", &value).unwrap(),
        b"x"
    );
}

#[test]
fn tampering_with_any_byte_is_detected() {
    let value = seal_value(&test_cert(), Scope::Strict, "ns", "db", b"payload").unwrap();
    let raw = STANDARD.decode(&value).unwrap();
    for position in [0, 1, 2, 300, 514, raw.len() - 17, raw.len() - 1] {
        let mut bad = raw.clone();
        bad[position] ^= 0x01;
        assert!(
            unseal_value(
                &[test_key()],
                Scope::Strict,
                "ns",
                "db",
                &STANDARD.encode(&bad)
            )
            .is_err(),
            "byte {position}"
        );
    }
    assert_eq!(
        unseal_value(&[test_key()], Scope::Strict, "ns", "db", "!!!"),
        Err(UnsealError::Base64)
    );
    assert_eq!(
        unseal_value(
            &[test_key()],
            Scope::Strict,
            "ns",
            "db",
            &STANDARD.encode([0u8, 5, 1])
        ),
        Err(UnsealError::Truncated)
    );
}

#[test]
fn sealed_secret_objects_round_trip_through_unseal() {
    let spec = SecretSpec {
        name: "octo-app-pr-7-db".into(),
        namespace: "octo-app-pr-7".into(),
        scope: Scope::NamespaceWide,
        type_: "Opaque".into(),
        labels: BTreeMap::new(),
        data: [("PASSWORD".to_string(), b"s3cret".to_vec())].into(),
        public: Default::default(),
        templates: Default::default(),
    };
    let object = sealed_secret_object(&seal_secret(&test_cert(), &spec).unwrap());
    assert_eq!(object["metadata"]["annotations"][NAMESPACE_WIDE], "true");
    assert_eq!(
        object["spec"]["template"]["metadata"]["annotations"][NAMESPACE_WIDE],
        "true"
    );
    let secret = unseal_object(&[test_key()], &object).unwrap();
    assert_eq!(opened(&secret), spec.data);
    assert!(
        !format!("{spec:?}").contains("s3cret"),
        "Debug never shows values"
    );
}

/// A strict Secret `db` holding one sealed value, PGPASSWORD = s3cret.
fn password_spec() -> SecretSpec {
    crate::secrets::spec(
        "db",
        "pv-octo-app-pr-7",
        "Opaque",
        [("PGPASSWORD", "s3cret".to_string())],
    )
}

/// Public values ride in `spec.template.data`, which the controller renders with Go's
/// text/template (`sealedsecret_expansion.go` `Unseal`): literal text comes out as itself; a
/// value that holds an action would not, so it is sealed with the rest. A template around a
/// sealed value rides there as it is, and opens to the value in place.
#[test]
fn public_values_ride_unsealed_unless_the_controller_would_read_them_as_a_template() {
    let mut spec = password_spec().with_public([
        ("PGHOST", "postgres.svc".to_string()),
        ("ODD", "a {{ .PGPASSWORD }} b".to_string()),
    ]);
    spec.templates.insert(
        "URL".to_string(),
        "postgres://u:{{ .PGPASSWORD }}@h/u".to_string(),
    );
    let sealed = seal_secret(&test_cert(), &spec).unwrap();
    assert_eq!(
        sealed.encrypted_data.keys().collect::<Vec<_>>(),
        ["ODD", "PGPASSWORD"]
    );
    assert_eq!(
        sealed.template_data,
        BTreeMap::from([
            ("PGHOST".to_string(), "postgres.svc".to_string()),
            (
                "URL".to_string(),
                "postgres://u:{{ .PGPASSWORD }}@h/u".to_string()
            ),
        ])
    );
    let object = sealed_secret_object(&sealed);
    assert_eq!(object["spec"]["template"]["data"]["PGHOST"], "postgres.svc");
    let secret = unseal_object(&[test_key()], &object).unwrap();
    let mut expected = spec.data.clone();
    for (key, value) in &spec.public {
        expected.insert(key.clone(), value.clone().into_bytes());
    }
    expected.insert("URL".into(), b"postgres://u:s3cret@h/u".to_vec());
    assert_eq!(opened(&secret), expected);
}

#[test]
fn a_template_of_anything_but_a_sealed_value_is_refused() {
    let mut spec = password_spec();
    spec.templates
        .insert("URL".to_string(), "{{ .PGHOST }}".to_string());
    assert!(matches!(
        seal_secret(&test_cert(), &spec),
        Err(SealError::Template(key)) if key == "URL"
    ));
}

#[test]
fn unseal_refuses_template_data_only_the_controller_could_render() {
    let mut object = sealed_object("strict");
    object["spec"]["template"]["data"] = json!({"URL": "{{ .PASSWORD | b64enc }}@host"});
    let failures = unseal_object(&[test_key()], &object).unwrap_err();
    assert_eq!(failures, [("URL".to_string(), UnsealError::Template)]);
}

#[test]
fn unseal_names_every_value_that_fails() {
    let mut object = sealed_object("strict");
    object["metadata"]["name"] = "renamed".into();
    let failures = unseal_object(&[test_key()], &object).unwrap_err();
    let keys: Vec<&str> = failures.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["DATABASE_URL", "EMPTY", "PGPASSWORD"]);
}
