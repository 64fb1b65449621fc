//! `sim`'s CSVs: sim.csv (a schedule's iteration per case), sim_timeline.csv (every op, for
//! Gantt charts), sim_bench.csv (the simulator's own speed).

use crate::record::{CsvTable, Line};
use crate::sim::model::{MAX_MICROBATCHES, MAX_STAGES};

pub const BENCH: &str = "sim";

/// `sim.csv`: one row per case and schedule.
pub struct SimTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SimParams {
    pub iteration: u64,
    pub schedule: String,
    /// What the schedule planned (adaptive's chosen warm-up, a static replay's source).
    pub plan: String,
    pub stages: usize,
    pub microbatches: usize,
    pub comm: String,
    pub link_ms: f64,
    /// Slow links as `link:ms;...` (empty when none).
    pub slow: String,
    /// Microbatches, or a size per stage (`40 GiB`).
    pub mem_limit: String,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SimFigures {
    pub iteration_ms: f64,
    pub speedup_vs_1f1b: f64,
    pub bubble_mean: f64,
    /// Zero Bubble's measure: (T - m(F + B + W)) / T (see `sim::bubble_rate`).
    pub bubble_rate: f64,
    /// `;`-separated, stage 0 first.
    pub bubble_per_stage: String,
    pub peak_activations_per_stage: String,
    pub peak_activations_max: usize,
    /// With the model's shape: the most activation bytes each stage held (`;`-separated),
    /// the largest of them, and each stage's parameters (empty without a shape).
    pub peak_activation_bytes_per_stage: String,
    pub peak_activation_bytes_max: Option<f64>,
    pub param_bytes_per_stage: Option<f64>,
    pub ops: usize,
}

impl CsvTable for SimTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = SimParams;
    type Figures = SimFigures;
}

/// Sum of the extra delays in a `slow` cell (`link:ms;...`).
pub fn total_delay(slow: &str) -> f64 {
    slow.split(';')
        .filter_map(|p| p.split_once(':'))
        .map(|(_, d)| d.parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// `sim_timeline.csv`: every op of every simulated schedule, for Gantt charts (small
/// scenarios only).
pub struct TimelineTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TimelineParams {
    pub iteration: u64,
    pub schedule: String,
    pub stage: usize,
    pub kind: crate::sim::OpKind,
    pub microbatch: usize,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TimelineFigures {
    pub start_ms: f64,
    pub end_ms: f64,
    pub queue_end_ms: f64,
}

impl CsvTable for TimelineTable {
    const NAME: &'static str = "sim_timeline";
    const WITH_STATS: bool = false;
    type Params = TimelineParams;
    type Figures = TimelineFigures;

    /// Stages and microbatches within the simulator's caps, ops that end after they start.
    fn check(line: &Line<Self>) -> Result<(), (&'static str, String)> {
        let (p, f) = (&line.params, &line.figures);
        if p.stage >= MAX_STAGES {
            return Err(("stage", format!("stages are 0 to {}", MAX_STAGES - 1)));
        }
        if p.microbatch >= MAX_MICROBATCHES {
            return Err((
                "microbatch",
                format!("microbatches are 0 to {}", MAX_MICROBATCHES - 1),
            ));
        }
        if f.end_ms < f.start_ms {
            return Err(("end_ms", format!("before start_ms {}", f.start_ms)));
        }
        Ok(())
    }
}

/// `sim_bench.csv`: simulator throughput per schedule (`sim --bench`).
pub struct SimBenchTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SimBenchParams {
    pub schedule: String,
    pub stages: usize,
    pub microbatches: usize,
    pub ops: usize,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SimBenchFigures {
    pub ops_per_s: f64,
}

impl CsvTable for SimBenchTable {
    const NAME: &'static str = "sim_bench";
    const WITH_STATS: bool = true;
    type Params = SimBenchParams;
    type Figures = SimBenchFigures;
}
