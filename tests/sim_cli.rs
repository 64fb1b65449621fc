//! `morphbench sim` end to end: files written, calibration from a run, and bad input.

mod common;

use common::*;
use morphbench::bench::hol::{HolFigures, HolParams, HolTable, Mode};
use morphbench::bench::kernels::{KernelFigures, KernelParams, KernelsTable};
use morphbench::record::{CsvSink, CsvTable, Line};
use morphbench::stats::Summary;

#[test]
fn sweep_writes_sim_csv_and_trace() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let trace = home.path().join("t.json");
    let o = morphbench(
        &[
            "sim",
            "--stages",
            "4",
            "--microbatches",
            "12",
            "--tf",
            "10",
            "--tb",
            "10",
            "--tw",
            "10",
            "--sweep",
            "0:0,20",
            "--trace-out",
            trace.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("stage  0 |"),
        "an ASCII timeline is printed: {text}"
    );
    let run = only_run(&out);
    let (h, rows) = read_csv(&run.join("sim.csv"));
    for c in [
        "schedule",
        "iteration_ms",
        "speedup_vs_1f1b",
        "bubble_mean",
        "peak_activations_max",
    ] {
        col(&h, c);
    }
    let (sch, it, case) = (
        col(&h, "schedule"),
        col(&h, "iteration_ms"),
        col(&h, "case"),
    );
    let get = |case_name: &str, s: &str| -> f64 {
        rows.iter()
            .find(|r| &r[case] == case_name && &r[sch] == s)
            .unwrap_or_else(|| panic!("no row {case_name} {s}"))[it]
            .parse()
            .unwrap()
    };
    // The closed form of 1F1B and the domino effect, read back from the CSV.
    assert_eq!(get("link 0 +0 ms", "1f1b"), 450.0);
    assert!(get("link 0 +20 ms", "static:1f1b") > 450.0 + 20.0);
    assert!(get("link 0 +20 ms", "adaptive") <= get("link 0 +20 ms", "static:1f1b"));
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(trace).unwrap()).unwrap();
    assert!(json["traceEvents"].as_array().unwrap().len() > 100);
}

#[test]
fn trace_file_gives_one_iteration_each() {
    let home = tempfile::tempdir().unwrap();
    let t = home.path().join("stragglers.txt");
    std::fs::write(&t, "# iteration;link;delay_ms\n0;0;0\n1;1;30\n2;2;60\n").unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "sim",
            "--trace",
            t.to_str().unwrap(),
            "--timeline",
            "none",
            "-q",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (h, rows) = read_csv(&only_run(&out).join("sim.csv"));
    let iters: std::collections::BTreeSet<String> = rows
        .iter()
        .map(|r| r[col(&h, "iteration")].to_string())
        .collect();
    assert_eq!(iters.len(), 3);
}

/// One kernels.csv row with a single sample of `p50` µs, written through the bench's own types.
fn kernel_row(
    kernel: &str,
    timer: &str,
    gemm: [Option<u32>; 3],
    ln: [Option<u32>; 2],
    p50: f64,
) -> Line<KernelsTable> {
    let params = KernelParams {
        kernel: kernel.into(),
        variant: "v".into(),
        size_m: gemm[0],
        size_n: gemm[1],
        size_k: gemm[2],
        rows: ln[0],
        hidden: ln[1],
    };
    let figures = KernelFigures {
        timer: timer.into(),
        verified: true,
        ..Default::default()
    };
    Line::new("r", kernel, params, Summary::of(&[p50]).as_ref(), figures)
}

fn hol_row(mode: Mode, delay: &str, parts: [f64; 5]) -> Line<HolTable> {
    let params = HolParams {
        mode,
        delay_ms: delay.into(),
        ..Default::default()
    };
    let on = mode == Mode::Offload;
    let part = |i: usize| on.then_some(parts[i]);
    let figures = HolFigures {
        d2h_copy_us: part(0),
        map_us: part(1),
        copy_out_us: part(2),
        send_us: part(3),
        receive_us: part(4),
        ..Default::default()
    };
    Line::new("r", "c", params, Summary::of(&[1.0]).as_ref(), figures)
}

fn write_rows<T: CsvTable>(path: &std::path::Path, rows: &[Line<T>]) {
    let mut sink = CsvSink::<T>::create(path).unwrap();
    for r in rows {
        sink.write(r).unwrap();
    }
}

#[test]
fn calibrates_from_a_run_folder() {
    let home = tempfile::tempdir().unwrap();
    let run = home.path().join("run");
    std::fs::create_dir(&run).unwrap();
    let g = |n| [Some(n), Some(n), Some(n)];
    write_rows(
        &run.join("kernels.csv"),
        &[
            kernel_row("gemm", "gpu", g(512), [None, None], 2000.0),
            kernel_row("gemm", "host", g(512), [None, None], 2500.0),
            kernel_row("gemm", "gpu", g(64), [None, None], 10.0),
            kernel_row(
                "layernorm",
                "gpu",
                [None; 3],
                [Some(4096), Some(1024)],
                500.0,
            ),
        ],
    );
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "sim",
            "--from",
            run.to_str().unwrap(),
            "--timeline",
            "none",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("tF = tB = 2.500 ms, tW = 2.000 ms"),
        "{}",
        stdout(&o)
    );
    // Link costs from the run's offloaded transfers at delay 0.
    write_rows(
        &run.join("hol.csv"),
        &[
            hol_row(Mode::None, "0", [0.0; 5]),
            hol_row(Mode::Offload, "0", [100.0, 200.0, 100.0, 120.0, 180.0]),
            hol_row(Mode::Offload, "20", [1.0; 5]),
        ],
    );
    let o = morphbench(
        &[
            "sim",
            "--from",
            run.to_str().unwrap(),
            "--timeline",
            "none",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("D2H 0.400 ms, link 0.300 ms"),
        "{}",
        stdout(&o)
    );
    // A cell that is not a number: the error names the file, the row and the column.
    let text = std::fs::read_to_string(run.join("hol.csv")).unwrap();
    std::fs::write(run.join("hol.csv"), text.replacen(",120.0,", ",fast,", 1)).unwrap();
    let o = morphbench(&["sim", "--from", run.to_str().unwrap()], home.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("hol.csv: row 2: column 'send_us' holds 'fast'"),
        "{err}"
    );
    // No gemm rows: a clear error naming the file.
    write_rows(
        &run.join("kernels.csv"),
        &[kernel_row(
            "memcpy",
            "host",
            [None; 3],
            [Some(1), Some(4)],
            3.0,
        )],
    );
    let o = morphbench(&["sim", "--from", run.to_str().unwrap()], home.path());
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no gemm rows"), "{}", stderr(&o));
    // A hand-written table without the leading columns is refused, naming the column.
    std::fs::write(run.join("kernels.csv"), "kernel,timer,p50_us\ngemm,gpu,3\n").unwrap();
    let o = morphbench(&["sim", "--from", run.to_str().unwrap()], home.path());
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("missing column 'schema_version'"),
        "{}",
        stderr(&o)
    );
}

fn sim_fails_with(args: &[&str], needle: &str) {
    let home = tempfile::tempdir().unwrap();
    let mut all = vec!["sim", "--out", "/tmp/mb-sim-bad"];
    all.extend_from_slice(args);
    let o = morphbench(&all, home.path());
    assert!(!o.status.success(), "{args:?} should fail");
    let err = stderr(&o);
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_names_the_field() {
    sim_fails_with(&["--stages", "0"], "stages must be at least 1");
    sim_fails_with(&["--microbatches", "0"], "microbatches must be at least 1");
    sim_fails_with(&["--tf", "-3"], "tf = -3");
    sim_fails_with(&["--tb", "inf"], "tb = inf");
    sim_fails_with(&["--tf", "1,2,3"], "tf has 3 values");
    sim_fails_with(&["--slow", "4:10"], "link 4 does not exist");
    sim_fails_with(&["--slow", "x:10"], "not a whole number");
    sim_fails_with(&["--sweep", "9:1,2"], "sweep link 9");
    sim_fails_with(&["--schedule", "2f2b"], "unknown schedule");
    sim_fails_with(&["--mem-limit", "0"], "mem_limit");
    let home = tempfile::tempdir().unwrap();
    let t = home.path().join("bad.txt");
    std::fs::write(&t, "0;1;10\n1;one;10\n").unwrap();
    sim_fails_with(&["--trace", t.to_str().unwrap()], "line 2");
    let s = home.path().join("bad.toml");
    std::fs::write(&s, "stages = 4\nstagez = 3\n").unwrap();
    sim_fails_with(&["--scenario", s.to_str().unwrap()], "stagez");
    sim_fails_with(&["--trace", "/nonexistent"], "cannot read trace");
    sim_fails_with(&["--stall", "2:1.5:200"], "PROB must be");
    sim_fails_with(&["--stall", "7:0.1:20"], "stall link 7 does not exist");
    sim_fails_with(
        &["--stall", "1:0.1:20", "--iterations", "0"],
        "--iterations 0",
    );
    sim_fails_with(&["--iterations", "10"], "give --stall");
    sim_fails_with(&["--mem-limit", "8GiB"], "give the model's shape");
    sim_fails_with(&["--hidden", "1024"], "--heads, --seq-len, --micro-batch");
    let model = [
        "--hidden",
        "1000",
        "--heads",
        "16",
        "--seq-len",
        "128",
        "--micro-batch",
        "1",
    ];
    sim_fails_with(&model, "not a multiple of heads");
    let model = [
        "--hidden",
        "1024",
        "--heads",
        "16",
        "--seq-len",
        "1024",
        "--micro-batch",
        "1",
    ];
    sim_fails_with(&[&model[..], &["--mem-limit", "20M"]].concat(), "raise it");
    sim_fails_with(
        &["--schedule", "interleaved:2", "--microbatches", "6"],
        "multiple of 4",
    );
    sim_fails_with(&["--schedule", "interleaved:1"], "interleaved:V");
}

/// The hand schedules in sim.csv, with their bubble rates and memory in bytes; the adaptive
/// planner keeps to a limit in bytes.
#[test]
fn schedules_report_bubble_rate_and_memory_in_bytes() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    #[rustfmt::skip]
    let o = morphbench(
        &[
            "sim", "--stages", "4", "--microbatches", "8", "--tf", "2", "--tb", "2", "--tw",
            "1", "--schedule", "1f1b,zb-h1,zb-h2,interleaved:2,adaptive", "--hidden", "1024",
            "--heads", "16", "--seq-len", "1024", "--micro-batch", "1", "--layers-per-stage",
            "2", "--mem-limit", "1GiB", "--slow", "1:5", "--out", out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", output(&o));
    let (headers, rows) = read_csv(&only_run(&out).join("sim.csv"));
    let by = |name: &str, column: &str| -> String {
        let row = rows
            .iter()
            .find(|r| &r[col(&headers, "schedule")] == name)
            .unwrap();
        row[col(&headers, column)].to_string()
    };
    // M_B = s·b·(34h + 5a·s) per layer, two layers: 1F1B's first stage holds 4 of them.
    let m_b = 1024.0 * (34.0 * 1024.0 + 5.0 * 16.0 * 1024.0) * 2.0;
    let first = |name: &str| -> f64 {
        let cell = by(name, "peak_activation_bytes_per_stage");
        cell.split(';').next().unwrap().parse().unwrap()
    };
    assert_eq!(first("1f1b"), 4.0 * m_b);
    assert!(first("zb-h2") > first("zb-h1"));
    for name in ["1f1b", "zb-h1", "zb-h2", "interleaved:2", "adaptive"] {
        let rate: f64 = by(name, "bubble_rate").parse().unwrap();
        assert!((0.0..1.0).contains(&rate), "{name}: bubble_rate {rate}");
        assert!(!by(name, "param_bytes_per_stage").is_empty());
    }
    let params: f64 = by("adaptive", "param_bytes_per_stage").parse().unwrap();
    let limit = (1u64 << 30) as f64 - params;
    let adaptive: f64 = by("adaptive", "peak_activation_bytes_max").parse().unwrap();
    assert!(
        adaptive <= limit,
        "adaptive holds {adaptive} B over the {limit} B left"
    );
    assert_eq!(by("adaptive", "mem_limit"), "1 GiB");
}

/// The wrap link (last stage to first, link S - 1) is a link of its own: a delay there slows
/// interleaving, whose chunks cross it, and leaves 1F1B as it was; one past it is refused.
#[test]
fn a_delay_on_the_wrap_link_slows_only_the_interleaved_schedule() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    #[rustfmt::skip]
    let o = morphbench(
        &[
            "sim", "--stages", "4", "--microbatches", "8", "--schedule", "1f1b,interleaved:2",
            "--sweep", "3:0,20", "--out", out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", output(&o));
    let (h, rows) = read_csv(&only_run(&out).join("sim.csv"));
    let iteration = |schedule: &str, slow: &str| -> f64 {
        let r = rows
            .iter()
            .find(|r| &r[col(&h, "schedule")] == schedule && &r[col(&h, "slow")] == slow)
            .unwrap_or_else(|| panic!("{schedule} {slow}"));
        r[col(&h, "iteration_ms")].parse().unwrap()
    };
    assert_eq!(iteration("1f1b", "none"), iteration("1f1b", "3:20"));
    assert!(iteration("interleaved:2", "3:20") >= iteration("interleaved:2", "none") + 20.0);
    sim_fails_with(&["--stages", "4", "--sweep", "4:5"], "the wrap link");
}

#[test]
fn stalls_are_drawn_per_transfer_and_priced_per_schedule() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let run = |seed: &str| {
        let o = morphbench(
            &[
                "sim",
                "--stages",
                "4",
                "--microbatches",
                "8",
                "--stall",
                "1:0.05:100",
                "--iterations",
                "200",
                "--seed",
                seed,
                "--schedule",
                "1f1b,adaptive",
                "--timeline",
                "none",
                "--out",
                out.to_str().unwrap(),
            ],
            home.path(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("tail: 200 iterations (seed"), "{text}");
        let dir = out.join("latest");
        let (h, rows) = read_csv(&dir.join("sim_tail.csv"));
        assert_eq!(rows.len(), 2);
        rows.iter()
            .map(|r| {
                let f = |c: &str| r[col(&h, c)].parse::<f64>().unwrap();
                assert!(
                    f("p99_ms") >= f("p50_ms") && f("mean_ms") > f("healthy_ms"),
                    "{r:?}"
                );
                assert!(f("throughput_lost") > 0.0, "{r:?}");
                (r[col(&h, "schedule")].to_string(), f("mean_ms"))
            })
            .collect::<Vec<_>>()
    };
    // The same seed, the same iterations.
    assert_eq!(run("3"), run("3"));
}

#[test]
fn latest_points_at_the_newest_run_and_runs_lists_them() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &["sim", "--timeline", "none", "--out", out.to_str().unwrap()],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&out);
    let latest = std::fs::read_link(out.join("latest")).unwrap();
    assert_eq!(out.join(latest), run);
    // A run that never finished is listed as partial.
    let partial = out.join("20000101T000000Z-old");
    std::fs::create_dir(&partial).unwrap();
    std::fs::write(
        partial.join("meta.json"),
        r#"{"status": "running", "started_utc": "2000-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let o = morphbench(&["runs", out.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[1].contains("20000101T000000Z-old") && lines[1].contains("partial"),
        "{text}"
    );
    let name = run.file_name().unwrap().to_str().unwrap();
    assert!(
        lines[2].contains(name) && lines[2].contains("complete") && lines[2].contains("Adaptive"),
        "{text}"
    );
}

#[test]
fn json_prints_the_summary_instead_of_tables() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "sim",
            "--sweep",
            "0:0,20",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("stdout is only JSON");
    assert_eq!(v["status"], "complete");
    let h = &v["headlines"][0];
    assert_eq!(h["bench"], "sim");
    assert!(h["what"].as_str().unwrap().contains("link 0 +20 ms"), "{h}");
    assert!(h["source"].as_str().unwrap().starts_with("sim.csv row "));
    // The same file is in the run folder.
    let run = only_run(&out);
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(file, v);
}
