//! The secrets each preview gets: a strong random database password and the Secrets built
//! from it, generated once per preview. Plaintext lives only in memory: previewd stores the
//! sealed values, and `SecretSpec`'s Debug output never shows a value.

use std::collections::BTreeMap;

use rand::{CryptoRng, Rng, RngCore};

use crate::config::{AppConfig, Config, DatabaseMode};
use crate::naming::Names;
use crate::render::SecretNames;
use crate::seal::{Scope, SecretSpec, template};

mod services;
pub use services::{SMTP_PORT, SMTP_USERNAME, mail, messaging, services_missing};

/// 32 characters of [A-Za-z0-9]: about 190 bits, and nothing to escape in a URL.
pub fn password(rng: &mut (impl RngCore + CryptoRng)) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (0..32)
        .map(|_| char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]))
        .collect()
}

/// PostgreSQL's default SCRAM iteration count (`scram_iterations`, src/include/common/scram-common.h).
const SCRAM_ITERATIONS: u32 = 4096;

/// The SCRAM-SHA-256 verifier PostgreSQL stores for `password` (RFC 5802 and 7677, in the
/// form of src/common/scram-common.c scram_build_secret):
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`, base64. `CREATE ROLE ...
/// PASSWORD '<verifier>'` stores it as it is, so the password itself never reaches the
/// server, its log or the provisioner. The password must be what SASLprep leaves unchanged
/// (printable ASCII, as `password` makes); PostgreSQL prepares it the same way at login.
pub fn scram_verifier(password: &str, salt: &[u8; 16]) -> String {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    use sha2::{Digest, Sha256};
    debug_assert!(password.bytes().all(|b| b.is_ascii_graphic()));
    let mac = |key: &[u8], parts: &[&[u8]]| -> [u8; 32] {
        let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    };
    let salted = pbkdf2_sha256(password.as_bytes(), salt, SCRAM_ITERATIONS);
    let stored_key = Sha256::digest(mac(&salted, &[b"Client Key"]));
    let server_key = mac(&salted, &[b"Server Key"]);
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    format!(
        "SCRAM-SHA-256${SCRAM_ITERATIONS}:{}${}:{}",
        b64(salt),
        b64(&stored_key),
        b64(&server_key)
    )
}

/// PBKDF2-HMAC-SHA-256 (RFC 8018 section 5.2) for one block: the output is one hash long.
/// Each round after the first is HMAC over the last 32-byte result, so it runs on SHA-256's
/// compression function alone: the key's inner and outer pads are hashed once, and a round
/// is two blocks (with the `hmac` crate it cost twice as long, keying and finishing each
/// round; issue #17).
fn pbkdf2_sha256(password: &[u8], salt: &[u8], rounds: u32) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    use sha2::digest::generic_array::GenericArray;
    use sha2::{Digest, Sha256};
    const IV: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut key = [0u8; 64];
    if password.len() > 64 {
        key[..32].copy_from_slice(&Sha256::digest(password));
    } else {
        key[..password.len()].copy_from_slice(password);
    }
    let pad = |byte: u8| {
        let mut state = IV;
        sha2::compress256(&mut state, &[GenericArray::from(key.map(|k| k ^ byte))]);
        state
    };
    let (inner, outer) = (pad(0x36), pad(0x5c));
    // A 32-byte message after a 64-byte pad: 0x80, zeros, then its length in bits, 768.
    let mut block = [0u8; 64];
    block[32] = 0x80;
    block[62..].copy_from_slice(&768u16.to_be_bytes());
    let hash = |mut state: [u32; 8], block: &[u8; 64]| -> [u8; 32] {
        sha2::compress256(&mut state, &[GenericArray::from(*block)]);
        let mut out = [0u8; 32];
        for (bytes, word) in out.chunks_exact_mut(4).zip(state) {
            bytes.copy_from_slice(&word.to_be_bytes());
        }
        out
    };
    let mut round = |message: &[u8; 32]| -> [u8; 32] {
        block[..32].copy_from_slice(message);
        let hashed = hash(inner, &block);
        block[..32].copy_from_slice(&hashed);
        hash(outer, &block)
    };
    let mut first = Hmac::<Sha256>::new_from_slice(password).expect("HMAC takes any key length");
    first.update(salt);
    first.update(&1u32.to_be_bytes());
    let mut u: [u8; 32] = first.finalize().into_bytes().into();
    let mut salted = u;
    for _ in 1..rounds {
        u = round(&u);
        salted.iter_mut().zip(u).for_each(|(s, u)| *s ^= u);
    }
    salted
}

/// The hash RabbitMQ stores for `password` under `rabbit_password_hashing_sha256` (its
/// default): base64 of a 4-byte salt followed by SHA-256(salt ++ password), as its
/// management API takes it in `PUT /api/users/{name}` (`password_hash`, rabbitmq-server
/// deps/rabbit/src/rabbit_password.erl `hash/2`, `salted_hash/3`). The provisioner creates
/// the preview's broker user from this, and never sees the password.
pub fn rabbitmq_password_hash(password: &str, salt: [u8; 4]) -> String {
    salted_hash::<sha2::Sha256>(password, salt)
}

/// The same under `rabbit_password_hashing_sha512`, the algorithm the messaging-topology-
/// operator declares with a User's imported `passwordHash` (its internal/user.go
/// GenerateUserSettings; rabbit-hole users.go `Base64EncodedSaltedPasswordHashSHA512`).
pub fn rabbitmq_password_hash_sha512(password: &str, salt: [u8; 4]) -> String {
    salted_hash::<sha2::Sha512>(password, salt)
}

fn salted_hash<D: sha2::Digest>(password: &str, salt: [u8; 4]) -> String {
    use base64::Engine;
    let mut bytes = salt.to_vec();
    bytes.extend_from_slice(
        &D::new()
            .chain_update(salt)
            .chain_update(password)
            .finalize(),
    );
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The database Secrets of a preview, for the configured database mode (none when off).
pub fn database(
    config: &Config,
    names: &Names,
    rng: &mut (impl RngCore + CryptoRng),
) -> Vec<SecretSpec> {
    let db = &config.database;
    let (host, port) = match db.mode {
        DatabaseMode::Off => return Vec::new(),
        DatabaseMode::Shared => (db.host.clone(), db.port),
        DatabaseMode::Cnpg => (format!("{}-rw.{}.svc", db.cnpg_cluster, db.namespace), 5432),
    };
    let password = password(rng);
    let secrets = SecretNames::of(names);
    let role = &names.database;
    let url = |password: &str| format!("postgres://{role}:{password}@{host}:{port}/{role}");
    let mut connection = spec(
        &secrets.database_url,
        &names.slug,
        "Opaque",
        [("PGPASSWORD", password.clone())],
    )
    .with_public([
        ("PGHOST", host.clone()),
        ("PGPORT", port.to_string()),
        ("PGUSER", role.clone()),
        ("PGDATABASE", role.clone()),
    ]);
    // The URL around the sealed password, built by the controller: no RSA operation and no
    // 700 bytes of its own. Sealed whole if the host could be read as a template.
    let around = url(&template::action("PGPASSWORD"));
    if template::is_literal(&url("")) {
        connection.templates.insert("DATABASE_URL".into(), around);
    } else {
        connection
            .data
            .insert("DATABASE_URL".into(), url(&password).into_bytes());
    }
    let credentials = match db.mode {
        // The create Job reads it in the provisioner namespace: the verifier, not the
        // password, which only the preview's own namespace holds.
        DatabaseMode::Shared => {
            let mut salt = [0; 16];
            rng.fill_bytes(&mut salt);
            spec(
                &secrets.database_password,
                &db.namespace,
                "Opaque",
                [("VERIFIER", scram_verifier(&password, &salt))],
            )
        }
        // CloudNativePG wants basic-auth in its Cluster's namespace, labelled for reloads.
        _ => {
            let mut role_secret = spec(
                &secrets.database_role,
                &db.namespace,
                "kubernetes.io/basic-auth",
                [("password", password)],
            )
            .with_public([("username", role.clone())]);
            role_secret
                .labels
                .insert("cnpg.io/reload".into(), "true".into());
            role_secret
        }
    };
    vec![connection, credentials]
}

/// A template generation's report token (#16): 256 random bits, URL-safe base64, sealed for
/// the generation's cluster into the namespace its database Jobs run in, where the size Job
/// reads it. previewd keeps only `report_digest` of it.
pub fn template_report(
    config: &Config,
    names: &Names,
    rng: &mut (impl RngCore + CryptoRng),
) -> (SecretSpec, [u8; 32]) {
    use base64::Engine;
    let mut token = [0u8; 32];
    rng.fill_bytes(&mut token);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token);
    let digest = report_digest(&token);
    let spec = spec(
        &SecretNames::of(names).report,
        &config.database.namespace,
        "Opaque",
        [("TOKEN", token)],
    );
    (spec, digest)
}

/// What previewd stores of a report token: its SHA-256 (the token has 256 bits of entropy,
/// so no salt or stretching adds anything).
pub fn report_digest(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `token` is the one whose digest is `digest`, in constant time.
pub fn report_token_matches(token: &str, digest: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(report_digest(token).as_slice().ct_eq(digest))
}

/// Every Secret a preview gets: its database credentials, its mail and broker logins (as
/// its repository asks) and, with a preview CA, its TLS certificate (valid through
/// `valid_until` plus the CA's margin).
pub fn for_preview(
    config: &Config,
    app: &AppConfig,
    names: &Names,
    ca: Option<&crate::ca::PreviewCa>,
    now: i64,
    valid_until: i64,
    rng: &mut (impl RngCore + CryptoRng),
) -> Result<Vec<SecretSpec>, crate::ca::CaError> {
    let mut secrets = database(config, names, rng);
    secrets.extend(mail(app, names, rng));
    secrets.extend(messaging(config, app, names, rng));
    if let Some(ca) = ca {
        let issued = ca.issue(&names.host, now, valid_until)?;
        secrets.push(
            spec(
                &SecretNames::of(names).tls,
                &names.slug,
                "kubernetes.io/tls",
                [("tls.key", issued.key_pem)],
            )
            .with_public([("tls.crt", issued.chain_pem), ("ca.crt", issued.ca_pem)]),
        );
    }
    Ok(secrets)
}

/// A strict-scope Secret: it opens only under this name in this namespace.
pub fn spec<const N: usize>(
    name: &str,
    namespace: &str,
    type_: &str,
    data: [(&str, String); N],
) -> SecretSpec {
    SecretSpec {
        name: name.into(),
        namespace: namespace.into(),
        scope: Scope::Strict,
        type_: type_.into(),
        labels: BTreeMap::new(),
        data: data
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.into_bytes()))
            .collect(),
        public: BTreeMap::new(),
        templates: BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names::of(&"octo/app#7".parse().unwrap(), "preview.example.com")
    }

    #[test]
    fn passwords_are_long_random_and_url_safe() {
        let mut rng = rand::thread_rng();
        let (a, b) = (password(&mut rng), password(&mut rng));
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn shared_mode_gets_a_connection_secret_and_only_a_verifier_for_the_provisioner() {
        let config = Config::from_toml("", Vec::new()).unwrap();
        let secrets = database(&config, &names(), &mut rand::thread_rng());
        assert_eq!(secrets.len(), 2);
        let (connection, password) = (&secrets[0], &secrets[1]);
        assert_eq!(
            (connection.name.as_str(), connection.namespace.as_str()),
            (
                "pv-octo-app-609ddd1d069bc4c5-pr-7-db",
                "pv-octo-app-609ddd1d069bc4c5-pr-7"
            )
        );
        assert_eq!(
            (password.name.as_str(), password.namespace.as_str()),
            (
                "pv-octo-app-609ddd1d069bc4c5-pr-7-db-password",
                "previewd-system"
            )
        );
        // Built by the controller around the sealed password.
        let url = template::render(&connection.templates["DATABASE_URL"], &connection.data);
        let url = String::from_utf8(url.unwrap()).unwrap();
        let pw = String::from_utf8(connection.data["PGPASSWORD"].clone()).unwrap();
        assert_eq!(
            url,
            format!(
                "postgres://pv_octo_app_609ddd1d069bc4c5_pr_7:{pw}@postgres.previewd-system.svc:5432/pv_octo_app_609ddd1d069bc4c5_pr_7"
            )
        );
        assert_eq!(
            password.data.keys().collect::<Vec<_>>(),
            ["VERIFIER"],
            "the provisioner never sees the password"
        );
        let verifier = String::from_utf8(password.data["VERIFIER"].clone()).unwrap();
        let salt = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            verifier.split(['$', ':']).nth(2).unwrap(),
        )
        .unwrap();
        assert_eq!(verifier, scram_verifier(&pw, &salt.try_into().unwrap()));
        assert!(
            !format!("{secrets:?}").contains(&pw),
            "Debug output shows no value"
        );
    }

    /// Computed independently, with Python's hashlib.pbkdf2_hmac and hmac, by the RFC 5802
    /// formulas; tests/postgres/provisioning.rs logs in with a verifier through SCRAM on a
    /// real server.
    #[test]
    fn verifiers_follow_rfc_5802() {
        let salt: [u8; 16] = *b"previewd-salt-16";
        assert_eq!(
            scram_verifier("correct-horse-battery-staple", &salt),
            EXPECTED_VERIFIER
        );
    }

    /// PBKDF2 as RFC 8018 writes it, each round a whole HMAC: the compression-function
    /// rounds must agree for keys up to a block and past it (HMAC hashes those first).
    #[test]
    fn pbkdf2_rounds_agree_with_whole_hmacs_for_short_and_long_passwords() {
        use hmac::{Hmac, Mac};
        let reference = |password: &[u8], salt: &[u8], rounds: u32| {
            let mac = |parts: &[&[u8]]| -> [u8; 32] {
                let mut mac = Hmac::<sha2::Sha256>::new_from_slice(password).unwrap();
                parts.iter().for_each(|part| mac.update(part));
                mac.finalize().into_bytes().into()
            };
            let mut u = mac(&[salt, &1u32.to_be_bytes()]);
            let mut out = u;
            for _ in 1..rounds {
                u = mac(&[&u]);
                out.iter_mut().zip(u).for_each(|(o, u)| *o ^= u);
            }
            out
        };
        for length in [0, 1, 32, 63, 64, 65, 200] {
            let password = vec![b'p'; length];
            for rounds in [1, 2, 7] {
                assert_eq!(
                    pbkdf2_sha256(&password, b"salt", rounds),
                    reference(&password, b"salt", rounds),
                    "{length}-byte password, {rounds} rounds"
                );
            }
        }
    }

    /// RabbitMQ's own worked example (rabbitmq.com docs/passwords, "Computing Password
    /// Hash": salt 0x908DC60A, password `test12`); tests/messaging.rs logs in on a real broker.
    /// The topology operator's own example (messaging-topology-operator v1.20.1
    /// docs/examples/users/userWithPasswordHash.yaml: "some-password", salt 4a359b35),
    /// recomputed with Python's hashlib.
    #[test]
    fn sha512_broker_hashes_follow_the_operators_example() {
        assert_eq!(
            rabbitmq_password_hash_sha512("some-password", [0x4a, 0x35, 0x9b, 0x35]),
            SHA512_EXAMPLE
        );
    }

    #[test]
    fn broker_password_hashes_follow_rabbitmqs_worked_example() {
        assert_eq!(
            rabbitmq_password_hash("test12", [0x90, 0x8d, 0xc6, 0x0a]),
            "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR"
        );
    }

    const SHA512_EXAMPLE: &str = "SjWbNXaNEwcoOOZWxG6J1HCF5P83lUavsCto+wh1s9zdOfoZ/CPv6l/SSdK3RC2+1QWmJGdYt5740j3ZLf/0RbpusNc=";

    const EXPECTED_VERIFIER: &str = "SCRAM-SHA-256$4096:cHJldmlld2Qtc2FsdC0xNg==$SN4FLGCc/zuie0vFvV43DnjJjt6KYKcFUWX7nxqKzdM=:rZ4twhi/lgrmXKRViQHoqCDPYA+T5hKDePzT76Yxprc=";

    #[test]
    fn cnpg_mode_gets_a_basic_auth_secret_in_the_clusters_namespace() {
        let config = Config::from_toml(
            "[database]\nmode = \"cnpg\"\nnamespace = \"pg\"\ncnpg_cluster = \"main\"\n",
            Vec::new(),
        )
        .unwrap();
        let secrets = database(&config, &names(), &mut rand::thread_rng());
        let role = &secrets[1];
        assert_eq!(
            (role.type_.as_str(), role.namespace.as_str()),
            ("kubernetes.io/basic-auth", "pg")
        );
        assert_eq!(role.labels["cnpg.io/reload"], "true");
        assert_eq!(secrets[0].public["PGHOST"], "main-rw.pg.svc");
        assert_eq!(role.public["username"], "pv_octo_app_609ddd1d069bc4c5_pr_7");
    }

    /// A host the controller would read as a template leaves no template to build the URL
    /// around: it is sealed whole.
    #[test]
    fn a_url_that_would_not_render_as_itself_is_sealed_whole() {
        let config = Config::from_toml(
            "[database]\nmode = \"shared\"\nhost = \"pg{{x}}.svc\"\n",
            Vec::new(),
        )
        .unwrap();
        let secrets = database(&config, &names(), &mut rand::thread_rng());
        assert!(secrets[0].templates.is_empty());
        let url = String::from_utf8(secrets[0].data["DATABASE_URL"].clone()).unwrap();
        assert!(url.contains("@pg{{x}}.svc:5432/"), "{url}");
    }

    /// Sealing is an RSA-4096 operation a value: only what must stay secret is sealed, and no
    /// public value carries the password.
    #[test]
    fn only_passwords_keys_and_verifiers_are_sealed() {
        let (ca, _) = crate::ca::PreviewCa::generate(
            "previewd preview CA",
            &["preview.example.com".to_owned()],
            0,
            365 * 86_400,
        )
        .unwrap();
        for (mode, credentials) in [("shared", "VERIFIER"), ("cnpg", "password")] {
            let config = Config::from_toml(
                &format!("[database]\nmode = \"{mode}\"\ncnpg_cluster = \"main\"\n"),
                Vec::new(),
            )
            .unwrap();
            let secrets = for_preview(
                &config,
                &AppConfig::default(),
                &names(),
                Some(&ca),
                0,
                86_400,
                &mut rand::thread_rng(),
            )
            .unwrap();
            let sealed: Vec<Vec<&str>> = secrets
                .iter()
                .map(|s| s.data.keys().map(String::as_str).collect())
                .collect();
            assert_eq!(
                sealed,
                [vec!["PGPASSWORD"], vec![credentials], vec!["tls.key"]],
                "{mode}"
            );
            let password = std::str::from_utf8(&secrets[0].data["PGPASSWORD"]).unwrap();
            let public: Vec<&String> = secrets
                .iter()
                .flat_map(|s| s.public.values().chain(s.templates.values()))
                .collect();
            assert!(public.iter().all(|v| !v.contains(password)), "{mode}");
            assert!(public.iter().all(|v| !v.contains("PRIVATE KEY")), "{mode}");
        }
    }

    #[test]
    fn no_database_no_secrets() {
        let config = Config::from_toml("[database]\nmode = \"off\"\n", Vec::new()).unwrap();
        assert!(database(&config, &names(), &mut rand::thread_rng()).is_empty());
    }

    #[test]
    fn a_report_token_matches_only_its_own_digest() {
        let config = Config::from_toml("[database]\nmode = \"shared\"\n", Vec::new()).unwrap();
        let (spec, digest) = template_report(&config, &names(), &mut rand::thread_rng());
        let token = std::str::from_utf8(&spec.data["TOKEN"]).unwrap().to_owned();
        assert_eq!(token.len(), 43, "256 bits, unpadded base64");
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_eq!(spec.namespace, config.database.namespace);
        assert!(spec.name.ends_with("-db-report"), "{}", spec.name);
        assert!(report_token_matches(&token, &digest));
        let (other, _) = template_report(&config, &names(), &mut rand::thread_rng());
        assert!(!report_token_matches(
            std::str::from_utf8(&other.data["TOKEN"]).unwrap(),
            &digest
        ));
        assert!(!report_token_matches("", &digest));
        assert!(
            !report_token_matches(&token, &digest[..31]),
            "a truncated digest never matches"
        );
    }
}
