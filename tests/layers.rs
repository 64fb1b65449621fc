//! The crate's shape: four layers whose imports point down only, and no cycle between
//! top-level modules (cycles inside one module are fine). Read off every `crate::` path in
//! `src/` (a `use` line or a path written in full), comments aside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first. A module imports from its own layer or those below it, never above.
const LAYERS: &[(&str, &[&str])] = &[
    // What the rest stands on: devices, transports, the pure simulator, numbers, the process.
    (
        "platform",
        &[
            "gpu",
            "transport",
            "sim",
            "stats",
            "units",
            "host",
            "pcie",
            "slurm",
            "output",
            "interrupt",
            "verdict",
            "reported",
            "sanitize",
            "safe_fs",
            // The unit tests' shared helpers (test builds only).
            "testing",
        ],
    ),
    // What every bench writes: CSV rows, the run folder, meta.json.
    ("record", &["record"]),
    // What measures: the benches, the multi-rank skeleton, the run harness, the noise policy.
    ("benches", &["bench", "cluster", "suite", "noise", "info"]),
    // What reads results back: the table registry, plots, headlines, reports; check.
    ("reading", &["report", "check"]),
    // Flags, configs and dispatch.
    ("top", &["config", "commands"]),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`None`: lib.rs and main.rs).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.strip_suffix(".rs") {
        Some("lib") | Some("main") => None,
        Some(stem) => Some(stem.to_string()),
        None => Some(first),
    }
}

/// The top-level modules named by `crate::` paths in `text` (`crate::a::b`, `crate::{a, b}`).
fn imported(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // A group's top-level names: those before a `::`, a `,` or the group's end at
                // brace depth zero (a use list may span lines; its first line is enough for
                // the names it starts with, and the rest are caught as they are used).
                let mut depth = 0;
                let mut name = String::new();
                let mut at_start = true;
                for c in group.chars() {
                    if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') {
                        name.push(c);
                        continue;
                    }
                    if !name.is_empty() {
                        out.insert(std::mem::take(&mut name));
                    }
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => at_start = true,
                        c if !c.is_whitespace() => at_start = false,
                        _ => {}
                    }
                }
                if !name.is_empty() {
                    out.insert(name);
                }
            } else {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        }
    }
    out.remove("self");
    out.remove("super");
    out
}

/// Each top-level module's imports of other top-level modules, with a file that makes each.
fn graph() -> BTreeMap<String, BTreeMap<String, String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for file in files {
        let Some(from) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(&src).unwrap().display().to_string();
        let entry = edges.entry(from.clone()).or_default();
        for to in imported(&text) {
            if to != from {
                entry.entry(to).or_insert_with(|| shown.clone());
            }
        }
    }
    edges
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

#[test]
fn every_top_level_module_has_a_layer() {
    let unplaced: Vec<String> = graph()
        .into_iter()
        .flat_map(|(from, to)| std::iter::once(from).chain(to.into_keys()))
        .filter(|m| layer_of(m).is_none())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        unplaced.is_empty(),
        "top-level modules in no layer: {unplaced:?}; add each to LAYERS in tests/layers.rs"
    );
}

#[test]
fn imports_point_down_only() {
    let mut upward = Vec::new();
    for (from, to) in graph() {
        for (target, file) in to {
            if let (Some(a), Some(b)) = (layer_of(&from), layer_of(&target)) {
                if b > a {
                    upward.push(format!(
                        "{file}: {from} ({}) imports {target} ({})",
                        LAYERS[a].0, LAYERS[b].0
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports up a layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_cycle_between_top_level_modules() {
    let cycles = cycles_of(&graph());
    assert!(cycles.is_empty(), "cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_reader_sees_paths_and_groups() {
    let text =
        "use crate::a::b;\nuse crate::{c, d::{e, f}, g::h};\n// crate::z\nlet x = crate::k::m();";
    let got: Vec<String> = imported(text).into_iter().collect();
    assert_eq!(got, ["a", "c", "d", "g", "k"]);
}

/// A file's text without its inline test module (`#[cfg(test)] mod tests { ... }` closes it).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// Whether a file is a test module of its own (`tests.rs`, `*_tests.rs`).
fn is_test_file(file: &Path) -> bool {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests")
}

/// The module path of a file of `src/` (`bench/peak/mod.rs` and `bench/peak.rs`: bench, peak).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The absolute module paths a file names (`crate::`, `super::`, `self::`, groups included),
/// as far as their first names; `pub(super)` and `pub(in ...)` are visibility, not paths.
fn named_paths(text: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.replace("pub(super)", "").replace("pub(in ", "");
        let bytes = code.as_bytes();
        let mut at = 0;
        while at < code.len() {
            let rest = &code[at..];
            let starts = ["crate::", "super::", "self::", "super;", "super}"]
                .iter()
                .any(|p| rest.starts_with(p));
            let boundary = at == 0
                || !(bytes[at - 1].is_ascii_alphanumeric()
                    || bytes[at - 1] == b'_'
                    || bytes[at - 1] == b':');
            if !(starts && boundary) {
                at += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            }
            // Walk `a::b::c` (and `super::super::`), stopping at a group, a glob or an end.
            let mut base: Vec<String> = Vec::new();
            let mut names: Vec<String> = Vec::new();
            let mut first = true;
            let mut tail = rest;
            loop {
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                match (first, name.as_str()) {
                    (true, "crate") => {}
                    (true, "self") => base = here.to_vec(),
                    (true, "super") => {
                        base = here.to_vec();
                        base.pop();
                    }
                    (false, "super") if names.is_empty() => {
                        base.pop();
                    }
                    _ => names.push(name.clone()),
                }
                first = false;
                tail = &tail[name.len()..];
                match tail.strip_prefix("::") {
                    Some(t) => tail = t,
                    None => break,
                }
            }
            let mut full = base;
            full.extend(names.iter().cloned());
            if let Some(group) = tail.strip_prefix('{') {
                for part in group.split([',', '}']) {
                    let first: String = part
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !first.is_empty() && first != "self" {
                        let mut p = full.clone();
                        p.push(first);
                        out.push(p);
                    }
                }
            } else {
                out.push(full);
            }
            at += rest.len() - tail.len();
        }
    }
    out
}

/// Inside one folder of `src/bench`, `src/report` or `src/check` (at any depth), the files
/// and subfolders beside each other (and the folder's own `mod.rs` or `X.rs`), with who
/// imports whom, each edge with a file that makes it.
fn sibling_graphs() -> BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graphs = BTreeMap::new();
    for root in ["bench", "report", "check"] {
        let mut dirs = vec![src.join(root)];
        while let Some(dir) = dirs.pop() {
            let here = module_path(&src, &dir.join("mod.rs"));
            let mut children = BTreeSet::new();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
                if path.is_dir() {
                    dirs.push(path);
                    children.insert(stem);
                } else if path.extension().is_some_and(|e| e == "rs") && stem != "mod" {
                    children.insert(stem);
                }
            }
            let mut files = Vec::new();
            rust_files(&dir, &mut files);
            let parent_file = dir.with_extension("rs");
            if parent_file.exists() {
                files.push(parent_file.clone());
            }
            let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for file in files.iter().filter(|f| !is_test_file(f)) {
                let rel = file.strip_prefix(&dir).map(Path::to_path_buf);
                let node = match &rel {
                    Ok(r) if r.as_os_str() == "mod.rs" => "mod".to_string(),
                    Err(_) => "mod".to_string(),
                    Ok(r) => {
                        let first = r.components().next().unwrap().as_os_str().to_string_lossy();
                        first.trim_end_matches(".rs").to_string()
                    }
                };
                let text = std::fs::read_to_string(file).unwrap();
                let text = without_tests(&text);
                let mut paths = named_paths(text, &module_path(&src, file));
                if node == "mod" {
                    // A folder's own module names its children by their bare names.
                    for child in &children {
                        if text.contains(&format!("{child}::")) {
                            let mut p = here.clone();
                            p.push(child.clone());
                            paths.push(p);
                        }
                    }
                }
                for p in paths {
                    if p.len() < here.len() || p[..here.len()] != here[..] {
                        continue;
                    }
                    let target = match p.get(here.len()) {
                        Some(name) if children.contains(name) => name.clone(),
                        _ => "mod".to_string(),
                    };
                    if target != node {
                        let shown = file.strip_prefix(&src).unwrap().display().to_string();
                        edges
                            .entry(node.clone())
                            .or_default()
                            .entry(target)
                            .or_insert(shown);
                    }
                }
            }
            graphs.insert(here.join("/"), edges);
        }
    }
    graphs
}

/// A cycle in a graph of names, shown with the file that makes each edge.
fn cycles_of(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<String> {
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle: Vec<String> = path[at..].to_vec();
            cycle.push(m.to_string());
            let shown: Vec<String> = cycle
                .windows(2)
                .map(|w| format!("{} -> {} ({})", w[0], w[1], edges[&w[0]][&w[1]]))
                .collect();
            cycles.push(shown.join(", "));
            return;
        }
        if done.contains(m) {
            return;
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flat_map(|t| t.keys()) {
            visit(next, edges, path, done, cycles);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let (mut done, mut cycles) = (BTreeSet::new(), Vec::new());
    for m in edges.keys() {
        visit(m, edges, &mut Vec::new(), &mut done, &mut cycles);
    }
    cycles
}

/// Inside `src/bench`, `src/report` and `src/check`, no file or folder imports a sibling
/// that imports it back, directly or round a loop (a folder's `mod.rs` counts as a sibling of
/// its files: shared types live in a leaf file both sides import).
#[test]
fn no_loop_between_siblings() {
    let graphs = sibling_graphs();
    assert!(graphs.contains_key("bench") && graphs.contains_key("bench/fleet"));
    let loops: Vec<String> = graphs
        .iter()
        .flat_map(|(dir, edges)| {
            cycles_of(edges)
                .into_iter()
                .map(move |c| format!("{dir}: {c}"))
        })
        .collect();
    assert!(
        loops.is_empty(),
        "loops between siblings:\n{}",
        loops.join("\n")
    );
}

#[test]
fn the_sibling_reader_resolves_super_and_groups() {
    let here: Vec<String> = ["bench", "peak", "fma"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let text = "use super::plan::PeakPlan;\nuse super::{shader, table::X};\npub(super) fn f() {}\nlet x = super::super::shared::note(y);";
    let got = named_paths(text, &here);
    let has = |p: &[&str]| got.iter().any(|g| g == p);
    assert!(has(&["bench", "peak", "plan", "PeakPlan"]), "{got:?}");
    assert!(has(&["bench", "peak", "shader"]), "{got:?}");
    assert!(has(&["bench", "peak", "table"]), "{got:?}");
    assert!(has(&["bench", "shared", "note"]), "{got:?}");
    // `pub(super)` is a visibility, not a path to the parent.
    assert!(!has(&["bench", "peak"]), "{got:?}");
}

/// No wildcard glue: a module names what it takes from its parent (`use super::*` only in
/// tests) and re-exports by name (`pub use x::*` nowhere). Preludes of other crates and
/// an enum's variants inside a function are fine.
#[test]
fn no_wildcard_glue() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut glue = Vec::new();
    for file in files.iter().filter(|f| !is_test_file(f)) {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in without_tests(&text).lines().enumerate() {
            let code = line.trim();
            let wildcard = code.ends_with("::*;");
            let ours = code.starts_with("use super::")
                || code.starts_with("use crate::")
                || code.starts_with("use self::")
                || code.starts_with("pub use ")
                || code.starts_with("pub(crate) use ");
            if wildcard && ours {
                let shown = file.strip_prefix(&src).unwrap().display();
                glue.push(format!("{shown}:{}: {code}", i + 1));
            }
        }
    }
    assert!(
        glue.is_empty(),
        "wildcard imports of our own modules:\n{}",
        glue.join("\n")
    );
}
