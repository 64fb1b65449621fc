//! One stage's part of one iteration: its ops in the planned order, each run when its input
//! has arrived and never ahead of its turn (what the simulator's fixed replay models).
//! `inline`: after an F or B, the stage copies the output to the host, sends it (after the
//! link's injected delay) and waits for the acknowledgement before its next op, so its queue
//! waits, as a blocking P2P on the compute stream does. `offload`: the stage pays the copy
//! to the host; a host thread per link delays, sends and waits while the stage computes on. The
//! injected delay is a latency (each message is due its delay after it was handed over), as
//! the simulator models a slow link.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::comm::{Link, ACT, GRAD};
use super::stage::Stage;
use crate::sim::{Layout, Op, OpKind};

/// How a stage's sends use its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Comm {
    Inline,
    Offload,
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Comm::Inline => "inline",
            Comm::Offload => "offload",
        })
    }
}

/// A send handed to a lane whose host thread had already ended: that thread's own error is
/// the one to report.
#[derive(Debug, thiserror::Error)]
#[error("stage {0}: the sender thread stopped")]
struct SenderStopped(u32);

/// One op as it ran, on the shared clock (µs since the Unix epoch).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpTime {
    pub kind: OpKind,
    pub mb: u32,
    /// Which of the stage's model chunks ran it (0 unless interleaved).
    #[serde(default)]
    pub chunk: u32,
    pub start_us: f64,
    /// End of the computation.
    pub end_us: f64,
    /// End of the time the op held the stage (its copy to the host, and with inline comm the
    /// send until acknowledged).
    pub queue_end_us: f64,
}

/// One send: its link, the copy to the host, and hand-over to acknowledgement (injected
/// delay included).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SendTime {
    pub link: u32,
    pub d2h_us: f64,
    pub send_us: f64,
}

/// What one stage reports of one iteration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StageTimes {
    pub ops: Vec<OpTime>,
    pub sends: Vec<SendTime>,
    /// `Some(width)` when the ops' start and end are the GPU's timestamps mapped onto the
    /// host clock, `width` µs being how far the mapping could be off; `None`: host clock.
    pub gpu_clock: Option<f64>,
    /// The stage's machine over the iteration (busy is not slow).
    #[serde(default)]
    pub load: Option<crate::noise::rank::RankLoad>,
}

impl StageTimes {
    /// Why rank 0 refuses a stage's report of an iteration, if it does: more ops than the
    /// stage's order holds, a send on no link, or a time that is not finite.
    pub fn fault(&self, ops: usize, links: usize) -> Option<String> {
        let times = self
            .ops
            .iter()
            .flat_map(|o| [o.start_us, o.end_us, o.queue_end_us])
            .chain(self.sends.iter().flat_map(|s| [s.d2h_us, s.send_us]));
        if self.ops.len() > ops || self.sends.len() > 2 * ops.max(1) {
            Some(format!(
                "{} ops and {} sends, for an order of {ops} ops",
                self.ops.len(),
                self.sends.len()
            ))
        } else if let Some(s) = self.sends.iter().find(|s| s.link as usize >= links) {
            Some(format!("a send on link {}, of {links} links", s.link))
        } else if times.chain(self.gpu_clock).any(|t| !t.is_finite()) {
            Some("a time that is not a finite number".into())
        } else {
            None
        }
    }
}

/// Puts each op's GPU (start, end) onto the host clock, in place of the host's times taken
/// around it. The GPU cannot start an op before the host submitted it nor end it after the
/// host saw it done, so every op bounds the offset between the clocks: offset >= submit -
/// GPU start, offset <= done - GPU end. The offset is the middle of what all ops allow;
/// returns the width of that range, or `None` (times left as they were) when no offset fits
/// every op, i.e. the timestamps contradict the host.
pub fn map_gpu_spans(ops: &mut [OpTime], spans: &[(f64, f64)]) -> Option<f64> {
    if spans.len() != ops.len() || spans.iter().any(|(a, b)| b < a) {
        return None;
    }
    let lo = ops
        .iter()
        .zip(spans)
        .map(|(o, g)| o.start_us - g.0)
        .fold(f64::NEG_INFINITY, f64::max);
    let hi = ops
        .iter()
        .zip(spans)
        .map(|(o, g)| o.end_us - g.1)
        .fold(f64::INFINITY, f64::min);
    if lo.is_nan() || hi.is_nan() || lo > hi {
        return None;
    }
    let offset = (lo + hi) / 2.0;
    for (o, g) in ops.iter_mut().zip(spans) {
        o.start_us = g.0 + offset;
        o.end_us = g.1 + offset;
    }
    Some(hi - lo)
}

/// The microseconds since the Unix epoch: one clock for every process on one machine.
pub use crate::host::now_us;

/// One of this stage's links: the neighbouring rank at its other end, the link's index (as
/// the simulator numbers links: i joins ranks i and i + 1, the wrap link the last and the
/// first) and the delay injected on it.
pub struct NeighbourLink {
    pub rank: u32,
    pub link: Arc<Link>,
    pub index: u32,
    pub delay: Duration,
}

/// This stage's links and where the model's chunks live.
pub struct Neighbours {
    pub links: Vec<NeighbourLink>,
    pub stages: u32,
    pub layout: Layout,
}

impl Neighbours {
    fn to(&self, rank: u32) -> anyhow::Result<(usize, &NeighbourLink)> {
        self.links
            .iter()
            .enumerate()
            .find(|(_, l)| l.rank == rank)
            .ok_or_else(|| anyhow::anyhow!("this stage has no link to stage {rank}"))
    }

    /// The (rank, chunk) running virtual stage `vs`.
    fn place(&self, vs: usize) -> (u32, u8) {
        let (rank, chunk) = self.layout.place(self.stages as usize, vs);
        (rank as u32, chunk as u8)
    }
}

struct Outgoing {
    link: Arc<Link>,
    link_index: u32,
    /// When it was handed over; it goes out at `handed + delay`. The delay is latency: a
    /// message waits out its own delay, not the delays of the messages before it.
    handed: std::time::Instant,
    delay: Duration,
    /// The kind of data and the receiver's chunk it is for.
    kind: (u8, u8),
    mb: u32,
    data: Vec<f32>,
    d2h_us: f64,
}

fn deliver(o: &Outgoing, iter: u32) -> anyhow::Result<SendTime> {
    let due = o.handed + o.delay;
    std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
    o.link.send(o.kind, iter, o.mb, &o.data)?;
    Ok(SendTime {
        link: o.link_index,
        d2h_us: o.d2h_us,
        // From the hand-over to the acknowledgement: the link's cost as the stage sees it.
        send_us: o.handed.elapsed().as_secs_f64() * 1e6,
    })
}

/// A host thread that delivers one link's offloaded sends in order.
type Lane = (
    mpsc::Sender<Outgoing>,
    JoinHandle<anyhow::Result<Vec<SendTime>>>,
);

/// Ends the offload lanes and collects their sends. The iteration's first error wins, except
/// that a lane's own error says why it stopped where the stage only saw that it had.
fn join_lanes(
    lanes: Vec<Option<Lane>>,
    times: &mut StageTimes,
    mut result: anyhow::Result<()>,
    s: u32,
) -> anyhow::Result<()> {
    for (tx, h) in lanes.into_iter().flatten() {
        drop(tx);
        match h.join() {
            Ok(Ok(sent)) => times.sends.extend(sent),
            Ok(Err(err)) => {
                result = match result {
                    Err(first) if !first.is::<SenderStopped>() => Err(first),
                    _ => Err(err),
                }
            }
            Err(_) => {
                result = result.and(Err(anyhow::anyhow!(
                    "stage {s}: the sender thread panicked"
                )))
            }
        }
    }
    result
}

/// Outputs handed from one of this stage's chunks to another (the V layouts' turn at the
/// last rank): (kind, receiving chunk, microbatch) to the values.
type Local = std::collections::HashMap<(u8, u8, u32), Vec<f32>>;

/// What one op of this stage takes in and hands on.
struct Route {
    /// Where its input comes from: (rank, kind, this stage's chunk), None for the model's own.
    input: Option<(u32, u8, u8)>,
    /// Where its output goes: (rank, kind, the receiver's chunk), None for none.
    output: Option<(u32, u8, u8)>,
}

/// Where `op`'s input comes from and its output goes: F takes the previous virtual stage's
/// activation and hands its own to the next, B takes the next one's gradient and hands its
/// own back; W neither.
fn route(nb: &Neighbours, me: u32, op: &Op) -> Route {
    let p = nb.stages as usize;
    let vs = nb.layout.virtual_stage(p, me as usize, op.chunk);
    let total = p * nb.layout.chunks();
    let chunk = op.chunk as u8;
    let at = |vs: usize, kind: u8| {
        let (rank, c) = nb.place(vs);
        (rank, kind, c)
    };
    match op.kind {
        OpKind::F => Route {
            input: (vs > 0).then(|| (nb.place(vs - 1).0, ACT, chunk)),
            output: (vs + 1 < total).then(|| at(vs + 1, ACT)),
        },
        OpKind::B => Route {
            input: (vs + 1 < total).then(|| (nb.place(vs + 1).0, GRAD, chunk)),
            output: (vs > 0).then(|| at(vs - 1, GRAD)),
        },
        OpKind::W => Route {
            input: None,
            output: None,
        },
    }
}

/// Runs `order` (the simulator's ops for this stage) for iteration `iter`.
pub fn run_iteration(
    stage: &mut Stage,
    nb: &Neighbours,
    order: &[Op],
    fused: bool,
    comm: Comm,
    iter: u32,
) -> anyhow::Result<StageTimes> {
    let s = stage.index;
    let e = |x: anyhow::Error| anyhow::anyhow!("stage {s}: {x:#}");
    let before = crate::noise::load::Sample::now();
    stage.zero_grads().map_err(e)?;
    stage.start_timing();
    let mut times = StageTimes::default();
    // Offloaded sends go through one host thread per link, each in order (a message waits
    // only for the earlier ones on its own link); their results come back at the end.
    let lane = || -> Lane {
        let (tx, rx) = mpsc::channel::<Outgoing>();
        let h = std::thread::spawn(move || {
            let mut done = Vec::new();
            for o in rx {
                done.push(deliver(&o, iter)?);
            }
            Ok(done)
        });
        (tx, h)
    };
    let offload = comm == Comm::Offload;
    let lanes: Vec<Option<Lane>> = nb.links.iter().map(|_| offload.then(lane)).collect();
    let mut local = Local::new();
    let mut result = Ok(());
    for op in order {
        let (kind, mb, chunk) = (op.kind, op.mb as u32, op.chunk);
        let step = (|| -> anyhow::Result<()> {
            let r = route(nb, s, op);
            let input = match r.input {
                None => None,
                Some((rank, k, c)) if rank == s => {
                    Some(local.remove(&(k, c, mb)).ok_or_else(|| {
                        anyhow::anyhow!("stage {s}: chunk {c}'s input {mb} was not made")
                    })?)
                }
                Some((rank, k, c)) => Some(nb.to(rank)?.1.link.receive((k, c), iter, mb)?),
            };
            let t0 = now_us();
            match kind {
                OpKind::F => stage.forward(chunk, mb, input),
                OpKind::B => stage.backward(chunk, mb, input, fused),
                OpKind::W => stage.weight(chunk, mb),
            }
            .map_err(e)?;
            let end = now_us();
            if let Some((rank, k, c)) = r.output {
                let (data, d2h_us) = stage.read_out(chunk, mb, k == GRAD).map_err(e)?;
                if rank == s {
                    local.insert((k, c, mb), data);
                } else {
                    let (i, to) = nb.to(rank)?;
                    let o = Outgoing {
                        link: to.link.clone(),
                        link_index: to.index,
                        handed: std::time::Instant::now(),
                        delay: to.delay,
                        kind: (k, c),
                        mb,
                        data,
                        d2h_us,
                    };
                    match &lanes[i] {
                        None => times.sends.push(deliver(&o, iter)?),
                        Some((tx, _)) => tx.send(o).map_err(|_| SenderStopped(s))?,
                    }
                }
            }
            times.ops.push(OpTime {
                kind,
                mb,
                chunk: chunk as u32,
                start_us: t0,
                end_us: end,
                queue_end_us: now_us(),
            });
            Ok(())
        })();
        if let Err(err) = step {
            result = Err(err);
            break;
        }
    }
    join_lanes(lanes, &mut times, result, s)?;
    if let Some(spans) = stage.gpu_spans(times.ops.len()).map_err(e)? {
        times.gpu_clock = map_gpu_spans(&mut times.ops, &spans);
    }
    let machine = crate::host::machine_id();
    let after = crate::noise::load::Sample::now();
    times.load = Some(crate::noise::rank::RankLoad::between(
        s, &machine, &before, &after,
    ));
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stages_report_out_of_bounds_is_refused() {
        let mut t = StageTimes {
            ops: vec![op(0.0, 1.0), op(1.0, 2.0)],
            sends: vec![SendTime {
                link: 0,
                d2h_us: 1.0,
                send_us: 2.0,
            }],
            gpu_clock: None,
            load: None,
        };
        assert_eq!(t.fault(2, 1), None);
        assert!(t.fault(1, 1).unwrap().contains("for an order of 1"));
        t.sends[0].link = 4_000_000_000;
        assert!(t.fault(2, 1).unwrap().contains("of 1 links"));
        t.sends[0].link = 0;
        t.ops[1].end_us = f64::INFINITY;
        assert!(t.fault(2, 1).unwrap().contains("finite"));
    }

    fn op(start_us: f64, end_us: f64) -> OpTime {
        OpTime {
            kind: OpKind::F,
            mb: 0,
            chunk: 0,
            start_us,
            end_us,
            queue_end_us: end_us,
        }
    }

    #[test]
    fn gpu_spans_land_inside_the_host_bounds() {
        // GPU clock = host - 1000 µs; each op starts 5 µs after submit, ends 7 µs before done.
        let mut ops = vec![op(1000.0, 1100.0), op(1200.0, 1400.0)];
        let spans = [(5.0, 93.0), (205.0, 393.0)];
        let width = map_gpu_spans(&mut ops, &spans).expect("consistent");
        assert!((width - 12.0).abs() < 1e-9, "{width}");
        for (o, g) in ops.iter().zip(&spans) {
            assert!((o.end_us - o.start_us - (g.1 - g.0)).abs() < 1e-9);
        }
        assert!(ops[0].start_us >= 1000.0 && ops[1].end_us <= 1400.0);
    }

    #[test]
    fn timestamps_that_contradict_the_host_are_refused() {
        let mut ops = vec![op(1000.0, 1100.0), op(1200.0, 1300.0)];
        // The second op would have to run before its submit: no offset fits both.
        let spans = [(0.0, 90.0), (100.0, 195.0)];
        assert_eq!(map_gpu_spans(&mut ops, &spans), None);
        assert_eq!(ops[0].start_us, 1000.0, "left as measured");
        assert_eq!(map_gpu_spans(&mut ops, &spans[..1]), None);
    }
}
