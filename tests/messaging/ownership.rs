//! A vhost or user of the preview's name that previewd did not make is someone else's:
//! create refuses it and writes nothing, delete leaves it alone.

use crate::{Preview, failed};

/// A vhost an operator made by hand, with a user of the same name in it.
fn someone_elses(preview: &Preview, user_tags: &str) {
    let broker = preview.broker();
    let (vhost, user) = (&preview.slug, &preview.slug);
    let made = broker.admin(
        "PUT",
        &format!("/api/vhosts/{vhost}"),
        Some(r#"{"description":"the payments team's"}"#),
    );
    assert_eq!(made.0, 201, "{}", made.1);
    let body = format!(r#"{{"password":"theirs-123","tags":"{user_tags}"}}"#);
    let made = broker.admin("PUT", &format!("/api/users/{user}"), Some(&body));
    assert_eq!(made.0, 201, "{}", made.1);
    let all = r#"{"configure":".*","write":".*","read":".*"}"#;
    let made = broker.admin(
        "PUT",
        &format!("/api/permissions/{vhost}/{user}"),
        Some(all),
    );
    assert_eq!(made.0, 201, "{}", made.1);
}

#[test]
fn create_refuses_a_vhost_of_the_same_name_made_by_someone_else_and_leaves_it_untouched() {
    let preview = Preview::of("octo/taken-vhost#1");
    let broker = preview.broker();
    let made = broker.admin(
        "PUT",
        &format!("/api/vhosts/{}", preview.slug),
        Some(r#"{"description":"the payments team's"}"#),
    );
    assert_eq!(made.0, 201, "{}", made.1);
    let before = preview.state();
    let stderr = failed(&preview.run_create());
    assert!(
        stderr.contains(&format!(
            "vhost {} exists and is not previewd's",
            preview.slug
        )),
        "{stderr}"
    );
    assert_eq!(preview.state(), before);
    assert_eq!(
        broker
            .admin("GET", &format!("/api/users/{}", preview.slug), None)
            .0,
        404,
        "no user was made either"
    );
}

#[test]
fn create_refuses_a_user_of_the_same_name_made_by_someone_else_and_leaves_it_untouched() {
    // A plain AMQP user (no tags), a monitoring user, and one that has previewd's tag
    // among others: none of them is previewd's.
    for (n, tags) in ["", "monitoring", "previewd,administrator"]
        .iter()
        .enumerate()
    {
        let preview = Preview::of(&format!("octo/taken-user#{}", n + 1));
        let broker = preview.broker();
        let body = format!(r#"{{"password":"theirs-123","tags":"{tags}"}}"#);
        let made = broker.admin("PUT", &format!("/api/users/{}", preview.slug), Some(&body));
        assert_eq!(made.0, 201, "{}", made.1);
        let before = preview.state();
        let stderr = failed(&preview.run_create());
        assert!(
            stderr.contains(&format!(
                "user {} exists and is not previewd's",
                preview.slug
            )),
            "tags {tags:?}: {stderr}"
        );
        assert_eq!(preview.state(), before, "tags {tags:?}");
        assert_eq!(
            broker
                .admin("GET", &format!("/api/vhosts/{}", preview.slug), None)
                .0,
            404,
            "tags {tags:?}: no vhost was made either"
        );
    }
}

#[test]
fn delete_leaves_someone_elses_vhost_and_user_alone() {
    let preview = Preview::of("octo/taken-both#1");
    someone_elses(&preview, "");
    let before = preview.state();
    let output = preview.run_delete();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Exit 0: the preview's teardown is never stuck on what is not previewd's.
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "user {} is not previewd's: left alone",
            preview.slug
        )) && stderr.contains(&format!(
            "vhost {} is not previewd's: left alone",
            preview.slug
        )),
        "{stderr}"
    );
    assert_eq!(preview.state(), before);
}
