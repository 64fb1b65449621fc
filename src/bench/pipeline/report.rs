//! What a case leaves: its row of pipeline.csv, its measured and predicted lanes of
//! pipeline_timeline.csv, its traces and its console line; and what the run leaves: the
//! Perfetto trace and a line per busy stage.

use anyhow::{anyhow, bail, Result};

use super::exec::StageTimes;
use super::plan::{Case, PipelinePlan, GRAD_TOLERANCE};
use super::predict::{
    measured_scenario, peak_in_flight, predicting_scenario, Basis, Measured, PlannedCase,
};
use super::table::{PipelineFigures, PipelineParams, PipelineTable, TimelineRow, TimelineTable};
use std::collections::BTreeMap;

use crate::cluster::world::World;
use crate::noise::load::BusyWarning;
use crate::noise::rank::{others_by_rank, worst, Busiest, Busy, RankLoad};
use crate::record::csv::{round, CsvSink, Line};
use crate::record::run_dir::RunDir;
use crate::sim::{simulate, Policy, Run, Scenario};
use crate::stats::Summary;

/// Where the cases' results go.
pub(super) struct Outputs {
    pub(super) run_id: String,
    pub(super) table: CsvSink<PipelineTable>,
    pub(super) timeline: CsvSink<TimelineTable>,
    /// Each case's measured and predicted runs, for the Perfetto trace.
    pub(super) traces: Vec<(String, Run)>,
    /// The cases whose gradients did not verify.
    pub(super) unverified: Vec<String>,
    /// Each stage's busiest case, the busy ones only.
    pub(super) busiest: Busiest,
    /// Every case's row, for a bench that leads the pipeline (the fleet gate).
    pub(super) rows: Vec<CaseRow>,
    /// pipeline_trace.csv's rows (the what-if's schema), and the cases it leaves out.
    pub(super) trace_csv: String,
    pub(super) trace_skipped: Vec<String>,
}

/// One case's row of pipeline.csv.
pub type CaseRow = (PipelineParams, PipelineFigures);

/// Every case's row, timeline and trace, and a line per busy stage (kept in `busy` for
/// meta.json); fails if a case's gradients did not verify.
pub(super) fn write_all(
    dir: &RunDir,
    world: &World,
    (plan, planned, measured): (&PipelinePlan, &[PlannedCase], Vec<Measured>),
    quiet: bool,
    busy: &mut Vec<BusyWarning>,
) -> Result<Vec<CaseRow>> {
    let mut out = Outputs {
        run_id: dir.id.clone(),
        table: dir.table()?,
        timeline: dir.table()?,
        traces: Vec::new(),
        unverified: Vec::new(),
        busiest: Default::default(),
        rows: Vec::new(),
        trace_csv: super::trace_csv::HEADER.to_string(),
        trace_skipped: Vec::new(),
    };
    // Each case's typical op and link times over its timed iterations: a delayed case is
    // predicted from its healthy case's.
    let means: Vec<Scenario> = plan
        .cases
        .iter()
        .zip(planned)
        .zip(&measured)
        .map(|((case, pc), m)| {
            let n = pc.orders.len();
            measured_scenario(n, &plan.shape, case.comm, &m.timed, (!pc.split, pc.layout))
        })
        .collect::<Result<_>>()?;
    for (i, ((case, pc), m)) in plan.cases.iter().zip(planned).zip(measured).enumerate() {
        let healthy = plan
            .cases
            .iter()
            .position(|h| calm(h) && h.schedule == case.schedule && h.comm == case.comm)
            .map(|h| (&means[h], !planned[h].split));
        let slow = case.slow.filter(|_| !calm(case));
        let (sc, basis) = if calm(case) {
            predicting_scenario(pc, Some((&means[i], !pc.split)), None)
        } else {
            predicting_scenario(pc, healthy, slow)
        };
        write_case(&mut out, (case, pc, m), (&sc, basis), plan, quiet)?;
    }
    for (r, b) in &out.busiest.0 {
        let line = b.line(
            &world.describe(*r),
            "its stage was timed",
            "the case's figures there are the machine's, not the pipeline's",
        );
        if quiet {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
        busy.push((format!("pipeline r{r}"), line));
    }
    std::fs::write(dir.path.join("pipeline_trace.csv"), &out.trace_csv)?;
    if !out.trace_skipped.is_empty() && !quiet {
        println!(
            "pipeline_trace.csv leaves out {}",
            out.trace_skipped.join("; ")
        );
    }
    let refs: Vec<(String, &Run)> = out.traces.iter().map(|(n, r)| (n.clone(), r)).collect();
    let trace = crate::sim::render::trace_events(&refs);
    std::fs::write(
        dir.path.join("pipeline_trace.json"),
        serde_json::to_vec(&trace)?,
    )?;
    if !out.unverified.is_empty() {
        bail!(
            "{}: the weight gradients are off beyond {GRAD_TOLERANCE:.0e} against the f64 reference (grad_rel_err in pipeline.csv)",
            out.unverified.join(", ")
        );
    }
    Ok(out.rows)
}

/// Each stage's load over a case's timed iterations (merged), as rows carry it.
fn case_load(timed: &[Vec<StageTimes>]) -> BTreeMap<u32, Busy> {
    let mut by_stage: BTreeMap<u32, RankLoad> = BTreeMap::new();
    for l in timed.iter().flatten().filter_map(|t| t.load.as_ref()) {
        let merged = match by_stage.get(&l.rank) {
            Some(m) => m.merge(l),
            None => l.clone(),
        };
        by_stage.insert(l.rank, merged);
    }
    others_by_rank(&by_stage.into_values().collect::<Vec<_>>())
}

/// A case without an injected delay (none, or 0 ms in a sweep).
fn calm(c: &Case) -> bool {
    c.slow.is_none_or(|(_, ms)| ms == 0.0)
}

/// Predicts `case` on `predicting` (from its healthy case and the delay, see
/// [`predicting_scenario`]), replays it on what it measured itself, and writes its row, its
/// timeline and its console line.
pub(super) fn write_case(
    out: &mut Outputs,
    (case, pc, m): (&Case, &PlannedCase, Measured),
    (predicting, basis): (&Scenario, Basis),
    plan: &PipelinePlan,
    quiet: bool,
) -> Result<()> {
    let n = pc.orders.len();
    let schedule = &case.schedule;
    let verified = m.grad_err <= GRAD_TOLERANCE;
    let policy = Policy::Fixed {
        orders: pc.orders.clone(),
        split: pc.split,
        layout: pc.layout,
        together: Vec::new(),
        comms: None,
    };
    let predicted_ms = simulate(predicting, &policy)
        .map_err(|e| anyhow!("predicting {schedule}: {e}"))?
        .iteration_ms;
    let (replayed_ms, predicted) = replay(case, pc, &m, plan, &policy)?;
    let s = Summary::of(&m.iteration_us).ok_or_else(|| anyhow!("no timed iterations"))?;
    let measured_ms = s.p50 / 1e3;
    let (_, bubbles, run) = m.last.expect("at least one timed iteration");
    let peak = peak_in_flight(&pc.orders);
    let loads = case_load(&m.timed);
    let load = worst(&loads);
    out.busiest.note(&loads);
    let params = case_params(case, plan, n);
    let figures = PipelineFigures {
        iteration_ms: round(measured_ms, 3),
        predicted_ms: round(predicted_ms, 3),
        error: round((measured_ms - predicted_ms) / measured_ms, 4),
        predicted_from: Some(basis.as_str().into()),
        replayed_ms: Some(round(replayed_ms, 3)),
        replay_error: Some(round((measured_ms - replayed_ms) / measured_ms, 4)),
        bubble: round(bubbles.iter().sum::<f64>() / n as f64, 4),
        peak_activations: peak.iter().copied().max().unwrap_or(0) as u32,
        grad_rel_err: crate::record::csv::sig(m.grad_err, 3),
        verified,
        plan: pc.name.clone(),
        op_clock: Some(op_clock(&m.timed).into()),
        stage_bubbles: Some(join(bubbles.iter().map(|b| round(*b, 4)))),
        stage_peak_activations: Some(join(peak.iter())),
        others_cores: load.others_cores,
        steal_pct: load.steal_pct,
        busy: Some(load.busy),
    };
    let case_name = case_file_name(case);
    match super::trace_csv::rows(&case_name, pc.layout, &m.timed) {
        Ok(rows) => out.trace_csv.push_str(&rows),
        Err(why) => out.trace_skipped.push(format!("{case_name}: {why}")),
    }
    if !quiet {
        println!(
            "{case_name:<28} measured {:>9.2} ms  predicted {:>9.2} ms (from {}) error {:>+6.1}%  replayed error {:>+6.1}%  bubble {:.3}  grad err {:.1e}  ops timed by {}{}",
            figures.iteration_ms,
            figures.predicted_ms,
            basis.as_str(),
            figures.error * 100.0,
            (measured_ms - replayed_ms) / measured_ms * 100.0,
            figures.bubble,
            m.grad_err,
            op_clock(&m.timed),
            if verified { "" } else { "  NOT VERIFIED" }
        );
    }
    out.rows.push((params.clone(), figures.clone()));
    out.table.write(&Line::new(
        &out.run_id,
        case_name.clone(),
        params,
        Some(&s),
        figures,
    ))?;
    write_lanes(
        out,
        &case_name,
        [("measured", &run), ("predicted", &predicted)],
    )?;
    out.traces.push((format!("{case_name} measured"), run));
    out.traces
        .push((format!("{case_name} predicted"), predicted));
    if !verified {
        out.unverified.push(case_name);
    }
    Ok(())
}

/// A case's parameter columns of pipeline.csv; `stages` is the number of ranks it ran on.
fn case_params(case: &Case, plan: &PipelinePlan, stages: usize) -> PipelineParams {
    PipelineParams {
        schedule: case.schedule.to_string(),
        comm: case.comm.to_string(),
        transport: plan.transport.to_string(),
        slow: case.slow.map_or("none".into(), |(l, d)| format!("{l}:{d}")),
        stages: stages as u32,
        microbatches: plan.shape.microbatches,
        layers: plan.shape.layers,
        tokens: plan.shape.tokens,
        hidden: plan.shape.hidden,
    }
}

/// The case's name in the CSVs, traces and console: file-name safe, so no ':'
/// (static:1f1b, LINK:MS).
fn case_file_name(case: &Case) -> String {
    format!(
        "{}_{}_{}",
        case.schedule.to_string().replace(':', "-"),
        case.comm,
        case.slow
            .map_or("nodelay".into(), |(l, d)| format!("link{l}+{d}ms"))
    )
}

/// Replayed: `pc`'s orders on each timed iteration's own op and link times (a shared machine
/// changes speed from one iteration to the next, so each iteration is set against its own
/// replay): the median, and the last iteration's replay (the timeline's predicted lane, as
/// the measured lane is its last iteration).
fn replay(
    case: &Case,
    pc: &PlannedCase,
    m: &Measured,
    plan: &PipelinePlan,
    policy: &Policy,
) -> Result<(f64, Run)> {
    let mut replays = Vec::new();
    for it in &m.timed {
        let sc = measured_scenario(
            pc.orders.len(),
            &plan.shape,
            case.comm,
            std::slice::from_ref(it),
            (!pc.split, pc.layout),
        )?;
        let run = simulate(&sc, policy).map_err(|e| anyhow!("replaying {}: {e}", case.schedule))?;
        replays.push(run);
    }
    let times: Vec<f64> = replays.iter().map(|r| r.iteration_ms).collect();
    let median = Summary::of(&times).map_or(0.0, |s| s.p50);
    let last = replays
        .pop()
        .ok_or_else(|| anyhow!("no timed iterations"))?;
    Ok((median, last))
}

/// A case's lanes of pipeline_timeline.csv: every op of each run.
fn write_lanes(out: &mut Outputs, case_name: &str, lanes: [(&str, &Run); 2]) -> Result<()> {
    for (lane, r) in lanes {
        for e in &r.ops {
            let row = TimelineRow {
                lane: lane.into(),
                stage: e.op.stage as u32,
                kind: e.op.kind,
                microbatch: e.op.mb as u32,
                start_ms: round(e.start, 4),
                end_ms: round(e.end, 4),
                queue_end_ms: round(e.queue_end, 4),
                chunk: Some(e.op.chunk as u32),
            };
            out.timeline.write(&Line::new(
                &out.run_id,
                case_name.to_string(),
                row,
                None,
                Default::default(),
            ))?;
        }
    }
    Ok(())
}

/// Per-stage values in one CSV cell.
fn join<T: std::fmt::Display>(v: impl Iterator<Item = T>) -> String {
    v.map(|x| x.to_string()).collect::<Vec<_>>().join(";")
}

/// Whose clock timed the ops of these iterations (see `PipelineFigures::op_clock`).
fn op_clock(timed: &[Vec<StageTimes>]) -> &'static str {
    let all = timed.iter().flatten();
    let gpu = all.clone().filter(|t| t.gpu_clock.is_some()).count();
    match gpu {
        0 => "host",
        n if n == all.count() => "gpu",
        _ => "mixed",
    }
}
