//! One link between two ranks, measured: latency (ping-pong, round trip / 2, as sockperf and
//! perftest report it) and bandwidth (a stream each way; both ways at once with `bidir`) at
//! every size, over TCP and, when asked, RDMA.
//!
//! The lower rank serves, the higher one drives: it connects to the lower rank's data
//! listener, says who it is, then announces each test with a 16-byte header (op, count, size)
//! that the server checks against the plan before it allocates or reads anything. TCP
//! messages carry a sequence number in their first bytes, so a lost, repeated or reordered
//! message (or bytes from anything but the peer) fails the test by name.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::tail::{Tail, TestClock};
use crate::cluster::auth::{self, Trust};
use crate::stats::hist::LogHist;
use crate::transport::tcp_info;
use crate::transport::TransportKind;

mod plan;
mod rdma;
mod stream;
mod wire;

use stream::{both_ways, read_messages, tcp_stream, write_messages};
use wire::{
    check_stamp, chunk, configure, enough, header, io_err, max_batch, missing, protocol, stamp,
    summary, PairError, ACK, HELLO, NO_INFO, OP_BOTH, OP_END, OP_INFO, OP_PING, OP_SINK, OP_SOURCE,
};

use plan::MAX_COUNT;
pub use plan::{Measured, PairPlan, MAX_BYTES, MIN_SAMPLES};

/// The driver's side of the pair: `me` connects to `peer` and measures everything in `plan`.
/// Returns what it measured; the server may measure RDMA's reverse direction itself.
pub fn drive(
    addr: &str,
    plan: &PairPlan,
    me: u32,
    peer: u32,
    round: u32,
    choice: &crate::transport::rdma::DeviceChoice,
    trust: &Trust,
) -> Result<Vec<Measured>, PairError> {
    let io = plan.io();
    let target: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("the address {addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&target, io)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    configure(&s, io)?;
    auth::prove(&s, trust, Instant::now() + io)
        .map_err(|e| protocol!("rank {peer} at {addr} is refused: {e}"))?;
    let mut hello = [0u8; 16];
    hello[..4].copy_from_slice(&HELLO);
    hello[4..8].copy_from_slice(&me.to_le_bytes());
    hello[8..12].copy_from_slice(&peer.to_le_bytes());
    hello[12..].copy_from_slice(&round.to_le_bytes());
    s.write_all(&hello).map_err(|e| io_err("the hello", e))?;
    let mut out = Vec::new();
    for &t in &plan.transports {
        match t {
            TransportKind::Tcp => {
                for &bytes in &plan.sizes {
                    out.extend(tcp_tests(&mut s, plan, bytes, peer, me)?);
                }
            }
            TransportKind::Rdma => out.extend(rdma::tests(&s, plan, me, peer, true, choice)?),
        }
    }
    s.write_all(&header(OP_END, 0, 0))
        .map_err(|e| io_err("the goodbye", e))?;
    Ok(out)
}

/// The server's side: takes one connection on `listener` (from `peer`, for `round`) and
/// answers its tests until it says goodbye.
pub fn serve(
    listener: &std::net::TcpListener,
    plan: &PairPlan,
    me: u32,
    peer: u32,
    round: u32,
    choice: &crate::transport::rdma::DeviceChoice,
    trust: &Trust,
) -> Result<Vec<Measured>, PairError> {
    let io = plan.io();
    let deadline = Instant::now() + io;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    // A connection that does not prove the job's secret is logged and dropped; the pair
    // waits on for its rank.
    let mut s = loop {
        match listener.accept() {
            Ok((s, from)) => match proven(s, trust, deadline) {
                Ok(s) => break s,
                Err(e) => tracing::warn!("links: refused {from} on the link with rank {peer}: {e}"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(protocol!(
                        "it never connected within {} s",
                        plan.io_timeout_s
                    ));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(protocol!("the data listener failed: {e}")),
        }
    };
    configure(&s, io)?;
    let mut hello = [0u8; 16];
    s.read_exact(&mut hello)
        .map_err(|e| io_err("the hello", e))?;
    let word = |i: usize| u32::from_le_bytes(hello[i..i + 4].try_into().expect("4 bytes"));
    if hello[..4] != HELLO {
        return Err("something that is not a morphbench rank connected to the link".into());
    }
    if (word(4), word(8), word(12)) != (peer, me, round) {
        return Err(protocol!(
            "rank {} connected for rank {} in round {}, expected rank {peer} in round {round}",
            word(4),
            word(8),
            word(12)
        ));
    }
    let mut out = Vec::new();
    for &t in &plan.transports {
        match t {
            TransportKind::Tcp => tcp_answer(&mut s, plan)?,
            TransportKind::Rdma => out.extend(rdma::tests(&s, plan, me, peer, false, choice)?),
        }
    }
    Ok(out)
}

/// An accepted connection, once it proved the job's secret (within a few seconds, so a
/// silent one holds up the pair no longer).
fn proven(s: TcpStream, trust: &Trust, deadline: Instant) -> anyhow::Result<TcpStream> {
    s.set_nonblocking(false)?;
    let until = deadline.min(Instant::now() + PROOF_WAIT);
    auth::accept(&s, trust, until)?;
    Ok(s)
}

/// How long a connection to a pair's server has to prove itself.
const PROOF_WAIT: Duration = Duration::from_secs(2);

/// Both ends' retransmission counters, summed: this end's read here, the server's asked for.
fn retransmits_now(s: &mut TcpStream) -> Result<Option<u64>, PairError> {
    s.write_all(&header(OP_INFO, 0, 0))
        .map_err(|e| io_err("the counters", e))?;
    let mut theirs = [0u8; 8];
    s.read_exact(&mut theirs)
        .map_err(|e| io_err("the counters", e))?;
    let total = u32::from_le_bytes(theirs[..4].try_into().expect("4 bytes"));
    let mine = tcp_info::read(s);
    Ok(match (mine, total) {
        (Some(m), t) if t != NO_INFO => Some(m.total as u64 + t as u64),
        _ => None,
    })
}

/// Runs `test`, counting the retransmissions both ends made meanwhile.
fn counted<T>(
    s: &mut TcpStream,
    test: impl FnOnce(&mut TcpStream) -> Result<T, PairError>,
) -> Result<(T, Option<u64>), PairError> {
    let before = retransmits_now(s)?;
    let out = test(s)?;
    let after = retransmits_now(s)?;
    Ok((out, before.zip(after).map(|(b, a)| a.saturating_sub(b))))
}

/// The driver's TCP tests at one size.
fn tcp_tests(
    s: &mut TcpStream,
    plan: &PairPlan,
    bytes: u64,
    server: u32,
    me: u32,
) -> Result<Vec<Measured>, PairError> {
    let mut out = Vec::new();
    let row = |src, dst, direction: &str, samples: &[f64], gbps, tail, retransmits| {
        Ok::<_, PairError>(Measured {
            transport: TransportKind::Tcp,
            src,
            dst,
            bytes,
            direction: direction.into(),
            summary: summary(samples)?,
            gbps,
            tail,
            retransmits,
            hist: LogHist::of(samples),
        })
    };
    let ((lat, tail), retrans) = counted(s, |s| ping_pong(s, plan, bytes))?;
    out.push(row(server, me, "pingpong", &lat, None, tail, retrans)?);
    for (op, src, dst) in stream_ops(plan, server, me) {
        let ((per_msg, gbps, tail), retrans) = counted(s, |s| tcp_stream(s, plan, op, bytes))?;
        out.push(row(
            src,
            dst,
            direction_of(op),
            &per_msg,
            Some(gbps),
            tail,
            retrans,
        )?);
    }
    Ok(out)
}

/// The streams of a TCP pair test after its ping-pong, as (op, src, dst): to the server, from
/// it, and (`--bidir`) both at once.
fn stream_ops(plan: &PairPlan, server: u32, me: u32) -> Vec<(u8, u32, u32)> {
    let mut ops = vec![(OP_SINK, me, server), (OP_SOURCE, server, me)];
    if plan.bidir {
        ops.push((OP_BOTH, server, me));
    }
    ops
}

fn direction_of(op: u8) -> &'static str {
    if op == OP_BOTH {
        "bidir"
    } else {
        "oneway"
    }
}

/// The stream rows a pair's driver reports after its ping-pong, as (src, dst, direction):
/// the shape the simulated followers copy.
#[cfg(feature = "test-hooks")]
pub fn tcp_streams(plan: &PairPlan, server: u32, me: u32) -> Vec<(u32, u32, &'static str)> {
    stream_ops(plan, server, me)
        .into_iter()
        .map(|(op, src, dst)| (src, dst, direction_of(op)))
        .collect()
}

/// The ping-pong test: one-way latency (round trip / 2) per sample, and its tail.
fn ping_pong(
    s: &mut TcpStream,
    plan: &PairPlan,
    bytes: u64,
) -> Result<(Vec<f64>, Tail), PairError> {
    let n = bytes as usize;
    let mut msg = vec![0u8; n];
    let mut echo = vec![0u8; n];
    let warm = if bytes < 1 << 20 { 5 } else { 1 };
    let mut seq = 0u64;
    let mut pings = |s: &mut TcpStream,
                     count: u32,
                     keep: &mut Vec<f64>,
                     clock: &mut TestClock|
     -> Result<(), PairError> {
        s.write_all(&header(OP_PING, count, bytes))
            .map_err(|e| io_err("a ping-pong", e))?;
        for _ in 0..count {
            stamp(&mut msg, seq);
            let t0 = Instant::now();
            s.write_all(&msg).map_err(|e| io_err("a ping-pong", e))?;
            s.read_exact(&mut echo)
                .map_err(|e| io_err("a ping-pong", e))?;
            let rtt = t0.elapsed().as_secs_f64() * 1e6;
            keep.push(rtt / 2.0);
            clock.note(rtt / 2.0, rtt);
            check_stamp(&echo, seq, "ping-pong")?;
            seq += 1;
        }
        Ok(())
    };
    pings(
        s,
        warm,
        &mut Vec::new(),
        &mut TestClock::start(plan.budget_ms),
    )?;
    let mut clock = TestClock::start(plan.budget_ms);
    let mut lat = Vec::new();
    while !enough(lat.len(), &clock, plan) {
        let c = chunk(lat.len(), &clock, plan, 256);
        pings(s, c, &mut lat, &mut clock)?;
    }
    let tail = Tail::of(&lat, missing(lat.len(), &clock, plan));
    Ok((lat, tail))
}

/// The server's TCP side: answers headers until the driver moves on (END, or the next
/// transport's first bytes are not a TCP header, which cannot happen: END always comes).
fn tcp_answer(s: &mut TcpStream, plan: &PairPlan) -> Result<(), PairError> {
    let (mut buf, mut msg) = (Vec::new(), Vec::new());
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h).map_err(|e| io_err("the tests", e))?;
        let op = h[0];
        let count = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        let bytes = u64::from_le_bytes(h[8..].try_into().expect("8 bytes"));
        if op == OP_END {
            return Ok(());
        }
        if op == OP_INFO && count == 0 && bytes == 0 {
            let total = tcp_info::read(s).map_or(NO_INFO, |r| r.total);
            let mut answer = [0u8; 8];
            answer[..4].copy_from_slice(&total.to_le_bytes());
            s.write_all(&answer)
                .map_err(|e| io_err("the counters", e))?;
            continue;
        }
        // Bounded before anything is allocated: a size of the plan, a count within the cap.
        if !plan.sizes.contains(&bytes) || count == 0 || count > MAX_COUNT || op > OP_BOTH {
            return Err(protocol!(
                "the peer sent a header outside the plan (op {op}, {count} x {bytes} B)"
            ));
        }
        if op != OP_PING && count > max_batch(bytes) {
            return Err(protocol!(
                "the peer announced a stream batch of {count} x {bytes} B, over the {}",
                max_batch(bytes)
            ));
        }
        let n = bytes as usize;
        msg.resize(n, 0);
        match op {
            OP_PING => {
                // The echo buffer is the one kept across headers: nothing is allocated inside
                // the driver's timed loop.
                for _ in 0..count {
                    s.read_exact(&mut msg)
                        .map_err(|e| io_err("a ping-pong", e))?;
                    s.write_all(&msg).map_err(|e| io_err("a ping-pong", e))?;
                }
            }
            OP_SINK => {
                read_messages(s, count, n, &mut buf)?;
                s.write_all(&[ACK]).map_err(|e| io_err("a stream", e))?;
            }
            OP_SOURCE => write_messages(s, count, &mut msg)?,
            _ => {
                both_ways(s, count, &mut msg, &mut buf)?;
                s.write_all(&[ACK]).map_err(|e| io_err("a stream", e))?;
            }
        }
    }
}

#[cfg(test)]
mod tests;
