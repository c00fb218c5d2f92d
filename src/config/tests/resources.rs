//! Sleep and bounds: `sleep_after`, `cpu`, `memory`, `pods`, `container_cpu` and
//! `container_memory`, in `[defaults]` and per repository, read or refused naming the key.

use super::*;

#[test]
fn previews_never_sleep_and_get_modest_bounds_unless_configured() {
    let config = Config::from_toml("[[repos]]\nname = \"o/r\"\n", env(&[])).unwrap();
    let policy = &config.repos[0].policy;
    assert_eq!(policy.sleep_after, None);
    assert_eq!(
        policy.resources,
        Resources {
            cpu: Cpu(4000),
            memory: Memory(8 << 30),
            pods: 20,
            container_cpu: Cpu(100),
            container_memory: Memory(256 << 20),
        }
    );
}

#[test]
fn a_repository_inherits_the_defaults_and_overrides_each_key_alone() {
    let config = Config::from_toml(
        "[defaults]\nsleep_after = \"2h\"\ncpu = \"2\"\ncontainer_memory = \"128Mi\"\n\
         [[repos]]\nname = \"o/a\"\n\
         [[repos]]\nname = \"o/b\"\nsleep_after = \"30m\"\nmemory = \"2Gi\"\npods = 5\n\
         [[repos]]\nname = \"o/c\"\nsleep_after = \"none\"\n",
        env(&[]),
    )
    .unwrap();
    let [a, b, c] = [0, 1, 2].map(|i| &config.repos[i].policy);
    assert_eq!(a.sleep_after, Some(Duration::from_secs(2 * 3600)));
    assert_eq!(b.sleep_after, Some(Duration::from_secs(30 * 60)));
    assert_eq!(c.sleep_after, None, "`none` turns an inherited sleep off");
    assert_eq!(
        (a.resources.cpu, a.resources.memory),
        (Cpu(2000), Memory(8 << 30))
    );
    assert_eq!(
        (b.resources.cpu, b.resources.memory),
        (Cpu(2000), Memory(2 << 30))
    );
    assert_eq!(b.resources.pods, 5);
    assert_eq!(b.resources.container_memory, Memory(128 << 20));
}

#[test]
fn bad_bounds_and_sleep_are_refused_naming_the_key() {
    for (toml, key) in [
        (
            "[defaults]\nsleep_after = \"soon\"\n",
            "defaults.sleep_after",
        ),
        ("[defaults]\nsleep_after = \"0s\"\n", "defaults.sleep_after"),
        ("[defaults]\ncpu = \"4000\"\n", "defaults.cpu"),
        ("[defaults]\nmemory = \"8GB\"\n", "defaults.memory"),
        ("[defaults]\npods = 0\n", "defaults.pods"),
        (
            "[[repos]]\nname = \"o/r\"\ncontainer_cpu = \"lots\"\n",
            "repos[0].container_cpu",
        ),
        (
            "[defaults]\ncpu = \"500m\"\ncontainer_cpu = \"1\"\n",
            "defaults.container_cpu",
        ),
        (
            "[[repos]]\nname = \"o/r\"\nmemory = \"128Mi\"\n",
            "repos[0].container_memory",
        ),
    ] {
        let error = error_of(toml, &[]);
        assert!(error.contains(key), "{toml:?}: {error}");
    }
}

#[test]
fn sleep_and_bounds_are_set_from_the_environment_too() {
    let config = Config::from_toml(
        "",
        env(&[
            ("PREVIEWD_DEFAULTS_SLEEP_AFTER", "1h"),
            ("PREVIEWD_DEFAULTS_CPU", "1.5"),
        ]),
    )
    .unwrap();
    assert_eq!(config.defaults.sleep_after, Some(Duration::from_secs(3600)));
    assert_eq!(config.defaults.resources.cpu, Cpu(1500));
}
