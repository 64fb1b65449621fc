//! A fixed order's communication calls, as PyTorch's lowered program lists them
//! (`_dump_csv`'s default, compute_comms format): each rank posts its sends and receives, and
//! waits on them, at given points between its ops. The engine runs such an order with each
//! transfer as a rendezvous: it starts once both its send and its receive are posted and the
//! data exists, and takes the time the scenario gives the link (docs/simulator.md, "PyTorch's
//! communication calls"). An op waits for its input's transfer; a wait holds the rank's host,
//! so nothing after it starts or is posted before that transfer is done.

use std::collections::{HashMap, HashSet};

use super::model::{Executed, Layout, Op, OpKind};

/// One transfer between ranks: what it carries (F: an activation, B: a gradient), the virtual
/// stage it lands on, and the microbatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transfer {
    pub kind: OpKind,
    pub to: usize,
    pub mb: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallKind {
    Send,
    Recv,
    WaitSend,
    WaitRecv,
}

/// One call of a rank: posted after `after` of the rank's ops have run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub after: usize,
    pub kind: CallKind,
    pub transfer: Transfer,
    /// Where the file lists it (for messages): its step and its cell.
    pub step: usize,
    pub cell: String,
}

/// Every rank's calls, in the order the rank posts them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommOrder {
    pub calls: Vec<Vec<Call>>,
}

/// The transfer an op's output makes (None at the ends of the pipeline).
fn output_of(op: Op, vs: usize, stages: usize) -> Option<Transfer> {
    let (kind, to) = match op.kind {
        OpKind::F if vs + 1 < stages => (OpKind::F, vs + 1),
        OpKind::B if vs > 0 => (OpKind::B, vs - 1),
        _ => return None,
    };
    Some(Transfer {
        kind,
        to,
        mb: op.mb,
    })
}

/// The transfer an op's input arrives by (None at the ends of the pipeline).
fn input_of(op: Op, vs: usize, stages: usize) -> Option<Transfer> {
    let ok = match op.kind {
        OpKind::F => vs > 0,
        OpKind::B => vs + 1 < stages,
        OpKind::W => false,
    };
    ok.then_some(Transfer {
        kind: op.kind,
        to: vs,
        mb: op.mb,
    })
}

impl CommOrder {
    /// Every transfer between two ranks posted once at each end, each send after the op that
    /// makes its data and each receive before the op that needs it, each wait after its own
    /// call; the error names the rank, the step and the call (or the op).
    pub fn check(&self, orders: &[Vec<Op>], layout: Layout) -> Result<(), String> {
        let p = orders.len();
        let stages = p * layout.chunks();
        let mut posted: HashMap<(CallKind, Transfer), usize> = HashMap::new();
        for (rank, calls) in self.calls.iter().enumerate() {
            let mut mine: HashSet<(CallKind, Transfer)> = HashSet::new();
            for c in calls {
                let at =
                    |what: String| format!("rank {rank}, step {} ({}): {what}", c.step, c.cell);
                let t = c.transfer;
                let (from, to) = match t.kind {
                    OpKind::F => (t.to.checked_sub(1), t.to),
                    _ => (t.to.checked_add(1).filter(|&s| s < stages), t.to),
                };
                let Some(from) = from.filter(|_| to < stages) else {
                    return Err(at(format!(
                        "no stage sends it: the stages are 0 to {}",
                        stages - 1
                    )));
                };
                let (rf, rt) = (layout.place(p, from).0, layout.place(p, to).0);
                let ends = match c.kind {
                    CallKind::Send | CallKind::WaitSend => rf,
                    CallKind::Recv | CallKind::WaitRecv => rt,
                };
                if rf == rt || ends != rank {
                    return Err(at(format!(
                        "it moves stage {from}'s output to stage {to}, from rank {rf} to rank \
                         {rt}: a rank posts only its own transfers to other ranks"
                    )));
                }
                let own = match c.kind {
                    CallKind::WaitSend => Some(CallKind::Send),
                    CallKind::WaitRecv => Some(CallKind::Recv),
                    _ => None,
                };
                match own {
                    Some(k) if !mine.contains(&(k, t)) => {
                        return Err(at("it waits on a call this rank has not posted".into()))
                    }
                    Some(_) => {}
                    None if posted.insert((c.kind, t), c.after).is_some() => {
                        return Err(at("it is posted a second time".into()))
                    }
                    None => {
                        mine.insert((c.kind, t));
                    }
                }
            }
        }
        for (rank, order) in orders.iter().enumerate() {
            for (i, &op) in order.iter().enumerate() {
                let vs = layout.virtual_stage(p, rank, op.chunk);
                let remote = |from: usize| layout.place(p, from).0 != rank;
                let (kind_name, dir) = match op.kind {
                    OpKind::F => ("F", "F"),
                    _ => ("B", "B"),
                };
                if let Some(t) = input_of(op, vs, stages) {
                    let from = if op.kind == OpKind::F { vs - 1 } else { vs + 1 };
                    if remote(from) && posted.get(&(CallKind::Recv, t)).is_none_or(|&a| a > i) {
                        return Err(format!(
                            "rank {rank}: {vs}{kind_name}{} needs its input from rank {}, but no \
                             {vs}RECV_{dir}{} is posted before it",
                            op.mb,
                            layout.place(p, from).0,
                            op.mb
                        ));
                    }
                }
                if let Some(t) = output_of(op, vs, stages) {
                    if remote(t.to) && posted.get(&(CallKind::Send, t)).is_none_or(|&a| a <= i) {
                        return Err(format!(
                            "rank {rank}: {vs}{kind_name}{}'s output goes to rank {}, but no \
                             {vs}SEND_{dir}{} is posted after it",
                            op.mb,
                            layout.place(p, t.to).0,
                            op.mb
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Where each rank stands in its calls while the engine runs a fixed order with them.
pub struct CommState<'a> {
    order: &'a CommOrder,
    layout: Layout,
    stages: usize,
    /// Per rank, each op's end, in the order run.
    ends: Vec<Vec<f64>>,
    /// Per rank, how many of its calls are posted.
    posted: Vec<usize>,
    /// Per rank, (op index, latest completion a wait before that op held the host to).
    held: Vec<(usize, f64)>,
    sends: HashMap<Transfer, f64>,
    recvs: HashMap<Transfer, f64>,
    /// A remote transfer's data: the end of the op that made it, and when the engine has it
    /// arrive had it left then.
    made: HashMap<Transfer, (f64, f64)>,
    done: HashMap<Transfer, f64>,
    received: HashSet<Transfer>,
}

impl<'a> CommState<'a> {
    pub fn new(order: &'a CommOrder, p: usize, layout: Layout) -> CommState<'a> {
        let received = order
            .calls
            .iter()
            .flatten()
            .filter(|c| c.kind == CallKind::Recv)
            .map(|c| c.transfer)
            .collect();
        CommState {
            order,
            layout,
            stages: p * layout.chunks(),
            ends: vec![Vec::new(); p],
            posted: vec![0; p],
            held: vec![(0, 0.0); p],
            sends: HashMap::new(),
            recvs: HashMap::new(),
            made: HashMap::new(),
            done: HashMap::new(),
            received,
        }
    }

    fn vs(&self, rank: usize, op: Op) -> usize {
        self.layout.virtual_stage(self.ends.len(), rank, op.chunk)
    }

    /// Records an op the engine ran on `rank`.
    pub fn ran(&mut self, rank: usize, exec: &Executed) {
        self.ends[rank].push(exec.end);
        let vs = self.vs(rank, exec.op);
        if let Some(t) = output_of(exec.op, vs, self.stages) {
            if self.received.contains(&t) {
                self.made.insert(t, (exec.end, exec.arrival));
                self.complete(t);
            }
        }
    }

    /// A transfer is done once its data exists and both ends are posted: the link's time after
    /// the later of the three.
    fn complete(&mut self, t: Transfer) {
        let (Some(&s), Some(&r), Some(&(end, arrival))) =
            (self.sends.get(&t), self.recvs.get(&t), self.made.get(&t))
        else {
            return;
        };
        self.done.insert(t, arrival + (s.max(r) - end).max(0.0));
    }

    /// Posts every call each rank has reached, until none more can be; true if any was.
    pub fn advance(&mut self) -> bool {
        let mut any = false;
        loop {
            let mut moved = false;
            for rank in 0..self.ends.len() {
                while let Some(c) = self.order.calls[rank].get(self.posted[rank]) {
                    let ran = self.ends[rank].len();
                    if ran < c.after {
                        break;
                    }
                    let base = match c.after {
                        0 => 0.0,
                        a => self.ends[rank][a - 1],
                    };
                    let held = match self.held[rank] {
                        (at, t) if at == c.after => t,
                        _ => 0.0,
                    };
                    let t = c.transfer;
                    match c.kind {
                        CallKind::WaitSend | CallKind::WaitRecv => {
                            let Some(&d) = self.done.get(&t) else { break };
                            self.held[rank] = (c.after, held.max(d));
                        }
                        CallKind::Send => {
                            self.sends.insert(t, base.max(held));
                        }
                        CallKind::Recv => {
                            self.recvs.insert(t, base.max(held));
                        }
                    }
                    self.complete(t);
                    self.posted[rank] += 1;
                    moved = true;
                }
            }
            if !moved {
                return any;
            }
            any = true;
        }
    }

    /// The earliest the ops `group`, next in `rank`'s order from index `at`, may start: after
    /// every wait before them and their inputs' transfers; None while the rank's host is held
    /// at a call or an input's transfer has not started.
    pub fn gate(&self, rank: usize, group: &[Op], at: usize) -> Option<f64> {
        if self.order.calls[rank]
            .get(self.posted[rank])
            .is_some_and(|c| c.after <= at)
        {
            return None;
        }
        let mut t = match self.held[rank] {
            (i, held) if i == at => held,
            _ => 0.0,
        };
        for &op in group {
            let vs = self.vs(rank, op);
            if let Some(x) = input_of(op, vs, self.stages).filter(|x| self.received.contains(x)) {
                t = t.max(*self.done.get(&x)?);
            }
        }
        Some(t)
    }

    /// The call `rank` is held at, for a deadlock's message.
    pub fn held_at(&self, rank: usize) -> Option<&Call> {
        self.order.calls[rank].get(self.posted[rank])
    }
}
