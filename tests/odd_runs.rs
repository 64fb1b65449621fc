//! Run folders that are not what a run wrote: every reader (`plot` and the report it writes,
//! `check`, `runs`) says what it could not use and why, naming the file, and never hangs: a
//! warning where it can still do its job (plot, runs), an error where it cannot (check, whose
//! runs must have an identity). And `check --fleet` of runs that share no figure is refused.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::only_run;

/// Runs morphbench, killed (and the test failed) if it takes longer than a reader ever should.
fn within(args: &[&str], home: &Path) -> Output {
    let mut child = common::in_home(
        Command::new(env!("CARGO_BIN_EXE_morphbench")).args(args),
        home,
    )
    .spawn()
    .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("morphbench {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A run of its own (its id is unique: the second it started, its host and its process).
fn measured(home: &Path, out: &str, args: &[&str]) -> PathBuf {
    let out = home.join(out);
    let mut all = args.to_vec();
    all.extend(["--quiet", "--out", out.to_str().unwrap()]);
    let o = within(&all, home);
    assert!(o.status.success(), "{args:?}: {}", common::stderr(&o));
    only_run(&out)
}

/// Each odd kind of meta.json, made in a copy of `good`, and the words that must name it.
fn odd_copies(good: &Path, home: &Path) -> Vec<(PathBuf, &'static str)> {
    let kinds: [(&str, &str); 6] = [
        ("fifo", "a FIFO, not a regular file"),
        ("device", "a character device, not a regular file"),
        ("dangling", "a link to nothing"),
        ("missing", "has no meta.json"),
        ("empty", "empty"),
        ("notjson", "not JSON"),
    ];
    let mut out = Vec::new();
    for (kind, words) in kinds {
        let dir = home.join("odd").join(kind);
        std::fs::create_dir_all(&dir).unwrap();
        for e in std::fs::read_dir(good).unwrap() {
            let p = e.unwrap().path();
            if p.is_file() && p.file_name().unwrap() != "meta.json" {
                std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
            }
        }
        let meta = dir.join("meta.json");
        match kind {
            "fifo" => assert!(Command::new("mkfifo")
                .arg(&meta)
                .status()
                .unwrap()
                .success()),
            "device" => std::os::unix::fs::symlink("/dev/zero", &meta).unwrap(),
            "dangling" => std::os::unix::fs::symlink(home.join("gone"), &meta).unwrap(),
            "empty" => std::fs::write(&meta, "").unwrap(),
            "notjson" => std::fs::write(&meta, "{\"run_id\": ").unwrap(),
            _ => {}
        }
        out.push((dir, words));
    }
    out
}

#[test]
fn every_reader_names_a_missing_or_irregular_meta_json_and_none_hangs() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let good = measured(h, "good", &["d2h", "--sizes", "4K,64K", "--iters", "5"]);
    let g = good.to_str().unwrap();
    for (dir, words) in odd_copies(&good, h) {
        let d = dir.to_str().unwrap();
        let named = |o: &Output| {
            let err = common::stderr(o);
            (err.contains("meta.json") && err.contains(words), err)
        };
        // plot draws the CSVs and warns; the report says the run's state is unknown.
        let o = within(&["plot", d, "-q"], h);
        let (ok, err) = named(&o);
        assert!(o.status.success() && ok, "plot {d}: {err}");
        assert!(err.contains("warning:"), "plot {d}: {err}");
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(
            report.contains("meta.json is missing or damaged"),
            "{report}"
        );
        // check cannot tell what it compares: an error, as the run or as the baseline.
        for args in [["check", d, "--baseline", g], ["check", g, "--baseline", d]] {
            let o = within(&args, h);
            let (ok, err) = named(&o);
            assert!(o.status.code() == Some(2) && ok, "{args:?}: {err}");
        }
    }
    // runs lists every odd folder, with what is wrong, as text and as JSON.
    let o = within(&["runs", h.join("odd").to_str().unwrap()], h);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = common::stdout(&o);
    for kind in ["fifo", "device", "dangling", "missing", "empty", "notjson"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(kind))
            .unwrap_or_else(|| panic!("runs does not list {kind}: {text}"));
        assert!(line.contains("unreadable:"), "{line}");
    }
    let o = within(&["runs", h.join("odd").to_str().unwrap(), "--json"], h);
    let listed: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    let entries = listed.as_array().unwrap();
    assert_eq!(entries.len(), 6, "{listed}");
    assert!(
        entries.iter().all(|e| e["meta_problem"].is_string()),
        "{listed}"
    );
    // A folder with a damaged meta.json and nothing else is nothing to draw: an error.
    let bare = h.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(bare.join("meta.json"), "[]").unwrap();
    let o = within(&["plot", bare.to_str().unwrap()], h);
    assert!(!o.status.success(), "{}", common::stderr(&o));
    assert!(
        common::stderr(&o).contains("not an object"),
        "{}",
        common::stderr(&o)
    );
}

#[test]
fn a_fleet_of_runs_that_share_no_figure_is_refused_naming_what_each_measured() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let d2h = measured(h, "d2h", &["d2h", "--sizes", "4K", "--iters", "5"]);
    let kernels = measured(
        h,
        "kernels",
        &[
            "kernels",
            "--gemm",
            "64x64x64",
            "--layernorm",
            "64x64",
            "--iters",
            "5",
        ],
    );
    let links = measured(
        h,
        "links",
        &[
            "links",
            "--local",
            "2",
            "--sizes",
            "8",
            "--iters",
            "20",
            "--budget-ms",
            "20",
        ],
    );
    let runs = [&d2h, &kernels, &links].map(|p| p.to_str().unwrap().to_string());
    let o = within(&["check", &runs[0], &runs[1], &runs[2], "--fleet"], h);
    let err = common::stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("nothing to compare"), "{err}");
    for bench in ["d2h", "kernels", "links"] {
        assert!(err.contains(&format!("measured {bench}")), "{bench}: {err}");
    }
    // Two runs of one bench and one of another: still no figure three runs share.
    let again = measured(h, "d2h2", &["d2h", "--sizes", "4K", "--iters", "5"]);
    let o = within(
        &[
            "check",
            &runs[0],
            again.to_str().unwrap(),
            &runs[1],
            "--fleet",
        ],
        h,
    );
    assert_eq!(o.status.code(), Some(2), "{}", common::stderr(&o));
}

#[test]
fn an_input_file_that_is_a_fifo_is_refused_not_read_for_ever() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let fifo = h.join("input.toml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let f = fifo.to_str().unwrap();
    let run = h.join("r");
    std::fs::create_dir_all(&run).unwrap();
    let r = run.to_str().unwrap();
    for args in [
        vec!["run", "--config", f],
        vec!["sim", "--validate", f],
        vec!["check", r, "--baseline", r, "--policy", f],
    ] {
        let o = within(&args, h);
        let err = common::stderr(&o);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("a FIFO, not a regular file"),
            "{args:?}: {err}"
        );
    }
}
