//! A baseline of several runs of the known-good node (`--baseline A B C`): each figure is
//! judged against the spread of its value across those runs, so run-to-run drift is measured
//! rather than guessed. The test is Student's t for one new observation against k earlier
//! ones, on log values (a prediction test: t = (x - mean) / (s sqrt(1 + 1/k)), k - 1 degrees
//! of freedom), and the p-values of all figures are adjusted together as with one baseline.

use std::collections::{BTreeMap, BTreeSet};

use statrs::distribution::{ContinuousCDF, StudentsT};

use super::figures::{Better, Figure, Key, RunFigures};
use super::judge::{cap_unsteady_caveat_only, format_p, grade, Outcome, Report, IN_BASELINE_ONLY};
use super::policy::Policy;
use super::stats::benjamini_hochberg;

/// The log of a figure as a time: lower is always better.
fn log_time(better: Better, value: f64) -> f64 {
    match better {
        Better::Lower => value.ln(),
        Better::Higher => -value.ln(),
    }
}

/// The prediction test of `x` against `base` (log times); `None` with fewer than 2 baselines.
fn prediction_p(base: &[f64], x: f64) -> Option<f64> {
    let k = base.len();
    if k < 2 {
        return None;
    }
    let mean = base.iter().sum::<f64>() / k as f64;
    let var = base.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
    let se = (var * (1.0 + 1.0 / k as f64)).sqrt();
    if se <= 0.0 {
        return Some(if (x - mean).abs() < 1e-12 { 1.0 } else { 0.0 });
    }
    let t = (x - mean) / se;
    let dist = StudentsT::new(0.0, 1.0, (k - 1) as f64).ok()?;
    Some((2.0 * (1.0 - dist.cdf(t.abs()))).clamp(0.0, 1.0))
}

/// Every figure of `run` against the same figure in each of `bases` (two or more runs).
pub fn against_baselines(bases: &[RunFigures], run: &RunFigures, policy: &Policy) -> Report {
    let mut report = Report {
        alpha: policy.top_level().alpha,
        ..Report::default()
    };
    report.notes.push(format!(
        "a baseline of {} runs: each figure is judged against its spread across them",
        bases.len()
    ));
    let keys: BTreeSet<&Key> = bases
        .iter()
        .flat_map(|b| b.figures.keys())
        .chain(run.figures.keys())
        .collect();
    // First pass: the test per figure, so the p-values can be adjusted together.
    let mut tested: Vec<(&Key, f64)> = Vec::new();
    let mut seen: BTreeMap<&Key, (Vec<&Figure>, &Figure)> = BTreeMap::new();
    for key in &keys {
        if policy.for_figure(key).ignore {
            report.ignored += 1;
            continue;
        }
        let have: Vec<&Figure> = bases
            .iter()
            .filter_map(|b| b.figures.get(*key))
            .filter(|f| f.value > 0.0)
            .collect();
        match run.figures.get(*key) {
            Some(f) if f.value > 0.0 && have.len() >= 2 => {
                let logs: Vec<f64> = have.iter().map(|b| log_time(b.better, b.value)).collect();
                if let Some(p) = prediction_p(&logs, log_time(f.better, f.value)) {
                    tested.push((key, p));
                }
                seen.insert(key, (have, f));
            }
            Some(f) => {
                let why = format!(
                    "in {} of the {} baseline runs: too few to judge by",
                    have.len(),
                    bases.len()
                );
                report.outcomes.push(Outcome {
                    value: Some(f.value),
                    ..Outcome::missing(&run.run_id, key, f, why)
                });
            }
            None => {
                if let Some(b) = have.first() {
                    report.outcomes.push(Outcome::missing(
                        &run.run_id,
                        key,
                        b,
                        IN_BASELINE_ONLY.into(),
                    ));
                }
            }
        }
    }
    let q_values = benjamini_hochberg(&tested.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    let q_of: BTreeMap<&Key, (f64, f64)> = tested
        .iter()
        .zip(q_values)
        .map(|((k, p), q)| (*k, (*p, q)))
        .collect();
    for (key, (have, f)) in seen {
        let tests = q_of.get(key).copied();
        report
            .outcomes
            .push(judge(run, key, (&have, f), tests, policy));
    }
    report.outcomes.sort_by_key(|o| o.verdict);
    report
}

/// One figure of `run` (`f`) against its positive values in the baselines (`have`, two or
/// more), given its test's p and adjusted q where it had one.
fn judge(
    run: &RunFigures,
    key: &Key,
    (have, f): (&[&Figure], &Figure),
    tests: Option<(f64, f64)>,
    policy: &Policy,
) -> Outcome {
    let t = policy.for_figure(key);
    let mut o = Outcome::blank(&run.run_id, key, f);
    let base = crate::stats::robust::median(&have.iter().map(|b| b.value).collect::<Vec<_>>());
    (o.base, o.value, o.ratio) = (Some(base), Some(f.value), Some(f.value / base));
    // The baselines' own range, as a ratio: where this run would sit among them.
    let lo = have
        .iter()
        .map(|b| f.value / b.value)
        .fold(f64::INFINITY, f64::min);
    let hi = have.iter().map(|b| f.value / b.value).fold(0.0, f64::max);
    (o.ci_lo, o.ci_hi) = (Some(lo), Some(hi));
    let (p, q) = tests.unzip();
    o.p = p;
    let worse = f.better.worse_by(base, f.value);
    let significant = q.is_some_and(|q| q < t.alpha);
    let p_text = match (p, q) {
        (Some(p), Some(q)) => format!(
            "t-test against {} baseline runs p={}, q={}",
            have.len(),
            format_p(p),
            format_p(q)
        ),
        _ => "no test".into(),
    };
    (o.verdict, o.reason) = grade(worse, significant, &t, &p_text);
    cap_unsteady_caveat_only(&mut o, f);
    if run.label.busy.iter().any(|(b, _)| *b == key.bench) {
        o.at_most_warn(&crate::noise::busy_caveat(&key.bench, "this run"));
    }
    if let Some(first) = have.first() {
        o.note_variant(first, f);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prediction_test_knows_run_to_run_spread() {
        // Baselines that drift by about 6%: a run 17% slower is within reach, 70% is not.
        let base: Vec<f64> = [100.0f64, 110.0, 95.0, 105.0]
            .iter()
            .map(|v| v.ln())
            .collect();
        let p_near = prediction_p(&base, 120f64.ln()).unwrap();
        let p_far = prediction_p(&base, 170f64.ln()).unwrap();
        assert!(p_near > 0.05, "{p_near}");
        assert!(p_far < 0.01, "{p_far}");
        assert_eq!(prediction_p(&base[..1], 1.0), None);
    }
}
