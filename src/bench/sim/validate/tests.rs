//! The presets against the artifact's runs, and the host rate's derivation.

use super::*;

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
