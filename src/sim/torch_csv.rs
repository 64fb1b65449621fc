//! PyTorch's pipeline schedules in and out: the CSV `torch.distributed.pipelining` writes and
//! reads (`_dump_csv` / `_load_csv` in pytorch/pytorch `torch/distributed/pipelining/
//! schedules.py`, commit 00722e64): one row per rank, no header, each cell an action
//! `{stage}{type}{microbatch}` as `_Action.from_str` parses it (`0F0`, `4I3`, `7W1`, `2B0`,
//! `3SEND_F1`, `(0F3;7B1)OVERLAP_F_B`), an empty cell an idle slot. Stages are global; where
//! each stage runs is inferred from the rows, as PyTorch infers it. Checked as
//! `_validate_schedule` checks it (each F before its backward, I before W, every stage on one
//! rank with m forwards and m backwards), then turned into the engine's fixed orders:
//! F runs F, I runs B (input gradient) and W its weight gradient, a full B the two as one op;
//! sends, receives and waits become the rank's calls ([`super::comms`]), (un)sharding and
//! gradient reductions cost nothing, and an overlapped pair runs as one op of the scenario's
//! `tfb` (its default, F + B + W, is PyTorch's runtime running the two in turn).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::comms::{Call, CallKind, CommOrder, Transfer};
use super::model::{Layout, Op, OpKind};

/// A schedule read from a PyTorch CSV, ready for the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TorchSchedule {
    pub ranks: usize,
    pub microbatches: usize,
    pub layout: Layout,
    pub split: bool,
    pub orders: Vec<Vec<Op>>,
    /// Which ops run as one with the op before them (a whole backward's B and W, an
    /// overlapped pair).
    pub together: Vec<Vec<bool>>,
    /// The sends, receives and waits of a compute_comms file, run as the transfers they are.
    pub comms: Option<Arc<CommOrder>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    F,
    I,
    W,
    B,
    /// A send, receive or wait of a transfer carrying F's or B's output.
    Comm(CallKind, OpKind),
    /// UNSHARD, RESHARD, REDUCE_GRAD and its wait: data parallelism's, not the pipeline's.
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Action {
    stage: usize,
    kind: Kind,
    mb: Option<usize>,
}

/// Longest first where one name begins another (`WAIT_SEND_F` before `W`).
const TYPES: [(&str, Kind); 16] = [
    ("WAIT_REDUCE_GRAD", Kind::Other),
    ("WAIT_SEND_F", Kind::Comm(CallKind::WaitSend, OpKind::F)),
    ("WAIT_RECV_F", Kind::Comm(CallKind::WaitRecv, OpKind::F)),
    ("WAIT_SEND_B", Kind::Comm(CallKind::WaitSend, OpKind::B)),
    ("WAIT_RECV_B", Kind::Comm(CallKind::WaitRecv, OpKind::B)),
    ("REDUCE_GRAD", Kind::Other),
    ("UNSHARD", Kind::Other),
    ("RESHARD", Kind::Other),
    ("SEND_F", Kind::Comm(CallKind::Send, OpKind::F)),
    ("RECV_F", Kind::Comm(CallKind::Recv, OpKind::F)),
    ("SEND_B", Kind::Comm(CallKind::Send, OpKind::B)),
    ("RECV_B", Kind::Comm(CallKind::Recv, OpKind::B)),
    ("F", Kind::F),
    ("I", Kind::I),
    ("B", Kind::B),
    ("W", Kind::W),
];

/// The most stages, microbatches or cells a file may name (bounded before use).
const MAX_INDEX: usize = 1 << 16;

fn parse_action(cell: &str, rank: usize, step: usize) -> anyhow::Result<Vec<Action>> {
    let bad = || {
        anyhow::anyhow!(
            "rank {rank}, step {step}: '{cell}' is not an action: write [stage][type][microbatch], \
             e.g. 2F0, 5I3, 5W3 (PyTorch's _Action format)"
        )
    };
    if let Some(inner) = cell.strip_prefix('(') {
        let (subs, tail) = inner.split_once(')').ok_or_else(bad)?;
        if tail != "OVERLAP_F_B" {
            return Err(bad());
        }
        let mut out = Vec::new();
        for sub in subs.split(';') {
            out.extend(parse_action(sub.trim(), rank, step)?);
        }
        return Ok(out);
    }
    let digits = cell.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let stage: usize = cell[..digits].parse().map_err(|_| bad())?;
    let rest = &cell[digits..];
    let (name, kind) = TYPES
        .iter()
        .find(|(name, _)| rest.starts_with(name))
        .ok_or_else(bad)?;
    let mb_text = &rest[name.len()..];
    let mb = match mb_text {
        "" => None,
        t => Some(t.parse::<usize>().map_err(|_| bad())?),
    };
    if stage >= MAX_INDEX || mb.is_some_and(|m| m >= MAX_INDEX) {
        return Err(anyhow::anyhow!(
            "rank {rank}, step {step}: '{cell}' names an index over {MAX_INDEX}"
        ));
    }
    if *kind != Kind::Other && mb.is_none() {
        return Err(anyhow::anyhow!(
            "rank {rank}, step {step}: '{cell}' has no microbatch"
        ));
    }
    Ok(vec![Action {
        stage,
        kind: *kind,
        mb,
    }])
}

/// Where the stages run, as a layout: loop placement (stage s on rank s mod p: one chunk,
/// or Megatron's interleaving) or the V (rank r holds stages r and 2p - 1 - r).
fn layout_of(rank_of: &BTreeMap<usize, usize>, p: usize) -> anyhow::Result<Layout> {
    let stages = rank_of.len();
    if rank_of.keys().next_back().is_some_and(|&s| s + 1 != stages) {
        return Err(anyhow::anyhow!(
            "the stages run are not 0..{stages}: every stage from 0 to the last must appear"
        ));
    }
    if !stages.is_multiple_of(p) {
        return Err(anyhow::anyhow!(
            "{stages} stages on {p} ranks: each rank must hold as many"
        ));
    }
    let v = stages / p;
    let fits = |layout: Layout| rank_of.iter().all(|(&s, &r)| layout.place(p, s).0 == r);
    let loop_layout = if v == 1 {
        Layout::Linear
    } else {
        Layout::Interleaved(v)
    };
    if fits(loop_layout) {
        Ok(loop_layout)
    } else if v == 2 && fits(Layout::Vee) {
        Ok(Layout::Vee)
    } else {
        Err(anyhow::anyhow!(
            "stages are placed neither as a loop (stage s on rank s mod {p}) nor as a V (rank r \
             holding r and {} - r): the simulator runs those two",
            2 * p - 1
        ))
    }
}

/// What a scan of the rows found: where each stage runs, each rank's compute actions in order
/// (stage, kind, microbatch), and which (stage, microbatch) ran F, I, W and a full B.
#[derive(Default)]
struct Scan {
    rank_of: BTreeMap<usize, usize>,
    /// Per rank, each compute action (stage, kind, microbatch, part of the action before it).
    lists: Vec<Vec<(usize, Kind, usize, bool)>>,
    /// Per rank, each communication call, `after` counting the compute actions before it.
    calls: Vec<Vec<Call>>,
    forwards: HashSet<(usize, usize)>,
    inputs: HashSet<(usize, usize)>,
    weights: HashSet<(usize, usize)>,
    fulls: HashSet<(usize, usize)>,
}

impl Scan {
    /// One action at `rank`'s `step`, checked against what ran before it.
    fn take(
        &mut self,
        a: Action,
        (rank, step, cell): (usize, usize, &str),
        joined: bool,
    ) -> anyhow::Result<()> {
        let at = |what: String| anyhow::anyhow!("rank {rank}, step {step} ({cell}): {what}");
        if let Some(&other) = self.rank_of.get(&a.stage) {
            if other != rank {
                let s = a.stage;
                return Err(at(format!(
                    "stage {s} is assigned to both rank {rank} and rank {other}"
                )));
            }
        }
        self.rank_of.insert(a.stage, rank);
        let Some(mb) = a.mb else { return Ok(()) };
        let key = (a.stage, mb);
        let set = match a.kind {
            Kind::F => &mut self.forwards,
            Kind::B | Kind::I if !self.forwards.contains(&key) => {
                let what = match a.kind {
                    Kind::B => "Full Backward",
                    _ => "Backward Input",
                };
                return Err(at(format!(
                    "running {what} for stage {}, microbatch {mb} without first running Forward",
                    a.stage
                )));
            }
            Kind::W if !self.inputs.contains(&key) => {
                return Err(at(format!(
                    "running Backward Weight for stage {}, microbatch {mb} without first \
                     running Backward Input",
                    a.stage
                )));
            }
            Kind::I => &mut self.inputs,
            Kind::W => &mut self.weights,
            Kind::B => &mut self.fulls,
            Kind::Other => return Ok(()),
            Kind::Comm(kind, dir) => {
                // Where it lands: F's output on the next stage, B's on the one before.
                let outbound = matches!(kind, CallKind::Send | CallKind::WaitSend);
                let to = match (dir, outbound) {
                    (OpKind::F, true) => a.stage + 1,
                    (_, true) => a.stage.wrapping_sub(1),
                    _ => a.stage,
                };
                self.calls[rank].push(Call {
                    after: self.lists[rank].len(),
                    kind,
                    transfer: Transfer { kind: dir, to, mb },
                    step,
                    cell: cell.to_string(),
                });
                return Ok(());
            }
        };
        if !set.insert(key) {
            let what = match a.kind {
                Kind::F => "Forward",
                Kind::I => "Backward Input",
                Kind::W => "Backward Weight",
                _ => "Full Backward",
            };
            return Err(at(format!(
                "{what} for stage {}, microbatch {mb} runs a second time",
                a.stage
            )));
        }
        self.lists[rank].push((a.stage, a.kind, mb, joined));
        Ok(())
    }

    /// Every stage with m forwards and m backwards (m: stage 0's forwards); returns m.
    fn microbatches(&self) -> anyhow::Result<usize> {
        let per_stage =
            |set: &HashSet<(usize, usize)>, s: usize| set.iter().filter(|k| k.0 == s).count();
        let m = per_stage(&self.forwards, 0);
        for &s in self.rank_of.keys() {
            let (f, i, w, b) = (
                per_stage(&self.forwards, s),
                per_stage(&self.inputs, s),
                per_stage(&self.weights, s),
                per_stage(&self.fulls, s),
            );
            let why = if f != m {
                format!("got {f} F microbatches for stage {s}, expected {m}")
            } else if i != w {
                format!(
                    "invalid backward microbatches for stage {s}: I and W must have equal \
                     counts, but got I={i}, W={w}"
                )
            } else if b + i != m {
                let rank = self.rank_of[&s];
                let missing: Vec<String> = (0..m)
                    .filter(|&mb| !self.fulls.contains(&(s, mb)) && !self.inputs.contains(&(s, mb)))
                    .map(|mb| mb.to_string())
                    .collect();
                format!(
                    "invalid backward microbatches for stage {s} on rank {rank}: expected {m} \
                     total backwards, but got B={b}, I={i}, W={w}; no backward for microbatch \
                     {}",
                    missing.join(", ")
                )
            } else if let Some(&(_, odd)) = self.forwards.iter().find(|k| k.0 == s && k.1 >= m) {
                format!(
                    "stage {s} on rank {} runs microbatch {odd}, but there are {m}: microbatches \
                     are 0 to {}",
                    self.rank_of[&s],
                    m - 1
                )
            } else {
                continue;
            };
            return Err(anyhow::anyhow!(why));
        }
        Ok(m)
    }

    /// The engine's orders and which ops run with the one before: F runs F, I the input
    /// gradient, W the weight gradient, a full B both halves as one op when others are split
    /// (else one fused B); an overlapped pair's actions run as one.
    fn orders(self, layout: Layout, split: bool) -> (Vec<Vec<Op>>, Vec<Vec<bool>>, CommOrder) {
        let p = self.lists.len();
        let (mut orders, mut together) = (Vec::with_capacity(p), Vec::with_capacity(p));
        let mut comms = CommOrder { calls: self.calls };
        for (rank, list) in self.lists.into_iter().enumerate() {
            let (mut order, mut joined) = (Vec::new(), Vec::new());
            // How many of the engine's ops come before each compute action (a full B among
            // split ones is two).
            let mut before = Vec::with_capacity(list.len() + 1);
            for (stage, kind, mb, with_previous) in list {
                before.push(order.len());
                let chunk = layout.chunk_of(p, stage);
                let mut push = |kind, with: bool| {
                    order.push(Op {
                        kind,
                        stage: rank,
                        mb,
                        chunk,
                    });
                    joined.push(with);
                };
                match (kind, split) {
                    (Kind::F, _) => push(OpKind::F, with_previous),
                    (Kind::I, _) | (Kind::B, false) => push(OpKind::B, with_previous),
                    (Kind::W, _) => push(OpKind::W, with_previous),
                    (Kind::B, true) => {
                        push(OpKind::B, with_previous);
                        push(OpKind::W, true);
                    }
                    (Kind::Other | Kind::Comm(..), _) => {}
                }
            }
            before.push(order.len());
            for call in &mut comms.calls[rank] {
                call.after = before[call.after];
            }
            orders.push(order);
            together.push(joined);
        }
        (orders, together, comms)
    }
}

/// Reads a PyTorch schedule CSV and checks it as `_validate_schedule` does; the error names
/// the rank, the step and the action.
pub fn parse(text: &str) -> anyhow::Result<TorchSchedule> {
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').map(str::trim).collect())
        .collect();
    let p = rows.len();
    if p == 0 {
        return Err(anyhow::anyhow!(
            "the schedule has no rows: one row per rank"
        ));
    }
    if p > super::model::MAX_STAGES {
        return Err(anyhow::anyhow!(
            "the schedule has {p} rows (ranks): the simulator takes at most {}",
            super::model::MAX_STAGES
        ));
    }
    if let Some(rank) = rows.iter().position(|r| r.len() > MAX_INDEX) {
        return Err(anyhow::anyhow!(
            "rank {rank}'s row has {} steps: the simulator takes at most {MAX_INDEX}",
            rows[rank].len()
        ));
    }
    let mut scan = Scan {
        lists: vec![Vec::new(); p],
        calls: vec![Vec::new(); p],
        ..Scan::default()
    };
    for (rank, row) in rows.iter().enumerate() {
        for (step, cell) in row.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
            for (k, action) in parse_action(cell, rank, step)?.into_iter().enumerate() {
                scan.take(action, (rank, step, cell), k > 0)?;
            }
        }
    }
    if let Some(rank) = scan.lists.iter().position(Vec::is_empty) {
        return Err(anyhow::anyhow!(
            "the schedule is missing actions for rank {rank}"
        ));
    }
    let layout = layout_of(&scan.rank_of, p)?;
    let microbatches = scan.microbatches()?;
    let split = !scan.inputs.is_empty();
    let (orders, together, comms) = scan.orders(layout, split);
    // A compute_comms file: its calls must pair up as PyTorch's runtime pairs them.
    let comms = if comms.calls.iter().all(Vec::is_empty) {
        None
    } else {
        comms.check(&orders, layout).map_err(anyhow::Error::msg)?;
        Some(Arc::new(comms))
    };
    Ok(TorchSchedule {
        ranks: p,
        microbatches,
        layout,
        split,
        orders,
        together,
        comms,
    })
}

/// Writes per-rank orders as PyTorch's compute-only CSV (`_dump_csv(format="compute_only")`,
/// without idle slots): F as F, a split backward as I then W, a fused one (or a B and W that
/// run as one, `together`) as B, a forward run with a backward as `(..;..)OVERLAP_F_B`.
pub fn format(orders: &[Vec<Op>], together: &[Vec<bool>], split: bool, layout: Layout) -> String {
    let p = orders.len();
    let mut out = String::new();
    for (rank, order) in orders.iter().enumerate() {
        let joined = |i: usize| together.get(rank).and_then(|t| t.get(i)) == Some(&true);
        let mut groups: Vec<Vec<Op>> = Vec::new();
        for (i, &op) in order.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if joined(i) => g.push(op),
                _ => groups.push(vec![op]),
            }
        }
        let cell = |op: &Op, whole: bool| {
            let stage = layout.virtual_stage(p, op.stage, op.chunk);
            let kind = match (op.kind, split && !whole) {
                (OpKind::F, _) => "F",
                (OpKind::B, true) => "I",
                (OpKind::B, false) => "B",
                (OpKind::W, _) => "W",
            };
            format!("{stage}{kind}{}", op.mb)
        };
        let cells: Vec<String> = groups
            .iter()
            .map(|g| {
                // A B with its W in the group is one whole backward.
                let parts: Vec<String> = g
                    .iter()
                    .filter(|o| {
                        !(o.kind == OpKind::W
                            && g.iter()
                                .any(|b| b.kind == OpKind::B && (b.chunk, b.mb) == (o.chunk, o.mb)))
                    })
                    .map(|o| cell(o, g.len() > 1))
                    .collect();
                match parts.len() {
                    1 => parts[0].clone(),
                    _ => format!("({})OVERLAP_F_B", parts.join(";")),
                }
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// Which ops of a run ran as one with the op before them on their rank (the same start and
/// end), for [`format`]; `orders` as `Run::orders` gives them.
pub fn together_of(run: &super::engine::Run, stages: usize) -> Vec<Vec<bool>> {
    let mut per: Vec<Vec<(f64, f64)>> = vec![Vec::new(); stages];
    for e in &run.ops {
        per[e.op.stage].push((e.start, e.end));
    }
    per.into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            (0..v.len()).map(|i| i > 0 && v[i] == v[i - 1]).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::schedules::{policy_of, static_policy};
    use crate::sim::{simulate, Policy, Scenario, Schedule};

    /// PyTorch's Schedule1F1B for p = 4, m = 8, as `_step_microbatches` runs it (p - r
    /// warm-up forwards, then backward and forward in turn), with the REDUCE_GRAD that
    /// `_add_reduce_grad` appends. (Its `_get_pipeline_order` listing numbers the last rank's
    /// forwards 1..m, a bug in the listing only.)
    const TORCH_1F1B: &str = "\
0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7,0REDUCE_GRAD
1F0,1F1,1F2,1B0,1F3,1B1,1F4,1B2,1F5,1B3,1F6,1B4,1F7,1B5,1B6,1B7,1REDUCE_GRAD
2F0,2F1,2B0,2F2,2B1,2F3,2B2,2F4,2B3,2F5,2B4,2F6,2B5,2F7,2B6,2B7,2REDUCE_GRAD
3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7,3REDUCE_GRAD
";

    /// ScheduleInterleaved1F1B for p = 4, m = 8, two stages per rank, as
    /// `_dump_csv(format="compute_only")` writes it (`_get_1f1b_rank_ops`: idle slots empty).
    const TORCH_INTERLEAVED: &str = "\
0F0,0F1,0F2,0F3,4F0,4F1,4F2,4F3,0F4,0F5,,,,,0F6,4B0,0F7,4B1,4F4,4B2,4F5,4B3,4F6,0B0,4F7,0B1,,0B2,,0B3,,4B4,,4B5,,4B6,,4B7,,0B4,,0B5,,0B6,,0B7
,1F0,1F1,1F2,1F3,5F0,5F1,5F2,5F3,,,,1F4,5B0,1F5,5B1,1F6,5B2,1F7,5B3,5F4,1B0,5F5,1B1,5F6,1B2,5F7,1B3,,5B4,,5B5,,5B6,,5B7,,1B4,,1B5,,1B6,,1B7
,,2F0,2F1,2F2,2F3,6F0,6F1,,,6F2,6B0,6F3,6B1,2F4,6B2,2F5,6B3,2F6,2B0,2F7,2B1,6F4,2B2,6F5,2B3,6F6,6B4,6F7,6B5,,6B6,,6B7,,2B4,,2B5,,2B6,,2B7
,,,3F0,3F1,3F2,3F3,,7F0,7B0,7F1,7B1,7F2,7B2,7F3,7B3,3F4,3B0,3F5,3B1,3F6,3B2,3F7,3B3,7F4,7B4,7F5,7B5,7F6,7B6,7F7,7B7,,3B4,,3B5,,3B6,,3B7
";

    fn scenario() -> Scenario {
        Scenario::builder(4, 8)
            .times(&[2.0], &[2.0], &[1.0])
            .link_ms(0.2)
            .slow(&[(1, 3.0)])
            .build()
            .unwrap()
    }

    fn fixed(policy: Policy) -> (Vec<Vec<Op>>, bool, Layout) {
        match policy {
            Policy::Fixed {
                orders,
                split,
                layout,
                ..
            } => (orders, split, layout),
            Policy::Priority(_) => panic!("not a fixed order"),
        }
    }

    #[test]
    fn pytorchs_own_orders_are_ours() {
        let sc = scenario();
        let torch = parse(TORCH_1F1B).unwrap();
        assert_eq!(
            (torch.ranks, torch.microbatches, torch.split),
            (4, 8, false)
        );
        let ours = fixed(static_policy(&Schedule::OneFOneB, &sc).unwrap()).0;
        assert_eq!(torch.orders, ours);
        let torch = parse(TORCH_INTERLEAVED).unwrap();
        assert_eq!(torch.layout, Layout::Interleaved(2));
        let interleaved: Schedule = "interleaved:2".parse().unwrap();
        assert_eq!(torch.orders, fixed(policy_of(&interleaved, &sc).unwrap()).0);
    }

    #[test]
    fn every_schedule_round_trips() {
        let sc = scenario();
        for name in [
            "1f1b",
            "zb-h1",
            "zb-h2",
            "zb-v",
            "interleaved:2",
            "adaptive",
        ] {
            let schedule: Schedule = name.parse().unwrap();
            let (_, run) = crate::sim::evaluate(&schedule, &sc, 8).unwrap();
            let split = run.ops.iter().any(|e| e.op.kind == OpKind::W);
            let layout = schedule.layout(4);
            let together = together_of(&run, 4);
            let text = format(&run.orders(4), &together, split, layout);
            let back = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!((back.layout, back.split), (layout, split), "{name}");
            assert_eq!(back.orders, run.orders(4), "{name}");
            let policy = Policy::Fixed {
                orders: back.orders,
                split,
                layout,
                together: back.together,
                comms: None,
            };
            let again = simulate(&sc, &policy).unwrap().iteration_ms;
            assert!((again - run.iteration_ms).abs() < 1e-9, "{name}");
        }
    }
}
