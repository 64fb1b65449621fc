//! The `sim` bench: simulate schedules over scenarios (a delay sweep or a trace of
//! iterations), write `sim.csv`, and show timelines. Optionally calibrated from a measured run.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};

use crate::config::{OneOrMany, SimConfig};
use crate::export::csv::{num, Schema};
use crate::export::{Record, RunDir};
use crate::output::Progress;
use crate::sim::engine::ops_simulated;
use crate::sim::schedules::evaluate;
use crate::sim::{default_mem_limit, CommModel, Run, Scenario, Schedule, DEFAULT_SCHEDULES};
use crate::stats::Summary;

pub const BENCH: &str = "sim";

pub const SCHEMA: Schema = Schema {
    params: &[
        "iteration",
        "schedule",
        "plan",
        "stages",
        "microbatches",
        "comm",
        "link_ms",
        "slow",
        "mem_limit",
    ],
    with_stats: true,
    tail: &[
        "iteration_ms",
        "speedup_vs_1f1b",
        "bubble_mean",
        "bubble_per_stage",
        "peak_activations_per_stage",
        "peak_activations_max",
        "ops",
    ],
};

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
                if !d.is_finite() || d < 0.0 {
                    return Err(format!("sweep delay {d}: delays must be finite and >= 0"));
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
        Ok(SimPlan {
            cases,
            schedules,
            mem_limit,
        })
    }
}

/// What one schedule did on one case.
pub struct Outcome {
    pub case: String,
    pub schedule: String,
    pub plan: String,
    pub run: Run,
}

/// Every op of every simulated schedule, for Gantt charts (small scenarios only).
pub const TIMELINE_SCHEMA: Schema = Schema {
    params: &["iteration", "schedule", "stage", "kind", "microbatch"],
    with_stats: false,
    tail: &["start_ms", "end_ms", "queue_end_ms"],
};

/// Scenarios with more ops than this per schedule get no `sim_timeline.csv` rows.
const TIMELINE_MAX_OPS: usize = 12_288;

/// Simulates every schedule on every case, writing `sim.csv` row by row (and the ops of small
/// scenarios to `sim_timeline.csv`).
pub fn run(plan: &SimPlan, dir: &RunDir, progress: &Progress) -> Result<Vec<Outcome>> {
    let mut table = dir.table(BENCH, &SCHEMA)?;
    let mut timeline = dir.table("sim_timeline", &TIMELINE_SCHEMA)?;
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
            table.write(
                Record::new(&dir.id, BENCH, &case.label)
                    .push(case.iteration)
                    .push(schedule)
                    .push(&plan_name)
                    .push(sc.stages)
                    .push(sc.microbatches)
                    .push(sc.comm)
                    .push(sc.link_ms)
                    .push(slow_label(&sc.delay_ms))
                    .push(plan.mem_limit)
                    .stats(&stats)
                    .push(num(run.iteration_ms))
                    .push(format!("{speedup:.4}"))
                    .push(format!("{:.4}", run.mean_bubble()))
                    .push(join(bubbles.iter().map(|b| format!("{b:.4}")).collect()))
                    .push(join(
                        run.peak_in_flight.iter().map(|p| p.to_string()).collect(),
                    ))
                    .push(peak_max)
                    .push(run.ops.len()),
            )?;
            if run.ops.len() <= TIMELINE_MAX_OPS {
                for e in &run.ops {
                    timeline.write(
                        Record::new(&dir.id, "sim_timeline", &case.label)
                            .push(case.iteration)
                            .push(schedule)
                            .push(e.op.stage)
                            .push(e.op.kind)
                            .push(e.op.mb)
                            .push(format!("{:.4}", e.start))
                            .push(format!("{:.4}", e.end))
                            .push(format!("{:.4}", e.queue_end)),
                    )?;
                }
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
    let schema = Schema {
        params: &["schedule", "stages", "microbatches", "ops"],
        with_stats: true,
        tail: &["ops_per_s"],
    };
    let mut table = dir.table("sim_bench", &schema)?;
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
        table.write(
            Record::new(&dir.id, "sim_bench", name)
                .push(name)
                .push(64)
                .push(1024)
                .push(ops)
                .stats(&s)
                .push(format!("{rate:.0}")),
        )?;
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
fn link_from_hol(path: &Path) -> Result<Option<(f64, f64)>> {
    let num = |r: &Row, c: &str| -> Result<f64> {
        field(r, c)
            .parse()
            .with_context(|| format!("{}: {c} missing or not a number", path.display()))
    };
    for r in read_rows(path)? {
        if field(&r, "mode") == "offload" && field(&r, "delay_ms") == "0" {
            let d2h = num(&r, "d2h_copy_us")? + num(&r, "map_us")? + num(&r, "copy_out_us")?;
            let link = num(&r, "send_us")? + num(&r, "receive_us")?;
            return Ok(Some((d2h / 1e3, link / 1e3)));
        }
    }
    Ok(None)
}

type Row = std::collections::HashMap<String, String>;

/// Every row of a CSV as column -> value.
fn read_rows(path: &Path) -> Result<Vec<Row>> {
    let mut rd =
        csv::Reader::from_path(path).with_context(|| format!("cannot read {}", path.display()))?;
    let headers = rd.headers()?.clone();
    rd.records()
        .map(|rec| {
            let rec = rec.with_context(|| format!("malformed row in {}", path.display()))?;
            Ok(headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect())
        })
        .collect()
}

fn field<'a>(row: &'a Row, name: &str) -> &'a str {
    row.get(name).map_or("", String::as_str)
}

/// The p50 of the row with the largest `weight` among those it returns one for.
fn largest_p50(path: &Path, weight: impl Fn(&Row) -> Option<f64>) -> Result<Option<f64>> {
    let mut best: Option<(f64, f64)> = None;
    for row in read_rows(path)? {
        if let Some(w) = weight(&row) {
            let p50: f64 = field(&row, "p50_us")
                .parse()
                .with_context(|| format!("{}: p50_us missing or not a number", path.display()))?;
            if best.is_none_or(|(bw, _)| w > bw) {
                best = Some((w, p50));
            }
        }
    }
    Ok(best.map(|(_, p)| p))
}

pub fn calibrate_from(run_dir: &Path, layers_per_stage: f64) -> Result<Calibration> {
    let kernels = run_dir.join("kernels.csv");
    let pick = |kernel: &'static str| {
        move |r: &Row| -> Option<f64> {
            if field(r, "kernel") != kernel {
                return None;
            }
            // Prefer GPU timestamps: host rows of the same size weigh less.
            let bonus = if field(r, "timer") == "gpu" { 0.5 } else { 0.0 };
            let size: f64 = ["size_m", "size_n", "size_k", "rows", "hidden"]
                .iter()
                .filter_map(|d| field(r, d).parse::<f64>().ok())
                .product();
            Some(size + bonus)
        }
    };
    let gemm_us = largest_p50(&kernels, pick("gemm"))?
        .with_context(|| format!("{} has no gemm rows", kernels.display()))?;
    let ln_us = largest_p50(&kernels, pick("layernorm"))?.unwrap_or(0.0);
    let f = (gemm_us + ln_us) / 1e3 * layers_per_stage;
    let w = gemm_us / 1e3 * layers_per_stage;
    let hol = run_dir.join("hol.csv");
    let from_hol = if hol.exists() {
        link_from_hol(&hol)?
    } else {
        None
    };
    let d2h = run_dir.join("d2h.csv");
    let d2h_ms = match from_hol {
        Some((d, _)) => Some(d),
        None if d2h.exists() => largest_p50(&d2h, |r| {
            let bytes = field(r, "bytes").parse::<f64>().unwrap_or(0.0);
            (field(r, "direction") == "d2h"
                && field(r, "part") == "end_to_end"
                && bytes <= 16.0 * 1048576.0)
                .then_some(bytes)
        })?
        .map(|us| us / 1e3),
        None => None,
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
