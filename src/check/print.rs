//! The console form of a check's report.

use std::fmt::Write as _;

use super::judge::Report;
use crate::sanitize::CONSOLE_TEXT;
use crate::verdict::Verdict;

/// A string read from a run's files (a host, a case, a reason) with control characters
/// escaped.
fn text(s: &str) -> std::borrow::Cow<'_, str> {
    crate::sanitize::console(s, CONSOLE_TEXT)
}

/// The figures printed per outlier node without `--all`.
pub(super) const OUTLIERS_SHOWN: usize = 10;

/// The PASS rows printed without `--all`.
pub(super) const PASS_ROWS_SHOWN: usize = 20;

/// The console table: FAILs first, then WARNs, then (some) PASSes; then the outliers and the
/// verdict.
pub fn console(title: &str, report: &Report, all: bool, show_run: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", text(title));
    for n in &report.notes {
        let _ = writeln!(s, "note: {}", text(n));
    }
    let num = |x: Option<f64>| {
        x.map_or("-".to_string(), |x| {
            format!("{}", crate::record::csv::sig(x, 4))
        })
    };
    let _ = writeln!(
        s,
        "{:<8}{}{:<44} {:<24} {:>11} {:>11} {:>7} {:>16}  reason",
        "verdict",
        if show_run {
            format!("{:<22}", "run")
        } else {
            String::new()
        },
        "figure",
        "column",
        "base",
        "value",
        "ratio",
        format!("{:.0}% interval", 100.0 * (1.0 - report.alpha))
    );
    let mut passes = 0;
    for o in &report.outcomes {
        if o.verdict == Verdict::Pass {
            passes += 1;
            if !all && passes > PASS_ROWS_SHOWN {
                continue;
            }
        }
        let name: String = text(&format!("{}: {}", o.bench, o.case))
            .chars()
            .take(44)
            .collect();
        let interval = match (o.ci_lo, o.ci_hi) {
            (Some(lo), Some(hi)) => format!("[{lo:.3}, {hi:.3}]"),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:<8}{}{:<44} {:<24} {:>11} {:>11} {:>7} {:>16}  {}",
            o.verdict.as_str(),
            if show_run {
                format!(
                    "{:<22}",
                    text(&o.run_id).chars().take(21).collect::<String>()
                )
            } else {
                String::new()
            },
            name,
            format!("{} ({})", text(&o.figure), o.better.as_str()),
            num(o.base),
            num(o.value),
            o.ratio.map_or("-".into(), |r| format!("{r:.3}")),
            interval,
            text(&o.reason)
        );
    }
    if !all && passes > PASS_ROWS_SHOWN {
        let _ = writeln!(
            s,
            "... and {} more PASS (all in check.csv; --all prints them)",
            passes - PASS_ROWS_SHOWN
        );
    }
    for (node, figs) in &report.outliers {
        let _ = writeln!(s, "outlier node {}: {} figure(s)", text(node), figs.len());
        for f in figs
            .iter()
            .take(if all { usize::MAX } else { OUTLIERS_SHOWN })
        {
            let _ = writeln!(s, "  {}", text(f));
        }
        if !all && figs.len() > OUTLIERS_SHOWN {
            let _ = writeln!(s, "  ... and {} more (--all)", figs.len() - OUTLIERS_SHOWN);
        }
    }
    let _ = writeln!(
        s,
        "verdict: {} ({} FAIL, {} WARN, {} PASS{})",
        report.worst().as_str(),
        report.count(Verdict::Fail),
        report.count(Verdict::Warn),
        report.count(Verdict::Pass),
        if report.ignored > 0 {
            format!(", {} ignored by the policy", report.ignored)
        } else {
            String::new()
        }
    );
    s
}
