//! The `hol` bench: head-of-line blocking on the GPU's one queue.
//!
//! A pipeline-stage-like stream runs on the queue (`stream`): a transformer layer's GEMM
//! (tokens x hidden by hidden x hidden) and layernorm in turn, with a transfer of the fresh
//! activation after every `every` ops. Three ways to do the transfer (`plan::Mode`):
//! - `none`: no transfer, the baseline;
//! - `inline`: a calibrated busy-wait kernel occupies the queue for bytes / link + delay, as a
//!   communication kernel stalled on a slow link does;
//! - `offload`: a fast copy into a staging buffer in its own submission; host threads map it
//!   and send it through a Transport after the delay while the queue goes on computing
//!   (`offload`).
//!
//! Every op and transfer is timed with GPU timestamps; the HoL stall of an op is its start
//! minus the end of the compute op before it. `rows` turns repetitions into `hol.csv` rows.

mod args;
mod offload;
mod plan;
mod rows;
pub mod sink;
mod stream;
mod views;

use anyhow::{anyhow, bail, ensure, Context, Result};

pub use args::HolSettings;
pub use plan::{check_delay, parse_delay_trace, Delays, HolPlan, Mode, BENCH, MAX_DELAY_MS};
pub use rows::{HolFigures, HolParams, HolTable};

use crate::bench::descriptor::{command, from_toml, Descriptor};
use crate::gpu::standin::{CalibrationPoint, StandIn};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::{CsvSink, Line, RunDir, TableSpec};
use crate::transport::factory::check_available;
use crate::transport::wire::checksum;
use offload::{run_rep, Ctx};
use rows::{Aggregate, Baseline};

/// The `hol` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<HolSettings>),
    command: command::<HolSettings>(
        "Head-of-line blocking: compute stalled behind transfers, inline vs offloaded; writes hol.csv",
        "Examples:\n  morphbench hol                                  # none, inline, offload at 0 and 20 ms\n  morphbench hol --delay-ms 0,5,20,60 --reps 10\n  morphbench hol --peer node2:18600 --transport rdma --device mlx5_0 --gid-index 3",
    ),
    tables: || {
        vec![TableSpec::compared::<HolTable>()
            .single_node()
            .headlines(views::headlines)
            .charts(crate::record::Charts::Compared(views::hol_charts))]
    },
};

/// Aggregates of one (mode, delay, bytes, every) point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PointSummary {
    pub mode: Mode,
    pub delay: String,
    pub bytes: u64,
    pub every: u32,
    pub makespan_us: f64,
    pub busy_fraction: f64,
    pub stall_mean_us: f64,
    pub stall_p99_us: f64,
    pub stall_removed: Option<f64>,
    pub busy_vs_none: Option<f64>,
    pub overhead_vs_none: Option<f64>,
    pub transfer_e2e_us: Option<f64>,
}

/// One point of the sweep: a transfer shape and the delays of each transfer.
struct Point<'a> {
    every: u32,
    bytes: u64,
    delay_label: &'a str,
    delays: &'a [f64],
}

/// What the points of one (every, bytes) pair share: the baseline, the first output.
#[derive(Default)]
struct Shared {
    none: Option<Baseline>,
    reference_output: Option<Vec<u8>>,
}

impl crate::suite::Bench for HolPlan {
    fn needs_gpu(&self) -> bool {
        true
    }
    fn points(&self) -> u64 {
        HolPlan::points(self)
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (points, calibration) = run(cx.gpu(BENCH)?, self, cx.dir, cx.progress)?;
        super::shared::note(
            BENCH,
            serde_json::json!({ "points": points, "standin_calibration": calibration }),
        )
    }
}

/// Runs the plan, writing `hol.csv` row by row; returns the summaries and the calibration.
pub fn run(
    gpu: &Gpu,
    plan: &HolPlan,
    dir: &RunDir,
    progress: &Progress,
) -> Result<(Vec<PointSummary>, Vec<CalibrationPoint>)> {
    plan.validate().map_err(|e| anyhow!("hol: {e}"))?;
    if plan.modes.contains(&Mode::Offload) {
        check_available(plan.transport, &plan.rdma)
            .with_context(|| format!("hol --transport {}", plan.transport_label()))?;
    }
    if !gpu.has_timestamps() {
        bail!(
            "hol times every op on the GPU clock, and adapter '{}' has no timestamp queries \
             inside passes: choose another --adapter or --backend",
            gpu.report.name
        );
    }
    let act = plan.activation_bytes();
    gpu.check_binding("hol activation", act)?;
    let stream = stream::build_stream(gpu, plan)?;
    let standin = if plan.modes.contains(&Mode::Inline) {
        Some(StandIn::calibrate(gpu, &stream.act_c)?)
    } else {
        None
    };
    let calibration = match &standin {
        Some(s) => {
            let points = s.check(gpu, &stream.act_c, &[2.0, 10.0, 50.0])?;
            for p in &points {
                progress.println(format!(
                    "stand-in calibration: asked {:>8.0} µs, achieved {:>8.0} µs ({:+.1}%)",
                    p.asked_us,
                    p.achieved_us,
                    (p.achieved_us / p.asked_us - 1.0) * 100.0
                ));
            }
            points
        }
        None => Vec::new(),
    };
    let ctx = Ctx {
        gpu,
        plan,
        stream: &stream,
        standin: standin.as_ref(),
    };
    // One untimed pass of the stream: CPU drivers compile a pipeline at its first dispatch.
    let warm_every = plan.every[0];
    let no_delays = vec![0.0; plan.transfers(warm_every) as usize];
    run_rep(&ctx, Mode::None, warm_every, act, &no_delays)?;
    let mut table = dir.table::<HolTable>()?;
    let mut summaries = Vec::new();
    for &every in &plan.every {
        for bytes in plan.bytes.iter().map(|b| b.unwrap_or(act)) {
            let mut shared = Shared::default();
            for (delay_label, delays) in plan.delay_cases(every) {
                let point = Point {
                    every,
                    bytes,
                    delay_label: &delay_label,
                    delays: &delays,
                };
                let mut inline_stall = None;
                for &mode in &plan.modes {
                    if mode == Mode::None && shared.none.is_some() {
                        continue;
                    }
                    let (summary, stall) = run_point(
                        &ctx,
                        &point,
                        mode,
                        &mut shared,
                        inline_stall,
                        (&mut table, &dir.id),
                        progress,
                    )?;
                    if mode == Mode::Inline {
                        inline_stall = Some(stall);
                    }
                    summaries.push(summary);
                    progress.inc();
                }
            }
        }
    }
    Ok((summaries, calibration))
}

/// The console's note of the stall offload removed: n/a at zero delay, where there is none.
fn removed_text(delay_label: &str, removed: Option<f64>) -> String {
    match (delay_label, removed) {
        ("0", Some(_)) => "  removed n/a (no delay)".into(),
        (_, Some(r)) if r >= 0.0 => format!("  removed {:.1}%", r * 100.0),
        (_, Some(r)) => format!(
            "  removed none (stalled {:.0}% longer than inline)",
            -r * 100.0
        ),
        (_, None) => String::new(),
    }
}

/// Runs one mode at one point for the plan's repetitions and writes its row. Returns the
/// summary and the mean stall.
fn run_point(
    ctx: &Ctx<'_>,
    point: &Point<'_>,
    mode: Mode,
    shared: &mut Shared,
    inline_stall: Option<f64>,
    (table, run_id): (&mut CsvSink<HolTable>, &str),
    progress: &Progress,
) -> Result<(PointSummary, f64)> {
    let plan = ctx.plan;
    let Point { every, bytes, .. } = *point;
    let label = match mode {
        Mode::None => "0".to_string(),
        _ => point.delay_label.to_string(),
    };
    progress.set_message(format!("hol {mode} delay {label} ms every {every}"));
    let wire_us = bytes as f64 / (plan.link_gbps * 1e3);
    let asked: Vec<f64> = match mode {
        Mode::Inline => point.delays.iter().map(|d| wire_us + d * 1e3).collect(),
        _ => Vec::new(),
    };
    let mut agg = Aggregate::default();
    for _ in 0..plan.reps {
        let rep = run_rep(ctx, mode, every, bytes, point.delays)?;
        if let Some(sink) = rep.sink {
            let all_arrived = sink.payloads == plan.transfers(every) as u64;
            // With a transfer after the last op, the last payload is the final activation:
            // compare it byte for byte (by checksum).
            let last_intact = !plan.ops.is_multiple_of(every)
                || sink.last_checksum == checksum(&rep.output[..bytes as usize]);
            ensure!(
                all_arrived && last_intact,
                "hol: offloaded payloads did not all arrive intact at the sink"
            );
        }
        match &shared.reference_output {
            None => shared.reference_output = Some(rep.output.clone()),
            Some(r) => ensure!(
                r == &rep.output,
                "hol: mode {mode} computed a different final activation than the first run \
                 (the GPU results must not depend on how transfers are done)"
            ),
        }
        agg.add(mode, &rep, &asked);
    }
    let figures = agg.figures(mode, shared.none, inline_stall)?;
    let (ms, st) = (agg.makespan()?, agg.stall()?);
    if mode == Mode::None {
        shared.none = Some(Baseline {
            makespan_us: ms.p50,
            busy_fraction: agg.busy_fraction()?,
        });
    }
    let params = HolParams {
        mode,
        delay_ms: label.clone(),
        bytes,
        every,
        ops: plan.ops,
        tokens: plan.tokens,
        hidden: plan.hidden,
        transport: match mode {
            Mode::Offload => plan.transport_label(),
            _ => String::new(),
        },
    };
    let case = format!("{mode} delay {label} ms every {every} bytes {bytes}");
    table.write(&Line::new(run_id, case, params, Some(&ms), figures.clone()))?;
    progress.println(format!(
        "{mode:<8} delay {label:>6} ms every {every} {bytes:>9} B: makespan {:>10.0} µs  busy {:.3}  stall mean {:>9.0} µs p99 {:>9.0} µs{}",
        ms.p50,
        figures.busy_fraction,
        st.mean,
        st.p99,
        removed_text(&label, figures.stall_removed)
    ));
    let summary = PointSummary {
        mode,
        delay: label,
        bytes,
        every,
        makespan_us: ms.p50,
        busy_fraction: figures.busy_fraction,
        stall_mean_us: st.mean,
        stall_p99_us: st.p99,
        stall_removed: figures.stall_removed,
        busy_vs_none: figures.busy_vs_none,
        overhead_vs_none: figures.overhead_vs_none,
        transfer_e2e_us: figures.transfer_e2e_us,
    };
    Ok((summary, st.mean))
}

/// What the fleet gate measures of a node's offload path ([`probe`]).
#[derive(Debug, Clone)]
pub struct HolProbe {
    /// µs per repetition of the stream with its transfers offloaded, and done inline.
    pub offload: crate::stats::Summary,
    pub inline: crate::stats::Summary,
    /// The share of inline's head-of-line stall that offload removed.
    pub stall_removed: f64,
    /// Compute ops in one repetition.
    pub ops: u32,
    /// The deadline cut it (its samples are kept).
    pub cut: bool,
}

/// The gate's HoL test: the plan's stream (kernels verified first) with a transfer after every
/// `every` ops on a link delayed by the plan's first delay, done inline (a stand-in holding
/// the queue) and offloaded (copied to host, sent by a host thread), in turn, until `iters`
/// repetitions of each or the deadline. Every repetition must compute the first one's final
/// activation, and every offloaded payload must arrive.
pub fn probe(
    gpu: &Gpu,
    plan: &HolPlan,
    iters: usize,
    deadline: std::time::Instant,
) -> Result<HolProbe> {
    plan.validate().map_err(|e| anyhow!("hol: {e}"))?;
    check_available(plan.transport, &plan.rdma)?;
    if !gpu.has_timestamps() {
        bail!(
            "adapter '{}' has no timestamp queries inside passes",
            gpu.report.name
        );
    }
    let (every, bytes) = (plan.every[0], plan.activation_bytes());
    gpu.check_binding("hol activation", bytes)?;
    let stream = stream::build_stream(gpu, plan)?;
    let standin = StandIn::calibrate(gpu, &stream.act_c)?;
    let ctx = Ctx {
        gpu,
        plan,
        stream: &stream,
        standin: Some(&standin),
    };
    let delays = plan
        .delay_cases(every)
        .into_iter()
        .next()
        .map(|(_, d)| d)
        .context("hol: the plan has no delay")?;
    run_rep(&ctx, Mode::None, every, bytes, &vec![0.0; delays.len()])?;
    let wire_us = bytes as f64 / (plan.link_gbps * 1e3);
    let asked: Vec<f64> = delays.iter().map(|d| wire_us + d * 1e3).collect();
    let (mut inline, mut offload) = (Aggregate::default(), Aggregate::default());
    let mut reference: Option<Vec<u8>> = None;
    let mut reps = 0;
    let mut cut = false;
    while reps < iters {
        if std::time::Instant::now() >= deadline {
            cut = true;
            break;
        }
        for (mode, agg) in [(Mode::Inline, &mut inline), (Mode::Offload, &mut offload)] {
            let rep = run_rep(&ctx, mode, every, bytes, &delays)?;
            if let Some(sink) = &rep.sink {
                ensure!(
                    sink.payloads == plan.transfers(every) as u64,
                    "hol: offloaded payloads did not all arrive at the sink"
                );
            }
            match &reference {
                None => reference = Some(rep.output.clone()),
                Some(r) => ensure!(
                    r == &rep.output,
                    "hol: {mode} computed a different final activation than the first run"
                ),
            }
            agg.add(mode, &rep, &asked);
        }
        reps += 1;
    }
    if reps < crate::bench::probe::MIN_SAMPLES {
        return Err(crate::bench::probe::Cut { samples: reps }.into());
    }
    let inline_stall = inline.stall()?.mean;
    Ok(HolProbe {
        offload: offload.makespan()?,
        inline: inline.makespan()?,
        stall_removed: if inline_stall > 0.0 {
            1.0 - offload.stall()?.mean / inline_stall
        } else {
            0.0
        },
        ops: plan.ops,
        cut,
    })
}
