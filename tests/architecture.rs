//! The module graph, read from the source: no import cycles, the pure deciders import no
//! system, and only the composition roots know every system (issue #14's "done when").

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules that act on something outside the process (or hold the state's connection).
const SYSTEMS: &[&str] = &["db", "sink", "github", "intake", "server", "serve"];

/// Modules that decide: given values, they return decisions and touch nothing. (`view` is
/// not one: it is the read model, and `view::read` reads it out of the state.)
const PURE: &[&str] = &[
    "render", "plan", "checks", "paths", "comment", "command", "intent", "ledger", "naming",
    "yaml", "template",
];

/// The composition roots: `serve` for the daemon, `cli` for one-shot commands.
const ROOTS: &[&str] = &["serve", "cli"];

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each top-level module of `src/` with the top-level modules its non-test code names
/// through `crate::` (a `use` or a path), comments left out.
fn graph() -> Graph {
    let mut graph = Graph::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a file name")
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" || relative.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        let deps = graph.entry(top.clone()).or_default();
        for name in crate_paths(&without_tests(&without_comments(&text))) {
            if name != top {
                deps.insert(name);
            }
        }
    }
    graph
}

fn walk(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
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

/// The first segment after every `crate::`, and each top-level name in a `crate::{..}`.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut current = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.extend(first_segment(&current));
                        current.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    current.push(ch);
                }
            }
            names.extend(first_segment(&current));
        } else {
            names.extend(first_segment(rest));
        }
    }
    names
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && name != "self").then_some(name)
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
fn modules_import_each_other_without_cycles() {
    let found = cycles(&graph());
    assert!(found.is_empty(), "import cycles: {found:?}");
}

#[test]
fn deciders_import_no_system() {
    let graph = graph();
    let mut offending = Vec::new();
    for pure in PURE {
        // A renamed module must not make this check pass by finding nothing.
        let deps = graph
            .get(*pure)
            .unwrap_or_else(|| panic!("no module {pure} in src/"));
        for dep in deps {
            if SYSTEMS.contains(&dep.as_str()) {
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

#[test]
fn the_reader_finds_grouped_and_nested_imports_but_not_comments_or_tests() {
    let text = "use crate::{a, b::{c, d}, self};\n// crate::commented\nfn f() { crate::e::g(); }\n#[cfg(test)]\nmod tests { use crate::t; }";
    let names = crate_paths(&without_tests(&without_comments(text)));
    let expected: BTreeSet<String> = ["a", "b", "e"].iter().map(|s| s.to_string()).collect();
    assert_eq!(names, expected);
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
