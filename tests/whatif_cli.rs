//! `morphbench whatif` end to end: the real trace ST in, its files and summary out; a slow
//! worker's host drained with its price; bad input refused with the fix; and the testbed's
//! own pipeline runs read back (a delayed link blamed on pp-comm and its two stages, a
//! healthy pipeline near S = 1).

mod common;

use std::path::{Path, PathBuf};

use common::{col, morphbench, only_run, read_csv, stderr};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/whatif")
        .join(name)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn attribution(run: &Path) -> Vec<(String, String, f64)> {
    let (h, rows) = read_csv(&run.join("whatif_attribution.csv"));
    rows.iter()
        .map(|r| {
            (
                r[col(&h, "dimension")].to_string(),
                r[col(&h, "key")].to_string(),
                r[col(&h, "slowdown")].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn st_runs_end_to_end_and_its_summary_carries_the_answer() {
    let home = tempfile::tempdir().unwrap();
    let trace = data("trace-ST.parquet");
    let meta = data("meta-ST.yaml");
    let o = morphbench(
        &[
            "whatif",
            "--trace",
            trace.to_str().unwrap(),
            "--meta",
            meta.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = common::stdout(&o);
    assert!(
        out.contains("stragglers cost 17.9% of its step time"),
        "{out}"
    );
    assert!(out.contains("stage 3 accounts for most of it"), "{out}");
    assert!(out.contains("under zb-h1:"), "{out}");
    let run = only_run(&home.path().join("results"));
    let (h, rows) = read_csv(&run.join("whatif.csv"));
    for c in ["step", "base_s", "nodelay_s", "ideal_s", "slowdown"] {
        col(&h, c);
    }
    assert_eq!(rows.len(), 32);
    let groups = attribution(&run);
    for dim in ["all", "optype", "dp_rank", "stage", "worker"] {
        assert!(groups.iter().any(|g| g.0 == dim), "no {dim} in {groups:?}");
    }
    assert!(groups.iter().any(|g| g.1 == "forward-pp-comm"));
    assert!(groups.iter().any(|g| g.0 == "worker" && g.1 == "1:3"));
    let summary = json(&run.join("summary.json"));
    let w = &summary["whatif"];
    assert!(
        (w["blocking_slowdown"].as_f64().unwrap() - 1.1787).abs() < 1e-3,
        "{w}"
    );
    assert!((w["m_s"].as_f64().unwrap() - 1.219).abs() < 0.01, "{w}");
    assert!(w["launch_slowdown"].as_f64().is_some() && w["m_w"].as_f64().is_some());
    assert_eq!(w["top"]["stage"][0]["key"], "3");
    let trace = json(&run.join("whatif_trace.json"));
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);
    let (sh, schedules) = read_csv(&run.join("whatif_schedules.csv"));
    assert_eq!(schedules.len(), 6);
    for r in &schedules {
        let with: f64 = r[col(&sh, "with_stragglers_s")].parse().unwrap();
        let without: f64 = r[col(&sh, "without_s")].parse().unwrap();
        assert!(with > without, "{r:?}");
    }
}

#[test]
fn a_slow_workers_host_is_drained_with_its_price() {
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("syn.csv");
    let shape = morphbench::bench::whatif::synth::Shape {
        dp: 4,
        pp: 4,
        microbatches: 8,
        steps: 4,
        slow: Some((3, 2, 1.6)),
        seed: 3,
        overlap: false,
    };
    let mut f = std::fs::File::create(&trace).unwrap();
    morphbench::bench::whatif::synth::write(&shape, &mut f).unwrap();
    // Ranks are stage * DP + dp_rank: worker 3:2 is rank 11.
    let hosts = home.path().join("hosts.txt");
    let lines: String = (0..16).map(|r| format!("{r} gpu{r:03}\n")).collect();
    std::fs::write(&hosts, format!("# rank host\n{lines}")).unwrap();
    let o = morphbench(
        &[
            "whatif",
            "--trace",
            trace.to_str().unwrap(),
            "--hosts",
            hosts.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&home.path().join("results"));
    assert_eq!(
        std::fs::read_to_string(run.join("drain.txt")).unwrap(),
        "gpu011\n"
    );
    assert!(common::stdout(&o).contains("drain gpu011 (worker 3:2, rank 11): recovers"));
    let w = json(&run.join("whatif.json"));
    assert!(w["drain"][0]["recovers"].as_f64().unwrap() >= 0.05, "{w}");
    assert_eq!(w["m_w_workers"][0], "3:2");
    // A host name that is not one is refused by line.
    std::fs::write(&hosts, "11 gpu;rm\n").unwrap();
    let o = morphbench(
        &[
            "whatif",
            "--trace",
            trace.to_str().unwrap(),
            "--hosts",
            hosts.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("line 1") && stderr(&o).contains("not a host name"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_input_is_refused_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let trace = data("trace-ST.csv");
    let t = trace.to_str().unwrap();
    let meta = home.path().join("meta.yaml");
    std::fs::write(&meta, "dp_size: 2\npp_size: 4\nworld_size: 9\n").unwrap();
    let cases: [(Vec<&str>, &str); 6] = [
        (vec!["--trace", "/nonexistent/t.csv"], "cannot read it"),
        (
            vec!["--trace", t, "--meta", meta.to_str().unwrap()],
            "world_size 9 is not",
        ),
        (
            vec!["--trace", t, "--dp", "3"],
            "DP 3 but the trace's dp_rank runs 0 to 1",
        ),
        (
            vec!["--trace", t, "--steps", "1-3"],
            "--steps names no step of the trace",
        ),
        (vec!["--trace", t, "--max-trace-mb", "0"], "--max-trace-mb"),
        (vec!["--trace", t, "--split", "rack"], "--split \"rack\""),
    ];
    for (args, want) in cases {
        let mut all = vec!["whatif"];
        all.extend(args);
        let o = morphbench(&all, home.path());
        assert!(!o.status.success(), "{all:?} passed");
        assert!(stderr(&o).contains(want), "{all:?}: {}", stderr(&o));
    }
}

fn pipeline_trace(home: &Path, args: &[&str]) -> PathBuf {
    let mut all = vec![
        "pipeline",
        "--schedule",
        "1f1b",
        "--comm",
        "offload",
        "--iters",
        "4",
        "--warmup",
        "1",
        "-q",
    ];
    all.extend(args);
    let o = morphbench(&all, home);
    assert!(o.status.success(), "{}", stderr(&o));
    only_run(&home.join("results")).join("pipeline_trace.csv")
}

fn whatif(home: &Path, trace: &Path, case: &str) -> PathBuf {
    let out = home.join("whatif");
    let o = morphbench(
        &[
            "--out",
            out.to_str().unwrap(),
            "whatif",
            "--trace",
            trace.to_str().unwrap(),
            "--case",
            case,
        ],
        home,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    only_run(&out)
}

#[test]
fn a_delayed_link_in_the_testbeds_pipeline_is_blamed_on_pp_comm_and_its_two_stages() {
    let home = tempfile::tempdir().unwrap();
    let trace = pipeline_trace(
        home.path(),
        &[
            "--local", "4", "--layers", "2", "--hidden", "64", "--tokens", "16", "--slow", "1:20",
        ],
    );
    let run = whatif(home.path(), &trace, "1f1b_offload_link1+20ms");
    let g = attribution(&run);
    let of = |dim: &str, key: &str| g.iter().find(|x| x.0 == dim && x.1 == key).unwrap().2;
    // How much S is depends on the machine (a 20 ms delay against its compute: 1.7 alone,
    // 1.28 beside CI's other tests), so the delay is checked in seconds. Each iteration's
    // last microbatch crosses link 1 forward and back on its one chain of dependencies:
    // 40 ms no schedule hides. The what-if must find at least half of it in every step,
    // and S above a healthy pipeline's (under 1.05, the next test).
    let s = of("all", "all");
    assert!(s > 1.05, "S {s}");
    let (h, steps) = read_csv(&run.join("whatif.csv"));
    assert!(!steps.is_empty());
    for r in &steps {
        let at = |c: &str| r[col(&h, c)].parse::<f64>().unwrap();
        let excess = at("base_s") - at("ideal_s");
        assert!(
            excess >= 0.020,
            "step {}: {excess} s over its ideal",
            &r[col(&h, "step")]
        );
    }
    let mut types: Vec<_> = g.iter().filter(|x| x.0 == "optype").collect();
    types.sort_by(|a, b| b.2.total_cmp(&a.2));
    assert!(
        types[0].1.ends_with("pp-comm") && types[1].1.ends_with("pp-comm"),
        "{types:?}"
    );
    // Blamed on the link's two stages: they rank first, whatever the machine's scale.
    let mut stages: Vec<_> = g.iter().filter(|x| x.0 == "stage").collect();
    stages.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut top: Vec<&str> = stages[..2].iter().map(|x| x.1.as_str()).collect();
    top.sort();
    assert_eq!(top, ["1", "2"], "{g:?}");
}

#[test]
fn a_healthy_pipeline_reads_back_near_no_slowdown() {
    let home = tempfile::tempdir().unwrap();
    let trace = pipeline_trace(home.path(), &["--local", "2"]);
    let run = whatif(home.path(), &trace, "1f1b_offload_nodelay");
    let s = json(&run.join("whatif.json"))["blocking_slowdown"]
        .as_f64()
        .unwrap();
    assert!(s < 1.05, "S {s} on a healthy pipeline");
}
