//! The `sim` bench: simulate schedules over scenarios (a delay sweep or a trace of
//! iterations), write `sim.csv`, and show timelines. Optionally calibrated from a measured run.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};

use crate::bench::d2h::D2hTable;
use crate::bench::hol::{HolTable, Mode};
use crate::bench::kernels::KernelsTable;
pub mod place;
mod scenario;
pub mod tail;
pub mod validate;

use crate::output::Progress;
use crate::record::csv::{round, sig4};
use crate::record::{read_optional, read_table, CsvSink, CsvTable, Line, RunDir};
use crate::sim::engine::ops_simulated;
use crate::sim::model::{MAX_MICROBATCHES, MAX_MS, MAX_STAGES};
use crate::sim::schedules::evaluate;
use crate::sim::{default_mem_limit, CommModel, Run, Scenario, Schedule, DEFAULT_SCHEDULES};
use crate::stats::Summary;
pub use scenario::{MemLimit, Occupy, OneOrMany, SimConfig, SlowLink, SweepLink};

mod runner;
#[allow(unused_imports)]
pub use runner::*;

mod calibrate;
#[allow(unused_imports)]
pub use calibrate::*;

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

/// One scenario to simulate, with a label for the `case` column.
#[derive(Debug, Clone)]
pub struct Case {
    pub label: String,
    pub iteration: u64,
    pub scenario: Scenario,
}

#[derive(Debug, Clone)]
pub struct SimPlan {
    pub cases: Vec<Case>,
    pub schedules: Vec<Schedule>,
    /// Microbatches in flight adaptive keeps to (no cap when the limit is in bytes).
    pub mem_limit: usize,
    /// The limit as given, for the CSV: microbatches or a size.
    pub mem_limit_label: String,
    /// Each stage's parameters in bytes, when the model's shape was given.
    pub param_bytes: Option<f64>,
    /// Random stalls over the base case, when asked ([`tail`]).
    pub tail: Option<TailPlan>,
}

/// The stalls, the iterations and the seed of a tail run.
#[derive(Debug, Clone)]
pub struct TailPlan {
    pub stalls: Vec<tail::Stall>,
    pub iterations: u32,
    pub seed: u64,
}

/// Iterations a tail run draws by default.
pub const TAIL_ITERATIONS: u32 = 1000;

/// `[sim]` in a suite config.
pub fn from_toml(v: toml::Value) -> Result<Box<dyn crate::suite::Bench>, String> {
    let plan = SimPlan::from_config(&super::table::<SimConfig>(v)?)?;
    Ok(Box::new(SimBench {
        plan,
        output: SimOutput::default(),
    }))
}

/// What `sim` shows besides sim.csv.
#[derive(Debug, Clone)]
pub struct SimOutput {
    /// Schedules whose ASCII timelines are printed.
    pub timelines: Vec<String>,
    pub width: usize,
    pub trace_out: Option<std::path::PathBuf>,
    /// Repetitions of the simulator throughput benchmark (none when 0).
    pub bench_reps: u32,
    /// Write the first case's orders as PyTorch schedule CSVs to this path (one file per
    /// schedule when there are several).
    pub export_torch: Option<std::path::PathBuf>,
}

impl Default for SimOutput {
    fn default() -> Self {
        SimOutput {
            timelines: vec!["adaptive".into()],
            width: 100,
            trace_out: None,
            bench_reps: 0,
            export_torch: None,
        }
    }
}

/// The `sim` bench: the scenarios to simulate and what to show of them.
#[derive(Debug, Clone)]
pub struct SimBench {
    pub plan: SimPlan,
    pub output: SimOutput,
}

impl crate::suite::Bench for SimBench {
    fn name(&self) -> &'static str {
        BENCH
    }
    fn needs_gpu(&self) -> bool {
        false
    }
    fn points(&self) -> u64 {
        self.plan.cases.len() as u64
    }
    fn run(
        &self,
        _gpu: Option<&crate::gpu::Gpu>,
        dir: &RunDir,
        progress: &Progress,
    ) -> Result<crate::suite::Notes> {
        let out = &self.output;
        let outcomes = run(&self.plan, dir, progress)?;
        if let (Some(t), Some(case)) = (&self.plan.tail, self.plan.cases.first()) {
            let rows = tail::run(
                &case.scenario,
                &self.plan.schedules,
                self.plan.mem_limit,
                &t.stalls,
                t.iterations,
                t.seed,
            )
            .map_err(|e| anyhow!("tail: {e}"))?;
            tail::print(&rows, &t.stalls, t.iterations, t.seed);
            tail::write(&rows, t, dir)?;
        }
        let shown: Vec<_> = outcomes
            .iter()
            .filter(|o| out.timelines.iter().any(|t| t == &o.schedule))
            .collect();
        print_timelines(&shown, out.width, progress);
        if let Some(path) = &out.trace_out {
            write_trace(&outcomes, path)?;
            progress.println(format!("trace written to {}", path.display()));
        }
        if let Some(path) = &out.export_torch {
            for written in export_torch(&outcomes, path)? {
                progress.println(format!("PyTorch schedule written to {}", written.display()));
            }
        }
        if out.bench_reps == 0 {
            return Ok(crate::suite::Notes::new());
        }
        progress.println("simulator throughput (S = 64, N = 1024):".into());
        let rate = throughput_bench(dir, out.bench_reps, progress)?;
        super::note("sim_ops_per_s", rate)
    }
}

/// The model's shape and the memory limit laid on the base scenario: (microbatches in flight
/// adaptive keeps to, the limit as the CSV shows it).
fn memory_of(cfg: &SimConfig, base: &mut Scenario) -> Result<(usize, String), String> {
    if let Some(shape) = &cfg.model {
        if let Some(problem) = shape.problem() {
            return Err(problem);
        }
        base.activation = Some(shape.activation());
    }
    let limit = match &cfg.mem_limit {
        None => {
            let n = default_mem_limit(base);
            (n, n.to_string())
        }
        Some(MemLimit::Microbatches(0)) => {
            return Err("mem_limit must be at least 1 microbatch".into())
        }
        Some(MemLimit::Microbatches(n)) => (*n, n.to_string()),
        Some(MemLimit::Size(text)) => {
            let bytes = crate::units::parse_byte_count(text)? as f64;
            let Some(shape) = &cfg.model else {
                return Err(format!(
                    "mem_limit {text} is in bytes: give the model's shape ([model] or \
                     --hidden, --heads, --seq-len, --micro-batch) or a number of microbatches"
                ));
            };
            let left = bytes - shape.param_bytes();
            if left < shape.activation().held {
                return Err(format!(
                    "mem_limit {text}: the parameters ({}) leave room for less than one \
                     microbatch's activations ({}); raise it",
                    crate::units::human_bytes(shape.param_bytes() as u64),
                    crate::units::human_bytes(shape.activation().held as u64)
                ));
            }
            base.activation_limit = Some(left);
            (usize::MAX, crate::units::human_bytes(bytes as u64))
        }
    };
    Ok(limit)
}

/// A PyTorch schedule CSV as a schedule named by its file.
fn read_schedule_file(path: &Path) -> Result<Schedule, String> {
    let text = crate::record::read_input(path)
        .map_err(|e| format!("cannot read schedule file {}: {e}", path.display()))?;
    let schedule = crate::sim::torch_csv::parse(&text)
        .map_err(|e| format!("schedule file {}: {e}", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "schedule".into());
    Ok(Schedule::File {
        name,
        schedule: Box::new(schedule),
    })
}

fn slow_label(delays: &[f64]) -> String {
    let parts: Vec<String> = delays
        .iter()
        .enumerate()
        .filter(|(_, &d)| d > 0.0)
        .map(|(l, d)| format!("{l}:{d}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(";")
    }
}

impl SimPlan {
    /// Builds the base scenario from a config (defaults: S = 4, N = 12, 10 ms ops, no delay).
    pub fn from_config(cfg: &SimConfig) -> Result<SimPlan, String> {
        Self::build(cfg, None)
    }

    /// Like `from_config`, with per-iteration link delays from a trace.
    pub fn build(cfg: &SimConfig, trace: Option<&str>) -> Result<SimPlan, String> {
        let ten = OneOrMany::One(10.0);
        let slow: Vec<(usize, f64)> = cfg.slow.iter().map(|s| (s.link, s.delay_ms)).collect();
        let file = cfg
            .schedule_file
            .as_deref()
            .map(read_schedule_file)
            .transpose()?;
        let from_file = |f: fn(&crate::sim::torch_csv::TorchSchedule) -> usize| {
            file.as_ref().map(|s| match s {
                Schedule::File { schedule, .. } => f(schedule),
                _ => unreachable!("read_schedule_file gives a file schedule"),
            })
        };
        let base = Scenario::new(
            cfg.stages.or(from_file(|s| s.ranks)).unwrap_or(4),
            cfg.microbatches
                .or(from_file(|s| s.microbatches))
                .unwrap_or(12),
            &cfg.tf.as_ref().unwrap_or(&ten).values(),
            &cfg.tb.as_ref().unwrap_or(&ten).values(),
            &cfg.tw.as_ref().unwrap_or(&ten).values(),
            cfg.link_ms.unwrap_or(0.0),
            &slow,
            cfg.comm.unwrap_or(CommModel::Latency),
            cfg.d2h_ms.unwrap_or(0.5),
        )
        .and_then(|sc| {
            let occupy: Vec<(usize, f64)> = cfg.occupy.iter().map(|o| (o.link, o.ms)).collect();
            sc.with_occupancy(&occupy)
        })
        .and_then(|sc| match &cfg.tfb {
            Some(tfb) => sc.with_tfb(&tfb.values()),
            None => Ok(sc),
        })
        .map_err(|e| e.to_string())?;
        let names = match (&cfg.schedules, &file) {
            (Some(names), _) => names.clone(),
            (None, Some(_)) => Vec::new(),
            (None, None) => DEFAULT_SCHEDULES.split(',').map(String::from).collect(),
        };
        let mut schedules = names
            .iter()
            .map(|s| s.parse::<Schedule>())
            .collect::<Result<Vec<_>, _>>()?;
        schedules.extend(file);
        if schedules.is_empty() {
            return Err("schedules is empty: name at least one".into());
        }
        let mut base = base;
        let (mem_limit, mem_limit_label) = memory_of(cfg, &mut base)?;
        let links = base.stages - 1;
        let mut cases = Vec::new();
        if let Some(text) = trace {
            for (iteration, mut extra) in crate::sim::trace::parse_link_trace(text, links)? {
                // A wrap link's delay (`--slow`) stays on it.
                extra.resize(base.delay_ms.len(), 0.0);
                let delays: Vec<f64> = base
                    .delay_ms
                    .iter()
                    .zip(&extra)
                    .map(|(a, b)| a + b)
                    .collect();
                cases.push(Case {
                    label: format!("iteration {iteration}"),
                    iteration,
                    scenario: base.with_delays(delays),
                });
            }
        } else if cfg.sweep.is_empty() {
            cases.push(Case {
                label: format!("slow {}", slow_label(&base.delay_ms)),
                iteration: 0,
                scenario: base.clone(),
            });
        }
        let sweepable = crate::sim::links_of(base.stages);
        for sw in &cfg.sweep {
            if sw.link >= sweepable {
                return Err(format!(
                    "sweep link {} does not exist: links are 0..={} (link i joins stages i and \
                     i+1; from 3 stages on the last is the wrap link, last stage to first)",
                    sw.link,
                    sweepable as i64 - 1
                ));
            }
            for &d in &sw.delays_ms {
                if !d.is_finite() || !(0.0..=MAX_MS).contains(&d) {
                    return Err(format!(
                        "sweep delay {d}: delays must be finite, >= 0 and at most {MAX_MS} ms"
                    ));
                }
                let mut delays = base.delay_ms.clone();
                delays.resize(delays.len().max(sw.link + 1), 0.0);
                delays[sw.link] += d;
                cases.push(Case {
                    label: format!("link {} +{d} ms", sw.link),
                    iteration: 0,
                    scenario: base.with_delays(delays),
                });
            }
        }
        let tail = Self::tail_plan(cfg, links)?;
        let plan = SimPlan {
            cases,
            schedules,
            mem_limit,
            mem_limit_label,
            param_bytes: cfg.model.map(|m| m.param_bytes()),
            tail,
        };
        plan.check_cost()?;
        Ok(plan)
    }

    /// The tail run a config asks for (stalls given), checked: links that exist, at most
    /// [`tail::MAX_ITERATIONS`].
    fn tail_plan(cfg: &SimConfig, links: usize) -> Result<Option<TailPlan>, String> {
        if cfg.stall.is_empty() {
            if cfg.iterations.is_some() || cfg.seed.is_some() {
                return Err(
                    "--iterations and --seed draw stalls: give --stall LINK:PROB:MS (or \
                            --from a links run that stalled)"
                        .into(),
                );
            }
            return Ok(None);
        }
        if let Some(s) = cfg.stall.iter().find(|s| s.link >= links) {
            return Err(format!(
                "stall link {} does not exist: links are 0..={} (link i joins stages i and i+1)",
                s.link,
                links as i64 - 1
            ));
        }
        let iterations = cfg.iterations.unwrap_or(TAIL_ITERATIONS);
        if iterations == 0 || iterations > tail::MAX_ITERATIONS {
            return Err(format!(
                "--iterations {iterations}: give 1 to {}",
                tail::MAX_ITERATIONS
            ));
        }
        Ok(Some(TailPlan {
            stalls: cfg.stall.clone(),
            iterations,
            seed: cfg.seed.unwrap_or(0),
        }))
    }

    /// Ops the run will simulate, counting the adaptive planner's candidate runs and the
    /// delay-free run each static replay is taken from.
    pub fn estimated_ops(&self) -> u64 {
        let per_case: u64 = self
            .schedules
            .iter()
            .map(|s| match s {
                Schedule::Adaptive => ADAPTIVE_RUNS,
                Schedule::Static(_) => 2,
                _ => 1,
            })
            .sum();
        let cases: u64 = self
            .cases
            .iter()
            .map(|c| 3 * (c.scenario.stages * c.scenario.microbatches) as u64 * per_case)
            .sum();
        // A tail run: each schedule planned once, then run every iteration.
        let tail = match (&self.tail, self.cases.first()) {
            (Some(t), Some(c)) => {
                let ops = 3 * (c.scenario.stages * c.scenario.microbatches) as u64;
                ops * (per_case + self.schedules.len() as u64 * t.iterations as u64)
            }
            _ => 0,
        };
        cases + tail
    }

    /// Refuses, before anything runs, a plan over the case or op caps.
    fn check_cost(&self) -> Result<(), String> {
        if self.cases.len() > MAX_CASES {
            return Err(format!(
                "{} cases (trace iterations and sweep delays) is over the cap of {MAX_CASES}: \
                 split the trace or the sweep",
                self.cases.len()
            ));
        }
        let ops = self.estimated_ops();
        if ops > MAX_SIM_OPS {
            return Err(format!(
                "this run would simulate about {ops} ops, over the cap of {MAX_SIM_OPS} \
                 (about a minute of simulation): use fewer stages, microbatches, cases or schedules"
            ));
        }
        Ok(())
    }
}

/// The most cases (trace iterations plus sweep delays) one run simulates.
pub const MAX_CASES: usize = 10_000;
/// The most ops one run simulates (estimated before it starts, see `estimated_ops`).
pub const MAX_SIM_OPS: u64 = 250_000_000;
/// Runs the adaptive planner makes per case: 18 candidate plans, the two delay-free runs its
/// static candidates replay, and the winner once more.
pub(crate) const ADAPTIVE_RUNS: u64 = 22;
/// The most rows `sim_timeline.csv` gets in one run; later cases get none (and it says so).
pub const MAX_TIMELINE_ROWS: usize = 500_000;

/// What one schedule did on one case.
pub struct Outcome {
    pub case: String,
    pub schedule: String,
    pub plan: String,
    pub run: Run,
    /// The model chunks each rank held (for exporting the order).
    pub layout: crate::sim::Layout,
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

/// Scenarios with more ops than this per schedule get no `sim_timeline.csv` rows.
const TIMELINE_MAX_OPS: usize = 12_288;
