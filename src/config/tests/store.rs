//! `state`: a file or a PostgreSQL URL, and what a shared state asks of the rest.

use super::*;

const SESSION: (&str, &str) = (
    "PREVIEWD_LOGIN_SESSION_SECRET",
    "a-session-secret-of-32-bytes-or-more",
);
const CLUSTER: &str = "[[clusters]]\nname = \"eu-1\"\nserver = \"https://eu-1.example.com\"\nsealing_cert = \"eu-1.pem\"\n";

#[test]
fn a_postgresql_url_from_the_environment_is_the_state_and_never_shown() {
    let url = "postgresql://previewd:hunter2@db.internal:5432/previewd";
    let config = Config::from_toml(CLUSTER, env(&[("PREVIEWD_STATE", url), SESSION])).unwrap();
    assert!(config.state.is_shared());
    assert_eq!(config.state.url(), Some(url));
    let shown = format!("{:?} {}", config, config.state);
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn a_postgresql_state_needs_one_session_secret_for_every_replica() {
    let e = error_of(
        CLUSTER,
        &[("PREVIEWD_STATE", "postgresql://db.internal/previewd")],
    );
    assert!(e.contains("login.session_secret"), "{e}");
    assert!(e.contains("every replica"), "{e}");
}

#[test]
fn a_postgresql_state_needs_every_cluster_to_name_its_sealing_certificate() {
    // Without [[clusters]], the implicit one seals with a key pair made beside the state.
    let e = error_of(
        "",
        &[
            ("PREVIEWD_STATE", "postgresql://db.internal/previewd"),
            SESSION,
        ],
    );
    assert!(e.contains("sealing_cert"), "{e}");
}

#[test]
fn a_postgresql_state_in_sealed_tls_mode_needs_the_ca_configured() {
    let toml = format!("{CLUSTER}[tls]\nmode = \"sealed\"\n");
    let e = error_of(
        &toml,
        &[
            ("PREVIEWD_STATE", "postgresql://db.internal/previewd"),
            SESSION,
        ],
    );
    assert!(e.contains("tls.ca_cert"), "{e}");
}

#[test]
fn a_url_sqlx_cannot_read_is_refused_without_repeating_the_password() {
    let e = error_of(
        "",
        &[("PREVIEWD_STATE", "postgresql://u:hunter2@db:port/x")],
    );
    assert!(e.contains("state"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
}
