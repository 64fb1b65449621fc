//! Executes per-stage programs under a runtime model as one max-plus graph.

use std::collections::HashMap;

use super::dag::{Dag, Node};
use super::program::{Instr, Xfer};
use super::{Blocking, Job, LinkModel, Machine, Path, PeerNumbering, RuntimeModel, Streams};
use crate::sim::model::OpKind;

/// A transfer: (link, direction as the kind it carries, microbatch).
type Key = (usize, OpKind, usize);

/// The link a transfer of `k` output or input crosses at stage `s`.
fn link_of(s: usize, x: Xfer) -> usize {
    match x {
        Xfer::Send(OpKind::F, _) | Xfer::Recv(OpKind::B, _) => s,
        _ => s - 1,
    }
}

fn key_of(s: usize, x: Xfer) -> Key {
    match x {
        Xfer::Send(k, m) | Xfer::Recv(k, m) => (link_of(s, x), k, m),
    }
}

/// The delay the injector puts before a send from stage `s` of `x`: the artifact's NCCL shim
/// takes peer 0 for the previous stage and peer 1 for the next, which is right in a two-rank
/// communicator and wrong in the pipeline group's (there peer 1 is stage 1 whoever sends).
pub(super) fn injected_delay(s: usize, x: Xfer, job: &Job, numbering: PeerNumbering) -> f64 {
    let Xfer::Send(k, _) = x else { return 0.0 };
    let peer = if k == OpKind::F { s + 1 } else { s - 1 };
    let seen = match (numbering, peer) {
        (PeerNumbering::Group, 0) => s.checked_sub(1),
        (PeerNumbering::Group, 1) => Some(s + 1),
        _ => Some(peer),
    };
    match seen {
        Some(p) if p + 1 == s => job.delay[p],
        Some(p) if p == s + 1 && p < job.stages => job.delay[s],
        _ => 0.0,
    }
}

struct Graph<'a> {
    dag: Dag,
    job: &'a Job<'a>,
    model: &'a RuntimeModel,
    machine: &'a Machine,
    /// A transfer's arrival, made when either end first names it.
    arrival: HashMap<Key, Node>,
    /// The end of the batch that carried a receive, for what waits on it.
    batch_of: HashMap<Key, Node>,
    /// Under pure latency, when a transfer's data is at the receiver (the delay after it left).
    delivered: HashMap<Key, Node>,
    channel: HashMap<(usize, OpKind, usize), Node>,
    stream: HashMap<(usize, usize), Node>,
}

impl Graph<'_> {
    fn wire_ms(&self, gbps: f64) -> f64 {
        if !self.model.offload_cost && self.model.path == Path::Offload {
            return 0.0;
        }
        self.job.activation_bytes / (gbps * 1e6)
    }

    fn arrival(&mut self, key: Key, weight: f64) -> Node {
        *self
            .arrival
            .entry(key)
            .or_insert_with(|| self.dag.node(&[], weight))
    }

    /// A device call: one kernel per stream it touches; sleeps for slow sends first.
    fn post_device(
        &mut self,
        s: usize,
        host: Node,
        xs: &[Xfer],
        ends: &mut Vec<(Xfer, Node)>,
        launches: &mut Vec<Node>,
    ) {
        let mut by_stream: Vec<(usize, Vec<Xfer>)> = Vec::new();
        for &x in xs {
            let id = match self.model.streams {
                Streams::PerRank => usize::MAX,
                Streams::PerLink => link_of(s, x),
            };
            match by_stream.iter_mut().find(|(i, _)| *i == id) {
                Some((_, v)) => v.push(x),
                None => by_stream.push((id, vec![x])),
            }
        }
        let wire = self.wire_ms(self.machine.device_gbps);
        for (id, xs) in by_stream {
            // Occupancy: the injector's sleep holds the stream before the call's kernel.
            let sleep = match self.model.link {
                LinkModel::Occupancy => xs
                    .iter()
                    .map(|&x| injected_delay(s, x, self.job, self.model.numbering))
                    .fold(0.0, f64::max),
                LinkModel::Latency => 0.0,
            };
            let prev = self.stream.get(&(s, id)).copied();
            let start = self.dag.node(&[Some(host), prev], sleep);
            if self.model.single_queue {
                launches.push(start);
            }
            let mut done = vec![Some(start)];
            for &x in &xs {
                let key = key_of(s, x);
                let t = self.arrival(key, wire);
                self.dag.wait(t, start);
                // Pure latency: the data lands the link's delay after the kernels met, and
                // only the receive waits for it.
                let landed = match (self.model.link, x) {
                    (LinkModel::Latency, Xfer::Recv(..)) => {
                        let d = self.dag.node(&[Some(t)], self.job.delay[key.0]);
                        self.delivered.insert(key, d);
                        d
                    }
                    _ => t,
                };
                done.push(Some(landed));
            }
            let end = self.dag.node(&done, 0.0);
            self.stream.insert((s, id), end);
            for &x in &xs {
                if matches!(x, Xfer::Recv(..)) {
                    self.batch_of.insert(key_of(s, x), end);
                }
                ends.push((x, end));
            }
        }
    }

    /// An offloaded send: copied to the host as its op ends, then sent by the link's sender
    /// for its microbatch (microbatch m on channel m mod k), which sleeps the delay first.
    fn post_offload(&mut self, s: usize, host: Node, x: Xfer) -> Node {
        let key = key_of(s, x);
        let Xfer::Send(k, m) = x else {
            return self.arrival(key, 0.0);
        };
        let (d2h, wire) = match self.job.measured {
            Some(r) => (r.send_ms[s], 0.0),
            None => (
                self.wire_ms(self.machine.pcie_gbps),
                self.wire_ms(self.machine.host_gbps),
            ),
        };
        let hold = self.job.delay[key.0] + wire;
        let ready = self.dag.node(&[Some(host)], d2h);
        let start = match self.model.link {
            LinkModel::Occupancy => {
                let ch = (key.0, k, m % self.job.channels.max(1));
                let prev = self.channel.get(&ch).copied();
                let start = self.dag.node(&[Some(ready), prev], 0.0);
                let end = self.dag.node(&[Some(start)], hold);
                self.channel.insert(ch, end);
                end
            }
            LinkModel::Latency => self.dag.node(&[Some(ready)], hold),
        };
        let t = self.arrival(key, 0.0);
        self.dag.wait(t, start);
        t
    }
}

/// The iteration time of `programs` (one per stage) under `model`.
pub fn execute(
    programs: &[Vec<Instr>],
    job: &Job,
    model: &RuntimeModel,
    machine: &Machine,
) -> anyhow::Result<f64> {
    let mut g = Graph {
        dag: Dag::default(),
        job,
        model,
        machine,
        arrival: HashMap::new(),
        batch_of: HashMap::new(),
        delivered: HashMap::new(),
        channel: HashMap::new(),
        stream: HashMap::new(),
    };
    let mut last = Vec::with_capacity(programs.len());
    for (s, program) in programs.iter().enumerate() {
        let mut host = g.dag.node(&[], 0.0);
        let mut sends: Vec<Node> = Vec::new();
        for instr in program {
            match instr {
                Instr::Compute(k, m) => {
                    let input = match k {
                        OpKind::F if s > 0 => Some((s - 1, OpKind::F, *m)),
                        OpKind::B if s + 1 < job.stages => Some((s, OpKind::B, *m)),
                        _ => None,
                    };
                    if let Some(key) = input {
                        let wait = match (model.path, model.blocking) {
                            (Path::Device, Blocking::Receiver) => g.batch_of.get(&key).copied(),
                            _ => None,
                        };
                        let wait = match wait.or_else(|| g.delivered.get(&key).copied()) {
                            Some(w) => w,
                            None => g.arrival(key, 0.0),
                        };
                        let h2d = match (model.path, job.measured) {
                            (Path::Offload, None) => g.wire_ms(machine.pcie_gbps),
                            _ => 0.0,
                        };
                        host = g.dag.node(&[Some(host), Some(wait)], h2d);
                    }
                    let ms = match k {
                        OpKind::F => job.tf[s],
                        OpKind::B if job.fused_backward => job.tb[s] + job.tw[s],
                        OpKind::B => job.tb[s],
                        OpKind::W => job.tw[s],
                    };
                    host = g.dag.node(&[Some(host)], ms);
                }
                Instr::Post(xs) => {
                    let (mut ends, mut launches) = (Vec::new(), Vec::new());
                    match model.path {
                        Path::Device => g.post_device(s, host, xs, &mut ends, &mut launches),
                        Path::Offload => {
                            for &x in xs {
                                let t = g.post_offload(s, host, x);
                                ends.push((x, t));
                            }
                        }
                    }
                    let mut holds = vec![Some(host)];
                    holds.extend(launches.into_iter().map(Some));
                    for &(x, end) in &ends {
                        if matches!(x, Xfer::Send(..)) {
                            sends.push(end);
                        }
                        let held = match model.blocking {
                            Blocking::Stage => true,
                            Blocking::Sender => matches!(x, Xfer::Send(..)),
                            _ => false,
                        };
                        if held {
                            holds.push(Some(end));
                        }
                    }
                    if holds.len() > 1 {
                        host = g.dag.node(&holds, 0.0);
                    }
                }
            }
        }
        let mut tail = vec![Some(host)];
        tail.extend(sends.into_iter().map(Some));
        last.push(g.dag.node(&tail, 0.0));
    }
    let at = g.dag.solve().map_err(|left| {
        anyhow::anyhow!("the runtime deadlocks: {left} of {} events can never happen (a receive that no send matches, or calls posted in an order both ends wait on)", g.dag.len())
    })?;
    Ok(last.iter().map(|&n| at[n as usize]).fold(0.0, f64::max))
}
