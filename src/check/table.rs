//! `check.csv`: one row per figure judged. `run_id` is the run judged, `bench` and `case` name
//! the figure's row in that run's tables, `figure` its column.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::figures::Better;
use super::judge::Outcome;
use crate::record::csv::{sig, sig4};
use crate::record::{CsvSink, CsvTable, Line};
use crate::verdict::Verdict;

pub struct CheckTable;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckParams {
    pub figure: String,
    pub unit: String,
    pub better: Better,
}

impl Default for CheckParams {
    fn default() -> CheckParams {
        CheckParams {
            figure: String::new(),
            unit: String::new(),
            better: Better::Lower,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckFigures {
    /// The baseline's figure, or the fleet's median.
    pub base: Option<f64>,
    pub value: Option<f64>,
    /// value / base.
    pub ratio: Option<f64>,
    /// The ratio's confidence interval at 1 - alpha (99% by default).
    pub ci_lo: Option<f64>,
    pub ci_hi: Option<f64>,
    /// The test's two-sided p-value (empty with --fleet or too few samples).
    pub p: Option<f64>,
    /// PASS, WARN or FAIL.
    pub verdict: Verdict,
    pub reason: String,
}

impl CsvTable for CheckTable {
    const NAME: &'static str = "check";
    const WITH_STATS: bool = false;
    type Params = CheckParams;
    type Figures = CheckFigures;

    /// A verdict is one of the three `check` gives.
    fn check(line: &Line<Self>) -> Result<(), (&'static str, String)> {
        if line.figures.verdict == Verdict::Skip {
            return Err(("verdict", "a verdict is PASS, WARN or FAIL".into()));
        }
        Ok(())
    }
}

/// Writes `outcomes` to `path` (replacing an earlier check of the same run).
pub fn write(path: &Path, outcomes: &[Outcome]) -> Result<()> {
    let mut sink = CsvSink::<CheckTable>::create(path)?;
    for o in outcomes {
        let mut line = Line::<CheckTable>::new(
            &o.run_id,
            o.case.clone(),
            CheckParams {
                figure: o.figure.clone(),
                unit: o.unit.clone(),
                better: o.better,
            },
            None,
            CheckFigures {
                base: o.base.map(sig4),
                value: o.value.map(sig4),
                ratio: o.ratio.map(|r| sig(r, 5)),
                ci_lo: o.ci_lo.map(|r| sig(r, 5)),
                ci_hi: o.ci_hi.map(|r| sig(r, 5)),
                p: o.p.map(|p| sig(p, 3)),
                verdict: o.verdict,
                reason: o.reason.clone(),
            },
        );
        line.lead.bench = o.bench.clone();
        sink.write(&line)?;
    }
    Ok(())
}
