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

use std::fmt::Write as _;

use super::exec::StageTimes;
use crate::sim::{Layout, OpKind};

pub const HEADER: &str =
    "case,dp_rank,stage,rank,step,optype,start_ts,duration,seq_id,mc,mb_id,gmc\n";

/// The case's rows, or why it has none.
pub fn rows(case: &str, layout: Layout, timed: &[Vec<StageTimes>]) -> anyhow::Result<String> {
    let chunks = match layout {
        Layout::Linear => 1,
        Layout::Interleaved(v) => v,
        other => {
            return Err(anyhow::anyhow!(
                "its layout ({other:?}) hands chunks over inside a rank"
            ))
        }
    };
    let mut out = String::new();
    for (step, stages) in timed.iter().enumerate() {
        let p = stages.len();
        let total = p * chunks;
        let origin = stages
            .iter()
            .flat_map(|t| t.ops.first())
            .map(|o| o.start_us)
            .fold(f64::INFINITY, f64::min);
        for (s, t) in stages.iter().enumerate() {
            let mut seq = std::collections::HashMap::<&str, u32>::new();
            let mut row =
                |optype: &'static str, start_us: f64, dur_us: f64, chunk: i64, mb: i64, vs: i64| {
                    let n = seq.entry(optype).or_insert(0);
                    let _ = writeln!(
                        out,
                        "{case},0,{s},{s},{step},{optype},{:.9},{:.9},{n},{chunk},{mb},{vs}",
                        (start_us - origin) / 1e6,
                        dur_us.max(0.0) / 1e6
                    );
                    *n += 1;
                };
            let mut free = origin;
            for o in &t.ops {
                let vs = o.chunk as usize * p + s;
                let (compute, recv, send, has_in, has_out) = match o.kind {
                    OpKind::F => (
                        "forward-compute",
                        "forward-recv",
                        "forward-send",
                        vs > 0,
                        vs + 1 < total,
                    ),
                    OpKind::B => (
                        "backward-compute",
                        "backward-recv",
                        "backward-send",
                        vs + 1 < total,
                        vs > 0,
                    ),
                    OpKind::W => {
                        return Err(anyhow::anyhow!("its backwards are split into B and W"))
                    }
                };
                let (c, v) = (o.chunk as i64, vs as i64);
                if chunks > 1 || has_in {
                    let from = if has_in { free } else { o.start_us };
                    row(recv, from, o.start_us - from, c, -1, v);
                }
                row(
                    compute,
                    o.start_us,
                    o.end_us - o.start_us,
                    c,
                    o.mb as i64,
                    v,
                );
                if chunks > 1 || has_out {
                    let held = if has_out {
                        o.queue_end_us - o.end_us
                    } else {
                        0.0
                    };
                    row(send, o.end_us, held, c, -1, v);
                }
                free = o.queue_end_us;
            }
            let last = free;
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
            row("gc", last, 0.0, -1, -1, -1);
            row("layernorm-grads-all-reduce", last, 0.0, -1, -1, -1);
            let clip_from = if s == 0 || s == p - 1 {
                row(
                    "embedding-grads-all-reduce",
                    last,
                    edge_end - last,
                    -1,
                    -1,
                    -1,
                );
                edge_end
            } else {
                last
            };
            row(
                "optimizer-clip-main-grad",
                clip_from,
                end - clip_from,
                -1,
                -1,
                -1,
            );
            row("optimizer", end, 0.0, -1, -1, -1);
        }
    }
    Ok(out)
}
