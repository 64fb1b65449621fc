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
        ],
    ),
    // What every bench writes: CSV rows, the run folder, meta.json.
    ("record", &["record"]),
    // What measures: the benches, the multi-rank skeleton, the run harness, the noise policy.
    ("benches", &["bench", "cluster", "suite", "noise", "info"]),
    // What reads results back: the table registry, plots, headlines, reports; check.
    ("reading", &["report", "check"]),
    // Flags, configs and dispatch.
    ("top", &["cli", "config", "commands"]),
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
    let edges = graph();
    // Depth-first search; a module met again while still on the path closes a cycle.
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
        visit(m, &edges, &mut Vec::new(), &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_reader_sees_paths_and_groups() {
    let text =
        "use crate::a::b;\nuse crate::{c, d::{e, f}, g::h};\n// crate::z\nlet x = crate::k::m();";
    let got: Vec<String> = imported(text).into_iter().collect();
    assert_eq!(got, ["a", "c", "d", "g", "k"]);
}
