//! `sim --validate FILE`: the simulator's runtime presets against measured runs. FILE is a CSV
//! of runs (system, slow links, delay, op times per stage, and optionally the measured healthy
//! and slow iterations); each row is predicted from its own columns and the documented
//! machine constants only, and `validate.csv` gives every input column, the predictions and
//! the errors. A report: it exits 0 whatever the errors; a bad file is refused naming the row
//! and column.
//!
//! `file` reads validation CSVs, `pipeline_run` a `pipeline` run folder, `report` predicts,
//! writes validate.csv (and the ablation) and prints.

mod file;
mod pipeline_run;
mod report;

use std::path::Path;

use anyhow::{Context, Result};

use crate::sim::runtime::program::Orders;
use crate::sim::runtime::{predict, Job, Machine, Mechanisms, Prediction, Replay, System};

pub use file::read;
pub use report::ValidateBench;

pub const BENCH: &str = "validate";

/// One measured run to predict.
#[derive(Debug, Clone)]
pub struct Case {
    pub system: System,
    pub stages: usize,
    pub microbatches: usize,
    pub tf: Vec<f64>,
    pub tb: Vec<f64>,
    pub tw: Vec<f64>,
    pub delay: Vec<f64>,
    pub activation_bytes: f64,
    pub channels: usize,
    pub healthy_ms: Option<f64>,
    pub slow_ms: Option<f64>,
    /// From a pipeline run: each stage's measured op order, and how long its sends held it.
    pub orders: Option<Orders>,
    pub send_ms: Vec<f64>,
}

impl Case {
    fn replay(&self) -> Option<Replay<'_>> {
        self.orders.as_ref().map(|orders| Replay {
            orders,
            send_ms: &self.send_ms,
        })
    }

    pub fn job(&self) -> Job<'_> {
        Job {
            stages: self.stages,
            microbatches: self.microbatches,
            tf: &self.tf,
            tb: &self.tb,
            tw: &self.tw,
            delay: &self.delay,
            activation_bytes: self.activation_bytes,
            channels: self.channels,
            fused_backward: false,
            measured: self.replay(),
        }
    }

    pub fn predict(&self, mech: &Mechanisms) -> Result<Prediction, String> {
        self.predict_on(&Machine::ARTIFACT, mech)
    }

    pub fn predict_on(&self, machine: &Machine, mech: &Mechanisms) -> Result<Prediction, String> {
        predict(self.system, &self.job(), machine, mech)
    }
}

/// The errors of one prediction against what was measured, where it was.
pub fn errors(case: &Case, p: &Prediction) -> (Option<f64>, Option<f64>) {
    match (case.healthy_ms, case.slow_ms) {
        (Some(h), Some(s)) => (
            Some((h + (p.slow_ms - p.healthy_ms) - s).abs() / s),
            Some((p.slow_ms - s).abs() / s),
        ),
        (_, Some(s)) => (None, Some((p.slow_ms - s).abs() / s)),
        _ => (None, None),
    }
}

/// The error of a prediction on the time the fault added, |predicted extra - measured extra| /
/// measured extra, or why a row is left out: no measured pair, or a fault that added under a
/// tenth of the healthy iteration (a small extra makes any miss a large share of it).
pub fn error_added(case: &Case, p: &Prediction) -> Result<f64, &'static str> {
    let (Some(h), Some(s)) = (case.healthy_ms, case.slow_ms) else {
        return Err("no measured healthy and slow iteration");
    };
    let measured = s - h;
    if measured < 0.1 * h {
        return Err("the fault added under a tenth of the healthy iteration");
    }
    Ok(((p.slow_ms - p.healthy_ms) - measured).abs() / measured)
}

/// The rows of a validation file, with its header and raw records for carrying through.
pub struct Input {
    pub header: Vec<String>,
    pub records: Vec<Vec<String>>,
    pub cases: Vec<Case>,
}

/// Median, p90 (nearest rank) and max of some errors.
pub fn spread(errs: &[f64]) -> Option<(f64, f64, f64)> {
    if errs.is_empty() {
        return None;
    }
    let mut e = errs.to_vec();
    e.sort_by(f64::total_cmp);
    let n = e.len();
    let p90 = e[((0.9 * n as f64).ceil() as usize).clamp(1, n) - 1];
    Some((median(e.clone()), p90, e[n - 1]))
}

/// The median of some values (0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs the validation of `file` into a run folder; its line goes into summary.json too.
pub fn run(
    file: &Path,
    ablation: bool,
    options: &crate::suite::RunOptions,
) -> Result<std::path::PathBuf> {
    let input = read(file)?;
    let bench = ValidateBench {
        input,
        source: file.display().to_string(),
        ablation,
    };
    let config = serde_json::json!({ "validate": file.display().to_string() });
    let benches: Vec<Box<dyn crate::suite::Bench>> = vec![Box::new(bench)];
    let dir = crate::suite::run(options, &benches, Some(config))?;
    add_to_summary(&dir.path)?;
    Ok(dir.path.clone())
}

/// Copies meta.json's validation figures into summary.json (`validate`).
fn add_to_summary(dir: &Path) -> Result<()> {
    let read = |name: &str| -> Result<serde_json::Value> {
        let p = dir.join(name);
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))
    };
    let meta = read("meta.json")?;
    let mut summary = read("summary.json")?;
    let figures = meta.pointer("/notes/validate").cloned();
    if let (Some(obj), Some(v)) = (summary.as_object_mut(), figures) {
        obj.insert("validate".into(), v);
    }
    let p = dir.join("summary.json");
    let tmp = dir.join("summary.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&summary)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
