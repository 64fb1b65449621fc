//! Running a planned sweep: every case simulated, its rows, timelines, trace and throughput.

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};

use super::plan::{slow_label, Case, Outcome, SimPlan, MAX_TIMELINE_ROWS, TIMELINE_MAX_OPS};
use super::tables::{
    SimBenchFigures, SimBenchParams, SimBenchTable, SimFigures, SimParams, SimTable,
    TimelineFigures, TimelineParams, TimelineTable,
};
use crate::output::Progress;
use crate::record::csv::{round, sig4};
use crate::record::{CsvSink, Line, RunDir};
use crate::sim::engine::ops_simulated;
use crate::sim::schedules::evaluate;
use crate::sim::{default_mem_limit, CommModel, Run, Scenario, Schedule};
use crate::stats::Summary;

const GIB: f64 = (1u64 << 30) as f64;

/// One sim.csv row's figures.
fn figures_of(
    run: &Run,
    sc: &Scenario,
    param_bytes: Option<f64>,
    speedup: f64,
    bubble_rate: f64,
) -> SimFigures {
    let join = |v: Vec<String>| v.join(";");
    let bytes = &run.peak_activation_bytes;
    SimFigures {
        iteration_ms: sig4(run.iteration_ms),
        speedup_vs_1f1b: round(speedup, 4),
        bubble_mean: round(run.mean_bubble(), 4),
        bubble_rate: round(bubble_rate, 4),
        bubble_per_stage: join(
            run.bubble_ratios()
                .iter()
                .map(|b| format!("{b:.4}"))
                .collect(),
        ),
        peak_activations_per_stage: join(
            run.peak_in_flight.iter().map(|p| p.to_string()).collect(),
        ),
        peak_activations_max: run.peak_in_flight.iter().copied().max().unwrap_or(0),
        peak_activation_bytes_per_stage: match sc.activation {
            Some(_) => join(bytes.iter().map(|b| format!("{b:.0}")).collect()),
            None => String::new(),
        },
        peak_activation_bytes_max: sc
            .activation
            .map(|_| bytes.iter().copied().fold(0.0, f64::max).round()),
        param_bytes_per_stage: param_bytes.map(f64::round),
        ops: run.ops.len(),
    }
}

/// The width of the schedule column: the longest name, at least 14.
fn name_width(schedules: &[Schedule]) -> usize {
    schedules
        .iter()
        .map(|s| s.to_string().len())
        .max()
        .unwrap_or(0)
        .max(14)
}

/// The statistics of a sim.csv row: the tail's iterations for the first case (`k` 0) when a
/// tail run drew them for `schedule`, else the one simulated iteration (µs).
fn iteration_stats(
    tails: &[super::tail::TailRow],
    k: usize,
    schedule: &Schedule,
    iteration_ms: f64,
) -> Result<Summary> {
    let name = schedule.to_string();
    let spread = tails
        .iter()
        .find(|t| k == 0 && t.schedule == name && !t.iterations_ms.is_empty());
    let iterations_us: Vec<f64> = match spread {
        Some(t) => t.iterations_ms.iter().map(|ms| ms * 1e3).collect(),
        None => vec![iteration_ms * 1e3],
    };
    Summary::of(&iterations_us).context("iteration time")
}

/// Simulates every schedule on every case, writing `sim.csv` row by row (and the ops of small
/// scenarios to `sim_timeline.csv`). With a tail run (`tails`, of the first case), that case's
/// rows carry the spread of its iterations in their statistics; every other row has one
/// iteration.
pub fn run(
    plan: &SimPlan,
    dir: &RunDir,
    progress: &Progress,
    tails: &[super::tail::TailRow],
) -> Result<Vec<Outcome>> {
    let mut table = dir.table::<SimTable>()?;
    let mut timeline = dir.table::<TimelineTable>()?;
    // Rows sim_timeline.csv may still take; `None` once a case did not fit.
    let mut timeline_room = Some(MAX_TIMELINE_ROWS);
    let mut outcomes = Vec::new();
    let one_f_one_b: Schedule = "1f1b".parse().expect("valid");
    let name_width = name_width(&plan.schedules);
    for (k, case) in plan.cases.iter().enumerate() {
        let sc = &case.scenario;
        progress.set_message(format!("sim {}", case.label));
        let reference = evaluate(&one_f_one_b, sc, plan.mem_limit)
            .map_err(|e| anyhow!("{}: 1f1b: {e}", case.label))?
            .1
            .iteration_ms;
        print_case_header(progress, case, name_width);
        for schedule in &plan.schedules {
            let (plan_name, run) = evaluate(schedule, sc, plan.mem_limit)
                .map_err(|e| anyhow!("{}: {schedule}: {e}", case.label))?;
            let speedup = reference / run.iteration_ms;
            let figures_rate = crate::sim::bubble_rate(schedule, sc, &run);
            let stats = iteration_stats(tails, k, schedule, run.iteration_ms)?;
            let params = SimParams {
                iteration: case.iteration,
                schedule: schedule.to_string(),
                plan: plan_name.clone(),
                stages: sc.stages,
                microbatches: sc.microbatches,
                comm: sc.comm.to_string(),
                link_ms: sc.link_ms,
                slow: slow_label(&sc.delay_ms),
                mem_limit: plan.mem_limit_label.clone(),
            };
            let figures = figures_of(&run, sc, plan.param_bytes, speedup, figures_rate);
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
            let shown = (speedup, figures_rate, plan_name.as_str());
            print_schedule_row(progress, schedule, sc, &run, shown, name_width);
            outcomes.push(Outcome {
                case: case.label.clone(),
                schedule: schedule.to_string(),
                layout: schedule.layout(sc.stages),
                plan: plan_name,
                run,
            });
        }
        progress.inc();
    }
    Ok(outcomes)
}

/// The console's header of one case: its scenario, then the columns of its rows.
fn print_case_header(progress: &Progress, case: &Case, name_width: usize) {
    let sc = &case.scenario;
    progress.println(format!(
        "\n{} (S={}, N={}, comm {}, slow links {})",
        case.label,
        sc.stages,
        sc.microbatches,
        sc.comm,
        slow_label(&sc.delay_ms)
    ));
    progress.println(format!(
        "  {:<w$} {:>12} {:>9} {:>11} {:>10}  plan",
        "schedule",
        "iteration ms",
        "vs 1f1b",
        "bubble rate",
        "peak act",
        w = name_width
    ));
}

/// The console's row of one schedule (`shown`: its speedup over 1F1B, its bubble rate and its
/// plan), and a warning when a stage holds more activations than `--mem-limit` allows.
fn print_schedule_row(
    progress: &Progress,
    schedule: &Schedule,
    sc: &Scenario,
    run: &Run,
    shown: (f64, f64, &str),
    name_width: usize,
) {
    let (speedup, bubble_rate, plan_name) = shown;
    let peak_max = run.peak_in_flight.iter().copied().max().unwrap_or(0);
    progress.println(format!(
        "  {:<w$} {:>12.2} {:>8.2}x {:>11.4} {:>10}  {}",
        schedule.to_string(),
        run.iteration_ms,
        speedup,
        bubble_rate,
        peak_max,
        plan_name,
        w = name_width
    ));
    let peak_bytes = run
        .peak_activation_bytes
        .iter()
        .copied()
        .fold(0.0, f64::max);
    if let Some(limit) = sc.activation_limit.filter(|&l| peak_bytes > l) {
        progress.println(format!(
            "  {:<w$} holds {:.3} GiB of activations on a stage: over --mem-limit's {:.3} GiB",
            "",
            peak_bytes / GIB,
            limit / GIB,
            w = name_width
        ));
    }
}

/// Writes every op of one schedule's run on one case to `sim_timeline.csv`.
pub(super) fn write_timeline(
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
            kind: e.op.kind,
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

/// Writes the first case's orders as PyTorch schedule CSVs: `path` itself for one schedule,
/// else `path` with `-<schedule>` before its extension for each. Returns the files written.
pub fn export_torch(outcomes: &[Outcome], path: &Path) -> Result<Vec<std::path::PathBuf>> {
    let Some(first) = outcomes.first() else {
        return Ok(Vec::new());
    };
    let case: Vec<&Outcome> = outcomes.iter().filter(|o| o.case == first.case).collect();
    let mut written = Vec::new();
    for o in &case {
        let target = match case.len() {
            1 => path.to_path_buf(),
            _ => {
                let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                let tag = crate::record::run_dir::file_safe(&o.schedule);
                let name = match path.extension() {
                    Some(ext) => format!("{stem}-{tag}.{}", ext.to_string_lossy()),
                    None => format!("{stem}-{tag}.csv"),
                };
                path.with_file_name(name)
            }
        };
        let stages = o.run.busy_ms.len();
        let split = o.run.ops.iter().any(|e| e.op.kind == crate::sim::OpKind::W);
        let together = crate::sim::torch_csv::together_of(&o.run, stages);
        let text = crate::sim::torch_csv::format(&o.run.orders(stages), &together, split, o.layout);
        std::fs::write(&target, text)
            .with_context(|| format!("cannot write {}", target.display()))?;
        written.push(target);
    }
    Ok(written)
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
    let sc = Scenario::builder(64, 1024)
        .times(&[1.0], &[1.2], &[0.8])
        .link_ms(0.1)
        .slow(&[(10, 30.0)])
        .comm(CommModel::Latency, 0.5)
        .build()
        .map_err(|e| anyhow!("{e}"))?;
    let mem = default_mem_limit(&sc);
    let (mut all_ops, mut all_secs) = (0usize, 0.0f64);
    let schedules = [
        "gpipe",
        "1f1b",
        "zb-h1",
        "zb-h2",
        "zb-fill",
        "interleaved:2",
        "greedy",
        "static:1f1b",
        "static:zb-fill",
        "adaptive",
    ];
    for name in schedules {
        let schedule: Schedule = name.parse()?;
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
