//! How the health check says what it found: a table of tests and verdicts (the default), one
//! JSON document (`--json`), and node-problem-detector's one line (`--npd`).

use super::outcome::{Health, Outcome};
use crate::sanitize::{console, CONSOLE_TEXT};
use crate::slurm::{clip, short, Action};
use crate::verdict::Verdict;

/// node-problem-detector shows at most this much of a plugin's output.
pub const NPD_MAX: usize = 80;

/// The first failed figure as a person reads it: `gpu3 gemm gflops: 812.4 vs 1650 GFLOP/s`.
fn first_failure(outcome: &Outcome) -> Option<String> {
    let r = outcome
        .rows
        .iter()
        .find(|r| r.figures.verdict == Verdict::Fail)?;
    let gpu = r
        .params
        .local_rank
        .map_or(String::new(), |g| format!("gpu{g} "));
    let num = |v: Option<f64>| v.map_or("none".into(), short);
    Some(match r.figures.value {
        Some(_) => format!(
            "{gpu}{} {}: {} vs {} {}",
            r.params.test,
            r.params.figure,
            num(r.figures.value),
            num(r.figures.expected),
            r.figures.unit
        ),
        None => format!(
            "{gpu}{} {}: {}",
            r.params.test, r.params.figure, r.figures.reason
        ),
    })
}

/// node-problem-detector's custom plugin output: one line of at most [`NPD_MAX`] characters
/// naming the first failed figure (the exit code carries OK, NonOK, Unknown).
pub fn npd_line(outcome: &Outcome) -> String {
    let text = match outcome.health {
        Health::Healthy => format!(
            "morphbench: healthy, {} GPU{} judged by {}",
            outcome.gpus,
            if outcome.gpus == 1 { "" } else { "s" },
            outcome.judged_by
        ),
        Health::Unhealthy => format!(
            "morphbench FAIL {}",
            first_failure(outcome).unwrap_or_else(|| "a figure".into())
        ),
        Health::Unknown => format!("morphbench: could not judge: {}", outcome.judged_by),
    };
    one_line(&text, NPD_MAX)
}

/// `text` on one line of at most `max` characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    clip(flat.trim().to_string(), max)
}

/// `--json`'s document.
pub fn document(outcome: &Outcome) -> serde_json::Value {
    let figures: Vec<serde_json::Value> = outcome
        .rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "gpu": r.params.local_rank, "host": r.params.host, "adapter": r.params.adapter,
                "test": r.params.test, "figure": r.params.figure, "value": r.figures.value,
                "expected": r.figures.expected, "unit": r.figures.unit,
                "verdict": r.figures.verdict, "reason": r.figures.reason,
                "retest_value": r.figures.retest_value, "busy": r.figures.busy,
            })
        })
        .collect();
    serde_json::json!({
        "node": outcome.node,
        "health": outcome.health,
        "exit_code": outcome.health.exit_code(),
        "judged_by": outcome.judged_by,
        "first_failure": first_failure(outcome),
        "gpus": outcome.gpus,
        "adapter": outcome.adapter,
        "plan_s": outcome.plan.as_secs_f64().ceil(),
        "bound_s": outcome.bound.as_secs_f64().ceil(),
        "wall_s": crate::record::csv::round(outcome.took.as_secs_f64(), 2),
        "run_dir": outcome.run_dir,
        "slurm": outcome.slurm,
        "textfile": outcome.textfile,
        "figures": figures,
    })
}

/// The default output: each test and figure with its verdict, then the verdict and what was
/// done about it.
pub fn table(outcome: &Outcome) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<4} {:<10} {:<10} {:>12} {:>12} {:<8} {:<7} why\n",
        "gpu", "test", "figure", "value", "expected", "unit", "verdict"
    ));
    let num = |v: Option<f64>| v.map_or("-".into(), short);
    // The rows of other local ranks: their strings with control characters escaped.
    let text = |s: &str| console(s, CONSOLE_TEXT).into_owned();
    for r in &outcome.rows {
        let (p, f) = (&r.params, &r.figures);
        out.push_str(&format!(
            "{:<4} {:<10} {:<10} {:>12} {:>12} {:<8} {:<7} {}\n",
            p.local_rank.map_or("-".into(), |g| g.to_string()),
            text(&p.test),
            text(&p.figure),
            num(f.value),
            num(f.expected),
            text(&f.unit),
            f.verdict,
            one_line(&f.reason, 100)
        ));
    }
    let verdict = match outcome.health {
        Health::Healthy => "healthy".to_string(),
        Health::Unhealthy => format!(
            "UNHEALTHY ({})",
            text(&first_failure(outcome).unwrap_or_default())
        ),
        Health::Unknown => "could not judge".to_string(),
    };
    let by = match outcome.health {
        Health::Unknown => outcome.judged_by.clone(),
        _ => format!("judged by {}", outcome.judged_by),
    };
    out.push_str(&format!(
        "health: {} {verdict}; {by}; {:.1} s (its plan {:.0} s, its bound {:.0} s) (exit {})\n",
        outcome.node,
        outcome.took.as_secs_f64(),
        outcome.plan.as_secs_f64().ceil(),
        outcome.bound.as_secs_f64().ceil(),
        outcome.health.exit_code()
    ));
    match &outcome.slurm {
        Some(Action::Drained { reason }) => {
            out.push_str(&format!("slurm: drained {}: {reason}\n", outcome.node))
        }
        Some(Action::Resumed) => out.push_str(&format!(
            "slurm: resumed {} (morphbench had drained it)\n",
            outcome.node
        )),
        Some(Action::Unchanged { why }) => {
            out.push_str(&format!("slurm: {} left as it is ({why})\n", outcome.node))
        }
        None => {}
    }
    if let Some(p) = &outcome.textfile {
        out.push_str(&format!("metrics: {}\n", p.display()));
    }
    if let Some(d) = &outcome.run_dir {
        out.push_str(&format!("run: {}\n", d.display()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fleet::table::{FleetFigures, FleetParams, FleetTable};
    use crate::record::csv::Line;
    use std::time::Duration;

    fn outcome(health: Health, test: &str) -> Outcome {
        let row = Line::<FleetTable>::new(
            "run",
            "c",
            FleetParams {
                rank: 3,
                host: "node07".into(),
                local_rank: Some(3),
                adapter: "NVIDIA H200".into(),
                driver: "580".into(),
                test: test.into(),
                figure: "gflops".into(),
            },
            None,
            FleetFigures {
                value: Some(812.44),
                expected: Some(1650.0),
                unit: "GFLOP/s".into(),
                verdict: if health == Health::Unhealthy {
                    Verdict::Fail
                } else {
                    Verdict::Pass
                },
                reason: "below the baseline".into(),
                ..FleetFigures::default()
            },
        );
        Outcome {
            node: "node07".into(),
            health,
            judged_by: "the baseline".into(),
            gpus: 8,
            adapter: "NVIDIA H200".into(),
            plan: Duration::from_secs(41),
            bound: Duration::from_secs(45),
            took: Duration::from_secs(30),
            run_dir: None,
            rows: vec![row],
            slurm: None,
            textfile: None,
        }
    }

    #[test]
    fn the_npd_line_is_one_line_of_at_most_80_characters_naming_the_first_failure() {
        let bad = npd_line(&outcome(Health::Unhealthy, "gemm"));
        assert_eq!(
            bad,
            "morphbench FAIL gpu3 gemm gflops: 812.4 vs 1650 GFLOP/s"
        );
        let long = npd_line(&outcome(
            Health::Unhealthy,
            &"a\nvery long test name ".repeat(9),
        ));
        assert!(
            long.chars().count() <= NPD_MAX && !long.contains('\n'),
            "{long}"
        );
        let mut unknown = outcome(Health::Unknown, "gemm");
        unknown.judged_by = "nothing was judged: no --baseline ".repeat(5);
        let line = npd_line(&unknown);
        assert!(line.starts_with("morphbench: could not judge") && line.chars().count() <= 80);
        assert!(npd_line(&outcome(Health::Healthy, "gemm")).starts_with("morphbench: healthy"));
    }

    #[test]
    fn the_table_and_the_document_name_the_verdict_and_the_exit_code() {
        let o = outcome(Health::Unhealthy, "gemm");
        let t = table(&o);
        assert!(
            t.contains("UNHEALTHY (gpu3 gemm gflops: 812.4 vs 1650 GFLOP/s)"),
            "{t}"
        );
        assert!(t.contains("(exit 1)"), "{t}");
        let d = document(&o);
        assert_eq!(d["exit_code"], 1);
        assert_eq!(d["health"], "unhealthy");
        assert_eq!(d["figures"][0]["verdict"], Verdict::Fail.as_str());
    }
}
