//! Exact event-driven execution of one pipeline iteration under a policy.
//!
//! Each stage runs one op at a time. The engine repeatedly takes the stage that can start
//! something earliest and starts it; because F and B take positive time and links add
//! non-negative latency, nothing not yet started can make another op ready earlier than that
//! moment, so every decision sees exactly the ops that are ready then.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

use super::comms::CommState;
use super::model::{Executed, Layout, Op, OpKind, Scenario};
pub use super::policy::{Policy, PriorityPolicy};

#[derive(Debug, Clone)]
pub struct Run {
    pub ops: Vec<Executed>,
    pub iteration_ms: f64,
    /// Compute time per stage (sends on the queue are not compute).
    pub busy_ms: Vec<f64>,
    pub peak_in_flight: Vec<usize>,
    /// Most activation bytes each rank held (all 0 without a `[model]` shape).
    pub peak_activation_bytes: Vec<f64>,
}

impl Run {
    /// 1 - busy / iteration time, per stage.
    pub fn bubble_ratios(&self) -> Vec<f64> {
        self.busy_ms
            .iter()
            .map(|b| 1.0 - b / self.iteration_ms)
            .collect()
    }

    pub fn mean_bubble(&self) -> f64 {
        let r = self.bubble_ratios();
        r.iter().sum::<f64>() / r.len() as f64
    }

    /// Per-stage op order, as a fixed policy could replay it.
    pub fn orders(&self, stages: usize) -> Vec<Vec<Op>> {
        let mut per: Vec<Vec<&Executed>> = vec![Vec::new(); stages];
        for e in &self.ops {
            per[e.op.stage].push(e);
        }
        per.into_iter()
            .map(|mut v| {
                v.sort_by(|a, b| a.start.total_cmp(&b.start));
                v.into_iter().map(|e| e.op).collect()
            })
            .collect()
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum SimError {
    #[error("deadlock after {done} of {total} ops: no stage can start anything ({detail})")]
    Deadlock {
        done: usize,
        total: usize,
        detail: String,
    },
    #[error("{schedule} cannot run here: {detail}")]
    Refused { schedule: String, detail: String },
    #[error("fixed order for stage {stage} has {got} ops, expected {want}")]
    BadOrder {
        stage: usize,
        got: usize,
        want: usize,
    },
}

/// A time usable as a heap key (times are finite).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Time(f64);
impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// One rank's state. Per-op vectors are indexed by `chunk * microbatches + mb`.
struct Stage {
    free_at: f64,
    f_ready: Vec<Option<f64>>,
    b_ready: Vec<Option<f64>>,
    /// Backwards whose input has arrived by `free_at`, lowest microbatch first.
    b_arrived: BinaryHeap<Reverse<usize>>,
    /// Backwards whose input arrives later, earliest first.
    b_future: BinaryHeap<Reverse<(Time, usize)>>,
    /// Microbatches whose B ran and whose W has not (all ready: B ran on this stage).
    w_pending: BinaryHeap<Reverse<usize>>,
    b_done: Vec<Option<f64>>,
    forwards_done: usize,
    backwards_done: usize,
    in_flight: usize,
    peak: usize,
    bytes: f64,
    peak_bytes: f64,
    busy: f64,
    cursor: usize,
    /// Cached next decision (start time, op); recomputed when the stage's state changes.
    decision: Option<(f64, Op)>,
    dirty: bool,
}

fn ready_of(st: &Stage, op: Op, n: usize) -> Option<f64> {
    let i = op.chunk * n + op.mb;
    match op.kind {
        OpKind::F => st.f_ready[i],
        OpKind::B => st.b_ready[i],
        OpKind::W => st.b_done[i],
    }
}

/// The ops a fixed order runs next from `at`: one, or an overlapped group.
fn group_at<'a>(order: &'a [Op], together: Option<&Vec<bool>>, at: usize) -> &'a [Op] {
    let mut end = (at + 1).min(order.len());
    while end < order.len() && together.is_some_and(|t| t.get(end) == Some(&true)) {
        end += 1;
    }
    &order[at.min(order.len())..end]
}

fn decide(st: &mut Stage, s: usize, policy: &Policy, n: usize) -> Option<(f64, Op)> {
    match policy {
        Policy::Fixed {
            orders, together, ..
        } => {
            let group = group_at(&orders[s], together.get(s), st.cursor);
            let op = *group.first()?;
            // A W listed before its B waits for the B; an overlapped group for all its inputs
            // (a W whose B is in the group comes with it).
            let mut ready = 0.0f64;
            for o in group {
                let with_its_b = o.kind == OpKind::W
                    && group
                        .iter()
                        .any(|b| b.kind == OpKind::B && (b.chunk, b.mb) == (o.chunk, o.mb));
                if !with_its_b {
                    ready = ready.max(ready_of(st, *o, n)?);
                }
            }
            Some((st.free_at.max(ready), op))
        }
        Policy::Priority(p) => {
            let mut cands: [Option<(f64, Op)>; 3] = [None, None, None];
            let slot = |k: OpKind| p.priority.iter().position(|&x| x == k).unwrap_or(2);
            let op = |kind, mb| Op::new(kind, s, mb);
            let held = p.hold_after_warmup
                && st.forwards_done >= p.warmup[s].min(n)
                && st.backwards_done == 0;
            if st.forwards_done < n && st.in_flight < p.cap[s] && !held {
                if let Some(r) = st.f_ready[st.forwards_done] {
                    cands[slot(OpKind::F)] = Some((r, op(OpKind::F, st.forwards_done)));
                }
            }
            if st.forwards_done >= p.warmup[s].min(n) {
                // Lowest microbatch among those arrived by the time the stage is free;
                // otherwise the earliest to arrive.
                while let Some(&Reverse((Time(r), m))) = st.b_future.peek() {
                    if r > st.free_at {
                        break;
                    }
                    st.b_future.pop();
                    st.b_arrived.push(Reverse(m));
                }
                if let Some(&Reverse(m)) = st.b_arrived.peek() {
                    cands[slot(OpKind::B)] = Some((st.b_ready[m].unwrap(), op(OpKind::B, m)));
                } else if let Some(&Reverse((Time(r), m))) = st.b_future.peek() {
                    cands[slot(OpKind::B)] = Some((r, op(OpKind::B, m)));
                }
            }
            if p.split {
                if let Some(&Reverse(m)) = st.w_pending.peek() {
                    cands[slot(OpKind::W)] = Some((st.b_done[m].unwrap(), op(OpKind::W, m)));
                }
            }
            let earliest = cands
                .iter()
                .flatten()
                .map(|(r, _)| *r)
                .fold(f64::INFINITY, f64::min);
            if !earliest.is_finite() {
                return None;
            }
            let t = st.free_at.max(earliest);
            // Highest priority among those ready by t.
            cands
                .iter()
                .flatten()
                .find(|(r, _)| *r <= t)
                .map(|&(_, op)| (t, op))
        }
    }
}

static OPS_SIMULATED: AtomicU64 = AtomicU64::new(0);

/// What op `exec` on stage `s` makes ready: an F's activation at the next virtual stage (or
/// the last one's own B), a B's gradient at the previous one (and its W, when split). Every
/// stage it changes is marked and listed in `touched`.
fn finish_op(
    stages: &mut [Stage],
    sc: &Scenario,
    layout: Layout,
    exec: &Executed,
    split: bool,
    dynamic: bool,
    touched: &mut Vec<usize>,
) {
    let (op, s, n) = (exec.op, exec.op.stage, sc.microbatches);
    let here = op.chunk * n + op.mb;
    let next = sc.next_of(op, layout);
    match op.kind {
        OpKind::F => {
            let st = &mut stages[s];
            st.forwards_done += 1;
            st.in_flight += 1;
            st.peak = st.peak.max(st.in_flight);
            match next {
                Some((to, _)) if !layout.binds(sc.stages, s, to, op.mb) => {}
                Some((to, chunk)) => {
                    let dest = &mut stages[to];
                    dest.f_ready[chunk * n + op.mb] = Some(exec.arrival);
                    dest.dirty = true;
                    touched.push(to);
                }
                None => {
                    st.b_ready[here] = Some(exec.end);
                    if dynamic {
                        st.b_future.push(Reverse((Time(exec.end), op.mb)));
                    }
                }
            }
        }
        OpKind::B => {
            let st = &mut stages[s];
            st.in_flight -= 1;
            st.backwards_done += 1;
            // The chosen B is the top of one of the two queues (fixed orders use neither).
            if st.b_arrived.peek() == Some(&Reverse(op.mb)) {
                st.b_arrived.pop();
            } else if st
                .b_future
                .peek()
                .is_some_and(|Reverse((_, m))| *m == op.mb)
            {
                st.b_future.pop();
            }
            st.b_done[here] = Some(exec.end);
            if split && dynamic {
                st.w_pending.push(Reverse(op.mb));
            }
            if let Some((to, chunk)) = next.filter(|&(to, _)| layout.binds(sc.stages, s, to, op.mb))
            {
                let dest = &mut stages[to];
                dest.b_ready[chunk * n + op.mb] = Some(exec.arrival);
                if dynamic {
                    dest.b_future.push(Reverse((Time(exec.arrival), op.mb)));
                }
                dest.dirty = true;
                touched.push(to);
            }
        }
        OpKind::W => {
            let st = &mut stages[s];
            if st.w_pending.peek() == Some(&Reverse(op.mb)) {
                st.w_pending.pop();
            }
        }
    }
}

/// Where each stage stood when the simulation could go no further; under a fixed order, the
/// op each stage waits at (its step in the order).
fn progress_of(stages: &[Stage], policy: &Policy, comms: Option<&CommState>) -> String {
    stages
        .iter()
        .enumerate()
        .map(|(i, st)| match policy {
            Policy::Fixed { orders, .. } => {
                let held = comms.and_then(|c| c.held_at(i));
                match (
                    held.filter(|c| c.after <= st.cursor),
                    orders[i].get(st.cursor),
                ) {
                    (Some(c), _) => format!("rank {i} is held at step {} ({})", c.step, c.cell),
                    (None, Some(op)) => format!(
                        "rank {i} waits at step {} for {}{} of chunk {}, whose input never comes",
                        st.cursor, op.kind, op.mb, op.chunk
                    ),
                    (None, None) => format!("rank {i} has run its whole order"),
                }
            }
            Policy::Priority(_) => format!(
                "stage {i}: {} F done, {} in flight",
                st.forwards_done, st.in_flight
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every rank before the first op: the first virtual stage's forwards ready at 0, and so is
/// any op whose input hop does not bind it (see `Layout::binds`).
fn initial_stages(p: usize, n: usize, layout: Layout) -> Vec<Stage> {
    let slots = layout.chunks() * n;
    let unbound = |rank: usize, slot: usize, kind: OpKind| {
        let (chunk, mb) = (slot / n, slot % n);
        let vs = layout.virtual_stage(p, rank, chunk);
        let from = match kind {
            OpKind::F if vs > 0 => layout.place(p, vs - 1).0,
            OpKind::B if vs + 1 < p * layout.chunks() => layout.place(p, vs + 1).0,
            _ => return false,
        };
        !layout.binds(p, from, rank, mb)
    };
    (0..p)
        .map(|s| Stage {
            free_at: 0.0,
            f_ready: (0..slots)
                .map(|i| {
                    (layout.virtual_stage(p, s, i / n) == 0 || unbound(s, i, OpKind::F))
                        .then_some(0.0)
                })
                .collect(),
            b_ready: (0..slots)
                .map(|i| unbound(s, i, OpKind::B).then_some(0.0))
                .collect(),
            b_arrived: BinaryHeap::new(),
            b_future: BinaryHeap::new(),
            w_pending: BinaryHeap::new(),
            b_done: vec![None; slots],
            forwards_done: 0,
            backwards_done: 0,
            in_flight: 0,
            peak: 0,
            bytes: 0.0,
            peak_bytes: 0.0,
            busy: 0.0,
            cursor: 0,
            decision: None,
            dirty: true,
        })
        .collect()
}

/// Ops executed by every simulation in this process so far (for throughput figures).
pub fn ops_simulated() -> u64 {
    OPS_SIMULATED.load(Ordering::Relaxed)
}

/// Simulates one iteration, recording every op.
pub fn simulate(sc: &Scenario, policy: &Policy) -> Result<Run, SimError> {
    simulate_with(sc, policy, true)
}

/// Rejects fixed orders whose length is not the number of ops each stage must run.
fn check_fixed_orders(policy: &Policy, per_stage_ops: usize) -> Result<(), SimError> {
    if let Policy::Fixed { orders, .. } = policy {
        for (stage, o) in orders.iter().enumerate() {
            if o.len() != per_stage_ops {
                return Err(SimError::BadOrder {
                    stage,
                    got: o.len(),
                    want: per_stage_ops,
                });
            }
        }
    }
    Ok(())
}

/// Candidate starts, earliest first (ties: lowest stage), tagged with the stage's version.
type StartQueue = BinaryHeap<Reverse<(Time, usize, u64)>>;

/// Re-decides every touched stage whose state changed and queues its new candidate start;
/// bumping the version makes the stage's older queue entries stale.
fn redecide_touched(
    stages: &mut [Stage],
    touched: &mut Vec<usize>,
    versions: &mut [u64],
    queue: &mut StartQueue,
    policy: &Policy,
    (n, comms): (usize, Option<&CommState>),
) {
    for s in touched.drain(..) {
        let st = &mut stages[s];
        if !st.dirty {
            continue;
        }
        st.decision = decide(&mut *st, s, policy, n);
        if let (
            Some(c),
            Some((t, op)),
            Policy::Fixed {
                orders, together, ..
            },
        ) = (comms, st.decision, policy)
        {
            let group = group_at(&orders[s], together.get(s), st.cursor);
            st.decision = c.gate(s, group, st.cursor).map(|g| (t.max(g), op));
        }
        st.dirty = false;
        versions[s] += 1;
        if let Some((t, _)) = st.decision {
            queue.push(Reverse((Time(t), s, versions[s])));
        }
    }
}

/// Pops the earliest candidate start that is still current, skipping stale entries.
fn pop_current(queue: &mut StartQueue, versions: &[u64]) -> Option<(f64, usize)> {
    while let Some(Reverse((Time(t), s, v))) = queue.pop() {
        if v == versions[s] {
            return Some((t, s));
        }
    }
    None
}

/// Times one op of a group that runs on stage `s` over `start..end`, including when its
/// output leaves and arrives once its link direction's channel is free.
fn execute_op(
    sc: &Scenario,
    layout: Layout,
    channel_free: &mut [[f64; 2]],
    op: Op,
    s: usize,
    start: f64,
    end: f64,
) -> Executed {
    let (queue_extra, arrival_after) = sc.send_costs(op, layout);
    let mut exec = Executed {
        op,
        start,
        end,
        queue_end: end + queue_extra,
        arrival: end + arrival_after,
    };
    if let Some(l) = sc.out_link(op, layout).filter(|&l| sc.occupancy(l) > 0.0) {
        // The transfer leaves once its channel is free and holds it for the occupancy.
        let upward = sc.next_of(op, layout).is_some_and(|(to, _)| to < s);
        let free = &mut channel_free[l][usize::from(upward)];
        let depart = (end + queue_extra).max(*free);
        *free = depart + sc.occupancy(l);
        exec.arrival = depart + sc.occupancy(l) + (arrival_after - queue_extra).max(0.0);
    }
    exec
}

/// Collects the per-stage results of a finished simulation into a `Run`.
fn finished_run(stages: &[Stage], ops: Vec<Executed>, iteration_ms: f64) -> Run {
    Run {
        iteration_ms,
        busy_ms: stages.iter().map(|st| st.busy).collect(),
        peak_in_flight: stages.iter().map(|st| st.peak).collect(),
        peak_activation_bytes: stages.iter().map(|st| st.peak_bytes).collect(),
        ops,
    }
}

/// Simulates one iteration; without `record`, `Run::ops` stays empty (for plan searches that
/// need only the iteration time, busy times and peaks).
pub fn simulate_with(sc: &Scenario, policy: &Policy, record: bool) -> Result<Run, SimError> {
    let (s_count, n) = (sc.stages, sc.microbatches);
    let (split, layout) = (policy.split(), policy.layout());
    let slots = layout.chunks() * n;
    let per_stage_ops = if split { 3 * slots } else { 2 * slots };
    check_fixed_orders(policy, per_stage_ops)?;
    let mut stages = initial_stages(s_count, n, layout);
    let total = per_stage_ops * s_count;
    // Only priority policies keep the queues of ready backward and weight ops.
    let dynamic = matches!(policy, Policy::Priority(_));
    let mut ops = Vec::with_capacity(if record { total } else { 0 });
    let (mut done, mut iteration_ms) = (0usize, 0.0f64);
    // An entry is stale once its stage's state changed (version bumped); stale entries are
    // skipped when popped.
    let mut queue = StartQueue::new();
    let mut versions = vec![0u64; s_count];
    // Stages whose state changed since their decision was made.
    let mut touched: Vec<usize> = (0..s_count).collect();
    // When each link direction's channel is free (towards the higher rank, towards the lower):
    // ops are taken in start order and each direction has one sender, so its sends arrive in
    // FIFO order.
    let mut channel_free = vec![[0.0f64; 2]; s_count.saturating_sub(1)];
    let mut comms = match policy {
        Policy::Fixed { comms: Some(c), .. } => Some(CommState::new(c, s_count, layout)),
        _ => None,
    };
    if let Some(c) = comms.as_mut() {
        c.advance();
    }
    while done < total {
        redecide_touched(
            &mut stages,
            &mut touched,
            &mut versions,
            &mut queue,
            policy,
            (n, comms.as_ref()),
        );
        let Some((start, s)) = pop_current(&mut queue, &versions) else {
            return Err(SimError::Deadlock {
                done,
                total,
                detail: progress_of(&stages, policy, comms.as_ref()),
            });
        };
        let (_, first) = stages[s].decision.expect("chosen stage has a decision");
        // Borrowed from the policy, not copied: this runs once per simulated op.
        let group: &[Op] = match policy {
            Policy::Fixed {
                orders, together, ..
            } => group_at(&orders[s], together.get(s), stages[s].cursor),
            Policy::Priority(_) => std::slice::from_ref(&first),
        };
        let compute = sc.group_compute(group, s, split, layout);
        let end = start + compute;
        let mut queue_end = end;
        for &op in group {
            let exec = execute_op(sc, layout, &mut channel_free, op, s, start, end);
            if let Some(c) = comms.as_mut() {
                c.ran(s, &exec);
            }
            if record {
                ops.push(exec);
            }
            done += 1;
            queue_end = queue_end.max(exec.queue_end);
            let st = &mut stages[s];
            st.bytes += sc.activation_delta(op, split, layout);
            st.peak_bytes = st.peak_bytes.max(st.bytes);
            st.cursor += 1;
            finish_op(&mut stages, sc, layout, &exec, split, dynamic, &mut touched);
        }
        iteration_ms = iteration_ms.max(end);
        let st = &mut stages[s];
        st.free_at = queue_end;
        st.busy += compute;
        st.dirty = true;
        touched.push(s);
        // A call posted can free any rank: each is decided again.
        if comms.as_mut().is_some_and(|c| c.advance()) {
            for (i, st) in stages.iter_mut().enumerate() {
                st.dirty = true;
                touched.push(i);
            }
        }
    }
    OPS_SIMULATED.fetch_add(done as u64, Ordering::Relaxed);
    Ok(finished_run(&stages, ops, iteration_ms))
}
