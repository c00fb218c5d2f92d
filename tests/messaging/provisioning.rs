//! What create makes: a vhost and user the app works with, the same on every rerun, and
//! apart for repositories whose names only differ where they are made safe.

use crate::Preview;

#[test]
fn a_created_previews_user_publishes_and_consumes_in_its_own_vhost() {
    let preview = Preview::of("octo/roundtrip#7");
    preview.create();
    let app = preview.amqp("roundtrip", &[]);
    assert_eq!(app["got"], app["sent"], "{app}");
    assert!(
        app["got"].as_str().unwrap().contains(&preview.slug),
        "{app}"
    );

    let broker = preview.broker();
    let vhost = broker.get(&format!("/api/vhosts/{}", preview.slug));
    assert_eq!(vhost["description"], "previewd preview octo/roundtrip#7");
    let user = broker.get(&format!("/api/users/{}", preview.slug));
    assert_eq!(user["tags"], serde_json::json!(["previewd"]));
    assert_eq!(user["hashing_algorithm"], "rabbit_password_hashing_sha256");
    let permissions = broker.get(&format!("/api/users/{}/permissions", preview.slug));
    assert_eq!(
        permissions,
        serde_json::json!([{"user": preview.slug, "vhost": preview.slug,
            "configure": ".*", "write": ".*", "read": ".*"}]),
        "its own vhost only"
    );
}

#[test]
fn create_is_idempotent() {
    let preview = Preview::of("octo/idempotent#3");
    preview.create();
    let first = preview.state();
    assert!(first.iter().all(|(status, _)| *status == 200), "{first:?}");
    preview.create();
    assert_eq!(preview.state(), first, "a rerun changed the broker");
    let app = preview.amqp("roundtrip", &[]);
    assert_eq!(app["got"], app["sent"], "{app}");
}

#[test]
fn previews_of_repositories_whose_safe_names_would_collide_get_vhosts_of_their_own() {
    let one = Preview::of("a/b-c#1");
    let other = Preview::of("a-b/c#1");
    assert_ne!(one.slug, other.slug);
    one.create();
    other.create();
    for (preview, neighbour) in [(&one, &other), (&other, &one)] {
        let app = preview.amqp("roundtrip", &[]);
        assert_eq!(app["got"], app["sent"], "{app}");
        let refused = preview.amqp_on(&neighbour.slug, "connect", &[]);
        assert!(
            refused["error"]
                .as_str()
                .unwrap_or_default()
                .contains("refused for user"),
            "{} on {}: {refused}",
            preview.key,
            neighbour.key
        );
    }
}

/// Operator mode: the topology operator declares a User from its Secret's `passwordHash`
/// as `rabbit_password_hashing_sha512` (its internal/user.go). The hash previewd seals there
/// (`rabbitmq_password_hash_sha512`) is declared the same way here, through the same API,
/// and the app logs in with the password it keeps; a SHA-256 hash declared as SHA-512 does
/// not open, so the algorithm is what is proved.
#[test]
fn a_user_declared_as_the_topology_operator_does_logs_in_with_the_apps_password() {
    let preview = Preview::of("octo/operator-hash#4");
    preview.create();
    let broker = preview.broker();
    let declare = |hash: &str| {
        let body = format!(
            r#"{{"password_hash":"{hash}","hashing_algorithm":"rabbit_password_hashing_sha512","tags":"previewd"}}"#
        );
        let (status, answer) =
            broker.admin("PUT", &format!("/api/users/{}", preview.slug), Some(&body));
        assert!(matches!(status, 201 | 204), "{status} {answer}");
    };
    declare(&previewd::secrets::rabbitmq_password_hash(
        &preview.password,
        rand::random(),
    ));
    let refused = preview.amqp("roundtrip", &[]);
    assert!(refused.get("error").is_some(), "{refused}");

    declare(&previewd::secrets::rabbitmq_password_hash_sha512(
        &preview.password,
        rand::random(),
    ));
    let app = preview.amqp("roundtrip", &[]);
    assert_eq!(app["got"], app["sent"], "{app}");
    preview.delete();
}
