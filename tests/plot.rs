//! `morphbench plot` on runs the test makes: every CSV kind drawn, valid PNG and SVG files,
//! comparisons, and clear errors for malformed CSVs.

mod common;

use std::path::{Path, PathBuf};

use common::*;

const SMALL: &str = r#"
[kernels]
gemm = ["33x17x9", "64x64x64"]
layernorm = ["5x77", "64x256"]
iters = 2
warmup = 1

[d2h]
sizes = ["4", "4K", "64K"]
iters = 2
warmup = 1

[hol]
tokens = 32
hidden = 32
ops = 6
every = [2]
delays_ms = [0, 5]
reps = 1

[sim]
stages = 3
microbatches = 4
sweep = [{ link = 0, delays_ms = [0, 10] }]
"#;

fn small_run(home: &Path) -> PathBuf {
    let cfg = home.join("small.toml");
    std::fs::write(&cfg, SMALL).unwrap();
    let out = home.join("out");
    let o = morphbench(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--no-plots",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
        home,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    only_run(&out)
}

fn check_image(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|_| panic!("{} missing", path.display()));
    assert!(
        bytes.len() > 5_000,
        "{} is only {} bytes",
        path.display(),
        bytes.len()
    );
    match path.extension().unwrap().to_str().unwrap() {
        "png" => assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display()),
        _ => {
            let text = String::from_utf8(bytes).unwrap();
            assert!(
                text.contains("<svg") && text.trim_end().ends_with("</svg>"),
                "{}",
                path.display()
            );
            assert!(text.contains("<text"), "{} has no text", path.display());
        }
    }
}

#[test]
fn every_csv_kind_is_drawn_and_reported() {
    let home = tempfile::tempdir().unwrap();
    let run = small_run(home.path());
    let o = morphbench(&["plot", run.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("skipped rdma.csv"), "{}", stdout(&o));
    let plots = run.join("plots");
    for name in [
        "kernels_gemm",
        "kernels_layernorm",
        "d2h_latency",
        "d2h_bandwidth",
        "hol_stall",
        "hol_makespan",
        "hol_busy",
        "hol_offload_split",
        "sim_iteration",
    ] {
        check_image(&plots.join(format!("{name}.png")));
        check_image(&plots.join(format!("{name}.svg")));
    }
    let gantts = std::fs::read_dir(&plots)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("sim_gantt_")
        })
        .count();
    assert!(
        gantts >= 2 * 5,
        "a Gantt chart (png + svg) per schedule, found {gantts}"
    );
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    // Headlines by rule: the largest sizes, both D2H parts named, n/a where nothing can be
    // removed, each linked to its row.
    for needle in [
        "GEMM at the largest size, 64x64x64",
        "Layernorm at the largest size, 64x256",
        "D2H bandwidth, GPU copy, 64 KiB",
        "D2H bandwidth, mapped, end to end, 64 KiB",
        "D2H latency, mapped, end to end, 4 B",
        "HoL stall removed by offload, 0 ms delay | n/a",
        "HoL stall removed by offload, 5 ms delay",
        "Adaptive schedule",
        "[kernels.csv row ",
    ] {
        assert!(md.contains(needle), "report.md lacks {needle}:\n{md}");
    }
    assert!(!md.contains("NaN") && !md.contains("inf "), "{md}");
    // summary.json: the same headlines, with units, for automation.
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["schema_version"], 2);
    assert_eq!(summary["status"], "complete");
    let heads = summary["headlines"].as_array().unwrap();
    assert!(heads
        .iter()
        .any(|h| h["unit"] == "GFLOP/s" && h["value"].as_f64().unwrap() > 0.0));
    assert!(summary["benches"]["d2h"]["rows"].as_u64().unwrap() > 0);
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "report.html embeds the SVGs");
}

#[test]
fn compare_draws_one_series_per_run() {
    let home = tempfile::tempdir().unwrap();
    let a = small_run(&home.path().join("a").tap_mkdir());
    let b = small_run(&home.path().join("b").tap_mkdir());
    let o = morphbench(
        &[
            "plot",
            a.to_str().unwrap(),
            "--format",
            "svg",
            "--compare",
            b.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(a.join("plots/kernels_gemm.svg")).unwrap();
    // Each run labels its series "host / adapter — what".
    assert!(
        svg.matches("GPU GEMM").count() >= 2,
        "two GPU series expected"
    );
    assert!(
        !a.join("plots/kernels_gemm.png").exists(),
        "--format svg writes no PNG"
    );
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}
impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

fn plot_fails_with(run: &Path, home: &Path, needles: &[&str]) {
    let o = morphbench(&["plot", run.to_str().unwrap()], home);
    assert!(!o.status.success());
    let err = stderr(&o);
    for n in needles {
        assert!(err.contains(n), "expected '{n}' in: {err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_csvs_name_the_file_and_column() {
    let home = tempfile::tempdir().unwrap();
    let run = small_run(home.path());
    let kernels = run.join("kernels.csv");
    let good = std::fs::read_to_string(&kernels).unwrap();
    // Wrong schema version.
    std::fs::write(&kernels, good.replacen("\n1,", "\n99,", 1)).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "schema_version 99"]);
    // A missing column.
    std::fs::write(&kernels, good.replacen("gflops", "gflopz", 1)).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "'gflops'"]);
    // A value that is not a number.
    let header_end = good.find('\n').unwrap();
    let (head, body) = good.split_at(header_end);
    let idx = head.split(',').position(|c| c == "gflops").unwrap();
    let broken: Vec<String> = body
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f: Vec<&str> = l.split(',').collect();
            f[idx] = "fast";
            f.join(",")
        })
        .collect();
    std::fs::write(&kernels, format!("{head}\n{}\n", broken.join("\n"))).unwrap();
    plot_fails_with(&run, home.path(), &["kernels.csv", "'gflops'", "'fast'"]);
    std::fs::write(&kernels, &good).unwrap();
    // An empty file.
    std::fs::write(run.join("d2h.csv"), "").unwrap();
    plot_fails_with(&run, home.path(), &["d2h.csv", "empty"]);
    plot_fails_with(&home.path().join("nope"), home.path(), &["nope"]);
}

/// A sim-only run (no GPU needed), then its timeline edited as an attacker would: each edit is
/// refused at once, naming the file, the row and the column, instead of hanging or
/// allocating without bound.
#[test]
fn plot_refuses_cells_that_once_hung_or_exhausted_it() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "sim",
            "--stages",
            "3",
            "--microbatches",
            "4",
            "--timeline",
            "none",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&out);
    let timeline = run.join("sim_timeline.csv");
    let good = std::fs::read_to_string(&timeline).unwrap();
    let (headers, rows) = read_csv(&timeline);
    let first = rows[0].iter().collect::<Vec<_>>().join(",");
    for (column, value, why) in [
        ("end_ms", "inf", "not a finite number"),
        ("stage", "1e308", "stage"),
        ("stage", "18446744073709551615", "out of range"),
        ("stage", "100000000", "stages are 0 to 1023"),
        ("stage", "-1", "negative"),
        ("stage", "2.5", "stage"),
    ] {
        let i = col(&headers, column);
        let mut cells: Vec<String> = rows[0].iter().map(String::from).collect();
        cells[i] = value.to_string();
        std::fs::write(&timeline, good.replacen(&first, &cells.join(","), 1)).unwrap();
        let t0 = std::time::Instant::now();
        let o = morphbench(
            &["plot", run.to_str().unwrap(), "--format", "svg"],
            home.path(),
        );
        let err = stderr(&o);
        assert!(!o.status.success(), "{column}={value} was accepted");
        assert!(
            err.contains("sim_timeline.csv: row 1")
                && err.contains(&format!("'{column}'"))
                && err.contains(why),
            "{column}={value}: {err}"
        );
        assert!(t0.elapsed().as_secs() < 30);
    }
}
