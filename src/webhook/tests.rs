//! Signature checks and payload conversion, against GitHub's test vector and recorded payloads.

use super::*;

/// The recorded payload `name`, byte for byte (also `ci`'s tests).
pub(in crate::webhook) fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/github/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub(in crate::webhook) fn event_of(name: &str) -> Event {
    let header = name.split('.').next().unwrap();
    parse(header, &fixture(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .1
}

fn secret(s: &str) -> SecretString {
    crate::config::Config::from_toml(&format!("[github]\nwebhook_secret = {s:?}\n"), Vec::new())
        .unwrap()
        .github
        .webhook_secret
        .unwrap()
}

#[test]
fn githubs_published_signature_test_vector_verifies() {
    let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    assert_eq!(
        verify(
            &secret("It's a Secret to Everybody"),
            signature,
            b"Hello, World!"
        ),
        Ok(())
    );
}

#[test]
fn altered_bodies_secrets_and_signatures_fail() {
    let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let s = secret("It's a Secret to Everybody");
    assert!(verify(&s, good, b"Hello, World?").is_err());
    assert!(verify(&secret("another secret, as long"), good, b"Hello, World!").is_err());
    assert!(verify(&s, &good.replace("757", "758"), b"Hello, World!").is_err());
    assert!(verify(&s, &good.replace("sha256=", ""), b"Hello, World!").is_err());
    assert!(
        verify(
            &s,
            "sha1=0123456789abcdef0123456789abcdef01234567",
            b"Hello, World!"
        )
        .is_err()
    );
    assert!(verify(&s, "sha256=zz", b"Hello, World!").is_err());
}

#[test]
fn opened_pr_becomes_a_pull_request_event() {
    let Event::PullRequest(pr) = event_of("pull_request.opened") else {
        panic!("not a PR")
    };
    assert_eq!(pr.action, PrAction::Opened);
    assert_eq!(pr.key.to_string(), "codertocat/hello-world#2");
    assert_eq!(
        pr.head_sha.as_str(),
        "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    );
    assert_eq!(
        (pr.head_ref.as_str(), pr.base_ref.as_str()),
        ("changes", "master")
    );
    assert_eq!(
        (pr.author.as_str(), pr.sender.as_str()),
        ("Codertocat", "Codertocat")
    );
    assert_eq!(pr.installation_id, Some(1));
    assert!(!pr.fork && !pr.draft);
    assert_eq!(pr.updated_at, Some(1_557_933_633));
}

#[test]
fn forks_are_told_by_repository_id_not_by_the_fork_flag() {
    let Event::PullRequest(fork) = event_of("pull_request.synchronize.fork") else {
        panic!()
    };
    assert!(fork.fork);
    // Both sides of this PR have `fork: true`, yet head and base repositories differ.
    let Event::PullRequest(merged) = event_of("pull_request.closed.merged.fork") else {
        panic!()
    };
    assert!(merged.fork);
    assert_eq!(merged.action, PrAction::Closed { merged: true });
    let Event::PullRequest(same_repo) = event_of("pull_request.synchronize") else {
        panic!()
    };
    assert!(!same_repo.fork);
}

#[test]
fn a_deleted_head_repository_counts_as_a_fork() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.synchronize")).unwrap();
    json["pull_request"]["head"]["repo"] = serde_json::Value::Null;
    let Event::PullRequest(pr) = parse("pull_request", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert!(pr.fork);
}

#[test]
fn every_pull_request_action_previewd_knows_is_converted() {
    let cases = [
        ("pull_request.reopened", PrAction::Reopened),
        ("pull_request.synchronize", PrAction::Synchronize),
        ("pull_request.ready_for_review", PrAction::ReadyForReview),
        (
            "pull_request.converted_to_draft",
            PrAction::ConvertedToDraft,
        ),
        (
            "pull_request.closed.unmerged",
            PrAction::Closed { merged: false },
        ),
        ("pull_request.labeled", PrAction::Labeled),
        ("pull_request.unlabeled", PrAction::Unlabeled),
        ("pull_request.edited", PrAction::Edited),
        ("pull_request.opened.with-null-body", PrAction::Opened),
    ];
    for (name, action) in cases {
        let Event::PullRequest(pr) = event_of(name) else {
            panic!("{name}")
        };
        assert_eq!(pr.action, action, "{name}");
    }
    let Event::PullRequest(draft) = event_of("pull_request.converted_to_draft") else {
        panic!()
    };
    assert!(draft.draft);
}

#[test]
fn a_preview_command_on_a_pr_is_queued_with_its_author() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("issue_comment.created.pull_request")).unwrap();
    json["comment"]["body"] = "LGTM!\r\n  /preview extend 2d  \nthanks".into();
    let Event::Command(command) = parse("issue_comment", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert_eq!(command.key.to_string(), "chhsia0/knative-route-demo#3");
    assert_eq!(command.line, "/preview extend 2d");
    assert_eq!(command.actor, "chhsia0");
    assert_eq!(command.association, "OWNER");
}

#[test]
fn comments_that_are_not_commands_are_ignored() {
    // The recorded comment says `/build`, not `/preview`.
    assert!(matches!(
        event_of("issue_comment.created.pull_request"),
        Event::Ignored(_)
    ));
    for name in [
        "issue_comment.created.issue",
        "issue_comment.created.issue.with-installation",
        "issue_comment.edited.pull_request",
        "issue_comment.edited.pull_request.bot-sticky",
        "issue_comment.deleted.pull_request",
        "issue_comment.edited.issue",
        "issue_comment.deleted.issue",
    ] {
        assert!(matches!(event_of(name), Event::Ignored(_)), "{name}");
    }
}

#[test]
fn bots_cannot_issue_commands() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("issue_comment.created.pull_request")).unwrap();
    json["comment"]["body"] = "/preview destroy".into();
    json["comment"]["user"]["type"] = "Bot".into();
    let (_, event) = parse("issue_comment", json.to_string().as_bytes()).unwrap();
    assert!(matches!(event, Event::Ignored(why) if why.contains("bot")));
}

#[test]
fn command_lines_must_start_with_the_word_preview_and_are_bounded() {
    assert_eq!(
        crate::command::find_line("/preview"),
        Some("/preview".into())
    );
    assert_eq!(
        crate::command::find_line("/preview   help"),
        Some("/preview   help".into())
    );
    assert_eq!(crate::command::find_line("/previews please"), None);
    assert_eq!(crate::command::find_line("please /preview destroy"), None);
    assert_eq!(
        crate::command::find_line(&format!("/preview {}", "x".repeat(500)))
            .unwrap()
            .chars()
            .count(),
        200
    );
    assert_eq!(
        crate::command::find_line(&format!("/preview {}", "é".repeat(300)))
            .unwrap()
            .chars()
            .count(),
        200
    );
}

#[test]
fn installations_list_the_repositories_they_serve() {
    let Event::Installation(InstallationChange::Present { id, account, repos }) =
        event_of("installation.created")
    else {
        panic!()
    };
    assert_eq!((id, account.as_str()), (957_387, "Codertocat"));
    assert_eq!(repos[0].as_str(), "codertocat/hello-world");
    assert_eq!(
        event_of("installation.deleted"),
        Event::Installation(InstallationChange::Gone { id: 2 })
    );
    assert!(matches!(
        event_of("installation_repositories.added"),
        Event::Installation(InstallationChange::ReposAdded { .. })
    ));
    assert!(matches!(
        event_of("installation_repositories.removed"),
        Event::Installation(InstallationChange::ReposRemoved { .. })
    ));
    assert_eq!(event_of("ping"), Event::Ping);
    assert_eq!(event_of("ping.with-app_id"), Event::Ping);
}

#[test]
fn unknown_events_and_new_actions_are_ignored_not_rejected() {
    let (_, release) = parse("release", br#"{"action": "published"}"#).unwrap();
    assert!(matches!(release, Event::Ignored(why) if why.contains("release.published")));
    assert!(matches!(event_of("push"), Event::Push(_)));
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
    json["action"] = "teleported".into();
    let (action, event) = parse("pull_request", json.to_string().as_bytes()).unwrap();
    assert_eq!(action.as_deref(), Some("teleported"));
    assert!(matches!(event, Event::Ignored(why) if why.contains("pull_request.teleported")));
}

#[test]
fn wrong_types_and_broken_json_are_rejected() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
    json["pull_request"]["head"]["sha"] = 42.into();
    assert!(matches!(
        parse("pull_request", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    json["pull_request"]["head"]["sha"] = "not-a-sha".into();
    assert!(matches!(
        parse("pull_request", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
    let body = fixture("pull_request.opened");
    assert!(matches!(
        parse("pull_request", &body[..body.len() / 2]),
        Err(Rejection::InvalidJson(_))
    ));
    assert!(matches!(
        parse("pull_request", b"payload=%7B%7D"),
        Err(Rejection::InvalidJson(_))
    ));
}

#[test]
fn receive_checks_headers_before_the_body() {
    let s = secret("It's a Secret to Everybody");
    let signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let headers = Headers {
        event: Some("ping"),
        guid: Some("g-1"),
        hook_id: Some("7"),
        signature: Some(signature),
        content_type: Some("application/json"),
    };
    assert_eq!(
        receive(None, headers, b"Hello, World!"),
        Err(Rejection::NoSecret)
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                event: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-GitHub-Event"))
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                guid: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-GitHub-Delivery"))
    );
    assert_eq!(
        receive(
            Some(&s),
            Headers {
                signature: None,
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::MissingHeader("X-Hub-Signature-256"))
    );
    assert!(matches!(
        receive(
            Some(&s),
            Headers {
                hook_id: Some("x; drop"),
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::BadHeader(..))
    ));
    assert!(matches!(
        receive(
            Some(&s),
            Headers {
                content_type: Some("application/x-www-form-urlencoded"),
                ..headers
            },
            b"Hello, World!"
        ),
        Err(Rejection::NotJson(_))
    ));
    // Signature and headers fine, body not JSON.
    assert!(matches!(
        receive(Some(&s), headers, b"Hello, World!"),
        Err(Rejection::InvalidJson(_))
    ));
}

/// The minimal types (`pull.rs`) against octocrab's full models, which intake used before
/// issue #17: the same answers on every recorded `pull_request` and `issue_comment` payload.
#[test]
fn minimal_types_read_what_octocrabs_models_read() {
    use octocrab::models::webhook_events::WebhookEventPayload as P;
    let dir = format!("{}/tests/fixtures/github", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        let header = name.split('.').next().unwrap();
        if !matches!(header, "pull_request" | "issue_comment") {
            continue;
        }
        let body = fixture(name);
        let full = WebhookEvent::try_from_header_and_body(header, &body).unwrap();
        let sender = full.sender.as_ref().map(|s| s.login.clone());
        let installation = full.installation.as_ref().map(|i| i.id().0);
        let full_name = full.repository.as_ref().and_then(|r| r.full_name.clone());
        match (full.specific, event_of(name)) {
            (P::PullRequest(p), Event::PullRequest(ours)) => {
                let pr = &p.pull_request;
                let base_repo = pr.base.repo.as_ref().unwrap();
                assert_eq!(
                    ours.key.to_string(),
                    format!("{}#{}", full_name.unwrap(), p.number).to_lowercase(),
                    "{name}"
                );
                assert_eq!(ours.repo_id, base_repo.id.0, "{name}");
                assert_eq!(ours.installation_id, installation, "{name}");
                assert_eq!(Some(ours.title), pr.title.clone(), "{name}");
                assert_eq!(
                    Some(ours.author),
                    pr.user.as_ref().map(|u| u.login.clone()),
                    "{name}"
                );
                assert_eq!(ours.head_sha.as_str(), pr.head.sha, "{name}");
                assert_eq!(
                    (ours.head_ref, ours.base_ref),
                    (pr.head.ref_field.clone(), pr.base.ref_field.clone()),
                    "{name}"
                );
                let default =
                    base_repo.default_branch.as_deref() == Some(pr.base.ref_field.as_str());
                assert_eq!(
                    ours.base_sha.map(|s| s.to_string()),
                    default.then(|| pr.base.sha.clone()),
                    "{name}"
                );
                assert_eq!(
                    ours.fork,
                    pr.head.repo.as_ref().map(|r| r.id) != Some(base_repo.id),
                    "{name}"
                );
                assert_eq!(ours.draft, pr.draft.unwrap_or(false), "{name}");
                let labels: Vec<String> =
                    pr.labels.iter().flatten().map(|l| l.name.clone()).collect();
                let label = p.label.as_ref().map(|l| l.name.clone());
                assert_eq!(
                    ours.labels,
                    labels_after(labels, ours.action, label.as_deref()),
                    "{name}"
                );
                assert_eq!(ours.label, label, "{name}");
                let closed = matches!(pr.state, Some(octocrab::models::IssueState::Closed));
                assert_eq!(ours.open, !closed, "{name}");
                assert_eq!(
                    ours.updated_at,
                    pr.updated_at.map(|t| t.timestamp()),
                    "{name}"
                );
                assert_eq!(Some(ours.sender), sender, "{name}");
                if let PrAction::Closed { merged } = ours.action {
                    assert_eq!(merged, pr.merged.unwrap_or(false), "{name}");
                }
            }
            (P::IssueComment(c), ours) => {
                // The recorded comments hold no command; give each one to compare them all.
                let mut json: serde_json::Value = serde_json::from_slice(&body).unwrap();
                json["comment"]["body"] = "/preview extend 2d".into();
                json["action"] = "created".into();
                let (_, ours_command) = parse(header, json.to_string().as_bytes()).unwrap();
                match (
                    c.issue.pull_request.is_some(),
                    c.comment.user.r#type == "Bot",
                    ours_command,
                ) {
                    (false, _, Event::Ignored(why)) => {
                        assert!(why.contains("not a pull request"), "{name}")
                    }
                    (true, true, Event::Ignored(why)) => assert!(why.contains("bot"), "{name}"),
                    (true, false, Event::Command(command)) => {
                        assert_eq!(
                            command.key.to_string(),
                            format!("{}#{}", full_name.unwrap(), c.issue.number).to_lowercase(),
                            "{name}"
                        );
                        assert_eq!(command.installation_id, installation, "{name}");
                        assert_eq!(command.comment_id, c.comment.id.0, "{name}");
                        assert_eq!(
                            command.commented_at,
                            Some(c.comment.created_at.timestamp()),
                            "{name}"
                        );
                        assert_eq!(command.actor, c.comment.user.login, "{name}");
                        let word =
                            serde_json::to_value(c.comment.author_association.unwrap()).unwrap();
                        assert_eq!(command.association, word.as_str().unwrap(), "{name}");
                    }
                    (_, _, other) => panic!("{name}: {other:?}"),
                }
                assert!(matches!(ours, Event::Ignored(_)), "{name}");
            }
            (specific, ours) => panic!("{name}: {specific:?} against {ours:?}"),
        }
        seen += 1;
    }
    assert!(seen >= 20, "only {seen} recorded payloads compared");
}

#[test]
fn escaped_text_is_read_and_unknown_associations_trust_nothing() {
    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("pull_request.opened")).unwrap();
    json["pull_request"]["title"] = "Fix \"quotes\" and caf\u{e9}\n".into();
    json["pull_request"]["labels"] = serde_json::json!([{"name": "pre\\view"}]);
    let Event::PullRequest(pr) = parse("pull_request", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert_eq!(pr.title, "Fix \"quotes\" and caf\u{e9}\n");
    assert_eq!(pr.labels, ["pre\\view"]);

    let mut json: serde_json::Value =
        serde_json::from_slice(&fixture("issue_comment.created.pull_request")).unwrap();
    json["comment"]["body"] = "/preview destroy".into();
    json["comment"]["author_association"] = "SUPREME_LEADER".into();
    let Event::Command(command) = parse("issue_comment", json.to_string().as_bytes())
        .unwrap()
        .1
    else {
        panic!()
    };
    assert_eq!(command.association, "NONE");
    json["comment"]["created_at"] = "yesterday".into();
    assert!(matches!(
        parse("issue_comment", json.to_string().as_bytes()),
        Err(Rejection::Malformed { .. })
    ));
}
