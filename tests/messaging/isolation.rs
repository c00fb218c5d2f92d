//! A preview's user reaches its own vhost over AMQP and nothing else: not another
//! preview's vhost, and not the management API, so not its own permissions or bounds.

use crate::Preview;

#[test]
fn a_previews_user_is_refused_on_another_previews_vhost() {
    let mine = Preview::of("octo/isolated-mine#1");
    let theirs = Preview::of("octo/isolated-theirs#1");
    mine.create();
    theirs.create();
    let refused = mine.amqp_on(&theirs.slug, "connect", &[]);
    let error = refused["error"].as_str().unwrap_or_default();
    // RabbitMQ's words for a vhost the user has no permissions on: 530 NOT_ALLOWED,
    // "access to vhost '...' refused for user '...'".
    assert!(
        error.contains("NOT_ALLOWED") && error.contains("refused for user"),
        "{refused}"
    );
    // And on the default vhost, which every broker has.
    let refused = mine.amqp_on("/", "connect", &[]);
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("refused for user"),
        "{refused}"
    );
    // A wrong password is refused at login (403 ACCESS_REFUSED).
    let mut wrong = Preview::of("octo/isolated-mine#1");
    wrong.password = "not-the-password".into();
    let refused = wrong.amqp("connect", &[]);
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("ACCESS_REFUSED"),
        "{refused}"
    );
}

#[test]
fn a_previews_user_has_no_management_api_and_cannot_change_its_own_grants_or_bounds() {
    let preview = Preview::of("octo/no-management#2");
    preview.create();
    let before = preview.state();
    let (vhost, user) = (preview.slug.as_str(), preview.slug.as_str());
    assert_eq!(preview.api("GET", "/api/whoami", None), 401);
    assert_eq!(preview.api("GET", "/api/overview", None), 401);
    assert_eq!(
        preview.api("GET", &format!("/api/vhosts/{vhost}"), None),
        401
    );
    let all = r#"{"configure":".*","write":".*","read":".*"}"#;
    for (method, path, body) in [
        ("PUT", format!("/api/permissions/{vhost}/{user}"), Some(all)),
        ("PUT", format!("/api/permissions/%2F/{user}"), Some(all)),
        (
            "PUT",
            format!("/api/users/{user}"),
            Some(r#"{"password":"x","tags":"administrator"}"#),
        ),
        (
            "DELETE",
            format!("/api/vhost-limits/{vhost}/max-connections"),
            None,
        ),
        (
            "PUT",
            format!("/api/vhost-limits/{vhost}/max-queues"),
            Some(r#"{"value":1000}"#),
        ),
        (
            "DELETE",
            format!("/api/user-limits/{user}/max-connections"),
            None,
        ),
        (
            "DELETE",
            format!("/api/operator-policies/{vhost}/previewd-bounds"),
            None,
        ),
        (
            "PUT",
            format!("/api/policies/{vhost}/mine"),
            Some(r#"{"pattern":".*","definition":{"max-length-bytes":100000000}}"#),
        ),
    ] {
        assert_eq!(preview.api(method, &path, body), 401, "{method} {path}");
    }
    assert_eq!(preview.state(), before, "the user changed something");
    let app = preview.amqp("roundtrip", &[]);
    assert_eq!(app["got"], app["sent"], "{app}");
}
