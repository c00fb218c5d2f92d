//! The module graph, read from the source: no import cycles (between top-level modules, nor
//! between the modules of one folder), the pure deciders import no system, only the
//! composition roots know every system, the reconciler never speaks to GitHub, and a module
//! with one user lives under it (issues #14 and #38).

#[path = "support/rust_files.rs"]
mod rust_files;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use rust_files::rust_files;

/// Modules that act on something outside the process (or hold the state's connection).
const SYSTEMS: &[&str] = &["db", "sink", "github", "intake", "server", "serve"];

/// Modules that decide: given values, they return decisions and touch nothing. (`view` is
/// not one: it is the read model, and `view::read` reads it out of the state.)
const PURE: &[&str] = &[
    "render",
    "plan",
    "checks",
    "paths",
    "comment",
    "command",
    "intent",
    "ledger",
    "naming",
    "yaml",
    "reconcile/templates/decide",
];

/// The composition roots: `serve` for the daemon, `cli` for one-shot commands (and `main`,
/// the binary, which only calls `cli`).
const ROOTS: &[&str] = &["serve", "cli", "main"];

/// The modules that speak GitHub's API or parse its payloads.
const GITHUB: &[&str] = &["github", "webhook"];

/// Module paths (`db/inline`) to the module paths their non-test code names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every module of `src/` (a path like `db/inline`; `lib` and test modules left out) with the
/// modules its non-test code names through `crate::` or `super::` (a `use` or a path),
/// comments left out. A path names the deepest module it passes through.
fn modules() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    let mut texts = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let is_test = relative
            .components()
            .any(|c| c.as_os_str() == "tests" || c.as_os_str() == "tests.rs");
        let name = relative
            .to_str()
            .expect("a UTF-8 path")
            .trim_end_matches(".rs")
            .to_owned();
        if name == "lib" || is_test {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        texts.insert(name, without_tests(&without_comments(&text)));
    }
    let known: BTreeSet<String> = texts.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, text) in &texts {
        let deps = graph.entry(module.clone()).or_default();
        for path in paths(text, module) {
            if let Some(target) = deepest_module(&path, &known)
                && target != *module
            {
                deps.insert(target);
            }
        }
    }
    graph
}

/// The graph between the children of `folder` (`""` for the top level): an edge for each
/// import from one child (or a module under it) to another (or a module under it).
fn within(graph: &Graph, folder: &str) -> Graph {
    let child = |module: &str| -> Option<String> {
        let rest = if folder.is_empty() {
            module
        } else {
            module.strip_prefix(folder)?.strip_prefix('/')?
        };
        Some(rest.split('/').next()?.to_owned())
    };
    let mut projected = Graph::new();
    for (module, deps) in graph {
        let Some(from) = child(module) else { continue };
        let edges = projected.entry(from.clone()).or_default();
        for to in deps.iter().filter_map(|d| child(d)) {
            if to != from && !is_twin_reading_its_original(folder, &from) {
                edges.insert(to);
            }
        }
    }
    projected
}

/// The one sanctioned way back: `db::pg` holds the PostgreSQL twin of each function of `db`
/// (each of which hands a PostgreSQL state to its twin on its first line), and a twin
/// returns its original's types (`PreviewRow`, `Noted`, …), so it names their modules.
/// Nothing else in `db` may name `pg`'s callers back.
fn is_twin_reading_its_original(folder: &str, from: &str) -> bool {
    folder == "db" && from == "pg"
}

/// The top-level modules and the top-level modules each names.
fn graph() -> Graph {
    within(&modules(), "")
}

/// Each folder of modules (`""`, `db`, `reconcile/templates`, …).
fn folders(graph: &Graph) -> BTreeSet<String> {
    let mut folders = BTreeSet::from([String::new()]);
    for module in graph.keys() {
        if let Some((parent, _)) = module.rsplit_once('/') {
            folders.insert(parent.to_owned());
        }
    }
    folders
}

/// The longest prefix of `path` that is a module.
fn deepest_module(path: &[String], known: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("/"))
        .find(|candidate| known.contains(candidate))
}

/// The text with `//` comments (doc comments included) removed; string literals are rare
/// enough in `use` positions that they are not worth lexing.
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text before the unit tests (`#[cfg(test)]` modules sit at the end of each file).
fn without_tests(text: &str) -> String {
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text.to_owned(),
    }
}

/// Every path after a `crate::` or a `super::` (chains of `super::` resolved from `module`,
/// the file's module path), as segments from the crate root; a group `{a, b::{c, d}}` is
/// one path per leaf.
fn paths(text: &str, module: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some((offset, root)) = ["crate::", "super::"]
        .iter()
        .filter_map(|root| Some((text[at..].find(root)?, *root)))
        .min()
    {
        let start = at + offset;
        at = start + 1;
        // A `crate::`/`super::` inside a longer name, or inside a path already read
        // (`super::super::`), starts no new path.
        let inside = text[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        if inside {
            continue;
        }
        let (base, mut cursor) = if root == "crate::" {
            (Vec::new(), start + root.len())
        } else {
            let mut segments: Vec<String> = module.split('/').map(str::to_owned).collect();
            let mut cursor = start;
            while text[cursor..].starts_with("super::") {
                segments.pop();
                cursor += "super::".len();
            }
            (segments, cursor)
        };
        group(text, &mut cursor, base, &mut found);
        at = at.max(cursor);
    }
    found
}

/// Reads one path (or group of paths) at `cursor`, each leaf pushed as `prefix` + its
/// segments.
fn group(text: &str, cursor: &mut usize, prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut path = prefix;
    loop {
        let rest = &text[*cursor..];
        let trimmed = rest.trim_start();
        *cursor += rest.len() - trimmed.len();
        if trimmed.starts_with('{') {
            *cursor += 1;
            loop {
                group(text, cursor, path.clone(), found);
                let rest = &text[*cursor..];
                let trimmed = rest.trim_start();
                *cursor += rest.len() - trimmed.len();
                match trimmed.chars().next() {
                    Some(',') => *cursor += 1,
                    Some('}') => {
                        *cursor += 1;
                        return;
                    }
                    _ => return,
                }
            }
        }
        let name: String = trimmed
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            break;
        }
        *cursor += name.len();
        if name != "self" {
            path.push(name);
        }
        if text[*cursor..].starts_with("::") {
            *cursor += 2;
        } else {
            break;
        }
    }
    found.push(path);
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a str) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        for u in w.graph[v]
            .iter()
            .filter(|u| w.graph.contains_key(u.as_str()))
        {
            let u = u.as_str();
            if !w.index.contains_key(u) {
                visit(w, u);
                let low = w.low[v].min(w.low[u]);
                w.low.insert(v, low);
            } else if w.stack.contains(&u) {
                let low = w.low[v].min(w.index[u]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut component = Vec::new();
            while let Some(u) = w.stack.pop() {
                component.push(u.to_owned());
                if u == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                w.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

#[test]
fn modules_import_each_other_without_cycles_even_inside_a_folder() {
    let modules = modules();
    let found: Vec<_> = folders(&modules)
        .iter()
        .flat_map(|folder| {
            cycles(&within(&modules, folder))
                .into_iter()
                .map(move |cycle| format!("in {folder:?}: {cycle:?}"))
        })
        .collect();
    assert!(found.is_empty(), "import cycles: {found:?}");
}

#[test]
fn deciders_import_no_system() {
    let modules = modules();
    let mut offending = Vec::new();
    for pure in PURE {
        // A renamed module must not make this check pass by finding nothing.
        assert!(modules.contains_key(*pure), "no module {pure} in src/");
        let under = format!("{pure}/");
        let deps = modules
            .iter()
            .filter(|(module, _)| module.as_str() == *pure || module.starts_with(&under))
            .flat_map(|(_, deps)| deps);
        for dep in deps {
            let top = dep.split('/').next().unwrap_or(dep);
            if SYSTEMS.contains(&top) {
                offending.push(format!("{pure} -> {dep}"));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "pure modules use systems: {offending:?}"
    );
}

#[test]
fn only_the_composition_roots_know_every_system() {
    let graph = graph();
    let everything = ["db", "sink", "github", "intake"];
    let knowing: Vec<_> = graph
        .iter()
        .filter(|(_, deps)| everything.iter().all(|s| deps.contains(*s)))
        .map(|(module, _)| module.as_str())
        .filter(|module| !ROOTS.contains(module))
        .collect();
    assert!(
        knowing.is_empty(),
        "beyond serve and cli, {knowing:?} know every system"
    );
}

/// `lib.rs`: "GitHub hears of it afterwards, apart from the pass" — the feedback worker's.
#[test]
fn the_reconciler_never_speaks_to_github() {
    let graph = graph();
    let reconcile = graph.get("reconcile").expect("a reconcile module");
    let speaking: Vec<_> = GITHUB.iter().filter(|g| reconcile.contains(**g)).collect();
    assert!(speaking.is_empty(), "reconcile imports {speaking:?}");
}

#[test]
fn a_module_with_one_user_lives_under_it() {
    let graph = graph();
    let mut users: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, deps) in &graph {
        for dep in deps {
            users.entry(dep).or_default().insert(module);
        }
    }
    // A module only a composition root uses is one of the parts the root wires together.
    let misplaced: Vec<_> = users
        .iter()
        .filter(|(_, by)| by.len() == 1 && by.iter().all(|user| !ROOTS.contains(user)))
        .map(|(module, by)| format!("{module} (used by {by:?})"))
        .collect();
    assert!(
        misplaced.is_empty(),
        "top-level modules with one user: {misplaced:?}"
    );
}

#[test]
fn the_reader_finds_grouped_nested_and_relative_imports_but_not_comments_or_tests() {
    let text = "use crate::{a, b::{c, d}, self};\nuse super::sibling::X;\npub(super) fn f() { crate::e::g(); super::super::up(); }\n// crate::commented\n#[cfg(test)]\nmod tests { use crate::t; }";
    let found = paths(&without_tests(&without_comments(text)), "x/y/z");
    let expected: Vec<Vec<String>> = [
        &["a"][..],
        &["b", "c"],
        &["b", "d"],
        &[],
        &["x", "y", "sibling", "X"],
        &["e", "g"],
        &["x", "up"],
    ]
    .iter()
    .map(|path| path.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(found, expected);
}

#[test]
fn a_cycle_inside_a_folder_is_found_and_imports_of_the_parent_are_not_one() {
    let mut modules = Graph::new();
    for (from, to) in [
        ("db/inline", "db/write"),
        ("db/write", "db/inline/cache"),
        ("db/inline/cache", "db"),
        ("db", "db/inline"),
    ] {
        modules.entry(from.into()).or_default().insert(to.into());
        modules.entry(to.into()).or_default();
    }
    assert_eq!(
        cycles(&within(&modules, "db")),
        vec![vec!["inline", "write"]]
    );
    assert!(cycles(&within(&modules, "")).is_empty());
}

#[test]
fn a_cycle_of_three_is_found() {
    let mut graph = Graph::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph.entry(from.into()).or_default().insert(to.into());
        graph.entry(to.into()).or_default();
    }
    assert_eq!(cycles(&graph), vec![vec!["a", "b", "c"]]);
}
