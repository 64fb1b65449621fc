//! Judging runs against each other: each figure against the fleet's median, by robust z.

use std::collections::BTreeSet;

use anyhow::Result;

use super::baseline::add_policy_notes;
use super::figures::{Figure, Key, RunFigures};
use super::judge::{cap_unsteady, pct, Outcome, Report};
use super::policy::{Policy, Thresholds};
use super::stats::robust_z;
use crate::verdict::Verdict;

/// The fewest runs a fleet check accepts: a median and a MAD need a majority to stand on.
pub const MIN_FLEET: usize = 3;

/// Every figure of every run against the fleet's median of that figure.
pub fn against_fleet(runs: &[RunFigures], policy: &Policy) -> Result<Report> {
    if runs.len() < MIN_FLEET {
        anyhow::bail!(
            "--fleet needs at least {MIN_FLEET} runs (one per node) to find outliers; got {}: \
             give more run folders, or compare two with --baseline",
            runs.len()
        );
    }
    let mut report = Report {
        alpha: policy.top_level().alpha,
        ..Report::default()
    };
    let adapters: BTreeSet<&str> = runs.iter().map(|r| r.label.adapter_name()).collect();
    let mixed = (adapters.len() > 1).then(|| {
        format!(
            "the fleet mixes adapters ({})",
            adapters.into_iter().collect::<Vec<_>>().join(", ")
        )
    });
    if let Some(why) = &mixed {
        report
            .notes
            .push(format!("{why}: outliers are reported as WARN, never FAIL"));
    }
    for r in runs {
        if let Some(w) = r.label.incomplete() {
            report.notes.push(format!("{}: {w}", r.run_id));
        }
    }
    let keys: BTreeSet<&Key> = runs.iter().flat_map(|r| r.figures.keys()).collect();
    for key in keys {
        let t = policy.for_figure(key);
        if t.ignore {
            report.ignored += 1;
            continue;
        }
        let have: Vec<(&RunFigures, &Figure)> = runs
            .iter()
            .filter_map(|r| r.figures.get(key).map(|f| (r, f)))
            .collect();
        let values: Vec<f64> = have.iter().map(|(_, f)| f.value).collect();
        let (median, z) = robust_z(&values);
        for run in runs.iter().filter(|r| !r.figures.contains_key(key)) {
            let why = format!(
                "not measured on this node ({} of {} runs have it)",
                have.len(),
                runs.len()
            );
            report.outcomes.push(Outcome {
                base: Some(median),
                ..Outcome::missing(&run.run_id, key, have[0].1, why)
            });
        }
        for ((run, fig), z) in have.iter().zip(z) {
            let mut o = Outcome::blank(&run.run_id, key, fig);
            (o.base, o.value) = (Some(median), Some(fig.value));
            o.ratio = (median > 0.0).then(|| fig.value / median);
            o.verdict = Verdict::Pass;
            if have.len() < MIN_FLEET {
                o.verdict = Verdict::Warn;
                o.reason = format!(
                    "only {} runs have this figure: no fleet to judge by",
                    have.len()
                );
                report.outcomes.push(o);
                continue;
            }
            fleet_verdict(&mut o, fig, median, z, &t);
            cap_unsteady(&mut o, &[fig], &t);
            if let Some(why) = &mixed {
                o.warn(why);
            }
            report.outcomes.push(o);
        }
    }
    list_outliers(&mut report, runs);
    add_policy_notes(&mut report, policy);
    report.outcomes.sort_by_key(|o| o.verdict);
    Ok(report)
}

/// One figure's verdict against the fleet's median: an outlier is far from the fleet by the
/// MAD (robust z) and by enough to matter (the policy's percentages).
fn fleet_verdict(o: &mut Outcome, fig: &Figure, median: f64, z: f64, t: &Thresholds) {
    let worse = if median > 0.0 {
        fig.better.worse_by(median, fig.value)
    } else {
        0.0
    };
    let z_text = if z.is_finite() {
        format!("z={z:.1}")
    } else {
        "z=inf (the others agree exactly)".into()
    };
    // An outlier is far from the fleet by the MAD and by enough to matter.
    let outlier = z.abs() > t.z && worse.abs() * 100.0 >= t.warn_pct;
    if outlier {
        let worse_pct = worse * 100.0;
        (o.verdict, o.reason) = if worse_pct >= t.fail_pct {
            (
                Verdict::Fail,
                format!("{} worse than the fleet median ({z_text})", pct(worse)),
            )
        } else if worse > 0.0 {
            (
                Verdict::Warn,
                format!("{} worse than the fleet median ({z_text})", pct(worse)),
            )
        } else {
            (
                Verdict::Warn,
                format!(
                    "{} better than the fleet median ({z_text}): check the setup",
                    pct(-worse)
                ),
            )
        };
    }
}

/// Each run's figures that did not pass, worst first, under its host's name.
fn list_outliers(report: &mut Report, runs: &[RunFigures]) {
    for run in runs {
        let mut mine: Vec<&Outcome> = report
            .outcomes
            .iter()
            .filter(|o| o.run_id == run.run_id && o.verdict != Verdict::Pass && o.ratio.is_some())
            .collect();
        mine.sort_by_key(|o| o.verdict);
        let figs: Vec<String> = mine
            .into_iter()
            .map(|o| {
                format!(
                    "{} {}: {} {} ({:.2}x the median)",
                    o.verdict.as_str(),
                    o.bench,
                    o.case,
                    o.figure,
                    o.ratio.unwrap_or(f64::NAN)
                )
            })
            .collect();
        if !figs.is_empty() {
            report
                .outliers
                .push((format!("{} ({})", run.label.host_name(), run.run_id), figs));
        }
    }
}
