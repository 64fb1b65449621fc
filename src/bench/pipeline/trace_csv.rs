//! `pipeline_trace.csv`: the testbed's own runs in the schema of a real job's trace (the
//! OSDI '25 artifact's, which `whatif` reads), DP rank 0, one step per timed iteration, a
//! `case` column naming the case (`whatif --case`).
//!
//! Each forward and backward is a compute op. A receive runs from the end of the stage's
//! previous op (when it started waiting) to the op's start; a send from the op's end for as
//! long as the op held the stage after computing (the copy to the host, and inline the send
//! until acknowledged). Under interleaving every compute has its receive and send, the first
//! and last virtual stage's being empty, as Megatron records them. The testbed has no
//! optimizer: the step's end is marked by zero-length gc, all-reduce, clip and optimizer ops,
//! so the schema's dependency model holds. Cases with split backwards (W ops) are left out:
//! the schema has one backward-compute.

use std::collections::HashMap;
use std::fmt::Write as _;

use super::exec::StageTimes;
use crate::sim::{Layout, OpKind};

pub const HEADER: &str =
    "case,dp_rank,stage,rank,step,optype,start_ts,duration,seq_id,mc,mb_id,gmc\n";

/// The case's rows, or why it has none.
pub fn rows(case: &str, layout: Layout, timed: &[Vec<StageTimes>]) -> anyhow::Result<String> {
    let chunks = chunks_per_rank(layout)?;
    let mut out = String::new();
    for (step, stages) in timed.iter().enumerate() {
        let origin = stages
            .iter()
            .flat_map(|t| t.ops.first())
            .map(|o| o.start_us)
            .fold(f64::INFINITY, f64::min);
        for (s, t) in stages.iter().enumerate() {
            let mut stage_rows = StageRows {
                out: &mut out,
                case,
                stage: s,
                step,
                origin,
                seq: HashMap::new(),
            };
            let last = stage_rows.op_rows(t, chunks, stages.len())?;
            stage_rows.step_end_rows(stages, last);
        }
    }
    Ok(out)
}

/// How many chunks each rank runs, or why the layout does not fit the schema.
fn chunks_per_rank(layout: Layout) -> anyhow::Result<usize> {
    match layout {
        Layout::Linear => Ok(1),
        Layout::Interleaved(v) => Ok(v),
        other => Err(anyhow::anyhow!(
            "its layout ({other:?}) hands chunks over inside a rank"
        )),
    }
}

/// The schema's names for an op's compute, receive and send, and whether it has a neighbour
/// to receive from and to send to (a backward runs the stages in reverse).
struct OpNames {
    compute: &'static str,
    recv: &'static str,
    send: &'static str,
    has_in: bool,
    has_out: bool,
}

impl OpNames {
    /// The names for an op of `kind` on virtual stage `vs` of `total`; split backwards (W) have
    /// none, as the schema has one backward-compute.
    fn of(kind: OpKind, vs: usize, total: usize) -> anyhow::Result<OpNames> {
        match kind {
            OpKind::F => Ok(OpNames {
                compute: "forward-compute",
                recv: "forward-recv",
                send: "forward-send",
                has_in: vs > 0,
                has_out: vs + 1 < total,
            }),
            OpKind::B => Ok(OpNames {
                compute: "backward-compute",
                recv: "backward-recv",
                send: "backward-send",
                has_in: vs + 1 < total,
                has_out: vs > 0,
            }),
            OpKind::W => Err(anyhow::anyhow!("its backwards are split into B and W")),
        }
    }
}

/// One stage's rows of one step; numbers each op type's rows in order (the seq_id column).
struct StageRows<'a> {
    out: &'a mut String,
    case: &'a str,
    stage: usize,
    step: usize,
    /// The step's first op start: timestamps are seconds from it.
    origin: f64,
    seq: HashMap<&'static str, u32>,
}

impl StageRows<'_> {
    /// Appends one row: times in microseconds, written as seconds from the step's origin.
    fn row(
        &mut self,
        optype: &'static str,
        start_us: f64,
        dur_us: f64,
        chunk: i64,
        mb: i64,
        vs: i64,
    ) {
        let (case, s, step) = (self.case, self.stage, self.step);
        let n = self.seq.entry(optype).or_insert(0);
        let _ = writeln!(
            self.out,
            "{case},0,{s},{s},{step},{optype},{:.9},{:.9},{n},{chunk},{mb},{vs}",
            (start_us - self.origin) / 1e6,
            dur_us.max(0.0) / 1e6
        );
        *n += 1;
    }

    /// Each op's receive, compute and send rows; returns when the stage went free after its
    /// last op (where the step's end begins).
    fn op_rows(&mut self, t: &StageTimes, chunks: usize, p: usize) -> anyhow::Result<f64> {
        let total = p * chunks;
        let mut free = self.origin;
        for o in &t.ops {
            let vs = o.chunk as usize * p + self.stage;
            let names = OpNames::of(o.kind, vs, total)?;
            let (c, v) = (o.chunk as i64, vs as i64);
            // Interleaved, Megatron records the edge stages' empty receive and send too.
            if chunks > 1 || names.has_in {
                let from = if names.has_in { free } else { o.start_us };
                self.row(names.recv, from, o.start_us - from, c, -1, v);
            }
            self.row(
                names.compute,
                o.start_us,
                o.end_us - o.start_us,
                c,
                o.mb as i64,
                v,
            );
            if chunks > 1 || names.has_out {
                let held = if names.has_out {
                    o.queue_end_us - o.end_us
                } else {
                    0.0
                };
                self.row(names.send, o.end_us, held, c, -1, v);
            }
            free = o.queue_end_us;
        }
        Ok(free)
    }

    /// The step's end: zero-length gc, all-reduce and optimizer ops (the testbed has none) so
    /// the schema's dependency model holds; the edge stages wait for each other's embedding.
    fn step_end_rows(&mut self, stages: &[StageTimes], last: f64) {
        let (s, p) = (self.stage, stages.len());
        let end = stages
            .iter()
            .flat_map(|t| t.ops.last())
            .map(|o| o.queue_end_us)
            .fold(f64::NEG_INFINITY, f64::max);
        let edge_end = [0, p - 1]
            .iter()
            .flat_map(|&e| stages[e].ops.last())
            .map(|o| o.queue_end_us)
            .fold(f64::NEG_INFINITY, f64::max);
        self.marker("gc", last, 0.0);
        self.marker("layernorm-grads-all-reduce", last, 0.0);
        let clip_from = if s == 0 || s == p - 1 {
            self.marker("embedding-grads-all-reduce", last, edge_end - last);
            edge_end
        } else {
            last
        };
        self.marker("optimizer-clip-main-grad", clip_from, end - clip_from);
        self.marker("optimizer", end, 0.0);
    }

    /// A step-end row: of no chunk, microbatch or virtual stage.
    fn marker(&mut self, optype: &'static str, start_us: f64, dur_us: f64) {
        self.row(optype, start_us, dur_us, -1, -1, -1);
    }
}
