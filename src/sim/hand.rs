//! The hand-written schedules, as their authors define them: fixed per-rank op orders that
//! the engine replays (a rank waits for its next listed op, never skipping ahead).
//!
//! - ZB-H1 and ZB-H2: Zero Bubble's `get_hand_schedule` (sail-sg/zero-bubble-pipeline-
//!   parallelism, `megatron/core/pipeline_parallel/efficiency.py`, commit f68d3879), with one
//!   (H1) or two (H2) warm-up forwards per downstream rank, each B followed by a W once the
//!   rank is past its lag, the rest of the W's at the end.
//! - Interleaved 1F1B: Megatron's `forward_backward_pipelining_with_interleaving`
//!   (NVIDIA/Megatron-LM, `megatron/core/pipeline_parallel/schedules.py`), the same order as
//!   Zero Bubble's `get_interleave_schedule` (`get_pp_rank_microbatches`, `get_schedule_table`
//!   at commit 00611e6): V chunks per rank, chunk c of rank r is virtual stage c·p + r,
//!   microbatches taken in groups of G (`microbatch_group_size_per_vp_stage`, p by default)
//!   per chunk, 2(p - r - 1) + (V - 1)·G warm-up forwards on rank r, backward chunks mirrored.

use super::model::{Op, OpKind};

/// ZB-H1 (`per_hop` = 1) or ZB-H2 (`per_hop` = 2) on `p` ranks and `n` microbatches: rank r
/// runs (p - r - 1)·per_hop warm-up forwards (at most n), then F, B and (once r·per_hop
/// backwards have run) W in turn, then its remaining W's.
pub fn zero_bubble(p: usize, n: usize, per_hop: usize) -> Vec<Vec<Op>> {
    (0..p)
        .map(|r| {
            let warmup = ((p - r - 1) * per_hop).min(n);
            // How many B's run before the first W: the W's fill the cool-down.
            let lag = (p - 1) * per_hop - warmup;
            let mut order = Vec::with_capacity(3 * n);
            order.extend((0..warmup).map(|mb| Op::new(OpKind::F, r, mb)));
            let mut w = 0;
            for i in 0..n {
                if warmup + i < n {
                    order.push(Op::new(OpKind::F, r, warmup + i));
                }
                order.push(Op::new(OpKind::B, r, i));
                if i >= lag {
                    order.push(Op::new(OpKind::W, r, w));
                    w += 1;
                }
            }
            order.extend((w..n).map(|mb| Op::new(OpKind::W, r, mb)));
            order
        })
        .collect()
}

/// Why Megatron's interleaved schedule cannot run `n` microbatches on `p` ranks with `v`
/// chunks in groups of `g`, if it cannot (its own checks, in
/// `forward_backward_pipelining_with_interleaving`).
pub fn interleaved_refusal(p: usize, n: usize, v: usize, g: usize) -> Option<String> {
    if v < 2 {
        return Some(format!(
            "interleaved:{v}: give at least 2 chunks per rank (1 is plain 1f1b)"
        ));
    }
    if g < p || g > n {
        return Some(format!(
            "the microbatch group ({g}) must lie in [ranks {p}, microbatches {n}] (Megatron's \
             rule): use at least {p} microbatches, or another group"
        ));
    }
    let rest = n % g;
    if rest > 0 && rest < p {
        return Some(format!(
            "{n} microbatches in groups of {g} leave {rest}, under the {p} ranks (Megatron \
             refuses it: dependency bubbles): use a multiple of {g}"
        ));
    }
    None
}

/// Megatron's schedule table: the (chunk, microbatch) of a rank's k-th forward. Microbatches
/// go in groups of `g` (the last group takes the remainder), each group through chunk 0,
/// then chunk 1, and so on.
fn schedule_table(n: usize, v: usize, g: usize) -> Vec<(usize, usize)> {
    let mut table = Vec::with_capacity(n * v);
    for start in (0..n).step_by(g) {
        let end = if start + g >= n { n } else { start + g };
        for chunk in 0..v {
            table.extend((start..end).map(|mb| (chunk, mb)));
        }
    }
    table
}

/// Megatron's interleaved 1F1B: per rank, min(2(p - r - 1) + (V - 1)·G, m·V) warm-up
/// forwards, then one forward and one backward in turn, then the cool-down backwards; the k-th
/// backward runs the k-th forward's microbatch on the mirrored chunk (V - 1 - c). Check
/// [`interleaved_refusal`] first.
pub fn interleaved(p: usize, n: usize, v: usize, g: usize) -> Vec<Vec<Op>> {
    let table = schedule_table(n, v, g);
    let total = table.len();
    (0..p)
        .map(|r| {
            let warmup = (2 * (p - r - 1) + (v - 1) * g).min(total);
            let forward = |k: usize| {
                let (chunk, mb) = table[k];
                Op {
                    kind: OpKind::F,
                    stage: r,
                    mb,
                    chunk,
                }
            };
            let backward = |k: usize| {
                let (chunk, mb) = table[k];
                Op {
                    kind: OpKind::B,
                    stage: r,
                    mb,
                    chunk: v - 1 - chunk,
                }
            };
            let mut order = Vec::with_capacity(2 * total);
            order.extend((0..warmup).map(forward));
            for k in 0..total {
                if warmup + k < total {
                    order.push(forward(warmup + k));
                }
                order.push(backward(k));
            }
            order
        })
        .collect()
}

/// One rank's DualPipeV order as it is built: the next forward and backward microbatch of
/// each chunk, the weight gradients waiting (oldest first), and which ops overlap the one
/// before them.
struct DualBuilder {
    rank: usize,
    forward: [usize; 2],
    backward: [usize; 2],
    waiting_w: std::collections::VecDeque<(usize, usize)>,
    order: Vec<Op>,
    together: Vec<bool>,
}

impl DualBuilder {
    fn push(&mut self, kind: OpKind, chunk: usize, mb: usize, with_previous: bool) {
        self.order.push(Op {
            kind,
            stage: self.rank,
            mb,
            chunk,
        });
        self.together.push(with_previous);
    }

    fn f(&mut self, chunk: usize) {
        let mb = self.forward[chunk];
        self.forward[chunk] += 1;
        self.push(OpKind::F, chunk, mb, false);
    }

    /// A whole backward (input and weight gradients as one op, its gradient sent when both
    /// are done), or, `overlapped`, as part of the op before it.
    fn b(&mut self, chunk: usize, overlapped: bool) {
        let mb = self.backward[chunk];
        self.backward[chunk] += 1;
        self.push(OpKind::B, chunk, mb, overlapped);
        self.push(OpKind::W, chunk, mb, true);
    }

    /// The input gradient only; its weight gradient waits (DualPipe's zero-bubble half).
    fn i(&mut self, chunk: usize) {
        let mb = self.backward[chunk];
        self.backward[chunk] += 1;
        self.push(OpKind::B, chunk, mb, false);
        self.waiting_w.push_back((chunk, mb));
    }

    fn w(&mut self) {
        if let Some((chunk, mb)) = self.waiting_w.pop_front() {
            self.push(OpKind::W, chunk, mb, false);
        }
    }

    /// One chunk's forward overlapped with the other's whole backward.
    fn f_and_b(&mut self, forward: usize, backward: usize) {
        self.f(forward);
        self.b(backward, true);
    }
}

/// Why DualPipeV cannot run `n` microbatches on `p` ranks, if it cannot (`DualPipeV.step`'s
/// assert).
pub fn dualpipe_v_refusal(p: usize, n: usize) -> Option<String> {
    (n < 2 * p).then(|| {
        format!(
            "DualPipeV needs at least 2 x ranks microbatches (num_chunks >= num_ranks * 2): {n} \
             on {p} ranks; use at least {}",
            2 * p
        )
    })
}

/// DeepSeek's DualPipeV (deepseek-ai/DualPipe `dualpipe/dualpipev.py`, `DualPipeV.step`, the
/// same as PyTorch's `ScheduleDualPipeV`): rank r holds chunks r and 2p - 1 - r, and runs
/// its eight steps: 2(p - r - 1) forwards of chunk 0; r + 1 pairs of forwards; p - r - 1 of
/// [input gradient of chunk 1, a waiting W, forward of chunk 1]; n - 2p + r + 1 pairs of
/// overlapped forward-and-backward (the last rank's first pair not overlapped); p - r - 1 of
/// [backward of chunk 1, overlapped F1&B0]; r + 1 pairs of backwards, from the middle one on
/// with the weight gradient left waiting; p - r - 1 of [W, input gradient of chunk 0]; the
/// last r + 1 W's. Returns the orders and which ops overlap the one before them. Check
/// [`dualpipe_v_refusal`] first.
pub fn dualpipe_v(p: usize, n: usize) -> (Vec<Vec<Op>>, Vec<Vec<bool>>) {
    let mut orders = Vec::with_capacity(p);
    let mut together = Vec::with_capacity(p);
    for r in 0..p {
        let mut d = DualBuilder {
            rank: r,
            forward: [0; 2],
            backward: [0; 2],
            waiting_w: Default::default(),
            order: Vec::with_capacity(6 * n),
            together: Vec::with_capacity(6 * n),
        };
        let ahead = p - r - 1;
        (0..2 * ahead).for_each(|_| d.f(0));
        for _ in 0..=r {
            d.f(0);
            d.f(1);
        }
        for _ in 0..ahead {
            d.i(1);
            d.w();
            d.f(1);
        }
        for i in 0..(n + r + 1 - 2 * p) {
            if i == 0 && r == p - 1 {
                d.f(0);
                d.b(1, false);
            } else {
                d.f_and_b(0, 1);
            }
            d.f_and_b(1, 0);
        }
        for _ in 0..ahead {
            d.b(1, false);
            d.f_and_b(1, 0);
        }
        // DualPipe's switch to the zero-bubble half, at step (r + 1) / 2.
        let half = r.div_ceil(2); // (r + 1) / 2
        let mut zero_bubble = false;
        for i in 0..=r {
            if i == half && r % 2 == 1 {
                zero_bubble = true;
            }
            if zero_bubble {
                d.i(1)
            } else {
                d.b(1, false)
            }
            if i == half && r % 2 == 0 {
                zero_bubble = true;
            }
            if zero_bubble {
                d.i(0)
            } else {
                d.b(0, false)
            }
        }
        for _ in 0..ahead {
            d.w();
            d.i(0);
        }
        (0..=r).for_each(|_| d.w());
        orders.push(d.order);
        together.push(d.together);
    }
    (orders, together)
}
