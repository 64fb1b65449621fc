//! The presets against the artifact's runs, and the host rate's derivation.

use super::*;
use crate::sim::runtime::{Machine, Mechanisms, Prediction, System};
use std::io::Write;

fn errors_of(file: &str, mech: &Mechanisms) -> Vec<f64> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(file);
    let input = read(&path).unwrap();
    input
        .cases
        .iter()
        .map(|c| errors(c, &c.predict(mech).unwrap()).0.unwrap())
        .collect()
}

/// The bar on the artifact's 7B runs: every row within 10% of the measured slow
/// iteration (healthy + predicted extra), the median within 5%. Exact, so deterministic.
#[test]
fn the_artifacts_7b_runs_are_predicted_within_ten_percent() {
    let e = errors_of("pipemorph-7b-single.csv", &Mechanisms::ALL);
    let (median, _, max) = spread(&e).unwrap();
    assert!(max <= 0.10, "worst {max}: {e:?}");
    assert!(median <= 0.05, "median {median}");
}

/// The artifact's other runs (14B-60B, several slow links, 10-60 ms), not tuned on: a
/// guard that the mechanisms keep holding, at the spread they give today.
#[test]
fn the_artifacts_other_runs_stay_close() {
    let e = errors_of("pipemorph-heldout.csv", &Mechanisms::ALL);
    let (median, p90, max) = spread(&e).unwrap();
    assert_eq!(e.len(), 96);
    assert!(
        median <= 0.05 && p90 <= 0.15 && max <= 0.28,
        "{median} {p90} {max}"
    );
}

/// The artifact's host rate is derived, not fitted to the runs it predicts: the least
/// squares over its `experiments/overhead` runs (every transfer offloaded through one
/// sender, no delay: ALL-CPU against ZB, iterations 3-7) of measured against predicted
/// extra time, on a 0.1 GB/s grid.
#[test]
fn the_host_rate_is_the_least_squares_fit_of_the_overhead_runs() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pipemorph-overhead.csv");
    let input = read(&path).unwrap();
    let sq = |gbps: f64| -> f64 {
        let m = Machine {
            host_gbps: gbps,
            ..Machine::ARTIFACT
        };
        input
            .cases
            .iter()
            .map(|c| {
                let p = c.predict_on(&m, &Mechanisms::ALL).unwrap();
                let measured = c.slow_ms.unwrap() - c.healthy_ms.unwrap();
                (p.slow_ms - p.healthy_ms - measured).powi(2)
            })
            .sum()
    };
    let best = (5..=40)
        .map(|i| i as f64 / 10.0)
        .min_by(|a, b| sq(*a).total_cmp(&sq(*b)))
        .unwrap();
    assert!(
        (best - Machine::ARTIFACT.host_gbps).abs() < 0.05,
        "the fit gives {best} GB/s"
    );
}

/// The error on the added time, per system, on all 112 of the artifact's runs: what the
/// model predicts well (1F1B, ZB on the device) stays there, and the offload systems'
/// figures are guarded at what they are today (the note says what is left and why). A row
/// whose fault added under a tenth of the healthy iteration is left out, saying so.
#[test]
fn the_error_on_the_added_time_is_judged_per_system() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut by: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut left_out = 0;
    for file in ["pipemorph-7b-single.csv", "pipemorph-heldout.csv"] {
        for c in read(&dir.join(file)).unwrap().cases {
            match error_added(&c, &c.predict(&Mechanisms::ALL).unwrap()) {
                Ok(e) => by.entry(c.system.to_string()).or_default().push(e),
                Err(why) => {
                    assert!(why.contains("a tenth"), "{why}");
                    left_out += 1;
                }
            }
        }
    }
    let median = |s: &str| spread(&by[s]).unwrap().0;
    assert_eq!(by.values().map(Vec::len).sum::<usize>() + left_out, 112);
    assert!(median("1F1B") <= 0.06 && median("ZB") <= 0.05, "{by:?}");
    assert!(median("ZB-CPU") <= 0.16 && median("ZB-CPU-ReSchedule") <= 0.45);
    // A made-up row: measured +100 on 400, predicted +120: 20% on what was added.
    let mut c = read(&dir.join("pipemorph-7b-single.csv")).unwrap().cases[0].clone();
    (c.healthy_ms, c.slow_ms) = (Some(400.0), Some(500.0));
    let p = Prediction {
        healthy_ms: 380.0,
        slow_ms: 500.0,
    };
    assert!((error_added(&c, &p).unwrap() - 0.2).abs() < 1e-12);
    c.slow_ms = Some(430.0);
    assert!(error_added(&c, &p).is_err());
}

fn one_row(extra_header: &str, extra_cell: &str) -> anyhow::Result<Input> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    writeln!(
        f,
        "system,slow_links,delay_ms,stages,microbatches,tf_ms,tb_ms,tw_ms,healthy_ms,slow_ms{extra_header}\n\
         ZB,0_1,30,2,4,1,1,1,400,500{extra_cell}"
    )
    .unwrap();
    read(f.path())
}

/// A row may give its healthy run's iterations before the fault: the trend is their median
/// pairwise slope, tested by Mann and Kendall's exact test; too few or bad values are refused
/// naming the column; without the column a row has no trend.
#[test]
fn a_rows_healthy_iterations_give_its_trend() {
    let col = ",healthy_iterations_ms";
    let trend = |cell: &str| one_row(col, cell).unwrap().cases[0].trend;
    let refused = |cell: &str| one_row(col, cell).err().unwrap().to_string();
    let t = trend(",400;410;420;430;440").unwrap();
    assert_eq!(t.ms_per_iteration, 10.0);
    assert!((t.p - 2.0 / 120.0).abs() < 1e-12 && t.moving());
    // Up and down: no trend.
    let t = trend(",400;420;400;420;400").unwrap();
    assert!(!t.moving(), "{t:?}");
    assert!(one_row("", "").unwrap().cases[0].trend.is_none());
    assert!(trend(",").is_none());
    let e = refused(",400;410");
    assert!(
        e.contains("healthy_iterations_ms") && e.contains("give 3 to 64"),
        "{e}"
    );
    let e = refused(",400;x;420");
    assert!(
        e.contains("healthy_iterations_ms") && e.contains("'x'"),
        "{e}"
    );
}

/// The artifact's runs on eight GPUs a node (30B, 60B) were still slowing down when their
/// fault came, whatever the system; the one-GPU-a-node runs (7B) were steady. The offload
/// systems' misses sit mostly on the moving runs (figures guarded at today's).
#[test]
fn the_artifacts_big_runs_were_still_slowing_before_their_fault() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let (mut big, mut big_moving, mut small_moving) = (0, 0, 0);
    let mut resched: [Vec<f64>; 2] = Default::default();
    for file in ["pipemorph-7b-single.csv", "pipemorph-heldout.csv"] {
        let input = read(&dir.join(file)).unwrap();
        let model = input.header.iter().position(|h| h == "model").unwrap();
        for (c, rec) in input.cases.iter().zip(&input.records) {
            let t = c
                .trend
                .expect("every artifact row has its healthy iterations");
            match rec[model].as_str() {
                "30B" | "60B" => {
                    big += 1;
                    big_moving += usize::from(t.moving() && t.ms_per_iteration > 0.0);
                }
                "7B" => small_moving += usize::from(t.moving()),
                _ => {}
            }
            if let (System::Pipemorph, Ok(e)) = (
                c.system,
                error_added(c, &c.predict(&Mechanisms::ALL).unwrap()),
            ) {
                resched[usize::from(t.moving())].push(e);
            }
        }
    }
    assert_eq!(big, 32);
    assert!(big_moving >= 28, "{big_moving} of 32 rising");
    assert_eq!(small_moving, 0);
    let (steady, moving) = (
        spread(&resched[0]).unwrap().0,
        spread(&resched[1]).unwrap().0,
    );
    assert!(steady <= 0.25 && moving >= 0.40, "{steady} {moving}");
}

/// Where a row's op times came from: said by `profile_from`, else read from the artifact's
/// `profile` path (SYSTEM/LINKS/DELAY_S/FILE); the row's own system, links and delay are the
/// run it predicts, delay 0 a healthy run, any other a delayed run of another kind.
#[test]
fn a_rows_profile_says_where_its_op_times_came_from() {
    let from = |h: &str, c: &str| one_row(h, c).map(|i| i.cases[0].profile_from);
    let path = |p: &str| from(",profile", &format!(",experiments/single/7B/{p}/simu.txt"));
    assert_eq!(path("ZB/0_1/0.03").unwrap(), ProfileFrom::ThisRun);
    assert_eq!(
        path("ZB-CPU-ReSchedule/0_1/0.03").unwrap(),
        ProfileFrom::OtherRun
    );
    assert_eq!(path("ZB/2_3/0.03").unwrap(), ProfileFrom::OtherRun);
    assert_eq!(path("ZB/0_1/0.06").unwrap(), ProfileFrom::OtherRun);
    assert_eq!(path("ZB/0_1/0").unwrap(), ProfileFrom::Healthy);
    assert_eq!(
        from(",profile", ",my-profile.txt").unwrap(),
        ProfileFrom::Given
    );
    assert_eq!(from("", "").unwrap(), ProfileFrom::Given);
    assert_eq!(
        from(",profile_from", ",healthy").unwrap(),
        ProfileFrom::Healthy
    );
    let e = from(",profile_from", ",mine").unwrap_err().to_string();
    assert!(
        e.contains("column profile_from: 'mine' is not healthy"),
        "{e}"
    );
}
