//! `morphbench sim --validate` end to end, on the PipeMorph artifact's measured runs and on a
//! `pipeline` run folder (predicted from its healthy case), and PyTorch pipelining's schedule
//! files in and out.

mod common;

use common::*;

/// A tiny two-stage 1F1B `pipeline` run with `comm` and `slow`, then `sim --validate` on its
/// folder: the home, validate's output folder and its output.
fn validate_tiny_pipeline(
    comm: &str,
    slow: &str,
) -> (tempfile::TempDir, std::path::PathBuf, std::process::Output) {
    let home = tempfile::tempdir().unwrap();
    let args = [
        "pipeline",
        "--local",
        "2",
        "--layers",
        "1",
        "--hidden",
        "32",
        "--tokens",
        "16",
        "--microbatches",
        "4",
        "--iters",
        "2",
        "--warmup",
        "1",
        "--schedule",
        "1f1b",
        "--comm",
        comm,
        "--slow",
        slow,
        "-q",
    ];
    let o = morphbench(&args, home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&home.path().join("results"));
    let out = home.path().join("validate");
    let o = morphbench(
        &[
            "sim",
            "--validate",
            run.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    (home, out, o)
}

/// `sim --validate` takes a pipeline run folder: each delayed case against its case without
/// delay, its own measured op times, orders and send times, the runtime model of its comm.
#[test]
fn a_pipeline_run_is_validated_against_the_runtime_model() {
    let (home, out, o) = validate_tiny_pipeline("inline,offload", "0:0,10");
    assert!(o.status.success(), "{}", stderr(&o));
    let v = only_run(&out);
    let (h, rows) = read_csv(&v.join("validate.csv"));
    assert_eq!(rows.len(), 4);
    let systems: Vec<&str> = rows.iter().map(|r| &r[col(&h, "system")]).collect();
    assert!(systems.contains(&"morphbench-inline") && systems.contains(&"morphbench-offload"));
    for r in &rows {
        let delayed = &r[col(&h, "delay_ms")] != "0";
        let e = &r[col(&h, "error_extra")];
        // Every case is predicted from its healthy twin's op times.
        assert_eq!(&r[col(&h, "profile_from")], "healthy", "{r:?}");
        // Each delayed case is judged against its healthy one; a healthy case has no error.
        assert_eq!(delayed, !e.is_empty(), "{:?}", r);
        if delayed {
            let e: f64 = e.parse().unwrap();
            assert!(e.is_finite() && e >= 0.0);
        }
    }
    // A folder that is no pipeline run is refused, naming what it lacks.
    let o = morphbench(&["sim", "--validate", v.to_str().unwrap()], home.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("pipeline.csv"), "{}", stderr(&o));
}

/// `sim --validate` on the PipeMorph artifact's 7B runs: validate.csv carries every input
/// column and the predictions, the one line and summary.json the spread, exit 0.
#[test]
fn validate_reports_each_measured_run_and_the_spread() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let data =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pipemorph-7b-single.csv");
    let o = morphbench(
        &[
            "sim",
            "--validate",
            data.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("validate: 16 rows, error_extra median"),
        "{text}"
    );
    let run = only_run(&out);
    let (h, rows) = read_csv(&run.join("validate.csv"));
    assert_eq!(rows.len(), 16);
    for c in [
        "model",
        "profile",
        "healthy_ms",
        "predicted_healthy_ms",
        "predicted_slow_ms",
        "error_extra",
        "error_slow",
    ] {
        col(&h, c);
    }
    let e = col(&h, "error_extra");
    assert!(rows.iter().all(|r| r[e].parse::<f64>().unwrap() <= 0.10));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["validate"]["rows"], 16);
    assert!(summary["validate"]["error_extra_median"].as_f64().unwrap() <= 0.05);
    // Every op time came from ZB-CPU-ReSchedule's delayed runs: its own rows are marked as
    // predicted from the run they predict, and the figures are given without them too.
    let from = col(&h, "profile_from");
    for r in &rows {
        let own = &r[col(&h, "system")] == "ZB-CPU-ReSchedule";
        let want = if own { "this_run" } else { "other_run" };
        assert_eq!(&r[from], want, "{r:?}");
    }
    assert_eq!(summary["validate"]["profile_from"]["this_run"], 4);
    assert_eq!(
        summary["validate"]["error_extra_not_this_run"]["judged"],
        12
    );
    assert!(
        text.contains("without the 4 rows whose op times were taken in the run they predict"),
        "{text}"
    );
}

#[test]
fn validate_refuses_a_bad_file_naming_row_and_column() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let header = "system,slow_links,delay_ms,stages,microbatches,tf_ms,tb_ms,tw_ms\n";
    let cases = [
        ("1F1B,0_1,30,4,12,8;9;10,10,5\n", "row 1", "tf_ms"),
        (
            "ZB,0_1,30,4,12,8,10,5\nZB,3_4,30,4,12,8,10,5\n",
            "row 2",
            "slow_links",
        ),
        ("ZB-GPU,0_1,30,4,12,8,10,5\n", "row 1", "system"),
        ("ZB,0_1,abc,4,12,8,10,5\n", "row 1", "delay_ms"),
        ("ZB,0_1,30,4,0,8,10,5\n", "row 1", "microbatches"),
    ];
    for (body, row, column) in cases {
        let f = home.path().join("bad.csv");
        std::fs::write(&f, format!("{header}{body}")).unwrap();
        let o = morphbench(
            &[
                "sim",
                "--validate",
                f.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            home.path(),
        );
        assert_eq!(o.status.code(), Some(2), "{body}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(row) && e.contains(column), "{body}: {e}");
    }
    let f = home.path().join("short.csv");
    std::fs::write(&f, "system,stages\nZB,4\n").unwrap();
    let o = morphbench(
        &[
            "sim",
            "--validate",
            f.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no column 'slow_links'"),
        "{}",
        stderr(&o)
    );
    assert!(
        !out.exists() || std::fs::read_dir(&out).unwrap().next().is_none(),
        "a refused file leaves no run folder"
    );
}

/// `--export-schedule torch` writes each schedule's order; `--schedule-file` reads one back
/// and runs it in the same time; a deadlocked file names where each rank waits.
#[test]
fn pytorch_schedule_files_round_trip() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let csv = home.path().join("order.csv");
    let base = [
        "sim",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--slow",
        "2:4",
    ];
    let mut args = base.to_vec();
    args.extend([
        "--schedule",
        "zb-v,interleaved:2",
        "--export-schedule",
        "torch",
        csv.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let o = morphbench(&args, home.path());
    assert!(o.status.success(), "{}", output(&o));
    let time = |text: &str, name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let first = stdout(&o);
    for tag in ["zb-v", "interleaved_2"] {
        let file = home.path().join(format!("order-{tag}.csv"));
        let mut again = base.to_vec();
        again.extend([
            "--schedule-file",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let o = morphbench(&again, home.path());
        assert!(o.status.success(), "{}", output(&o));
        let name = tag.replace('_', ":");
        assert_eq!(
            time(&first, &name),
            time(&stdout(&o), &format!("file:order-{tag}"))
        );
    }
    let dead = home.path().join("dead.csv");
    std::fs::write(&dead, "0F0,0B0,0F1,0B1\n1F0,1F1,1B1,1B0\n").unwrap();
    let o = morphbench(
        &[
            "sim",
            "--schedule-file",
            dead.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(!o.status.success());
    assert!(
        output(&o).contains("rank 1 waits at step 1 for F1"),
        "{}",
        output(&o)
    );
}

/// A delayed case with no healthy twin is never predicted from its own times (they hold the
/// delay it would add again): left out, and with nothing else to predict, refused.
#[test]
fn a_delayed_case_without_a_healthy_twin_is_not_predicted_from_itself() {
    let (_home, _, o) = validate_tiny_pipeline("offload", "0:10");
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains("lacks a healthy twin") && e.contains("--slow LINK:0,MS"),
        "{e}"
    );
}

/// `sim --from` twice: the stages and links from a links run, the op times from a pipeline
/// run's healthy case; a second run of either kind, or a folder of neither, is refused.
#[test]
fn op_times_and_links_come_from_two_runs() {
    let (home, _, _) = validate_tiny_pipeline("inline", "0:0");
    let pipeline = only_run(&home.path().join("results"));
    let links_home = tempfile::tempdir().unwrap();
    let o = morphbench(
        &[
            "links", "--local", "2", "--sizes", "8", "--iters", "100", "-q",
        ],
        links_home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let links = only_run(&links_home.path().join("results"));
    assert!(links.join("links_hist.csv").exists());
    let (p, l) = (pipeline.to_str().unwrap(), links.to_str().unwrap());
    let sim_out = home.path().join("sim");
    let o = morphbench(
        &[
            "sim",
            "--from",
            l,
            "--from",
            p,
            "--timeline",
            "none",
            "--out",
            sim_out.to_str().unwrap(),
        ],
        home.path(),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}{out}", stderr(&o));
    assert!(
        out.contains("op times from") && out.contains("medians per stage"),
        "{out}"
    );
    // Stage 0's forward holds its stage for its send too: the op's median plus the send's.
    let (h, ops) = read_csv(&pipeline.join("pipeline_timeline.csv"));
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        (v[(n - 1) / 2] + v[n / 2]) / 2.0
    };
    let cell = |r: &csv::StringRecord, c: &str| r[col(&h, c)].parse::<f64>().unwrap();
    let case = out
        .split(" case ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    let f0: Vec<&csv::StringRecord> = ops
        .iter()
        .filter(|r| &r[col(&h, "lane")] == "measured" && &r[col(&h, "case")] == case)
        .filter(|r| &r[col(&h, "stage")] == "0" && &r[col(&h, "kind")] == "F")
        .collect();
    let op = median(
        f0.iter()
            .map(|r| cell(r, "end_ms") - cell(r, "start_ms"))
            .collect(),
    );
    let held = median(
        f0.iter()
            .map(|r| cell(r, "queue_end_ms") - cell(r, "end_ms"))
            .collect(),
    );
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(only_run(&sim_out).join("meta.json")).unwrap(),
    )
    .unwrap();
    let tf0 = meta["config"]["tf"][0].as_f64().unwrap();
    assert!(
        held > 0.0 && (tf0 - (op + held)).abs() < 1e-6,
        "{tf0} {op} {held}"
    );
    for (args, said) in [
        (vec!["--from", p, "--from", p], "a second run with op times"),
        (
            vec!["--from", l, "--from", l],
            "a second run with links.csv",
        ),
        (vec!["--from", "/"], "not a run folder sim reads"),
    ] {
        let o = morphbench(&[&["sim"], &args[..]].concat(), home.path());
        assert!(!o.status.success());
        assert!(stderr(&o).contains(said), "{}", stderr(&o));
    }
}

/// `sim --from` a pipeline run gives the tail's figures on each schedule's measured healthy
/// iteration too: that iteration plus what the stalls add to the simulated one.
#[test]
fn the_tail_is_also_given_on_the_measured_healthy_iteration() {
    let (home, _, _) = validate_tiny_pipeline("inline", "0:0");
    let pipeline = only_run(&home.path().join("results"));
    let (h, cases) = read_csv(&pipeline.join("pipeline.csv"));
    let measured: f64 = cases[0][col(&h, "iteration_ms")].parse().unwrap();
    let sim_out = home.path().join("sim");
    let p = pipeline.to_str().unwrap();
    let o = morphbench(
        &[
            "sim",
            "--from",
            p,
            "--schedule",
            "1f1b",
            "--stall",
            "0:0.5:10",
            "--iterations",
            "200",
            "--timeline",
            "none",
            "--out",
            sim_out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (h, rows) = read_csv(&only_run(&sim_out).join("sim_tail.csv"));
    let cell = |c: &str| rows[0][col(&h, c)].parse::<f64>().unwrap();
    assert!((cell("measured_healthy_ms") / measured - 1.0).abs() < 1e-3);
    for q in ["p50", "p99"] {
        let on = cell(&format!("anchored_{q}_ms"));
        let want = measured + cell(&format!("{q}_ms")) - cell("healthy_ms");
        assert!((on - want).abs() < 1e-3 * want, "{q}: {on} vs {want}");
    }
    assert!(cell("anchored_p99_ms") > measured);
}
