//! The command language: every verb, durations, junk, and where a command is not a command.

use super::*;

fn cmd(line: &str) -> Result<Command, ParseError> {
    parse(&find_line(line).expect("a command line"))
}

const HOUR: u64 = 3600;

#[test]
fn every_verb_parses() {
    let cases = [
        ("/preview help", Command::Help),
        ("/preview status", Command::Status),
        ("/preview deploy", Command::Deploy),
        ("/preview redeploy", Command::Redeploy),
        ("/preview destroy", Command::Destroy),
        ("/preview keep", Command::Keep),
        ("/preview unkeep", Command::Unkeep),
        ("/preview reseed", Command::Reseed),
        ("/preview sleep", Command::Sleep),
        ("/preview WAKE", Command::Wake),
        ("/preview approve", Command::Approve(None)),
        ("/preview share", Command::Share(SHARE_DEFAULT)),
        ("/preview unshare", Command::Unshare),
        (
            "/preview   EXTEND   2d  ",
            Command::Extend(Duration::from_secs(48 * HOUR)),
        ),
    ];
    for (line, want) in cases {
        assert_eq!(cmd(line), Ok(want), "{line}");
    }
}

#[test]
fn durations_are_written_like_the_config() {
    for (text, hours) in [
        ("2d", 48),
        ("36h", 36),
        ("1w", 168),
        ("1d12h", 36),
        ("90m", 1),
    ] {
        let Ok(Command::Extend(d)) = cmd(&format!("/preview extend {text}")) else {
            panic!("{text}");
        };
        assert_eq!(d.as_secs() / HOUR, hours, "{text}");
    }
}

#[test]
fn bad_durations_and_arguments_get_clear_errors() {
    assert_eq!(cmd("/preview extend"), Err(ParseError::MissingDuration));
    assert_eq!(
        cmd("/preview extend forever"),
        Err(ParseError::BadDuration("forever".into()))
    );
    assert_eq!(
        cmd("/preview extend 2 days"),
        Err(ParseError::BadDuration("2 days".into()))
    );
    assert_eq!(
        cmd("/preview extend 0h"),
        Err(ParseError::BadDuration("0h".into()))
    );
    assert_eq!(
        cmd("/preview destroy now please"),
        Err(ParseError::Unexpected {
            verb: "destroy",
            extra: "now please".into()
        })
    );
    assert_eq!(cmd("/preview"), Err(ParseError::NoVerb));
}

#[test]
fn unknown_verbs_get_a_suggestion_when_close() {
    assert_eq!(
        cmd("/preview destory"),
        Err(ParseError::UnknownVerb {
            verb: "destory".into(),
            suggestion: Some("destroy")
        })
    );
    let far = cmd("/preview launch-the-rockets").unwrap_err();
    assert_eq!(
        far,
        ParseError::UnknownVerb {
            verb: "launch-the-rockets".into(),
            suggestion: None
        }
    );
    assert_eq!(far.to_string(), "`launch-the-rockets` is not a command");
}

#[test]
fn unicode_and_junk_never_panic() {
    for line in [
        "/preview ✨",
        "/preview extend ２d",
        "/preview extend 9999999999999999999999d",
        "/preview \u{202e}yortsed",
        "/preview extend -1d",
    ] {
        assert!(cmd(line).is_err(), "{line}");
    }
    assert!(matches!(
        cmd("/preview déployer"),
        Err(ParseError::UnknownVerb { .. })
    ));
}

#[test]
fn commands_in_code_blocks_and_quotes_are_ignored() {
    let quoted = "> /preview destroy\nI would not do that";
    assert_eq!(find_line(quoted), None);
    let fenced = "How to use it:\n```\n/preview destroy\n```\n";
    assert_eq!(find_line(fenced), None);
    let tilde = "~~~sh\n/preview destroy\n~~~\n/preview status";
    assert_eq!(find_line(tilde).as_deref(), Some("/preview status"));
    let indented = "Example:\n\n    /preview destroy\n";
    assert_eq!(find_line(indented), None);
    assert_eq!(find_line("see /preview destroy in the docs"), None);
    assert_eq!(find_line("/previewing is fun"), None);
}

/// The attack of issue #13: one code block as GitHub renders it (a 4-backtick fence around a
/// 3-backtick one) ran the `/preview destroy` it shows.
#[test]
fn a_fence_inside_a_longer_fence_is_all_code() {
    for (body, why) in [
        (
            "To tear it down:\n````md\n```\n/preview destroy\n```\n````\n",
            "a ``` fence inside a ```` one",
        ),
        (
            "~~~~\n~~~\n/preview destroy\n~~~\n~~~~\n",
            "a ~~~ fence inside a ~~~~ one",
        ),
        (
            "~~~\n```\n/preview destroy\n~~~\n",
            "a ``` line does not close a ~~~ fence",
        ),
        (
            "```\nno closing fence: code to the end\n/preview destroy\n",
            "an unclosed fence",
        ),
    ] {
        assert_eq!(find_line(body), None, "{why}");
    }
}

#[test]
fn a_command_after_a_closed_fence_is_still_found() {
    for (body, line) in [
        (
            "````\n```\n/preview destroy\n```\n````\n/preview status\n",
            "/preview status",
        ),
        (
            "```\r\n/preview destroy\r\n```\r\n/preview extend 1d\r\n",
            "/preview extend 1d",
        ),
    ] {
        assert_eq!(find_line(body).as_deref(), Some(line), "{body:?}");
    }
}

/// GitHub never shows an HTML comment: what it holds is nobody's command.
#[test]
fn commands_in_html_comments_are_ignored() {
    assert_eq!(find_line("<!-- /preview destroy -->"), None);
    assert_eq!(find_line("<!--\n/preview destroy\n-->\n"), None);
    assert_eq!(find_line("<!--\r\n\r\n/preview destroy\r\n\r\n-->"), None);
    assert_eq!(
        find_line("Looks good <!--\n/preview destroy\n--> to me"),
        None,
        "an inline comment across lines"
    );
    assert_eq!(
        find_line("<!-- hidden -->\n/preview status").as_deref(),
        Some("/preview status"),
        "what follows a closed comment is seen"
    );
    assert_eq!(find_line("<details>\n/preview destroy\n</details>"), None);
}

#[test]
fn quotes_lists_tables_headings_links_and_inline_code_are_not_commands() {
    for body in [
        "> /preview destroy",
        "> quoting a reviewer\n/preview destroy", // a lazy continuation: still the quote
        ">> /preview destroy",
        "- /preview destroy",
        "1. /preview destroy",
        "- [ ] /preview destroy",
        "* item\n\n  /preview destroy", // a loose list item's paragraph
        "| command |\n|---|\n| /preview destroy |",
        "# /preview destroy",
        "/preview destroy\n===\n", // a setext heading
        "/preview destroy\n---\n",
        "`/preview destroy`",
        "``/preview destroy``",
        "[/preview destroy](https://example.com)",
        "![/preview destroy](https://example.com/x.png)",
        "*/preview destroy*",
        "~~/preview destroy~~",
        "<b>/preview destroy</b>",
        "Note[^1]\n\n[^1]: /preview destroy",
        "Example:\n\n    /preview destroy\n",
        "\t/preview destroy",
    ] {
        assert_eq!(find_line(body), None, "{body:?}");
    }
}

/// GitHub shows each line of a paragraph on its own line: each may be the command.
#[test]
fn a_command_is_a_line_of_a_paragraph() {
    for (body, line, why) in [
        ("Thanks!\n/preview extend 1d", "/preview extend 1d", ""),
        (
            "/preview extend 1d\\\nthanks",
            "/preview extend 1d",
            "a hard break ends the line",
        ),
        ("/preview extend 1d  \nthanks", "/preview extend 1d", ""),
        (
            "Example:\n    /preview status",
            "/preview status",
            "an indented line inside a paragraph is no code block",
        ),
        (
            "> /preview destroy\n\n/preview status",
            "/preview status",
            "",
        ),
    ] {
        assert_eq!(find_line(body).as_deref(), Some(line), "{body:?} {why}");
    }
    assert_eq!(
        cmd("/preview extend `2d`"),
        Ok(Command::Extend(Duration::from_secs(48 * HOUR))),
        "code later on the line is its text"
    );
}

#[test]
fn a_very_long_comment_stays_fast_and_an_oversized_one_runs_nothing() {
    let started = std::time::Instant::now();
    for unit in ["`", "<!--", "[", "*_", "> ", "```\n", "- ", "|a", "\\"] {
        let body = unit.repeat(MAX_BODY / unit.len());
        assert!(body.len() <= MAX_BODY);
        let _ = find_line(&body);
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let oversized = format!("/preview destroy\n\n{}", "x".repeat(MAX_BODY));
    assert_eq!(find_line(&oversized), None);
}

#[test]
fn approve_names_the_commit_by_at_least_seven_hex_digits() {
    assert_eq!(cmd("/preview approve"), Ok(Command::Approve(None)));
    let Ok(Command::Approve(Some(named))) = cmd("/preview approve EC26C3E") else {
        panic!("not an approval of a commit");
    };
    assert_eq!(named.as_str(), "ec26c3e");
    assert!(named.names("ec26c3e57ca3a959ca5aad62de7213c562f8c821"));
    assert!(!named.names("ec26c3f57ca3a959ca5aad62de7213c562f8c821"));
    assert!(!named.names("ec26c3e"), "only a full head SHA is named");
    let full = "ec26c3e57ca3a959ca5aad62de7213c562f8c821";
    assert!(
        matches!(cmd(&format!("/preview approve {full}")), Ok(Command::Approve(Some(n))) if n.names(full))
    );
    for bad in ["ec26c3", "ec26c3g", &format!("{full}0"), "HEAD"] {
        assert!(
            matches!(
                cmd(&format!("/preview approve {bad}")),
                Err(ParseError::BadSha(_))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        cmd("/preview approve ec26c3e please"),
        Err(ParseError::Unexpected {
            verb: "approve",
            ..
        })
    ));
}

/// A reply quotes the commenter's words in a code span: a backtick in them must not end it
/// (and let a mention or a link through).
#[test]
fn quoted_words_cannot_leave_their_code_span() {
    for line in [
        "/preview destroy x` @org/security `y",
        "/preview extend 2d` @org/security",
        "/preview approve `@org/security`",
        "/preview des`troy",
    ] {
        let error = parse(line).unwrap_err().to_string();
        assert_eq!(error.matches('`').count() % 2, 0, "{error}");
        // Between code spans (the even pieces) nothing of the commenter's is left.
        let outside: String = error.split('`').step_by(2).collect();
        assert!(!outside.contains('@'), "{error}");
    }
}

#[test]
fn the_first_command_line_of_several_wins() {
    let body = "Thanks!\r\n/preview extend 1d\r\n/preview destroy\r\n";
    assert_eq!(
        cmd(body),
        Ok(Command::Extend(Duration::from_secs(24 * HOUR)))
    );
}

#[test]
fn long_lines_are_bounded() {
    let line = find_line(&format!("/preview {}", "x".repeat(10_000))).unwrap();
    assert_eq!(line.chars().count(), MAX_LINE);
}

#[test]
fn authors_may_manage_their_own_preview_but_not_more() {
    let author = Asker {
        login: "alice",
        association: "CONTRIBUTOR",
    };
    for command in [
        Command::Destroy,
        Command::Extend(Duration::from_secs(HOUR)),
        Command::Sleep,
        Command::Wake,
    ] {
        assert_eq!(gate(command, &author, "Alice", false), Gate::Allowed);
        assert_eq!(
            gate(command, &author, "alice", true),
            Gate::NeedsWrite,
            "fork PRs need write access for everything"
        );
    }
    for command in [
        Command::Deploy,
        Command::Reseed,
        Command::Approve(None),
        Command::Keep,
    ] {
        assert_eq!(gate(command, &author, "alice", false), Gate::NeedsWrite);
    }
    assert_eq!(gate(Command::Help, &author, "bob", true), Gate::Allowed);
    assert_eq!(gate(Command::Status, &author, "bob", true), Gate::Allowed);
}

/// A private organisation member arrives as CONTRIBUTOR (or NONE): the association is
/// never reason enough to refuse, only the permission endpoint is.
#[test]
fn every_association_is_confirmed_with_github() {
    for association in [
        "OWNER",
        "MEMBER",
        "COLLABORATOR",
        "CONTRIBUTOR",
        "FIRST_TIME_CONTRIBUTOR",
        "NONE",
    ] {
        let asker = Asker {
            login: "someone",
            association,
        };
        assert_eq!(
            gate(Command::Approve(None), &asker, "alice", true),
            Gate::NeedsWrite
        );
        assert_eq!(
            gate(Command::Destroy, &asker, "alice", false),
            Gate::NeedsWrite
        );
    }
}

#[test]
fn share_takes_an_optional_duration_and_unshare_none() {
    assert_eq!(cmd("/preview share"), Ok(Command::Share(SHARE_DEFAULT)));
    assert_eq!(SHARE_DEFAULT, Duration::from_secs(24 * HOUR));
    assert_eq!(
        cmd("/preview share 2d"),
        Ok(Command::Share(Duration::from_secs(48 * HOUR)))
    );
    assert_eq!(
        cmd("/preview SHARE 36h"),
        Ok(Command::Share(Duration::from_secs(36 * HOUR)))
    );
    assert_eq!(cmd("/preview unshare"), Ok(Command::Unshare));
    assert_eq!(
        cmd("/preview share forever"),
        Err(ParseError::BadDuration("forever".into()))
    );
    assert_eq!(
        cmd("/preview share 0h"),
        Err(ParseError::BadDuration("0h".into()))
    );
    assert_eq!(
        cmd("/preview share 1 day"),
        Err(ParseError::BadDuration("1 day".into()))
    );
    assert_eq!(
        cmd("/preview unshare all"),
        Err(ParseError::Unexpected {
            verb: "unshare",
            extra: "all".into()
        })
    );
    assert_eq!(
        cmd("/preview shrae"),
        Err(ParseError::UnknownVerb {
            verb: "shrae".into(),
            suggestion: Some("share")
        })
    );
}

/// A share link lets anyone holding it in: only a writer makes or revokes one, the PR's
/// author included only when GitHub says they can write.
#[test]
fn sharing_needs_write_access_even_for_the_author() {
    let author = Asker {
        login: "alice",
        association: "OWNER",
    };
    for command in [Command::Share(SHARE_DEFAULT), Command::Unshare] {
        assert_eq!(gate(command, &author, "alice", false), Gate::NeedsWrite);
    }
}

#[test]
fn a_share_lasts_what_was_asked_but_never_past_a_week_or_the_preview() {
    const NOW: i64 = 1_000_000;
    let day = 24 * HOUR as i64;
    let far = NOW + 30 * day;
    assert_eq!(
        share_until(NOW, Duration::from_secs(2 * day as u64), far),
        (NOW + 2 * day, None)
    );
    assert_eq!(
        share_until(NOW, Duration::from_secs(30 * day as u64), far),
        (NOW + 7 * day, Some(ShareCap::Longest))
    );
    assert_eq!(
        share_until(NOW, Duration::from_secs(30 * day as u64), NOW + 3 * day),
        (NOW + 3 * day, Some(ShareCap::PreviewExpiry))
    );
    assert_eq!(
        share_until(NOW, SHARE_DEFAULT, NOW + HOUR as i64),
        (NOW + HOUR as i64, Some(ShareCap::PreviewExpiry))
    );
    assert_eq!(
        share_until(NOW, SHARE_DEFAULT, NOW - 5),
        (NOW - 5, Some(ShareCap::PreviewExpiry)),
        "a preview already due: the caller makes no link"
    );
    assert_eq!(
        share_until(NOW, Duration::from_secs(u64::MAX), i64::MAX).0,
        NOW + 7 * day
    );
}
