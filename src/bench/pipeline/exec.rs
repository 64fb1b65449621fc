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
use crate::sim::OpKind;

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

/// What a stage sees when a link's sender thread has ended (its own error follows).
const STOPPED: &str = "the sender thread stopped";

/// One op as it ran, on the shared clock (µs since the Unix epoch).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpTime {
    pub kind: OpKind,
    pub mb: u32,
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
pub use crate::cluster::clock::now_us;

/// This stage's neighbours and the injected delay on each.
pub struct Neighbours {
    /// To stage s - 1 (link s - 1), and its delay.
    pub prev: Option<(Arc<Link>, Duration)>,
    /// To stage s + 1 (link s), and its delay.
    pub next: Option<(Arc<Link>, Duration)>,
}

struct Outgoing {
    link: Arc<Link>,
    link_index: u32,
    /// When it was handed over; it goes out at `handed + delay`. The delay is latency: a
    /// message waits out its own delay, not the delays of the messages before it.
    handed: std::time::Instant,
    delay: Duration,
    kind: u8,
    mb: u32,
    data: Vec<f32>,
    d2h_us: f64,
}

fn deliver(o: &Outgoing, iter: u32) -> Result<SendTime, String> {
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
    JoinHandle<Result<Vec<SendTime>, String>>,
);

/// Ends the offload lanes and collects their sends. The iteration's first error wins, except
/// that a lane's own error says why it stopped where the stage only saw that it had.
fn join_lanes(
    lanes: [Option<Lane>; 2],
    times: &mut StageTimes,
    mut result: Result<(), String>,
    s: u32,
) -> Result<(), String> {
    for (tx, h) in lanes.into_iter().flatten() {
        drop(tx);
        match h.join() {
            Ok(Ok(sent)) => times.sends.extend(sent),
            Ok(Err(err)) => {
                result = match result {
                    Err(first) if !first.ends_with(STOPPED) => Err(first),
                    _ => Err(err),
                }
            }
            Err(_) => result = result.and(Err(format!("stage {s}: the sender thread panicked"))),
        }
    }
    result
}

/// Runs `order` ((kind, microbatch) pairs) for iteration `iter`.
pub fn run_iteration(
    stage: &mut Stage,
    nb: &Neighbours,
    order: &[(OpKind, u32)],
    fused: bool,
    comm: Comm,
    iter: u32,
) -> Result<StageTimes, String> {
    let s = stage.index;
    let e = |x: anyhow::Error| format!("stage {s}: {x:#}");
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
    // [to the previous stage (gradients), to the next (activations)]
    let lanes: [Option<Lane>; 2] = [
        (offload && nb.prev.is_some()).then(lane),
        (offload && nb.next.is_some()).then(lane),
    ];
    let mut result = Ok(());
    for &(kind, mb) in order {
        let step = (|| -> Result<(), String> {
            let (start, end) = match kind {
                OpKind::F => {
                    let input = match &nb.prev {
                        Some((link, _)) => Some(link.receive(ACT, iter, mb)?),
                        None => None,
                    };
                    let t0 = now_us();
                    stage.forward(mb, input).map_err(e)?;
                    (t0, now_us())
                }
                OpKind::B => {
                    let dy = match &nb.next {
                        Some((link, _)) => Some(link.receive(GRAD, iter, mb)?),
                        None => None,
                    };
                    let t0 = now_us();
                    stage.backward(mb, dy, fused).map_err(e)?;
                    (t0, now_us())
                }
                _ => {
                    let t0 = now_us();
                    stage.weight(mb).map_err(e)?;
                    (t0, now_us())
                }
            };
            // F sends downstream, B upstream.
            let out = match kind {
                OpKind::F => nb.next.as_ref().map(|(l, d)| (l, *d, ACT, s)),
                OpKind::B => nb.prev.as_ref().map(|(l, d)| (l, *d, GRAD, s - 1)),
                _ => None,
            };
            if let Some((link, delay, k, link_index)) = out {
                let (data, d2h_us) = stage.read_out(mb, k == GRAD).map_err(e)?;
                let o = Outgoing {
                    link: link.clone(),
                    link_index,
                    handed: std::time::Instant::now(),
                    delay,
                    kind: k,
                    mb,
                    data,
                    d2h_us,
                };
                match comm {
                    Comm::Inline => times.sends.push(deliver(&o, iter)?),
                    Comm::Offload => lanes[(k == ACT) as usize]
                        .as_ref()
                        .expect("a lane per neighbour")
                        .0
                        .send(o)
                        .map_err(|_| format!("stage {s}: {STOPPED}"))?,
                }
            }
            times.ops.push(OpTime {
                kind,
                mb,
                start_us: start,
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

    fn op(start_us: f64, end_us: f64) -> OpTime {
        OpTime {
            kind: OpKind::F,
            mb: 0,
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
