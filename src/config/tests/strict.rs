//! What a configuration may not hold, refused at start without repeating a secret: quoted
//! keys that read as another section's, control characters in secrets, a file's contents
//! where its path belongs, a URL that does not parse.

use super::*;

#[test]
fn a_quoted_top_level_key_with_a_dot_is_refused_not_read_as_its_section() {
    for toml in [
        "\"github.token\" = \"ghp_x\"\n",
        "'api.token' = \"t\"\n",
        "\"sink.kind\" = \"directory\"\n",
    ] {
        let error = Config::from_toml(toml, Vec::new()).unwrap_err().to_string();
        assert!(error.contains("is quoted with a dot"), "{toml}: {error}");
    }
    // The same keys written in their sections are fine.
    Config::from_toml("[sink]\nkind = \"directory\"\n", Vec::new()).unwrap();
}

#[test]
fn a_config_error_never_quotes_a_secret() {
    for toml in [
        "[github]\nwebhook_secret = \"Zq8\\xVv3-super-secret-value\"\n",
        "[github]\ntoken = \"ghp_super-secret-value\n",
        "[api]\ntoken = [\"tok-super-secret-value\"]\n",
        "[github]\nwebhook_secret = 9999999999999999\n",
    ] {
        let error = Config::from_toml(toml, Vec::new()).unwrap_err().to_string();
        assert!(
            !error.contains("super-secret") && !error.contains("9999"),
            "{error}"
        );
        assert!(
            error.contains("line 2") || error.contains("token") || error.contains("secret"),
            "{error}"
        );
    }
    let error = Config::from_toml("[github]\nwebhook_secret = \"a\\qb\"\n", Vec::new())
        .unwrap_err()
        .to_string();
    assert!(error.contains("line 2, column"), "{error}");
}

#[test]
fn a_secret_with_a_line_break_is_refused_at_start_not_found_later() {
    // A token from a file with its trailing newline crashed the GitHub client at start;
    // a webhook secret with one refused every delivery.
    for (name, value) in [
        ("PREVIEWD_GITHUB_TOKEN", "ghp_x\n"),
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET", "0123456789abcdef0123\n"),
        ("PREVIEWD_API_TOKEN", "t0ken\r"),
    ] {
        let error = Config::from_toml("", vec![(name.to_owned(), value.to_owned())])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("control character") && error.contains(name),
            "{error}"
        );
    }
}

#[test]
fn a_key_pasted_where_its_path_belongs_is_refused_without_repeating_it() {
    let pem = "-----BEGIN PRIVATE KEY-----\nMIIEsecretbytes\n-----END PRIVATE KEY-----\n";
    for (name, extra) in [
        (
            "PREVIEWD_GITHUB_PRIVATE_KEY_PATH",
            Some(("PREVIEWD_GITHUB_APP_ID", "1")),
        ),
        ("PREVIEWD_GITHUB_WEBHOOK_SECRET_FILE", None),
        (
            "PREVIEWD_TLS_CA_KEY",
            Some(("PREVIEWD_TLS_CA_CERT", "/ca.pem")),
        ),
    ] {
        let mut env = vec![(name.to_owned(), pem.to_owned())];
        env.extend(extra.map(|(k, v)| (k.to_owned(), v.to_owned())));
        let error = Config::from_toml("", env).unwrap_err().to_string();
        assert!(
            error.contains("not its path") && !error.contains("secretbytes"),
            "{error}"
        );
    }
    // A one-line secret given as the file's name is not repeated either.
    let error = Config::from_toml(
        "",
        vec![(
            "PREVIEWD_GITHUB_WEBHOOK_SECRET_FILE".to_owned(),
            "hunter2-is-my-secret".to_owned(),
        )],
    )
    .unwrap_err()
    .to_string();
    assert!(!error.contains("hunter2"), "{error}");
}

#[test]
fn an_api_url_that_does_not_parse_is_refused_at_start() {
    let error = Config::from_toml(
        "[github]\napi_url = \"https://exa mple.com/x\"\n",
        Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("is not a URL"), "{error}");
}
