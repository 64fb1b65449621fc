use super::*;
use std::collections::BTreeMap;

use crate::record::csv::Stats;

fn stats(samples: &[f64]) -> Stats {
    Stats::from(&crate::stats::Summary::of(samples).unwrap())
}

fn fig(samples: &[f64], better: Better) -> Figure {
    let s = stats(samples);
    let (column, unit, value) = match better {
        Better::Lower => ("p50_us", "us", s.p50_us),
        Better::Higher => ("gbps", "GB/s", 1000.0 / s.p50_us),
    };
    Figure {
        column,
        unit,
        better,
        value,
        time: stats::Moments {
            n: s.n,
            mean: s.mean_us,
            stddev: s.stddev_us,
        },
        time_p50: s.p50_us,
        samples: None,
        cv: s.cv,
        detail: String::new(),
        caveat: None,
    }
}

/// 20 samples around `center` with a 2% spread.
fn steady(center: f64) -> Vec<f64> {
    (0..20)
        .map(|i| center * (1.0 + 0.02 * ((i % 5) as f64 - 2.0) / 2.0))
        .collect()
}

/// 20 samples around `center`, lower better.
fn lower(center: f64) -> Figure {
    fig(&steady(center), Better::Lower)
}

fn key(case: &str) -> Key {
    Key {
        bench: "d2h".into(),
        case: case.into(),
    }
}

/// `now` judged against `base` under the default thresholds.
fn judged(base: &Figure, now: &Figure, family: Family) -> Outcome {
    judge(&key("a"), base, now, &Thresholds::default(), "r", family)
}

fn run(id: &str, figures: Vec<(&str, Figure)>) -> RunFigures {
    RunFigures {
        dir: PathBuf::from(id),
        run_id: id.into(),
        label: crate::record::label::RunLabel::of(Path::new("/nonexistent")),
        figures: figures
            .into_iter()
            .map(|(c, f)| (key(c), f))
            .collect::<BTreeMap<_, _>>(),
    }
}

#[test]
fn a_twenty_percent_regression_fails_and_the_same_figure_passes() {
    let base = fig(&steady(100.0), Better::Higher);
    let slow = fig(&steady(120.0), Better::Higher);
    let o = judged(&base, &slow, Family::default());
    assert_eq!(o.verdict, Verdict::Fail, "{o:?}");
    assert!((o.ratio.unwrap() - 1.0 / 1.2).abs() < 1e-9);
    let (lo, hi) = (o.ci_lo.unwrap(), o.ci_hi.unwrap());
    assert!(lo < 1.0 / 1.2 && 1.0 / 1.2 < hi, "{lo} {hi}");
    assert!(o.reason.contains("16.7% worse"), "{}", o.reason);
    // The same figure, and a 20% improvement, pass.
    assert_eq!(
        judged(&base, &base, Family::default()).verdict,
        Verdict::Pass
    );
    assert_eq!(
        judged(&slow, &base, Family::default()).verdict,
        Verdict::Pass
    );
    // 7% worse and significant: a WARN.
    let o = judged(&lower(100.0), &lower(107.0), Family::default());
    assert_eq!(o.verdict, Verdict::Warn, "{o:?}");
}

#[test]
fn unsteady_rows_and_caveats_warn_but_never_fail() {
    let noisy = |c: f64| -> Vec<f64> {
        (0..40)
            .map(|i| c * if i % 2 == 0 { 0.7 } else { 1.3 })
            .collect()
    };
    let (a, mut b) = (
        fig(&noisy(100.0), Better::Lower),
        fig(&noisy(150.0), Better::Lower),
    );
    let o = judged(&a, &b, Family::default());
    assert_eq!(o.verdict, Verdict::Warn);
    assert!(
        o.reason.contains("unsteady") && o.reason.contains("would FAIL"),
        "{}",
        o.reason
    );
    b = lower(150.0);
    let mut a = lower(100.0);
    a.caveat = Some("launch-bound".into());
    let o = judged(&a, &b, Family::default());
    assert_eq!(o.verdict, Verdict::Warn);
    assert!(o.reason.starts_with("launch-bound"), "{}", o.reason);
}

#[test]
fn a_fail_must_stand_out_from_the_pairs_scatter() {
    let (a, b) = (lower(100.0), lower(125.0));
    // Figures that moved by 20% typically: a 25% change does not stand out.
    let noisy = Family {
        q: None,
        scatter: Some(0.2),
    };
    let o = judged(&a, &b, noisy);
    assert_eq!(o.verdict, Verdict::Warn);
    assert!(o.reason.contains("scatter"), "{}", o.reason);
    // Figures that moved by 2%: it does.
    let quiet = Family {
        q: None,
        scatter: Some(0.02),
    };
    assert_eq!(judged(&a, &b, quiet).verdict, Verdict::Fail);
    // A node 25% slower on every figure fails on every figure: the scatter is small.
    let figs: Vec<(String, Figure)> = (0..10)
        .map(|i| (format!("f{i}"), lower(100.0 + i as f64)))
        .collect();
    let base = run(
        "b",
        figs.iter().map(|(c, f)| (c.as_str(), f.clone())).collect(),
    );
    let slow = run(
        "s",
        figs.iter()
            .map(|(c, f)| {
                (
                    c.as_str(),
                    f.with_samples(
                        f.samples
                            .clone()
                            .unwrap_or_else(|| steady(f.value))
                            .iter()
                            .map(|x| x * 1.25)
                            .collect(),
                    ),
                )
            })
            .collect(),
    );
    assert_eq!(
        against_baseline(&base, &slow, &Policy::default()).count(Verdict::Fail),
        10
    );
    // Too few samples: a WARN.
    let (a, b) = (
        fig(&steady(100.0)[..5], Better::Lower),
        fig(&steady(125.0)[..5], Better::Lower),
    );
    let o = judged(&a, &b, Family::default());
    assert!(
        o.verdict == Verdict::Warn && o.reason.contains("min_n"),
        "{o:?}"
    );
}

#[test]
fn figures_in_one_run_only_warn_and_policy_can_ignore() {
    let base = run("b", vec![("x", lower(100.0)), ("y", lower(1.0))]);
    let now = run("n", vec![("x", lower(130.0)), ("z", lower(1.0))]);
    let r = against_baseline(&base, &now, &Policy::default());
    let v: Vec<(&str, Verdict)> = r
        .outcomes
        .iter()
        .map(|o| (o.case.as_str(), o.verdict))
        .collect();
    assert_eq!(
        v,
        vec![
            ("x", Verdict::Fail),
            ("y", Verdict::Warn),
            ("z", Verdict::Warn)
        ]
    );
    let p = Policy::parse("[figure.\"d2h: x\"]\nignore = true\n").unwrap();
    let r = against_baseline(&base, &now, &p);
    assert_eq!((r.worst(), r.ignored), (Verdict::Warn, 1));
    let p = Policy::parse("[bench.d2h]\nfail_pct = 40\n").unwrap();
    assert_eq!(against_baseline(&base, &now, &p).count(Verdict::Fail), 0);
}

#[test]
fn a_fleet_names_its_outlier_node() {
    let nodes: Vec<RunFigures> = [100.0, 101.0, 99.0, 100.5, 140.0]
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            run(
                &format!("node{i}"),
                vec![
                    ("x", fig(&steady(c), Better::Lower)),
                    ("y", fig(&steady(5.0), Better::Lower)),
                ],
            )
        })
        .collect();
    let r = against_fleet(&nodes, &Policy::default()).unwrap();
    let fails: Vec<&str> = r
        .outcomes
        .iter()
        .filter(|o| o.verdict == Verdict::Fail)
        .map(|o| o.run_id.as_str())
        .collect();
    assert_eq!(fails, vec!["node4"]);
    assert_eq!(r.outliers.len(), 1);
    assert!(
        r.outliers[0].0.contains("node4") && r.outliers[0].1[0].contains("d2h: x"),
        "{:?}",
        r.outliers
    );
    assert!(against_fleet(&nodes[..2], &Policy::default()).is_err());
}

#[test]
fn a_regression_measured_on_a_busy_machine_is_at_most_a_warn() {
    let base = run("base", vec![("a", fig(&steady(100.0), Better::Higher))]);
    let mut slow = run("slow", vec![("a", fig(&steady(120.0), Better::Higher))]);
    assert_eq!(
        against_baseline(&base, &slow, &Policy::default()).count(Verdict::Fail),
        1
    );
    slow.label.busy = vec![("d2h".into(), "other processes used 1.00 of 2 cores".into())];
    let r = against_baseline(&base, &slow, &Policy::default());
    assert_eq!(r.count(Verdict::Fail), 0);
    assert_eq!(r.count(Verdict::Warn), 1);
    let o = &r.outcomes[0];
    assert!(
        o.reason.contains("busy during d2h in this run") && o.reason.contains("would FAIL"),
        "{}",
        o.reason
    );
    // A busy machine during another bench changes nothing here.
    slow.label.busy = vec![("kernels".into(), "busy".into())];
    assert_eq!(
        against_baseline(&base, &slow, &Policy::default()).count(Verdict::Fail),
        1
    );
}
