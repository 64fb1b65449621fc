//! The gate's short real pipeline (extended): `pipeline` led inside the gate's session once
//! the links are in, every rank a stage in rank order (up to [`MAX_STAGES`]), 1F1B and
//! adaptive with offloaded sends, a few iterations; its weight gradients are verified against
//! the f64 reference and each iteration is set against the simulator's prediction from its own
//! measured op and link times. Its rows of fleet.csv say the pipeline ran across these nodes
//! and what it took; a pipeline cannot tell which stage was wrong, so a failure is a WARN on
//! every rank unless a rank was lost (that rank FAILs, by name).

use super::rank::{judged, row, RankOutcome, Row, PASS, SKIP, WARN};
use super::verdict::Verdict;
use crate::bench::pipeline::exec::Comm;
use crate::bench::pipeline::shape::Shape;
use crate::bench::pipeline::{Case, CaseRow, PipelineOptions, PipelinePlan};
use crate::cluster::SessionOptions;
use crate::gpu::BackendChoice;
use crate::sim::Schedule;
use crate::transport::TransportKind;

/// The most stages the gate's pipeline has: beyond, it is not short.
pub const MAX_STAGES: usize = 8;

/// How the gate's pipeline went.
#[derive(Debug, Clone)]
pub enum PipelineResult {
    /// Not at this level.
    None,
    Skipped(String),
    Failed(String),
    /// Each case's row, and the timed rounds run and planned when the deadline cut them.
    Done(Vec<CaseRow>, Option<(u32, u32)>),
}

/// The plan: two layers a stage (256 hidden, 64 tokens), two microbatches a stage (4 to 16),
/// 1F1B and adaptive with offloaded sends over TCP, one warm-up and 3 timed iterations each.
pub fn plan(stages: usize) -> PipelinePlan {
    let case = |schedule: Schedule| Case {
        schedule,
        comm: Comm::Offload,
        slow: None,
    };
    PipelinePlan {
        shape: Shape {
            layers: 2,
            hidden: 256,
            tokens: 64,
            microbatches: (2 * stages as u32).clamp(4, 16),
        },
        cases: vec![case(Schedule::OneFOneB), case(Schedule::Adaptive)],
        iters: 3,
        warmup: 1,
        timeout_s: 30,
        transport: TransportKind::Tcp,
    }
}

/// The pipeline's options in the gate; its rounds stop at `allowance`'s end less the setup
/// (the stages' GPUs, links and calibration, about a fifth).
pub fn options(
    stages: usize,
    session: &SessionOptions,
    (backend, adapter): (BackendChoice, Option<String>),
    allowance: std::time::Duration,
) -> PipelineOptions {
    PipelineOptions {
        session: session.clone(),
        plan: plan(stages),
        backend,
        adapter,
        rdma: Default::default(),
        deadline_s: Some(allowance.as_secs_f64() * 0.8),
    }
}

/// Each rank's rows: one per case (`1f1b_offload_ms`...).
pub fn rows(ranks: &[RankOutcome], result: &PipelineResult) -> Vec<Row> {
    let live = || ranks.iter().filter(|o| o.failure.is_none());
    let all = |verdict: Verdict, why: &str| -> Vec<Row> {
        live()
            .map(|o| judged(o, "pipeline", "iteration_ms", verdict, why.into()))
            .collect()
    };
    let cases = match result {
        PipelineResult::None => return Vec::new(),
        PipelineResult::Skipped(why) => return all(SKIP, why),
        PipelineResult::Failed(why) => {
            return all(WARN, &format!("the pipeline did not complete: {why}"))
        }
        PipelineResult::Done(cases, cut) => (cases, cut),
    };
    let (cases, cut) = cases;
    let cut = cut.map_or(String::new(), |(ran, of)| {
        format!("; cut by its deadline after {ran} of {of} timed iterations")
    });
    let mut rows = Vec::new();
    for o in live() {
        for (p, f) in cases {
            let figure = format!("{}_{}_ms", p.schedule, p.comm);
            let (mut rp, mut rf) = row(o, "pipeline", &figure);
            rf.value = Some(f.iteration_ms);
            rf.expected = Some(f.predicted_ms);
            rf.unit = "ms".into();
            rf.verdict = if f.verified && cut.is_empty() {
                PASS
            } else {
                WARN
            };
            rf.reason = format!(
                "a real {}-stage pipeline across the fleet (this rank stage {}): {:.1} ms an \
                 iteration, the simulator predicted {:.1} ms from its measured op and link times \
                 ({:+.0}%); gradients {} (relative error {:.1e}){cut}",
                p.stages,
                o.rank,
                f.iteration_ms,
                f.predicted_ms,
                100.0 * f.error,
                if f.verified {
                    "verified"
                } else {
                    "NOT verified"
                },
                f.grad_rel_err
            );
            rp.figure = figure;
            rows.push((rp, rf));
        }
    }
    rows
}
