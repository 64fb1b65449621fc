//! Judging one run against a baseline run.

use std::collections::BTreeSet;

use super::figures::{Key, RunFigures};
use super::judge::{judge, p_value, pct, scatter, Family, Outcome, Report, IN_BASELINE_ONLY};
use super::policy::Policy;
use super::stats::benjamini_hochberg;

/// Why two runs' figures are not comparable as a regression, if they are not.
pub(super) fn environment_differs(base: &RunFigures, run: &RunFigures) -> Option<String> {
    let (a, b) = (&base.label, &run.label);
    if a.adapter != b.adapter {
        return Some(format!(
            "different adapters ({} in the baseline, {} here)",
            a.adapter_name(),
            b.adapter_name()
        ));
    }
    if a.driver != b.driver {
        return Some(format!(
            "different drivers ({} in the baseline, {} here)",
            a.driver.as_deref().unwrap_or("?"),
            b.driver.as_deref().unwrap_or("?")
        ));
    }
    None
}

/// Every figure of `run` against the same figure of `base`.
pub fn against_baseline(base: &RunFigures, run: &RunFigures, policy: &Policy) -> Report {
    let mut report = Report {
        alpha: policy.top_level().alpha,
        ..Report::default()
    };
    let env = environment_differs(base, run);
    if let Some(why) = &env {
        report.notes.push(format!(
            "{why}: differences are reported as WARN, never FAIL"
        ));
    }
    for (side, r) in [("the baseline", base), ("this run", run)] {
        if let Some(w) = r.label.incomplete() {
            report.notes.push(format!("{side} ({}): {w}", r.run_id));
        }
    }
    let keys: BTreeSet<&Key> = base.figures.keys().chain(run.figures.keys()).collect();
    // Hundreds of figures are tested at once: their p-values are adjusted to control the false
    // discovery rate, so chance alone rarely makes one significant.
    let tested: Vec<(&Key, f64)> = keys
        .iter()
        .filter(|k| !policy.for_figure(k).ignore)
        .filter_map(|k| match (base.figures.get(*k), run.figures.get(*k)) {
            (Some(b), Some(f)) => p_value(b, f).0.map(|p| (*k, p)),
            _ => None,
        })
        .collect();
    let q_values = benjamini_hochberg(&tested.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    let q_of: std::collections::BTreeMap<&Key, f64> =
        tested.iter().map(|(k, _)| *k).zip(q_values).collect();
    let log_worse: Vec<f64> = keys
        .iter()
        .filter(|k| !policy.for_figure(k).ignore)
        .filter_map(|k| match (base.figures.get(*k), run.figures.get(*k)) {
            (Some(b), Some(f)) if b.value > 0.0 && f.value > 0.0 && b.column == f.column => {
                Some(f.better.log_worse(b.value, f.value))
            }
            _ => None,
        })
        .collect();
    let pair_scatter = scatter(&log_worse);
    if let Some(sigma) = pair_scatter {
        report.notes.push(format!(
            "figures moved by {} typically between these runs (robust spread of {} log ratios); \
             a FAIL must stand out from that",
            pct(sigma.exp() - 1.0),
            log_worse.len()
        ));
    }
    for key in keys {
        let t = policy.for_figure(key);
        if t.ignore {
            report.ignored += 1;
            continue;
        }
        let mut o = match (base.figures.get(key), run.figures.get(key)) {
            (Some(b), Some(f)) => {
                let family = Family {
                    q: q_of.get(key).copied(),
                    scatter: pair_scatter,
                };
                judge(key, b, f, &t, &run.run_id, family)
            }
            (Some(b), None) => Outcome {
                base: Some(b.value),
                ..Outcome::missing(&run.run_id, key, b, IN_BASELINE_ONLY.into())
            },
            (None, Some(f)) => Outcome {
                value: Some(f.value),
                ..Outcome::missing(
                    &run.run_id,
                    key,
                    f,
                    "in this run only: not in the baseline".into(),
                )
            },
            (None, None) => unreachable!("the key came from one of the runs"),
        };
        if let Some(why) = &env {
            o.warn(why);
        }
        if let Some(side) = busy_side(base, run, &key.bench) {
            let why = crate::noise::busy_caveat(&key.bench, side);
            o.at_most_warn(&format!("{why} (meta.json host_load)"));
        }
        report.outcomes.push(o);
    }
    add_policy_notes(&mut report, policy);
    report.outcomes.sort_by_key(|o| o.verdict);
    report
}

/// Which run, if any, recorded a busy machine during `bench`.
pub(super) fn busy_side(base: &RunFigures, run: &RunFigures, bench: &str) -> Option<&'static str> {
    let busy = |r: &RunFigures| r.label.busy.iter().any(|(b, _)| b == bench);
    match (busy(base), busy(run)) {
        (true, true) => Some("both runs"),
        (true, false) => Some("the baseline"),
        (false, true) => Some("this run"),
        (false, false) => None,
    }
}

pub(super) fn add_policy_notes(report: &mut Report, policy: &Policy) {
    let names: Vec<String> = report
        .outcomes
        .iter()
        .map(|o| format!("{}: {}", o.bench, o.case))
        .collect();
    for name in policy.unmatched(&names) {
        report.notes.push(format!(
            "policy section [figure.\"{name}\"] names no figure of these runs (check.csv's \
             bench and case columns, as \"BENCH: CASE\")"
        ));
    }
}
