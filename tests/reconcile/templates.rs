//! Template databases (#16) through the reconciler and the directory sink: a repository's
//! first preview starts generation 1 and is seeded (and says so); the next clones it; a
//! reseed clones again; a push past `template_refresh` and a writer's refresh build the next
//! generation, which retires the one before; teardown keeps the template; destroy and idle
//! drop it.

use super::*;
use previewd::db;

const TEMPLATED: &str = "[[repos]]\nname = \"codertocat/hello-world\"\nimage = \"ghcr.io/octo/hello\"\n\
                         migrate_command = [\"./migrate\"]\nseed = \"example\"\ndatabase_template = true\n";
const GEN: &str = "pv-codertocat-hello-worl-4d960c3af87af320-tpl-";

fn generation_file(app: &TestApp, n: u32) -> Option<String> {
    std::fs::read_to_string(rendered(app).join(format!("{GEN}{n}-helpers.yaml"))).ok()
}

async fn states(app: &TestApp) -> Vec<(i64, String)> {
    app.rows("SELECT generation, state FROM templates ORDER BY generation")
        .await
}

fn preview_file(app: &TestApp, number: u32) -> String {
    std::fs::read_to_string(
        rendered(app).join(APP.replace("-pr-2-", &format!("-pr-{number}-")) + ".yaml"),
    )
    .unwrap()
}

#[tokio::test]
async fn a_repositorys_previews_clone_its_template_once_it_is_built_and_reseed_clones_again() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();

    // The first preview finds no generation ready: seeded, and its history says why.
    let first = preview_file(&app, 2);
    assert!(
        first.contains("001-schema.sql"),
        "the first preview is seeded"
    );
    assert!(!first.contains("template:"), "{first}");
    let history = app.history(HELLO, 2).await;
    assert!(
        history.iter().any(|(what, _, reason)| what == "template"
            && reason.contains("no template generation is ready")),
        "{history:?}"
    );
    // Generation 1 is built from the PR's base commit, by its own Application.
    let built = generation_file(&app, 1).expect("generation 1's Application is written");
    assert!(built.contains("build: true"), "{built}");
    assert!(
        built.contains("previewd.dev/template: '1'")
            || built.contains("previewd.dev/template: \"1\""),
        "{built}"
    );
    assert!(
        built.contains("ghcr.io/octo/hello:f95f852bd8fca8fcc58a9a2d6c842781e32a215e"),
        "the base commit's image: {built}"
    );
    // The directory sink reports no health: applied is all previewd can know.
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);
    // Listed in the API and on the dashboard, with its base commit and database.
    let (status, api) = app.get("/api/templates", None).await;
    assert_eq!(status, 200, "{api}");
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    let listed = &api["templates"][0];
    assert_eq!(
        (&listed["repo"], &listed["generation"], &listed["state"]),
        (&HELLO.into(), &1.into(), &"ready".into())
    );
    assert_eq!(
        listed["base_sha"],
        "f95f852bd8fca8fcc58a9a2d6c842781e32a215e"
    );
    let (_, page) = app.get("/", None).await;
    assert!(
        page.contains("Template databases") && page.contains("<code>f95f852</code>"),
        "{page}"
    );

    // The next PR clones generation 1 and seeds nothing.
    app.send(&Delivery::fixture("pull_request.opened").number(3))
        .await;
    reconciler.pass().await.unwrap();
    let clone = preview_file(&app, 3);
    let database = format!("{}1", GEN.replace('-', "_"));
    assert!(clone.contains(&format!("name: {database}")), "{clone}");
    assert!(clone.contains("clone: 1"), "{clone}");
    assert!(
        !clone.contains("001-schema.sql"),
        "a clone is not seeded: {clone}"
    );

    // A reseed clones again (the clone generation follows the seed generation).
    app.execute("UPDATE previews SET seed_generation = seed_generation + 1 WHERE number = 3")
        .await;
    reconciler.pass().await.unwrap();
    assert!(preview_file(&app, 3).contains("clone: 2"));
    // The seeded preview's reseed clones too, now that a generation is ready.
    app.execute("UPDATE previews SET seed_generation = seed_generation + 1 WHERE number = 2")
        .await;
    reconciler.pass().await.unwrap();
    let reseeded = preview_file(&app, 2);
    assert!(
        reseeded.contains(&format!("name: {database}")) && reseeded.contains("clone: 2"),
        "{reseeded}"
    );

    // Previews living long (longer than template_idle) keep it in use all along.
    app.clock.advance(20 * 86_400);
    reconciler.pass().await.unwrap();

    // Closing every PR keeps the template: it is the next preview's head start.
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    app.send(
        &Delivery::fixture("pull_request.closed.unmerged")
            .number(3)
            .updated_at("2019-05-15T17:00:00Z"),
    )
    .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("previews").await, 0);
    assert!(generation_file(&app, 1).is_some());
    assert_eq!(states(&app).await, [(1, "ready".into())]);

    // Until template_idle has passed with no preview: then it is dropped, with its ledger.
    app.clock.advance(14 * 86_400);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(generation_file(&app, 1).is_none());
    assert_eq!(app.count("templates").await, 0);
    assert_eq!(app.count("template_ledger").await, 0);
    assert_eq!(app.count("template_secrets").await, 0);
}

#[tokio::test]
async fn a_push_to_the_default_branch_builds_the_next_generation_only_after_template_refresh() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);

    // A push elsewhere is answered and ignored; one to the default branch is recorded.
    let (status, body) = app
        .send(&Delivery::fixture("push").edit(|j| j["ref"] = "refs/heads/feature".into()))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.send(&Delivery::fixture("push")).await;
    assert_eq!(status, 202, "{body}");
    reconciler.pass().await.unwrap();
    assert_eq!(
        states(&app).await,
        [(1, "ready".into())],
        "not before template_refresh"
    );

    app.clock.advance(24 * 3600);
    reconciler.pass().await.unwrap();
    let second = generation_file(&app, 2).expect("generation 2 is built from the push");
    assert!(
        second.contains("6113728f27ae82c7b1a177c8d03f9e96e0adf246"),
        "{second}"
    );
    // Ready on the next look; then generation 1 (no clone pending) retires.
    reconciler.pass().await.unwrap();
    assert_eq!(
        states(&app).await,
        [(1, "ready".into()), (2, "ready".into())]
    );
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(2, "ready".into())]);
    assert!(generation_file(&app, 1).is_none());

    // A writer's refresh builds at once, even at the same base; destroy-template drops all.
    let pr2: i64 = app.scalar("SELECT id FROM previews WHERE number = 2").await;
    let mut tx = db::begin(app.state()).await.unwrap();
    let refresh = db::Effect::RefreshTemplate { by: "octocat" };
    assert!(db::command_effect(&mut tx, pr2, &refresh, 0).await.unwrap());
    tx.commit().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(generation_file(&app, 3).is_some());
    assert!(
        db::destroy_template(app.state(), HELLO, "destroyed", 0)
            .await
            .unwrap()
    );
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("templates").await, 0);
    assert!(generation_file(&app, 2).is_none() && generation_file(&app, 3).is_none());
}

// ---- attack-16: reproductions ----

async fn template_base(app: &TestApp) -> String {
    app.scalar("SELECT base_sha FROM template_repos WHERE repo = 'codertocat/hello-world'")
        .await
}

const OLD_HEAD: &str = "1111111111111111111111111111111111111111";
const NEW_HEAD: &str = "2222222222222222222222222222222222222222";

/// A push of the default branch from `before` to `after`, pushed at `pushed_at` (GitHub's
/// `repository.pushed_at`, a Unix time in push payloads).
fn default_branch_push(before: &str, after: &str, pushed_at: i64) -> Delivery {
    let (before, after) = (before.to_owned(), after.to_owned());
    Delivery::fixture("push").edit(move |j| {
        j["before"] = before.into();
        j["after"] = after.clone().into();
        j["head_commit"]["id"] = after.into();
        j["repository"]["pushed_at"] = pushed_at.into();
    })
}

#[tokio::test]
async fn an_older_push_delivered_after_a_newer_one_never_moves_the_template_back() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);

    // main moved f95f852 -> 1111 -> 2222; GitHub delivered the second push first.
    let (status, _) = app
        .send(&default_branch_push(OLD_HEAD, NEW_HEAD, 1_700_000_200))
        .await;
    assert_eq!(status, 202);
    let (status, _) = app
        .send(&default_branch_push(
            "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
            OLD_HEAD,
            1_700_000_100,
        ))
        .await;
    assert_eq!(status, 202);
    assert_eq!(
        template_base(&app).await,
        NEW_HEAD,
        "the late, older push replaced the newest head of the default branch"
    );
}

#[tokio::test]
async fn an_older_push_delivered_late_never_builds_a_generation_at_the_older_commit() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    // The newer push arrives, is built (past template_refresh) and becomes current.
    app.send(&default_branch_push(OLD_HEAD, NEW_HEAD, 1_700_000_200))
        .await;
    app.clock.advance(24 * 3600);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(2, "ready".into())]);
    // Then the older one (a slow delivery, or a redelivery under a new id).
    app.send(&default_branch_push(
        "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
        OLD_HEAD,
        1_700_000_100,
    ))
    .await;
    app.clock.advance(24 * 3600);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let bases: Vec<(i64, String)> = app
        .rows("SELECT generation, base_sha FROM templates ORDER BY generation")
        .await;
    assert_eq!(
        bases,
        [(2, NEW_HEAD.to_owned())],
        "previews would now clone a template built from an older default branch"
    );
}

async fn preview_id(app: &TestApp, number: u32) -> i64 {
    app.scalar(&format!("SELECT id FROM previews WHERE number = {number}"))
        .await
}

#[tokio::test]
async fn destroy_template_never_drops_the_generation_a_preview_is_still_cloning() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);

    // PR 3's helper Application is applied, cloning generation 1; Argo CD has not run its
    // create Job yet (the clone is decided, not confirmed).
    app.send(&Delivery::fixture("pull_request.opened").number(3))
        .await;
    let pr3: std::collections::BTreeSet<_> = [previewd::preview::PreviewKey::new(
        HELLO.parse().unwrap(),
        3,
    )]
    .into();
    reconciler.pass_for(&pr3).await.unwrap();
    let database = format!("{}1", GEN.replace('-', "_"));
    assert!(preview_file(&app, 3).contains(&format!("name: {database}")));
    let (decided, confirmed): (Option<i64>, Option<i64>) = app
        .row("SELECT template_generation, template_confirmed FROM previews WHERE number = 3")
        .await;
    assert_eq!(
        (decided, confirmed),
        (Some(1), None),
        "the clone is pending"
    );

    // The operator runs `previewd destroy-template`; the template pass runs before PR 3's
    // create Job does.
    assert!(
        db::destroy_template(app.state(), HELLO, "destroyed", 0)
            .await
            .unwrap()
    );
    reconciler.templates().await.unwrap();

    // Either the generation stays until PR 3's clone is done, or PR 3 stops naming it.
    let kept = generation_file(&app, 1).is_some();
    reconciler.pass_for(&pr3).await.unwrap();
    let still_names_it = preview_file(&app, 3).contains(&format!("name: {database}"));
    assert!(
        kept || !still_names_it,
        "generation 1 was dropped while PR 3's create Job still clones it: its create Job fails \
         (\"template ... does not exist or is not sealed\") on every sync until a reseed"
    );
}

#[tokio::test]
async fn a_pr_into_another_branch_never_gives_the_template_its_base() {
    const RELEASE_HEAD: &str = "3333333333333333333333333333333333333333";
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    // The repository's first PR targets an old release branch, not the default branch.
    app.send(&Delivery::fixture("pull_request.opened").edit(|j| {
        j["pull_request"]["base"]["ref"] = "release-0.9".into();
        j["pull_request"]["base"]["sha"] = RELEASE_HEAD.into();
    }))
    .await;
    reconciler.pass().await.unwrap();
    let built: Vec<String> = app.scalars("SELECT base_sha FROM templates").await;
    assert!(
        !built.iter().any(|sha| sha == RELEASE_HEAD),
        "the template every later preview (of PRs into master) clones was built from \
         release-0.9's head: {built:?}"
    );
}

#[tokio::test]
async fn a_writers_refresh_template_after_destroy_template_builds_a_generation_again() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);
    // `previewd destroy-template`, carried out to the end.
    assert!(
        db::destroy_template(app.state(), HELLO, "destroyed", 0)
            .await
            .unwrap()
    );
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("templates").await, 0);

    // A writer comments `/preview refresh-template` on PR 2: previewd answers "building the
    // next generation ... from the default branch" with a rocket (obey.rs, comment.rs).
    let mut tx = db::begin(app.state()).await.unwrap();
    let changed = db::command_effect(
        &mut tx,
        preview_id(&app, 2).await,
        &db::Effect::RefreshTemplate { by: "octocat" },
        common::NOW,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert!(
        changed && app.count("templates").await > 0,
        "the command was answered as building, and nothing was built (changed a row: {changed})"
    );
}

#[tokio::test]
async fn a_preview_on_another_cluster_never_clones_a_generation_built_on_the_first_clusters_database()
 {
    // CloudNativePG: each Kubernetes cluster has its own Cluster (database.cnpg_cluster in
    // database.namespace), so each has its own PostgreSQL server.
    let toml = format!(
        "[database]\nmode = \"cnpg\"\nnamespace = \"pg\"\ncnpg_cluster = \"shared\"\n\
         [[clusters]]\nname = \"eu-1\"\nserver = \"https://eu-1.example.com\"\ncapacity = 1\n\
         [[clusters]]\nname = \"us-1\"\nserver = \"https://us-1.example.com\"\n{TEMPLATED}"
    );
    let app = TestApp::start_with(&toml).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(states(&app).await, [(1, "ready".into())]);
    let built_on: String = app.scalar("SELECT cluster FROM templates").await;
    assert_eq!(built_on, "eu-1");

    // eu-1 is full: PR 3 lands on us-1, and is told to clone generation 1.
    app.send(&Delivery::fixture("pull_request.opened").number(3))
        .await;
    reconciler.pass().await.unwrap();
    let placed: String = app
        .scalar("SELECT cluster FROM previews WHERE number = 3")
        .await;
    assert_eq!(placed, "us-1");
    let clone = preview_file(&app, 3);
    let database = format!("{}1", GEN.replace('-', "_"));
    assert!(
        !clone.contains(&format!("name: {database}")),
        "PR 3's clone Job runs against us-1's CloudNativePG Cluster, which has no database \
         {database} (built on eu-1's): \"template ... does not exist or is not sealed\", a failed \
         preview:\n{clone}"
    );
}

/// Argo CD's destination glob (`glob.Match`, gobwas/glob without separators): `*` is any run
/// of characters, `-` included.
fn glob_matches(glob: &str, text: &str) -> bool {
    match glob.split_once('*') {
        None => glob == text,
        Some((head, rest)) => {
            text.starts_with(head)
                && (head.len()..=text.len()).any(|i| glob_matches(rest, &text[i..]))
        }
    }
}

#[tokio::test]
async fn no_repositorys_apps_project_reaches_another_repositorys_template_namespace() {
    use previewd::naming::Names;
    use previewd::preview::{PreviewKey, RepoName};
    let shop: RepoName = "octo/shop".parse().unwrap();
    // The 16 hex digits of octo/shop's hash, as its preview namespaces carry them.
    let slug = Names::of(&PreviewKey::new(shop.clone(), 1), "d").slug;
    let hash = slug
        .rsplit("-pr-")
        .nth(1)
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .to_owned();
    // A listed repository whose name holds that hash and `-pr` (a legal GitHub name).
    let other = format!("a/{hash}-pr");
    let config = previewd::config::Config::from_toml(
        &format!(
            "[[repos]]\nname = \"octo/shop\"\napp_chart = \"deploy/chart\"\n\
             [[repos]]\nname = \"{other}\"\nimage = \"ghcr.io/a/x\"\nmigrate_command = [\"./m\"]\n\
             seed = \"example\"\ndatabase_template = true\n"
        ),
        Vec::new(),
    )
    .unwrap();
    let template_ns = Names::template(&other.parse().unwrap(), 1, "d").slug;
    let apps = previewd::projects::apps(&config);
    let reaching: Vec<String> = apps["spec"]["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["namespace"].as_str().unwrap().to_owned())
        .filter(|glob| glob_matches(glob, &template_ns))
        .collect();
    assert!(
        reaching.is_empty(),
        "octo/shop's PR code (fork code included) may deploy into {other}'s template namespace \
         {template_ns}, where its database Secret lives, through {reaching:?}"
    );
}

#[tokio::test]
async fn a_template_no_preview_used_for_template_idle_is_dropped_though_prs_without_previews_are_open()
 {
    // `trigger = "label"`: an open PR without the label is tracked (opted out), but has no
    // preview and no database.
    let app = TestApp::start_with(&format!("{TEMPLATED}trigger = \"label\"\n")).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let desired: String = app.scalar("SELECT desired FROM previews").await;
    assert_eq!(desired, "opted_out");
    // (Its base alone started generation 1, though nothing will clone it.)
    let built = app.count("templates").await;

    app.clock.advance(30 * 86_400);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(
        (built, app.count("templates").await),
        (built, 0),
        "30 days without a preview, template_idle 14d: the template should be gone"
    );
}

#[tokio::test]
async fn a_repository_leaving_repos_keeps_its_cloned_previews_exactly_as_applied() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    app.send(&Delivery::fixture("pull_request.opened").number(3))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    let before = (preview_file(&app, 2), preview_file(&app, 3));
    let unlisted = previewd::config::Config::from_toml(
        &common::config("[[repos]]\nname = \"octo/other\"\n"),
        vec![(
            "PREVIEWD_STATE".into(),
            app.dir.path().join("previewd.db").display().to_string(),
        )],
    )
    .unwrap();
    let frozen = super::reconciler(&app, unlisted);
    frozen.pass().await.unwrap();
    frozen.pass().await.unwrap();
    assert_eq!((preview_file(&app, 2), preview_file(&app, 3)), before);
    assert_eq!(app.count("templates").await, 0, "the template is dropped");
}

/// A previewd with `TEMPLATED` and a configured public_url: one a cluster reaches it at, so its
/// generations are sealed with a report token (the loopback guess never is).
async fn reporting() -> TestApp {
    TestApp::with_config(&format!(
        "public_url = \"https://previewd.example.com\"\n{}",
        common::config(TEMPLATED)
    ))
    .await
}

/// The report token sealed into generation `n`, opened with the cluster's key as the
/// sealed-secrets controller would open it for the size Job.
async fn report_token(app: &TestApp, n: i64) -> String {
    let id: i64 = app
        .scalar(&format!("SELECT id FROM templates WHERE generation = {n}"))
        .await;
    let sealed = db::generation_secrets(app.state(), id).await.unwrap();
    let report = sealed
        .iter()
        .find(|s| s.name.ends_with("-db-report"))
        .expect("a generation is sealed with a report token when previewd has a public_url");
    let key = previewd::seal::private_key_from_pem(
        &std::fs::read_to_string(format!("{FIXTURES}/test-key.pem")).unwrap(),
    )
    .unwrap();
    let token = previewd::seal::unseal_value(
        &[key],
        previewd::seal::Scope::Strict,
        &report.namespace,
        &report.name,
        &report.encrypted_data["TOKEN"],
    )
    .unwrap();
    String::from_utf8(token).unwrap()
}

async fn report(app: &TestApp, path: &str, body: &str) -> (u16, String) {
    let request = axum::http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap();
    let (status, _, body) = app.answer(request).await;
    (status.as_u16(), String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn a_generations_size_job_reports_its_size_with_the_token_sealed_for_it_and_no_other() {
    let app = reporting().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    // The Application tells the size Job where to report, and which Secret holds its token.
    let built = generation_file(&app, 1).unwrap();
    assert!(
        built.contains("https://previewd.example.com/api/templates/codertocat/hello-world/1/size")
            && built.contains(&format!("tokenSecret: {GEN}1-db-report")),
        "{built}"
    );
    let token = report_token(&app, 1).await;
    // previewd keeps the token's digest, never the token.
    let stored: Vec<u8> = app
        .scalar("SELECT report_digest FROM templates WHERE generation = 1")
        .await;
    assert_eq!(stored, previewd::secrets::report_digest(&token));
    assert_eq!(
        app.scalar::<i64>(&format!(
            "SELECT count(*) FROM template_secrets WHERE encrypted_data LIKE '%{token}%'"
        ))
        .await,
        0
    );
    let size = "/api/templates/codertocat/hello-world/1/size";

    // Strangers: no token, a wrong one, the right one for a generation that does not exist,
    // a body too large or unreadable. Nothing is recorded.
    for (path, body, status) in [
        (size, r#"{"bytes": 1}"#.to_owned(), 400),
        (size, r#"{"token": "x", "bytes": 1}"#.to_owned(), 401),
        (
            "/api/templates/codertocat/hello-world/2/size",
            format!(r#"{{"token": "{token}", "bytes": 1}}"#),
            401,
        ),
        (
            "/api/templates/octocat/hello-world/1/size",
            format!(r#"{{"token": "{token}", "bytes": 1}}"#),
            401,
        ),
        (size, format!(r#"{{"token": "{token}", "bytes": -1}}"#), 400),
        (
            size,
            format!(
                r#"{{"token": "{token}", "bytes": 1, "pad": "{}"}}"#,
                "x".repeat(2000)
            ),
            413,
        ),
        (
            "/api/templates/codertocat/hello-world/x/size",
            "{}".into(),
            400,
        ),
    ] {
        let (got, answer) = report(&app, path, &body).await;
        assert_eq!(got, status, "{path} {body:.60}: {answer}");
    }
    let (_, api) = app.get("/api/templates", None).await;
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["templates"][0]["size_bytes"], serde_json::Value::Null);

    // The size Job, with its own token: recorded, listed in the API and on the dashboard.
    let (got, answer) = report(
        &app,
        size,
        &format!(r#"{{"token":"{token}","bytes":262144000}}"#),
    )
    .await;
    assert_eq!(got, 204, "{answer}");
    let (_, api) = app.get("/api/templates", None).await;
    let api: serde_json::Value = serde_json::from_str(&api).unwrap();
    assert_eq!(api["templates"][0]["size_bytes"], 262_144_000);
    let (_, page) = app.get("/", None).await;
    assert!(page.contains(">250 MB<"), "{page}");

    // A retired generation takes no report, even with its own token.
    app.execute("UPDATE templates SET state = 'retiring' WHERE generation = 1")
        .await;
    let (got, _) = report(&app, size, &format!(r#"{{"token":"{token}","bytes":1}}"#)).await;
    assert_eq!(got, 401);
    assert_eq!(
        app.scalar::<i64>("SELECT size_bytes FROM templates WHERE generation = 1")
            .await,
        262_144_000
    );
}

/// With no `public_url`, previewd on its default loopback `listen` guesses
/// `http://127.0.0.1:8080` for people on the same host. A generation's size Job runs in a
/// cluster, where 127.0.0.1 is its own pod: told to report there, it never reaches previewd,
/// retries for half a minute in every build's PostSync and no size is ever recorded. No
/// address a cluster can reach: no report token, no size Job.
#[tokio::test]
async fn a_generation_is_never_told_to_report_to_a_loopback_address_no_cluster_reaches() {
    let app = TestApp::start_with(TEMPLATED).await;
    assert_eq!(
        app.app.config.public_url.as_deref(),
        Some("http://127.0.0.1:8080"),
        "the guess for a loopback listen"
    );
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let built = generation_file(&app, 1).unwrap();
    assert!(!built.contains("http://127.0.0.1"), "{built}");
    assert!(!built.contains("-db-report"), "{built}");
}

/// The API document caps `bytes` at 2^53 (`maximum`, the largest integer a float spells
/// exactly), and a float spelling past it is refused; the same number spelled as an
/// integer must be refused too, not recorded.
#[tokio::test]
async fn a_size_past_the_documented_maximum_is_refused_however_it_is_spelled() {
    let app = reporting().await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let token = report_token(&app, 1).await;
    let size = "/api/templates/codertocat/hello-world/1/size";
    let document = previewd::server::openapi::document();
    let maximum =
        document["paths"]["/api/templates/{owner}/{repo}/{generation}/size"]["post"]["requestBody"]
            ["content"]["application/json"]["schema"]["properties"]["bytes"]["maximum"]
            .as_i64()
            .unwrap();
    for bytes in [
        "1e16".to_owned(),
        (maximum + 1).to_string(),
        i64::MAX.to_string(),
    ] {
        let (got, answer) = report(
            &app,
            size,
            &format!(r#"{{"token":"{token}","bytes":{bytes}}}"#),
        )
        .await;
        assert_eq!(got, 400, "bytes {bytes}: {answer}");
    }
    assert_eq!(
        app.scalar::<Option<i64>>("SELECT size_bytes FROM templates WHERE generation = 1")
            .await,
        None
    );
}

// ---- attack [1/7]: reproductions ----

/// Every database name `repo`'s generations were recorded with, so far.
async fn databases(app: &TestApp) -> Vec<String> {
    let names: Vec<String> = app.scalars("SELECT names FROM templates").await;
    names
        .iter()
        .map(|n| serde_json::from_str::<serde_json::Value>(n).unwrap()["database"].to_string())
        .collect()
}

/// A writer's `/preview refresh-template` on PR 2, as `obey` records it.
async fn refresh_template(app: &TestApp) {
    let mut tx = db::begin(app.state()).await.unwrap();
    let refresh = db::Effect::RefreshTemplate { by: "octocat" };
    assert!(
        db::command_effect(&mut tx, preview_id(app, 2).await, &refresh, common::NOW)
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
}

/// `previewd destroy-template` forgets every generation's row once its Application is gone;
/// the database may well still be on the server (`drop_on_delete = false` before, a drop
/// that never ran). A later generation numbered as an earlier one gets its names
/// (`Names::template`), so its create Job finds that database sealed and makes nothing
/// (template-create.sql), and the build's migrations can never connect: the template is
/// stuck unbuildable under that number.
#[tokio::test]
async fn generation_numbers_and_names_never_repeat_after_destroy_template_forgot_every_row() {
    let app = TestApp::start_with(TEMPLATED).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    refresh_template(&app).await;
    for _ in 0..3 {
        reconciler.pass().await.unwrap();
    }
    assert_eq!(states(&app).await, [(2, "ready".into())]);
    let mut used = databases(&app).await;
    used.push(format!("\"{}1\"", GEN.replace('-', "_")));

    // destroy-template, carried out to the last row; then a writer's refresh builds anew.
    assert!(
        db::destroy_template(app.state(), HELLO, "destroyed", 0)
            .await
            .unwrap()
    );
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("templates").await, 0);
    refresh_template(&app).await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();

    let rebuilt = states(&app).await;
    assert!(
        rebuilt.iter().all(|(n, _)| *n > 2) && !rebuilt.is_empty(),
        "generation numbers restarted after destroy-template: {rebuilt:?}"
    );
    let again = databases(&app).await;
    assert!(
        again.iter().all(|d| !used.contains(d)),
        "a new generation is named as an earlier one, whose sealed database may still be on \
         the server: {again:?} (used before: {used:?})"
    );
    assert!(generation_file(&app, 1).is_none() && generation_file(&app, 2).is_none());

    // The same after the idle drop: the next preview's generation is numbered past them all.
    app.send(&Delivery::fixture("pull_request.closed.unmerged").updated_at("2019-05-15T17:00:00Z"))
        .await;
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    app.clock.advance(30 * 86_400);
    reconciler.pass().await.unwrap();
    reconciler.pass().await.unwrap();
    assert_eq!(app.count("templates").await, 0, "dropped for being idle");
    app.send(&Delivery::fixture("pull_request.opened").number(3))
        .await;
    reconciler.pass().await.unwrap();
    let after_idle = states(&app).await;
    assert!(
        !after_idle.is_empty() && after_idle.iter().all(|(n, _)| *n > rebuilt[0].0),
        "{after_idle:?} after {rebuilt:?}"
    );
}

/// An installation from before `template_repos.last_generation` numbers its next generations
/// past what it recorded: its generations, and those its previews were cloned from.
#[test]
fn an_existing_installation_numbers_new_generations_past_every_recorded_one() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|f| f.unwrap().path())
        .collect();
    files.sort();
    let (before, after): (Vec<_>, Vec<_>) = files
        .into_iter()
        .partition(|f| f.file_name().unwrap().to_str().unwrap() < "0016_template_generations.sql");
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    for file in &before {
        conn.execute_batch(&std::fs::read_to_string(file).unwrap())
            .unwrap();
    }
    conn.execute_batch(
        "INSERT INTO template_repos (repo, base_sha, last_used_at, updated_at) VALUES
           ('octo/kept', 'a', 0, 0), ('octo/cloned', 'a', 0, 0), ('octo/new', 'a', 0, 0);
         INSERT INTO templates (repo, generation, base_sha, cluster, names, state, created_at, updated_at)
           VALUES ('octo/kept', 4, 'a', 'c', '{}', 'ready', 0, 0);
         INSERT INTO previews (repo, number, repo_id, author, head_sha, head_ref, base_ref, fork,
                               draft, desired, pr_updated_at, created_at, updated_at, expires_at,
                               template_generation)
           VALUES ('octo/cloned', 1, 1, 'a', 'a', 'a', 'b', 0, 0, 'deployed', 0, 0, 0, 0, 7);",
    )
    .unwrap();
    conn.execute_batch(&std::fs::read_to_string(&after[0]).unwrap())
        .unwrap();
    let mut marks = conn
        .prepare("SELECT repo, last_generation FROM template_repos ORDER BY repo")
        .unwrap();
    let marks: Vec<(String, i64)> = marks
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        marks,
        [
            ("octo/cloned".to_owned(), 7),
            ("octo/kept".to_owned(), 4),
            ("octo/new".to_owned(), 0)
        ]
    );
}

/// With `drop_on_delete = false` a preview's database is kept at teardown; a retired
/// generation is previewd's own, and was kept too, with its spare clones: on the server for
/// good, its row forgotten, listed nowhere. Its Application renders its drop all the same.
#[tokio::test]
async fn a_generation_is_dropped_when_retired_though_drop_on_delete_keeps_previews_databases() {
    let app =
        TestApp::start_with(&format!("[database]\ndrop_on_delete = false\n{TEMPLATED}")).await;
    let reconciler = reconciler(&app, app.app.config.clone());
    app.send(&Delivery::fixture("pull_request.opened")).await;
    reconciler.pass().await.unwrap();
    let preview = preview_file(&app, 2);
    assert!(preview.contains("dropOnDelete: false"), "{preview}");
    let built = generation_file(&app, 1).unwrap();
    assert!(
        built.contains("dropOnDelete: true")
            && built.contains("- post-delete-finalizer.argocd.argoproj.io\n"),
        "generation 1 would never be dropped once retired:\n{built}"
    );
}
