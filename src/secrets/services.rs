//! The Secrets of a preview's mail catcher and broker user: a generated password each,
//! sealed, with the settings around it public, under the names apps conventionally read.

use rand::{CryptoRng, RngCore};

use super::{password, rabbitmq_password_hash, rabbitmq_password_hash_sha512, spec};
use crate::config::{AppConfig, Config, MessagingMode};
use crate::naming::Names;
use crate::render::SecretNames;
use crate::seal::{SecretSpec, template};

/// The catcher's SMTP port (Mailpit's default) and the one user it accepts.
pub const SMTP_PORT: u16 = 1025;
pub const SMTP_USERNAME: &str = "preview";

/// The mail Secret, for a repository with `mail = true`: `SMTP_HOST`, `SMTP_PORT`,
/// `SMTP_USERNAME`, `SMTP_PASSWORD` for the app, and `MP_SMTP_AUTH`, the `user:password` the
/// catcher accepts, built by the controller around the sealed password.
pub fn mail(
    app: &AppConfig,
    names: &Names,
    rng: &mut (impl RngCore + CryptoRng),
) -> Option<SecretSpec> {
    app.mail.as_ref()?;
    let mut secret = spec(
        &SecretNames::of(names).mail,
        &names.slug,
        "Opaque",
        [("SMTP_PASSWORD", password(rng))],
    )
    .with_public([
        (
            "SMTP_HOST",
            format!("{}.{}.svc", names.mail_service(), names.slug),
        ),
        ("SMTP_PORT", SMTP_PORT.to_string()),
        ("SMTP_USERNAME", SMTP_USERNAME.to_owned()),
    ]);
    secret.templates.insert(
        "MP_SMTP_AUTH".into(),
        format!("{SMTP_USERNAME}:{}", template::action("SMTP_PASSWORD")),
    );
    Some(secret)
}

/// The broker Secrets, for a repository with `messaging = "rabbitmq"`: `AMQP_URL` and its
/// parts in the preview namespace, and the user's credentials where its maker reads them:
/// only the password's hash for the shared mode's Job; the password for the operator's
/// `User`, in the broker's namespace, which PR code cannot reach.
pub fn messaging(
    config: &Config,
    app: &AppConfig,
    names: &Names,
    rng: &mut (impl RngCore + CryptoRng),
) -> Vec<SecretSpec> {
    if !app.messaging {
        return Vec::new();
    }
    let broker = &config.messaging;
    let secrets = SecretNames::of(names);
    let password = password(rng);
    // The vhost and the user are the slug: [a-z0-9-], nothing to escape in a URL.
    let user = &names.slug;
    let mut connection = spec(
        &secrets.amqp,
        &names.slug,
        "Opaque",
        [("AMQP_PASSWORD", password.clone())],
    )
    .with_public([
        ("AMQP_HOST", broker.host.clone()),
        ("AMQP_PORT", broker.port.to_string()),
        ("AMQP_USERNAME", user.clone()),
        ("AMQP_VHOST", user.clone()),
    ]);
    connection.templates.insert(
        "AMQP_URL".into(),
        format!(
            "amqp://{user}:{}@{}:{}/{user}",
            template::action("AMQP_PASSWORD"),
            broker.host,
            broker.port
        ),
    );
    let credentials = match broker.mode {
        MessagingMode::Shared => {
            let mut salt = [0; 4];
            rng.fill_bytes(&mut salt);
            spec(
                &secrets.amqp_hash,
                &broker.namespace,
                "Opaque",
                [("PASSWORD_HASH", rabbitmq_password_hash(&password, salt))],
            )
        }
        // The operator declares the user from the hash (its `passwordHash` key), and reads
        // only Secrets it is labelled for (topology operator 1.20: its cache and its webhook).
        MessagingMode::Operator => {
            let mut salt = [0; 4];
            rng.fill_bytes(&mut salt);
            let mut credentials = spec(
                &secrets.amqp_user,
                &broker.namespace,
                "Opaque",
                [(
                    "passwordHash",
                    rabbitmq_password_hash_sha512(&password, salt),
                )],
            )
            .with_public([("username", user.clone())]);
            credentials
                .labels
                .insert("rabbitmq.com/topology-operator".into(), "true".into());
            credentials
        }
    };
    vec![connection, credentials]
}

/// The mail and broker Secrets `app` asks for that are not among `stored` (by name): what a
/// preview sealed before its repository turned them on still needs.
pub fn services_missing(
    config: &Config,
    app: &AppConfig,
    names: &Names,
    stored: &[&str],
    rng: &mut (impl RngCore + CryptoRng),
) -> Vec<SecretSpec> {
    let secrets = SecretNames::of(names);
    let mut missing = Vec::new();
    if !stored.contains(&secrets.mail.as_str()) {
        missing.extend(mail(app, names, rng));
    }
    if !stored.contains(&secrets.amqp.as_str()) {
        missing.extend(messaging(config, app, names, rng));
    }
    missing
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MailPolicy;

    fn names() -> Names {
        Names::of(&"octo/app#7".parse().unwrap(), "preview.example.com")
    }

    fn app(mail: bool, messaging: bool) -> AppConfig {
        AppConfig {
            mail: mail.then(MailPolicy::default),
            messaging,
            ..AppConfig::default()
        }
    }

    fn text(secret: &SecretSpec, key: &str) -> String {
        String::from_utf8(secret.data[key].clone()).unwrap()
    }

    #[test]
    fn a_preview_sealed_before_mail_and_messaging_gets_only_theirs_added() {
        let config = Config::from_toml("", Vec::new()).unwrap();
        let secrets = SecretNames::of(&names());
        let mut rng = rand::thread_rng();
        let before = [
            secrets.database_url.as_str(),
            secrets.database_password.as_str(),
        ];
        let added: Vec<String> =
            services_missing(&config, &app(true, true), &names(), &before, &mut rng)
                .into_iter()
                .map(|s| s.name)
                .collect();
        assert_eq!(
            added,
            [
                secrets.mail.clone(),
                secrets.amqp.clone(),
                secrets.amqp_hash.clone()
            ]
        );
        let all = [
            before[0],
            before[1],
            &secrets.mail,
            &secrets.amqp,
            &secrets.amqp_hash,
        ];
        assert!(services_missing(&config, &app(true, true), &names(), &all, &mut rng).is_empty());
        assert!(
            services_missing(&config, &app(false, false), &names(), &before, &mut rng).is_empty()
        );
    }

    #[test]
    fn a_repository_without_mail_or_messaging_gets_neither_secret() {
        let config = Config::from_toml("", Vec::new()).unwrap();
        let mut rng = rand::thread_rng();
        assert!(mail(&app(false, false), &names(), &mut rng).is_none());
        assert!(messaging(&config, &app(false, false), &names(), &mut rng).is_empty());
    }

    #[test]
    fn the_app_and_the_catcher_get_the_same_smtp_login() {
        let secret = mail(&app(true, false), &names(), &mut rand::thread_rng()).unwrap();
        let slug = &names().slug;
        assert_eq!(
            (secret.name.as_str(), secret.namespace.as_str()),
            (format!("{slug}-mail").as_str(), slug.as_str())
        );
        assert_eq!(
            secret.public["SMTP_HOST"],
            format!("{slug}-mail.{slug}.svc")
        );
        assert_eq!(secret.public["SMTP_PORT"], "1025");
        let password = text(&secret, "SMTP_PASSWORD");
        let auth = template::render(&secret.templates["MP_SMTP_AUTH"], &secret.data).unwrap();
        assert_eq!(
            String::from_utf8(auth).unwrap(),
            format!("preview:{password}")
        );
        assert_eq!(secret.data.len(), 1, "only the password is sealed");
    }

    #[test]
    fn shared_messaging_gives_the_provisioner_only_the_passwords_hash() {
        let config = Config::from_toml("", Vec::new()).unwrap();
        let secrets = messaging(
            &config,
            &app(false, true),
            &names(),
            &mut rand::thread_rng(),
        );
        let (connection, hash) = (&secrets[0], &secrets[1]);
        let slug = &names().slug;
        let password = text(connection, "AMQP_PASSWORD");
        let url = template::render(&connection.templates["AMQP_URL"], &connection.data).unwrap();
        assert_eq!(
            String::from_utf8(url).unwrap(),
            format!("amqp://{slug}:{password}@rabbitmq.previewd-system.svc:5672/{slug}")
        );
        assert_eq!(hash.namespace, "previewd-system");
        assert_eq!(hash.data.keys().collect::<Vec<_>>(), ["PASSWORD_HASH"]);
        let stored = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            text(hash, "PASSWORD_HASH"),
        )
        .unwrap();
        let salt: [u8; 4] = stored[..4].try_into().unwrap();
        assert_eq!(
            text(hash, "PASSWORD_HASH"),
            rabbitmq_password_hash(&password, salt)
        );
        assert!(!text(hash, "PASSWORD_HASH").contains(&password));
    }

    #[test]
    fn operator_messaging_gives_the_user_its_credentials_in_the_brokers_namespace() {
        let config = Config::from_toml("[messaging]\nmode = \"operator\"\n", Vec::new()).unwrap();
        let secrets = messaging(
            &config,
            &app(false, true),
            &names(),
            &mut rand::thread_rng(),
        );
        let user = &secrets[1];
        assert_eq!(user.namespace, "rabbitmq");
        assert_eq!(user.public["username"], names().slug);
        assert_eq!(user.labels["rabbitmq.com/topology-operator"], "true");
        let hash = text(user, "passwordHash");
        let stored =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &hash).unwrap();
        assert_eq!(stored.len(), 4 + 64, "a salt and a SHA-512");
        let password = text(&secrets[0], "AMQP_PASSWORD");
        assert_eq!(
            hash,
            rabbitmq_password_hash_sha512(&password, stored[..4].try_into().unwrap())
        );
        assert_eq!(
            user.data.len(),
            1,
            "the hash only: the password stays with the app"
        );
    }
}
