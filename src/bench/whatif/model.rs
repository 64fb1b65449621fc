//! The dependency model of one training step, built from one model-parallel group (DP rank 0)
//! of the trace's first step and shared by every step and DP rank: program order on each
//! stage, pipeline sends and receives paired across stages (the VPP wrap included), their
//! streams, the DP collectives, the embedding all-reduce between the first and last stage, and
//! the optimizer. It follows the OSDI '25 artifact's model (analyzer/dependency_model.py of
//! ByteDance-Seed/StragglerAnalysis), so its what-if answers are comparable; `docs/whatif.md`
//! walks through each rule.

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Context, Result};

use super::trace::{OpType, Record};
use crate::sim::replay::{Graph, Group, Node, Plan};

/// One op of a step on one stage, the same on every DP rank and step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpKey {
    pub optype: OpType,
    pub seq: u32,
    pub stage: u32,
}

impl std::fmt::Display for OpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} of stage {}",
            self.optype.name(),
            self.seq,
            self.stage
        )
    }
}

/// Two timestamps closer than this are the same moment (clock skew between streams).
const EPS: f64 = 5e-5;

/// The model: the replay plan, which op each node is, and which nodes end a step.
pub struct Model {
    pub plan: Plan,
    pub keys: Vec<OpKey>,
    pub index: HashMap<OpKey, usize>,
    pub optimizers: Vec<usize>,
}

/// The first step's ops of DP rank 0, per stage, as recorded.
struct Group0<'a> {
    ops: BTreeMap<OpKey, &'a Record>,
    pp: u32,
    /// The step the model is built from.
    step: i64,
}

impl<'a> Group0<'a> {
    fn get(&self, key: OpKey) -> Result<&'a Record> {
        self.ops.get(&key).copied().with_context(|| {
            format!(
                "step {}, worker 0:{}: no {key}, which the step's dependency model needs (DP \
                 rank 0 of the first step is the model every step and DP rank follows)",
                self.step, key.stage
            )
        })
    }
    /// A stage's ops of the given types, in the order they started.
    fn sorted(&self, stage: u32, keep: impl Fn(OpType) -> bool) -> Vec<(OpKey, &'a Record)> {
        let mut v: Vec<(OpKey, &Record)> = self
            .ops
            .iter()
            .filter(|(k, _)| k.stage == stage && keep(k.optype))
            .map(|(k, r)| (*k, *r))
            .collect();
        v.sort_by(|a, b| {
            a.1.start
                .total_cmp(&b.1.start)
                .then(a.0.seq.cmp(&b.0.seq))
                .then(a.0.optype.name().cmp(b.0.optype.name()))
        });
        v
    }
}

/// Dependencies as they are added: `deps[v]` holds what v waits for.
#[derive(Default)]
struct Builder {
    deps: BTreeMap<OpKey, Vec<OpKey>>,
    groups: Vec<(Vec<OpKey>, bool)>,
    /// Sends and receives by the send they pair as: (its type, its n-th moving op, stage).
    pairs: BTreeMap<(OpType, u32, u32), Vec<OpKey>>,
}

impl Builder {
    fn touch(&mut self, k: OpKey) {
        self.deps.entry(k).or_default();
    }
    fn dep(&mut self, v: OpKey, on: OpKey) {
        self.touch(on);
        self.deps.entry(v).or_default().push(on);
    }
    /// Each op after the first waits for the one before; the first for `first_after`.
    fn chain(&mut self, ops: &[OpKey], first_after: &[OpKey]) {
        let mut last: Vec<OpKey> = first_after.to_vec();
        for &op in ops {
            self.touch(op);
            for &l in &last {
                self.dep(op, l);
            }
            last = vec![op];
        }
    }
}

pub fn build(records: &[Record], use_dp: bool, ovlp_dp: bool) -> Result<Model> {
    let first = records.iter().map(|r| r.step).min().context("no ops")?;
    let mut ops = BTreeMap::new();
    for r in records.iter().filter(|r| r.step == first && r.dp_rank == 0) {
        let key = OpKey {
            optype: r.optype,
            seq: r.seq_id,
            stage: r.stage,
        };
        if ops.insert(key, r).is_some() {
            bail!(
                "step {first}, worker 0:{}: {key} is recorded twice",
                r.stage
            );
        }
    }
    let pp = ops.keys().map(|k| k.stage).max().unwrap_or(0) + 1;
    let vpp = ops.values().map(|r| r.mc).max().unwrap_or(0).max(0) as u32 + 1;
    let g = Group0 {
        ops,
        pp,
        step: first,
    };
    let mut b = Builder::default();
    for s in 0..pp {
        pipeline(&g, &mut b, s, vpp).with_context(|| format!("stage {s} of step {first}"))?;
    }
    if use_dp {
        for s in 0..pp {
            let stream = g.sorted(s, OpType::is_dp_comm);
            let dp_stream: Vec<OpKey> = stream
                .iter()
                .filter(|(k, _)| k.optype != OpType::SeparateGradsAllReduce)
                .map(|(k, _)| *k)
                .collect();
            b.chain(&dp_stream, &[]);
            params_gather(&g, &mut b, s)?;
            if ovlp_dp {
                grads_scatter(&g, &mut b, s)?;
            }
            for (k, _) in &stream {
                b.groups.push((vec![*k], true));
            }
        }
    }
    for s in 0..pp {
        after_compute(&g, &mut b, s, use_dp, ovlp_dp)?;
    }
    let emb = |s| key(OpType::EmbeddingGradsAllReduce, 0, s);
    b.groups.push((
        if pp > 1 {
            vec![emb(0), emb(pp - 1)]
        } else {
            vec![emb(0)]
        },
        false,
    ));
    let clip = (0..pp)
        .map(|s| key(OpType::OptimizerClipMainGrad, 0, s))
        .collect();
    b.groups.push((clip, true));
    finish(&g, b)
}

fn key(optype: OpType, seq: u32, stage: u32) -> OpKey {
    OpKey { optype, seq, stage }
}

/// Chains each of a stage's four p2p streams (sends and receives, forward and backward) in
/// start order.
fn chain_p2p_streams(b: &mut Builder, comm: &[(OpKey, &Record)]) {
    for t in [
        OpType::ForwardSend,
        OpType::ForwardRecv,
        OpType::BackwardSend,
        OpType::BackwardRecv,
    ] {
        let stream: Vec<OpKey> = comm
            .iter()
            .filter(|(k, _)| k.optype == t)
            .map(|(k, _)| *k)
            .collect();
        b.chain(&stream, &[]);
    }
}

/// A stage's compute ops of one type: how many, and the window a send or receive must reach
/// to serve one of them.
struct ComputeSpan {
    compute: OpType,
    count: usize,
    last_start: f64,
    first_end: f64,
}

impl ComputeSpan {
    /// The span of the ops of type `compute` among a stage's compute ops.
    fn of(comp: &[(OpKey, &Record)], compute: OpType) -> Self {
        let of_type: Vec<&Record> = comp
            .iter()
            .filter(|(k, _)| k.optype == compute)
            .map(|(_, r)| *r)
            .collect();
        let last_start = of_type
            .iter()
            .map(|r| r.start)
            .fold(f64::NEG_INFINITY, f64::max);
        let first_end = of_type
            .iter()
            .map(|r| r.start + r.duration)
            .fold(f64::INFINITY, f64::min);
        ComputeSpan {
            compute,
            count: of_type.len(),
            last_start,
            first_end,
        }
    }

    /// A send that ends before the first compute or a receive that starts after the last one
    /// serves none (the profiler records them at the step's edges).
    fn serves(&self, r: &Record, is_send: bool) -> bool {
        if is_send {
            r.start + r.duration >= self.first_end - EPS
        } else {
            r.start <= self.last_start + EPS
        }
    }

    /// The seq of the compute the first serving op of type `t` serves, once `serving` such
    /// ops are checked to be one per compute (an edge stage may have none, or one fewer).
    fn first_served(&self, t: OpType, is_send: bool, serving: usize, edge: bool) -> Result<u32> {
        let mut id = 0u32;
        if serving != self.count {
            if !edge || !(serving == 0 || serving + 1 == self.count) {
                bail!(
                    "{} {}s serve {} {}s: a stage inside the pipeline needs one for each",
                    serving,
                    t.name(),
                    self.count,
                    self.compute.name()
                );
            }
            if !is_send && serving + 1 == self.count {
                id = 1; // the first stage's first receive is not recorded
            }
        }
        Ok(id)
    }
}

/// A stage's compute order, its four p2p streams, the sends and receives matched to the
/// compute they serve and paired with their peers.
fn pipeline(g: &Group0, b: &mut Builder, s: u32, vpp: u32) -> Result<()> {
    let comp = g.sorted(s, OpType::is_compute);
    let comp_keys: Vec<OpKey> = comp.iter().map(|(k, _)| *k).collect();
    b.chain(&comp_keys, &[]);
    let comm = g.sorted(s, OpType::is_p2p);
    chain_p2p_streams(b, &comm);
    // For each p2p op: the compute it serves, and whether it moves anything (no-op).
    let mut no_op: HashMap<OpKey, bool> = comm.iter().map(|(k, _)| (*k, true)).collect();
    for (compute, send, recv) in [
        (
            OpType::ForwardCompute,
            OpType::ForwardSend,
            OpType::ForwardRecv,
        ),
        (
            OpType::BackwardCompute,
            OpType::BackwardSend,
            OpType::BackwardRecv,
        ),
    ] {
        let span = ComputeSpan::of(&comp, compute);
        for t in [send, recv] {
            let is_send = t == send;
            let rows: Vec<(OpKey, &Record)> = comm
                .iter()
                .filter(|(k, _)| k.optype == t)
                .copied()
                .collect();
            let count = rows.iter().filter(|(_, r)| span.serves(r, is_send)).count();
            let edge = s == 0 || s == g.pp - 1;
            let mut id = span.first_served(t, is_send, count, edge)?;
            for (k, r) in rows {
                if !span.serves(r, is_send) {
                    continue;
                }
                let served = key(compute, id, s);
                let gmc = g.get(served)?.gmc as i64;
                let peer = gmc
                    + if (compute == OpType::ForwardCompute) == is_send {
                        1
                    } else {
                        -1
                    };
                no_op.insert(k, peer < 0 || peer >= (vpp * g.pp) as i64);
                if is_send {
                    b.dep(k, served);
                } else {
                    b.dep(served, k);
                    if id > 0 {
                        g.get(key(compute, id - 1, s))?;
                        b.dep(k, key(compute, id - 1, s));
                    }
                }
                id += 1;
            }
        }
    }
    pair_and_first_backward(g, b, s, &comp, &comm, &no_op)
}

/// The n-th moving send of a stage pairs with the n-th moving receive of its peer stage; a
/// no-op is a collective of one. The first backward send and receive wait for the forward
/// two before the first backward.
fn pair_and_first_backward(
    g: &Group0,
    b: &mut Builder,
    s: u32,
    comp: &[(OpKey, &Record)],
    comm: &[(OpKey, &Record)],
    no_op: &HashMap<OpKey, bool>,
) -> Result<()> {
    for t in [
        OpType::ForwardSend,
        OpType::ForwardRecv,
        OpType::BackwardSend,
        OpType::BackwardRecv,
    ] {
        let mut n = 0u32;
        for (k, _) in comm.iter().filter(|(k, _)| k.optype == t) {
            if no_op[k] {
                b.groups.push((vec![*k], false));
                continue;
            }
            let (peer_type, dir) = match t {
                OpType::ForwardSend => (OpType::ForwardRecv, 1i64),
                OpType::ForwardRecv => (OpType::ForwardSend, -1),
                OpType::BackwardSend => (OpType::BackwardRecv, -1),
                _ => (OpType::BackwardSend, 1),
            };
            let peer_stage = ((s as i64 + dir).rem_euclid(g.pp as i64)) as u32;
            // A pair is named by its send: (type, n, stage).
            let name = match t {
                OpType::ForwardSend | OpType::BackwardSend => (t, n, s),
                _ => (peer_type, n, peer_stage),
            };
            b.pairs.entry(name).or_default().push(*k);
            n += 1;
        }
    }
    let first_b = comp
        .iter()
        .position(|(k, _)| k.optype == OpType::BackwardCompute);
    if let Some(i) = first_b.filter(|&i| i >= 2) {
        let before = comp[i - 2].0;
        if before.optype != OpType::ForwardCompute || comp[i - 1].0.optype != OpType::ForwardCompute
        {
            bail!("the two ops before the first backward-compute are not forwards");
        }
        for t in [OpType::BackwardRecv, OpType::BackwardSend] {
            if g.ops.contains_key(&key(t, 0, s)) {
                b.dep(key(t, 0, s), before);
            }
        }
    }
    Ok(())
}

/// Each model chunk's first forward waits for that chunk's last parameter all-gather.
fn params_gather(g: &Group0, b: &mut Builder, s: u32) -> Result<()> {
    let gathers = g.sorted(s, |t| t == OpType::ParamsAllGather);
    let forwards = g.sorted(s, |t| t == OpType::ForwardCompute);
    let mut done = std::collections::HashSet::new();
    for i in (0..gathers.len() as u32).rev() {
        let ag = g.get(key(OpType::ParamsAllGather, i, s))?;
        if !done.insert(ag.mc) {
            continue;
        }
        let first = forwards
            .iter()
            .filter(|(_, r)| r.mc == ag.mc)
            .min_by(|a, b| a.1.start.total_cmp(&b.1.start))
            .with_context(|| {
                format!(
                    "no forward-compute of model chunk {} for its all-gather",
                    ag.mc
                )
            })?;
        b.dep(first.0, key(OpType::ParamsAllGather, i, s));
    }
    Ok(())
}

/// With overlapped DP, each chunk's first gradient reduce-scatter waits for that chunk's last
/// backward.
fn grads_scatter(g: &Group0, b: &mut Builder, s: u32) -> Result<()> {
    let scatters = g.sorted(s, |t| t == OpType::GradsReduceScatter);
    let backwards = g.sorted(s, |t| t == OpType::BackwardCompute);
    let mut done = std::collections::HashSet::new();
    for i in 0..scatters.len() as u32 {
        let rs = g.get(key(OpType::GradsReduceScatter, i, s))?;
        if !done.insert(rs.mc) {
            continue;
        }
        let last = backwards
            .iter()
            .filter(|(_, r)| r.mc == rs.mc)
            .max_by(|a, b| (a.1.start + a.1.duration).total_cmp(&(b.1.start + b.1.duration)))
            .with_context(|| {
                format!(
                    "no backward-compute of model chunk {} for its reduce-scatter",
                    rs.mc
                )
            })?;
        b.dep(key(OpType::GradsReduceScatter, i, s), last.0);
    }
    Ok(())
}

/// After the last compute: gc, the layernorm and embedding all-reduces, the DP gradient
/// collectives (unless overlapped with the backwards), gradient clipping, the optimizer.
fn after_compute(g: &Group0, b: &mut Builder, s: u32, use_dp: bool, ovlp_dp: bool) -> Result<()> {
    let comp = g.sorted(s, OpType::is_compute);
    let last = comp
        .iter()
        .fold(None::<(OpKey, f64)>, |best, (k, r)| {
            let end = r.start + r.duration;
            match best {
                Some((_, e)) if e >= end => best,
                _ => Some((*k, end)),
            }
        })
        .context("a stage with no compute")?
        .0;
    let gc = key(OpType::Gc, 0, s);
    g.get(gc)?;
    b.dep(gc, last);
    // Scatters numbered 0..=max (the artifact's t1).
    let scatters = g
        .sorted(s, |t| t == OpType::GradsReduceScatter)
        .iter()
        .map(|(k, _)| k.seq + 1)
        .max()
        .unwrap_or(0);
    let mut chain = vec![key(OpType::LayernormGradsAllReduce, 0, s)];
    if s == 0 || s == g.pp - 1 {
        chain.push(key(OpType::EmbeddingGradsAllReduce, 0, s));
    }
    let mut after = vec![gc];
    if use_dp && ovlp_dp {
        if scatters > 0 {
            after.insert(0, key(OpType::GradsReduceScatter, scatters - 1, s));
        }
        chain.push(key(OpType::SeparateGradsAllReduce, 0, s));
    } else if use_dp {
        chain.extend((0..scatters).map(|i| key(OpType::GradsReduceScatter, i, s)));
    }
    chain.push(key(OpType::OptimizerClipMainGrad, 0, s));
    chain.push(key(OpType::Optimizer, 0, s));
    for k in chain.iter().chain(&after) {
        g.get(*k)?;
    }
    b.chain(&chain, &after);
    Ok(())
}

/// Numbers the modelled ops, checks every pair has its two ends, fixes the replay order.
fn finish(g: &Group0, b: Builder) -> Result<Model> {
    let keys: Vec<OpKey> = b.deps.keys().copied().collect();
    let index: HashMap<OpKey, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
    for k in &keys {
        g.get(*k)?;
    }
    let mut groups: Vec<Group> = Vec::new();
    for ((t, n, s), members) in &b.pairs {
        if members.len() != 2 {
            bail!(
                "step {}, worker 0:{s}: {} (the {n}-th of stage {s} that moves data) has no \
                 partner on its peer stage: a send needs its receive",
                g.step,
                t.name()
            );
        }
    }
    let pairs = b.pairs.into_values().map(|m| (m, false));
    for (members, dp_sync) in b.groups.into_iter().chain(pairs) {
        let members = members
            .iter()
            .map(|k| {
                index
                    .get(k)
                    .copied()
                    .with_context(|| format!("{k} is in a collective but not in the model"))
            })
            .collect::<Result<Vec<usize>>>()?;
        groups.push(Group { members, dp_sync });
    }
    let graph = Graph {
        nodes: keys
            .iter()
            .map(|k| Node {
                deps: b.deps[k].iter().map(|d| index[d]).collect(),
            })
            .collect(),
        groups,
        names: keys.iter().map(|k| k.to_string()).collect(),
    };
    let optimizers = keys
        .iter()
        .filter(|k| k.optype == OpType::Optimizer)
        .map(|k| index[k])
        .collect();
    Ok(Model {
        plan: Plan::new(graph)?,
        keys,
        index,
        optimizers,
    })
}
