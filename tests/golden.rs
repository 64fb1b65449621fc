//! Outputs byte for byte: the CSV and JSON that fixed inputs give, against the files in
//! `tests/golden/` (written by the code before the command line, the bench registry and the
//! verdicts were restructured, and by every version since: a refactor changes no output).
//! Only what differs from run to run by design is masked: run ids and the times of day in
//! them. `MORPHBENCH_WRITE_GOLDEN=1` rewrites the files (for a change that means to alter
//! an output; the diff then shows what it altered).

mod common;

use std::path::{Path, PathBuf};

use common::{morphbench, only_run, output};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// `text` with each run id replaced by its place in order of appearance, and the folders
/// the test ran in by their names: the same shape, nothing volatile.
fn masked(text: &str, ids: &[String]) -> String {
    let mut out = text.replace(golden_dir().to_str().unwrap(), "GOLDEN");
    let tmp = std::env::temp_dir();
    out = out.replace(tmp.to_str().unwrap(), "TMP");
    for (i, id) in ids.iter().enumerate() {
        out = out.replace(id.as_str(), &format!("RUN{i}"));
    }
    out
}

/// The run ids a run folder's CSVs and meta.json name, in the order first seen.
fn run_ids(dirs: &[&Path]) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for dir in dirs {
        let meta = std::fs::read_to_string(dir.join("meta.json")).unwrap();
        let meta: serde_json::Value = serde_json::from_str(&meta).unwrap();
        let id = meta["run_id"].as_str().unwrap().to_string();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// Compares `actual` with the golden file `name` (or writes it, when asked).
fn same_as_golden(name: &str, actual: &str, failures: &mut Vec<String>) {
    let path = golden_dir().join(name);
    if std::env::var_os("MORPHBENCH_WRITE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (MORPHBENCH_WRITE_GOLDEN=1 writes it)",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(expected.lines().count().min(actual.lines().count()));
        failures.push(format!(
            "{name} differs from line {}:\n  golden: {:?}\n  now:    {:?}",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        ));
    }
}

fn run_ok(args: &[&str], home: &Path) -> String {
    let o = morphbench(args, home);
    assert!(o.status.success(), "{args:?}\n{}", output(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn the_simulators_outputs_are_unchanged() {
    let home = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    // A sweep of every schedule family with a timeline, and the artifact's validation.
    let out = home.path().join("sim");
    run_ok(
        &[
            "sim",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--sweep",
            "1:0,20",
            "--schedule",
            "1f1b,zb-h1,zb-h2,interleaved:2,zb-v,adaptive",
            "--timeline",
            "1f1b,adaptive",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    let run = only_run(&out);
    let ids = run_ids(&[&run]);
    for csv in ["sim.csv", "sim_timeline.csv"] {
        let text = std::fs::read_to_string(run.join(csv)).unwrap();
        same_as_golden(&format!("sim/{csv}"), &masked(&text, &ids), &mut failures);
    }
    let out = home.path().join("validate");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pipemorph-7b-single.csv");
    run_ok(
        &[
            "sim",
            "--validate",
            data.to_str().unwrap(),
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    let run = only_run(&out);
    let ids = run_ids(&[&run]);
    let text = std::fs::read_to_string(run.join("validate.csv")).unwrap();
    same_as_golden("validate/validate.csv", &masked(&text, &ids), &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn checks_outputs_are_unchanged() {
    let home = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let runs = golden_dir().join("runs");
    let (base, node) = (runs.join("base"), runs.join("node"));
    let out = home.path().join("check");
    let o = morphbench(
        &[
            "check",
            node.to_str().unwrap(),
            "--baseline",
            base.to_str().unwrap(),
            "--check-out",
            out.to_str().unwrap(),
            "--json",
        ],
        home.path(),
    );
    // A verdict (0 or 1), never an error (2).
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", output(&o));
    let ids = run_ids(&[&node, &base]);
    let json = String::from_utf8(o.stdout.clone()).unwrap();
    same_as_golden("check/check.json", &masked(&json, &ids), &mut failures);
    let text = std::fs::read_to_string(out.join("check.csv")).unwrap();
    same_as_golden("check/check.csv", &masked(&text, &ids), &mut failures);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
