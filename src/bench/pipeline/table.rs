//! pipeline.csv and pipeline_timeline.csv (which `plot` draws as measured-against-predicted
//! Gantt charts).

use serde::{Deserialize, Serialize};

use crate::record::csv::{CsvTable, Line};

/// `pipeline.csv`: one row per schedule, comm mode and delay.
pub struct PipelineTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineParams {
    pub schedule: String,
    /// `inline` or `offload`.
    pub comm: String,
    pub transport: String,
    /// `LINK:MS` injected on every message of that link, or `none`.
    pub slow: String,
    pub stages: u32,
    pub microbatches: u32,
    pub layers: u32,
    pub tokens: u32,
    pub hidden: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PipelineFigures {
    /// The median iteration, first op's start to last op's end over all stages.
    pub iteration_ms: f64,
    /// The simulator's iteration for the same orders from what is known before the fault: a
    /// delayed case on its healthy case's typical op and link times (same schedule and comm, no
    /// delay, measured in the same run) plus the injected delay; see `predicted_from`.
    pub predicted_ms: f64,
    /// (measured - predicted) / measured.
    pub error: f64,
    /// 1 - compute / iteration, mean over stages (the last timed iteration).
    pub bubble: f64,
    pub peak_activations: u32,
    /// The largest relative error of any stage's weight gradients against f64.
    pub grad_rel_err: f64,
    pub verified: bool,
    /// The simulator's plan the stages replayed (adaptive names its k).
    pub plan: String,
    /// Whose clock timed the ops: `gpu` (timestamps mapped onto the host clock) in every
    /// stage and timed iteration, `host` in none, `mixed` otherwise. Empty in files from
    /// before it was added (as are the two below).
    pub op_clock: Option<String>,
    /// `bubble` of each stage, `;`-separated from stage 0.
    pub stage_bubbles: Option<String>,
    /// The most activations each stage held (F done, its B not yet), `;`-separated.
    pub stage_peak_activations: Option<String>,
    /// CPU that other processes (not this run's stages) used on the busiest stage's machine
    /// over the case's timed iterations, in cores, and the hypervisor's steal (percent).
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    /// Some stage's machine was busy while the case was timed.
    pub busy: Option<bool>,
    /// What `predicted_ms` stands on: `healthy` (the healthy case and the delay), `itself` (a
    /// case without a delay: its own means), `calibration` (a delayed case with no healthy
    /// case in the run: rank 0's op timing before the run). Empty in files from before it.
    pub predicted_from: Option<String>,
    /// The median over timed iterations of the simulator's iteration for the same orders on
    /// that iteration's own measured op and link times (a replay, not a prediction: the delay
    /// is inside what it replays), and its (measured - replayed) / measured.
    pub replayed_ms: Option<f64>,
    pub replay_error: Option<f64>,
}

impl CsvTable for PipelineTable {
    const NAME: &'static str = "pipeline";
    const WITH_STATS: bool = true;
    type Params = PipelineParams;
    type Figures = PipelineFigures;
    const ADDED: &'static [&'static str] = &[
        "op_clock",
        "stage_bubbles",
        "stage_peak_activations",
        "others_cores",
        "steal_pct",
        "busy",
        "predicted_from",
        "replayed_ms",
        "replay_error",
    ];
    const SIGNED: &'static [&'static str] = &["error", "replay_error"];
}

/// `pipeline_timeline.csv`: every op of the last timed iteration of each case, measured and
/// predicted (ms from the iteration's start).
pub struct TimelineTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    /// `measured` or `predicted`.
    pub lane: String,
    pub stage: u32,
    pub kind: crate::sim::OpKind,
    pub microbatch: u32,
    pub start_ms: f64,
    pub end_ms: f64,
    /// When the op let go of its stage (after its copy to the host, or its inline send).
    pub queue_end_ms: f64,
    /// Which of the stage's model chunks ran it (0 unless interleaved; empty in files from
    /// before it was added).
    pub chunk: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NoFigures {}

impl CsvTable for TimelineTable {
    const NAME: &'static str = "pipeline_timeline";
    const WITH_STATS: bool = false;
    type Params = TimelineRow;
    type Figures = NoFigures;
    const ADDED: &'static [&'static str] = &["chunk"];

    /// Stages and microbatches a pipeline run can have (a chart is sized by them), ops that end
    /// after they start.
    fn check(line: &Line<Self>) -> Result<(), (&'static str, String)> {
        let p = &line.params;
        let most_stages = crate::cluster::launch::MAX_WORLD;
        if p.stage >= most_stages {
            return Err(("stage", format!("stages are 0 to {}", most_stages - 1)));
        }
        if p.microbatch >= super::plan::MAX_MICROBATCHES {
            return Err((
                "microbatch",
                format!(
                    "microbatches are 0 to {}",
                    super::plan::MAX_MICROBATCHES - 1
                ),
            ));
        }
        if !(p.end_ms >= p.start_ms && p.queue_end_ms >= p.end_ms) {
            return Err(("end_ms", "an op ends before it starts".into()));
        }
        Ok(())
    }
}
