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

use crate::export::csv::{round, sig4};
use crate::export::{read_optional, read_table, CsvSink, CsvTable, Line, RunDir};
use crate::output::Progress;
use crate::sim::engine::ops_simulated;
use crate::sim::model::{MAX_MICROBATCHES, MAX_MS, MAX_STAGES};
use crate::sim::schedules::evaluate;
use crate::sim::{default_mem_limit, CommModel, Run, Scenario, Schedule, DEFAULT_SCHEDULES};
use crate::stats::Summary;
pub use scenario::{OneOrMany, SimConfig, SlowLink, SweepLink};

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
    pub mem_limit: usize,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SimFigures {
    pub iteration_ms: f64,
    pub speedup_vs_1f1b: f64,
    pub bubble_mean: f64,
    /// `;`-separated, stage 0 first.
    pub bubble_per_stage: String,
    pub peak_activations_per_stage: String,
    pub peak_activations_max: usize,
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
    pub mem_limit: usize,
}

/// `[sim]` in a suite config.
pub fn from_toml(v: toml::Value) -> Result<Box<dyn super::Bench>, String> {
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
}

impl Default for SimOutput {
    fn default() -> Self {
        SimOutput {
            timelines: vec!["adaptive".into()],
            width: 100,
            trace_out: None,
            bench_reps: 0,
        }
    }
}

/// The `sim` bench: the scenarios to simulate and what to show of them.
#[derive(Debug, Clone)]
pub struct SimBench {
    pub plan: SimPlan,
    pub output: SimOutput,
}

impl super::Bench for SimBench {
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
    ) -> Result<super::Notes> {
        let out = &self.output;
        let outcomes = run(&self.plan, dir, progress)?;
        let shown: Vec<_> = outcomes
            .iter()
            .filter(|o| out.timelines.iter().any(|t| t == &o.schedule))
            .collect();
        print_timelines(&shown, out.width, progress);
        if let Some(path) = &out.trace_out {
            write_trace(&outcomes, path)?;
            progress.println(format!("trace written to {}", path.display()));
        }
        if out.bench_reps == 0 {
            return Ok(super::Notes::new());
        }
        progress.println("simulator throughput (S = 64, N = 1024):".into());
        let rate = throughput_bench(dir, out.bench_reps, progress)?;
        super::note("sim_ops_per_s", rate)
    }
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
        let base = Scenario::new(
            cfg.stages.unwrap_or(4),
            cfg.microbatches.unwrap_or(12),
            &cfg.tf.as_ref().unwrap_or(&ten).values(),
            &cfg.tb.as_ref().unwrap_or(&ten).values(),
            &cfg.tw.as_ref().unwrap_or(&ten).values(),
            cfg.link_ms.unwrap_or(0.0),
            &slow,
            cfg.comm.unwrap_or(CommModel::Latency),
            cfg.d2h_ms.unwrap_or(0.5),
        )
        .map_err(|e| e.to_string())?;
        let names = cfg
            .schedules
            .clone()
            .unwrap_or_else(|| DEFAULT_SCHEDULES.split(',').map(String::from).collect());
        let schedules = names
            .iter()
            .map(|s| s.parse::<Schedule>())
            .collect::<Result<Vec<_>, _>>()?;
        if schedules.is_empty() {
            return Err("schedules is empty: name at least one".into());
        }
        let mem_limit = cfg.mem_limit.unwrap_or_else(|| default_mem_limit(&base));
        if mem_limit == 0 {
            return Err("mem_limit must be at least 1 microbatch".into());
        }
        let links = base.stages - 1;
        let mut cases = Vec::new();
        if let Some(text) = trace {
            for (iteration, extra) in crate::sim::trace::parse_link_trace(text, links)? {
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
        for sw in &cfg.sweep {
            if sw.link >= links {
                return Err(format!(
                    "sweep link {} does not exist: links are 0..={} (link i joins stages i and i+1)",
                    sw.link,
                    links as i64 - 1
                ));
            }
            for &d in &sw.delays_ms {
                if !d.is_finite() || !(0.0..=MAX_MS).contains(&d) {
                    return Err(format!(
                        "sweep delay {d}: delays must be finite, >= 0 and at most {MAX_MS} ms"
                    ));
                }
                let mut delays = base.delay_ms.clone();
                delays[sw.link] += d;
                cases.push(Case {
                    label: format!("link {} +{d} ms", sw.link),
                    iteration: 0,
                    scenario: base.with_delays(delays),
                });
            }
        }
        let plan = SimPlan {
            cases,
            schedules,
            mem_limit,
        };
        plan.check_cost()?;
        Ok(plan)
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
        self.cases
            .iter()
            .map(|c| 3 * (c.scenario.stages * c.scenario.microbatches) as u64 * per_case)
            .sum()
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
const ADAPTIVE_RUNS: u64 = 22;
/// The most rows `sim_timeline.csv` gets in one run; later cases get none (and it says so).
pub const MAX_TIMELINE_ROWS: usize = 500_000;

/// What one schedule did on one case.
pub struct Outcome {
    pub case: String,
    pub schedule: String,
    pub plan: String,
    pub run: Run,
}

/// `sim_timeline.csv`: every op of every simulated schedule, for Gantt charts (small
/// scenarios only).
pub struct TimelineTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct TimelineParams {
    pub iteration: u64,
    pub schedule: String,
    pub stage: usize,
    /// `F`, `B` or `W`.
    pub kind: String,
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
        if !["F", "B", "W"].contains(&p.kind.as_str()) {
            return Err(("kind", "an op kind is F, B or W".into()));
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

/// Simulates every schedule on every case, writing `sim.csv` row by row (and the ops of small
/// scenarios to `sim_timeline.csv`).
pub fn run(plan: &SimPlan, dir: &RunDir, progress: &Progress) -> Result<Vec<Outcome>> {
    let mut table = dir.table::<SimTable>()?;
    let mut timeline = dir.table::<TimelineTable>()?;
    // Rows sim_timeline.csv may still take; `None` once a case did not fit.
    let mut timeline_room = Some(MAX_TIMELINE_ROWS);
    let mut outcomes = Vec::new();
    let one_f_one_b: Schedule = "1f1b".parse().expect("valid");
    for case in &plan.cases {
        let sc = &case.scenario;
        progress.set_message(format!("sim {}", case.label));
        let reference = evaluate(&one_f_one_b, sc, plan.mem_limit)
            .map_err(|e| anyhow!("{}: 1f1b: {e}", case.label))?
            .1
            .iteration_ms;
        progress.println(format!(
            "\n{} (S={}, N={}, comm {}, slow links {})",
            case.label,
            sc.stages,
            sc.microbatches,
            sc.comm,
            slow_label(&sc.delay_ms)
        ));
        progress.println(format!(
            "  {:<14} {:>12} {:>9} {:>8} {:>10}  plan",
            "schedule", "iteration ms", "vs 1f1b", "bubble", "peak act"
        ));
        for schedule in &plan.schedules {
            let (plan_name, run) = evaluate(schedule, sc, plan.mem_limit)
                .map_err(|e| anyhow!("{}: {schedule}: {e}", case.label))?;
            let speedup = reference / run.iteration_ms;
            let bubbles = run.bubble_ratios();
            let peak_max = run.peak_in_flight.iter().copied().max().unwrap_or(0);
            let stats = Summary::of(&[run.iteration_ms * 1e3]).context("iteration time")?;
            let join = |v: Vec<String>| v.join(";");
            let params = SimParams {
                iteration: case.iteration,
                schedule: schedule.to_string(),
                plan: plan_name.clone(),
                stages: sc.stages,
                microbatches: sc.microbatches,
                comm: sc.comm.to_string(),
                link_ms: sc.link_ms,
                slow: slow_label(&sc.delay_ms),
                mem_limit: plan.mem_limit,
            };
            let figures = SimFigures {
                iteration_ms: sig4(run.iteration_ms),
                speedup_vs_1f1b: round(speedup, 4),
                bubble_mean: round(run.mean_bubble(), 4),
                bubble_per_stage: join(bubbles.iter().map(|b| format!("{b:.4}")).collect()),
                peak_activations_per_stage: join(
                    run.peak_in_flight.iter().map(|p| p.to_string()).collect(),
                ),
                peak_activations_max: peak_max,
                ops: run.ops.len(),
            };
            table.write(&Line::new(
                &dir.id,
                &case.label,
                params,
                Some(&stats),
                figures,
            ))?;
            let ops = run.ops.len();
            match timeline_room {
                _ if ops > TIMELINE_MAX_OPS => {}
                Some(left) if ops <= left => {
                    timeline_room = Some(left - ops);
                    write_timeline(&mut timeline, &dir.id, case, schedule, &run)?;
                }
                Some(_) => {
                    timeline_room = None;
                    progress.println(format!(
                        "note: sim_timeline.csv is full (cap {MAX_TIMELINE_ROWS} rows): later \
                         cases have no timeline rows"
                    ));
                }
                None => {}
            }
            progress.println(format!(
                "  {:<14} {:>12.2} {:>8.2}x {:>8.3} {:>10}  {}",
                schedule.to_string(),
                run.iteration_ms,
                speedup,
                run.mean_bubble(),
                peak_max,
                plan_name
            ));
            outcomes.push(Outcome {
                case: case.label.clone(),
                schedule: schedule.to_string(),
                plan: plan_name,
                run,
            });
        }
        progress.inc();
    }
    Ok(outcomes)
}

/// Writes every op of one schedule's run on one case to `sim_timeline.csv`.
fn write_timeline(
    timeline: &mut CsvSink<TimelineTable>,
    run_id: &str,
    case: &Case,
    schedule: &Schedule,
    run: &Run,
) -> Result<()> {
    for e in &run.ops {
        let params = TimelineParams {
            iteration: case.iteration,
            schedule: schedule.to_string(),
            stage: e.op.stage,
            kind: e.op.kind.to_string(),
            microbatch: e.op.mb,
        };
        let figures = TimelineFigures {
            start_ms: round(e.start, 4),
            end_ms: round(e.end, 4),
            queue_end_ms: round(e.queue_end, 4),
        };
        timeline.write(&Line::new(run_id, &case.label, params, None, figures))?;
    }
    Ok(())
}

/// Prints the ASCII timelines of the given outcomes.
pub fn print_timelines(outcomes: &[&Outcome], width: usize, progress: &Progress) {
    for o in outcomes {
        let stages = o.run.busy_ms.len();
        progress.println(format!(
            "\n{} — {} ({}): {:.1} ms",
            o.case, o.schedule, o.plan, o.run.iteration_ms
        ));
        progress.println(crate::sim::render::ascii_timeline(&o.run, stages, width));
    }
}

/// Writes Chrome trace / Perfetto JSON of the outcomes.
pub fn write_trace(outcomes: &[Outcome], path: &Path) -> Result<()> {
    let runs: Vec<(String, &Run)> = outcomes
        .iter()
        .map(|o| (format!("{} | {}", o.case, o.schedule), &o.run))
        .collect();
    let json = crate::sim::render::trace_events(&runs);
    std::fs::write(path, serde_json::to_vec(&json)?)
        .with_context(|| format!("cannot write trace {}", path.display()))
}

/// Simulator throughput: every schedule on S = 64, N = 1024, timed `reps` times.
pub fn throughput_bench(dir: &RunDir, reps: u32, progress: &Progress) -> Result<f64> {
    let mut table = dir.table::<SimBenchTable>()?;
    let sc = Scenario::new(
        64,
        1024,
        &[1.0],
        &[1.2],
        &[0.8],
        0.1,
        &[(10, 30.0)],
        CommModel::Latency,
        0.5,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let mem = default_mem_limit(&sc);
    let (mut all_ops, mut all_secs) = (0usize, 0.0f64);
    let schedules = [
        "gpipe",
        "1f1b",
        "zb-h1",
        "greedy",
        "static:1f1b",
        "static:zb-h1",
        "adaptive",
    ];
    for name in schedules {
        let schedule: Schedule = name.parse().map_err(|e: String| anyhow!(e))?;
        let mut samples = Vec::new();
        let mut ops = 0usize;
        for _ in 0..reps.max(1) {
            // Count every op simulated, including adaptive's candidate plans and the
            // delay-free run a static: replay is taken from.
            let before = ops_simulated();
            let t0 = Instant::now();
            evaluate(&schedule, &sc, mem).map_err(|e| anyhow!("{name}: {e}"))?;
            samples.push(t0.elapsed().as_secs_f64() * 1e6);
            ops = (ops_simulated() - before) as usize;
        }
        let s = Summary::of(&samples).context("no samples")?;
        let rate = ops as f64 / (s.p50 / 1e6);
        all_ops += ops;
        all_secs += s.p50 / 1e6;
        let params = SimBenchParams {
            schedule: name.to_string(),
            stages: 64,
            microbatches: 1024,
            ops,
        };
        let figures = SimBenchFigures {
            ops_per_s: rate.round(),
        };
        table.write(&Line::new(&dir.id, name, params, Some(&s), figures))?;
        progress.println(format!(
            "  {name:<14} {ops:>9} ops  p50 {:>9.1} ms  {:>6.2} M ops/s",
            s.p50 / 1e3,
            rate / 1e6
        ));
    }
    let overall = all_ops as f64 / all_secs;
    progress.println(format!("  overall {:.2} M simulated ops/s", overall / 1e6));
    Ok(overall)
}

/// Op durations taken from a measured run: one layer's forward is its largest GEMM plus its
/// largest layernorm (GPU timer, median); the input-gradient backward costs the same as the
/// forward and the weight-gradient backward one more GEMM (the usual 2x-forward backward).
/// Link costs come from the run's offloaded transfers where it has hol.csv (delay 0): the
/// D2H copy, map and copy out become the offload queue cost, the send and receive the link
/// latency. Without hol.csv, d2h.csv's end-to-end D2H latency of the largest size up to
/// 16 MiB (a typical activation) is the offload cost.
pub struct Calibration {
    pub tf_ms: f64,
    pub tb_ms: f64,
    pub tw_ms: f64,
    pub d2h_ms: Option<f64>,
    pub link_ms: Option<f64>,
    pub note: String,
}

/// (D2H cost, link latency) in ms from hol.csv's offload rows at delay 0.
fn link_from_hol(rows: &[Line<HolTable>]) -> Option<(f64, f64)> {
    let r = rows
        .iter()
        .find(|r| r.params.mode == Mode::Offload && r.params.delay_ms == "0")?;
    let f = &r.figures;
    let d2h = f.d2h_copy_us? + f.map_us? + f.copy_out_us?;
    let link = f.send_us? + f.receive_us?;
    Some((d2h / 1e3, link / 1e3))
}

/// The p50 of the row with the largest `weight` among those it returns one for.
fn largest_p50<T: CsvTable>(
    rows: &[Line<T>],
    weight: impl Fn(&Line<T>) -> Option<f64>,
) -> Option<f64> {
    rows.iter()
        .filter_map(|r| Some((weight(r)?, r.stats().p50_us)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p50)| p50)
}

pub fn calibrate_from(run_dir: &Path, layers_per_stage: f64) -> Result<Calibration> {
    let kernels = read_table::<KernelsTable>(&run_dir.join("kernels.csv"))?;
    let pick = |kernel: &'static str| {
        move |r: &Line<KernelsTable>| -> Option<f64> {
            let p = &r.params;
            if p.kernel != kernel {
                return None;
            }
            // Prefer GPU timestamps: host rows of the same size weigh less.
            let bonus = if r.figures.timer == "gpu" { 0.5 } else { 0.0 };
            let size: f64 = [p.size_m, p.size_n, p.size_k, p.rows, p.hidden]
                .iter()
                .flatten()
                .map(|&d| d as f64)
                .product();
            Some(size + bonus)
        }
    };
    let gemm_us = largest_p50(&kernels, pick("gemm"))
        .with_context(|| format!("{} has no gemm rows", run_dir.join("kernels.csv").display()))?;
    let ln_us = largest_p50(&kernels, pick("layernorm")).unwrap_or(0.0);
    let f = (gemm_us + ln_us) / 1e3 * layers_per_stage;
    let w = gemm_us / 1e3 * layers_per_stage;
    let from_hol = read_optional::<HolTable>(run_dir)?.and_then(|rows| link_from_hol(&rows));
    let d2h_ms = match from_hol {
        Some((d, _)) => Some(d),
        None => read_optional::<D2hTable>(run_dir)?.and_then(|rows| {
            largest_p50(&rows, |r| {
                let p = &r.params;
                (p.direction == "d2h" && p.part == "end_to_end" && p.bytes <= 16 << 20)
                    .then_some(p.bytes as f64)
            })
            .map(|us| us / 1e3)
        }),
    };
    let link_ms = from_hol.map(|(_, l)| l);
    Ok(Calibration {
        tf_ms: f,
        tb_ms: f,
        tw_ms: w,
        d2h_ms,
        link_ms,
        note: format!(
            "from {}: per layer gemm {:.3} ms + layernorm {:.3} ms; {layers_per_stage} layer(s) per stage: \
             tF = tB = {f:.3} ms, tW = {w:.3} ms{}{}",
            run_dir.display(),
            gemm_us / 1e3,
            ln_us / 1e3,
            d2h_ms.map(|d| format!(", D2H {d:.3} ms")).unwrap_or_default(),
            link_ms.map(|l| format!(", link {l:.3} ms (offloaded send + ack)")).unwrap_or_default()
        ),
    })
}
