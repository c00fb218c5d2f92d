//! Signing in to previews: `access`, `app_service` and the `[login]` client, each read
//! or refused at start naming its key.

use super::*;

#[test]
fn an_app_service_needs_a_public_url_the_ingress_can_reach() {
    let repo = "[[repos]]\nname = \"o/r\"\napp_service = \"web:8080\"\n";
    let e = Config::from_toml(repo, env(&[])).unwrap_err().to_string();
    assert!(e.contains("repos[0].app_service"), "{e}");
    assert!(e.contains("public_url"), "{e}");
    let config = Config::from_toml(
        &format!("public_url = \"https://previewd.example.com\"\n{repo}"),
        env(&[]),
    )
    .unwrap();
    let service = config.repos[0].app.service.clone().unwrap();
    assert_eq!(service.name, "web");
    assert_eq!(service.port, ServicePort::Number(8080));
}

#[test]
fn app_service_and_access_are_read_or_refused_naming_the_key() {
    let base = "public_url = \"https://previewd.example.com\"\n[[repos]]\nname = \"o/r\"\n";
    for (line, key) in [
        ("app_service = \"web\"", "repos[0].app_service"),
        ("app_service = \"Web:80\"", "repos[0].app_service"),
        ("app_service = \"web:0\"", "repos[0].app_service"),
        (
            "app_service = \"web:a-very-long-port-name\"",
            "repos[0].app_service",
        ),
        ("access = \"everyone\"", "repos[0].access"),
    ] {
        let e = Config::from_toml(&format!("{base}{line}\n"), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains(key), "{line}: {e}");
    }
    let config = Config::from_toml(
        &format!("{base}app_service = \"web:http\"\naccess = \"org\"\n"),
        env(&[]),
    )
    .unwrap();
    assert_eq!(config.repos[0].policy.access, Access::Org);
    assert_eq!(
        config.repos[0].app.service.as_ref().unwrap().port,
        ServicePort::Name("http".into())
    );
    assert_eq!(config.defaults.access, Access::Repo);
}

#[test]
fn sign_in_needs_both_halves_of_the_client_and_an_https_public_url() {
    let client = "[login]\nclient_id = \"Iv1.x\"\nclient_secret = \"s\"\n";
    let e = Config::from_toml(
        &format!("listen = \"0.0.0.0:8080\"\npublic_url = \"http://previewd.example.com\"\n[api]\ntoken = \"t\"\n{client}"),
        env(&[]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("public_url"), "{e}");
    let e = Config::from_toml("[login]\nclient_id = \"Iv1.x\"\n", env(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("login.client_secret"), "{e}");
    let e = Config::from_toml("[login]\nsession_secret = \"short\"\n", env(&[]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("login.session_secret"), "{e}");
    assert!(!e.contains("short"), "the secret is not repeated: {e}");
}
