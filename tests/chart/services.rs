//! Mail and messaging as the chart renders them from previewd's Application: the catcher
//! beside the app, its inbox behind the preview's Ingress, and the broker's vhost made and
//! deleted by hook Jobs in the provisioner namespace, every object validated.

use super::*;

const SLUG: &str = "pv-octo-app-609ddd1d069bc4c5-pr-7";

fn config(extra: &str) -> String {
    format!(
        r#"
public_url = "https://previewd.example.com"
[defaults]
domain = "preview.example.com"
[mail]
relay_host = "smtp-relay.mail.svc"
[[clusters]]
name = "eu-1"
server = "https://eu-1.k8s.example.com"
[[repos]]
name = "octo/app"
app_service = "web:8080"
mail = true
mail_relay = ["qa@example.com"]
messaging = "rabbitmq"
{extra}"#
    )
}

fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn env(container: &Value) -> Vec<(String, Value)> {
    container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e
                .get("value")
                .cloned()
                .unwrap_or_else(|| e["valueFrom"].clone());
            (e["name"].as_str().unwrap().to_owned(), value)
        })
        .collect()
}

#[test]
fn a_preview_with_mail_gets_a_catcher_whose_inbox_is_behind_its_login() {
    let preview = Preview::test().on("eu-1");
    let objects = assert_valid_objects(&config(""), &preview);
    let deployment = named(&objects, "Deployment", &format!("{SLUG}-mail"));
    assert_eq!(deployment["metadata"]["namespace"], SLUG);
    assert_eq!(
        annotation(deployment, "argocd.argoproj.io/sync-wave"),
        Some("-1"),
        "before the app, after its Secret"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let env = env(&pod["containers"][0]);
    let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
    assert_eq!(
        get("MP_SMTP_AUTH").unwrap()["secretKeyRef"],
        serde_json::json!({"name": format!("{SLUG}-mail"), "key": "MP_SMTP_AUTH"}),
        "the login the app's SMTP_* settings carry"
    );
    assert_eq!(
        get("MP_SMTP_RELAY_ALLOWED_RECIPIENTS").unwrap(),
        r"^(qa\@example\.com)$"
    );
    assert_eq!(
        get("MP_SMTP_RELAY_MATCHING").unwrap(),
        r"^(qa\@example\.com)$"
    );
    named(&objects, "Service", &format!("{SLUG}-mail"));
    // Inside the cluster, only the ingress controller reaches the inbox.
    let policy = named(&objects, "NetworkPolicy", &format!("{SLUG}-mail"));
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "ingress-nginx"
    );
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "http");
    assert_eq!(
        policy["spec"]["ingress"][1]["from"][0],
        serde_json::json!({"podSelector": {}}),
        "SMTP from the preview's own namespace"
    );
    // The inbox: a path of the preview's own host, on the Ingress that asks previewd.
    let ingress = named(&objects, "Ingress", SLUG);
    let paths = &ingress["spec"]["rules"][0]["http"]["paths"];
    assert_eq!(paths[0]["path"], "/__mail/");
    assert_eq!(
        paths[0]["backend"]["service"]["name"],
        format!("{SLUG}-mail")
    );
    assert_eq!(paths[1]["path"], "/");
    assert!(
        annotation(ingress, "nginx.ingress.kubernetes.io/auth-url")
            .unwrap()
            .starts_with("https://previewd.example.com/auth/check")
    );
}

/// Issue #41: asleep, the catcher runs no pod; awake, one. Through the Helm parameter the
/// sleep rides in, as Argo CD passes it (`--set mail.asleep=true`).
#[test]
fn a_sleeping_preview_s_catcher_runs_no_pod() {
    let replicas = |preview: &Preview| {
        let objects = assert_valid_rendering(&config(""), preview);
        named(&objects, "Deployment", &format!("{SLUG}-mail"))["spec"]["replicas"].clone()
    };
    assert_eq!(replicas(&Preview::test().on("eu-1")), 1);
    assert_eq!(replicas(&Preview::test().on("eu-1").asleep()), 0);
}

#[test]
fn without_named_recipients_the_catcher_knows_no_relay() {
    let toml = config("").replace("mail_relay = [\"qa@example.com\"]\n", "");
    let objects = assert_valid_objects(&toml, &Preview::test().on("eu-1"));
    let deployment = named(&objects, "Deployment", &format!("{SLUG}-mail"));
    let env = env(&deployment["spec"]["template"]["spec"]["containers"][0]);
    assert!(
        env.iter()
            .all(|(name, _)| !name.starts_with("MP_SMTP_RELAY")),
        "{env:?}"
    );
}

#[test]
fn shared_messaging_makes_and_deletes_the_vhost_from_the_provisioner_namespace() {
    let preview = Preview::test().on("eu-1");
    let objects = assert_valid_objects(&config(""), &preview);
    let create = named(&objects, "Job", &format!("{SLUG}-amqp-create"));
    let delete = named(&objects, "Job", &format!("{SLUG}-amqp-delete"));
    for (job, hook) in [(create, "Sync"), (delete, "PostDelete")] {
        assert_eq!(job["metadata"]["namespace"], "previewd-system");
        assert_eq!(annotation(job, "argocd.argoproj.io/hook"), Some(hook));
        let container = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            container["envFrom"][0]["secretRef"]["name"], "rabbitmq-admin",
            "the admin's credentials, only here"
        );
        let env = env(container);
        assert!(env.contains(&("VHOST".into(), SLUG.into())));
        assert!(env.contains(&("PREVIEW".into(), "octo/app#7".into())));
    }
    assert_eq!(
        annotation(create, "argocd.argoproj.io/sync-wave"),
        Some("-1")
    );
    let env = env(&create["spec"]["template"]["spec"]["containers"][0]);
    let hash = &env.iter().find(|(n, _)| n == "PASSWORD_HASH").unwrap().1;
    assert_eq!(
        hash["secretKeyRef"]["name"],
        format!("{SLUG}-amqp-hash"),
        "the hash, never the password"
    );
    assert!(env.contains(&("MAX_QUEUE_BYTES".into(), "16777216".into())));
    // The delete's script outlives the ordinary objects: a PostDelete hook itself.
    let script = named(&objects, "ConfigMap", &format!("{SLUG}-amqp-delete-sh"));
    assert_eq!(
        annotation(script, "argocd.argoproj.io/hook"),
        Some("PostDelete")
    );
    assert!(
        script["data"]["rabbitmq.sh"]
            .as_str()
            .unwrap()
            .contains("delete")
    );
}

#[test]
fn the_delete_runs_only_for_an_application_carrying_the_post_delete_finalizers() {
    let toml = format!("{}[database]\nmode = \"off\"\n", config(""));
    let config = Config::from_toml(&toml, Vec::new()).unwrap();
    let preview = Preview::test().on("eu-1");
    let application =
        render::helper_application(&preview, &names_of(&preview, &config), &config, &[]).unwrap();
    let finalizers = application["metadata"]["finalizers"].as_array().unwrap();
    assert!(
        finalizers
            .iter()
            .any(|f| f == "post-delete-finalizer.argocd.argoproj.io"),
        "{finalizers:?}"
    );
}

#[test]
fn operator_messaging_renders_the_topology_operators_objects_valid_against_its_crds() {
    let toml = format!(
        "{}[messaging]\nmode = \"operator\"\ncluster = \"broker\"\n",
        config("")
    );
    let objects = assert_valid_objects(&toml, &Preview::test().on("eu-1"));
    let vhost = named(&objects, "Vhost", SLUG);
    assert_eq!(vhost["metadata"]["namespace"], "rabbitmq");
    assert_eq!(vhost["spec"]["deletionPolicy"], "delete");
    assert_eq!(
        vhost["spec"]["limits"],
        serde_json::json!({"connections": 20, "queues": 20})
    );
    let user = named(&objects, "User", SLUG);
    assert_eq!(
        user["spec"]["importCredentialsSecret"]["name"],
        format!("{SLUG}-amqp-user")
    );
    assert!(user["spec"].get("tags").is_none(), "no management access");
    let permission = named(&objects, "Permission", SLUG);
    assert_eq!(permission["spec"]["vhost"], SLUG);
    let wave = |o: &Value| annotation(o, "argocd.argoproj.io/sync-wave").map(str::to_owned);
    assert_eq!(wave(vhost).as_deref(), Some("-1"));
    assert_eq!(wave(user).as_deref(), Some("-1"));
    assert_eq!(
        wave(permission).as_deref(),
        Some("0"),
        "after its User and Vhost"
    );
    let policy = named(&objects, "OperatorPolicy", &format!("{SLUG}-bounds"));
    assert_eq!(wave(policy).as_deref(), Some("0"));
    assert_eq!(
        policy["spec"]["definition"],
        serde_json::json!({"max-length-bytes": 16 << 20, "max-length": 1000}),
        "only keys RabbitMQ takes in an operator policy"
    );
    for object in [vhost, user, permission, policy] {
        assert_eq!(object["spec"]["rabbitmqClusterReference"]["name"], "broker");
    }
    assert!(
        objects.iter().all(|o| !o["metadata"]["name"]
            .as_str()
            .unwrap()
            .contains("amqp-create")),
        "no Jobs in operator mode"
    );
}
