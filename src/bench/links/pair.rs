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

use serde::{Deserialize, Serialize};

use super::tail::{Tail, TestClock};
use crate::stats::Summary;
use crate::transport::tcp_info;
use crate::transport::TransportKind;

mod rdma;
mod stream;
#[allow(unused_imports)]
pub use stream::*;

const HELLO: [u8; 4] = *b"MBL1";
const OP_END: u8 = 0;
const OP_PING: u8 = 1;
/// The driver streams to the server.
const OP_SINK: u8 = 2;
/// The server streams to the driver.
const OP_SOURCE: u8 = 3;
/// Both stream at once.
const OP_BOTH: u8 = 4;
/// The driver asks for the server's retransmission counters (8 bytes back: total, lost).
const OP_INFO: u8 = 5;
/// The counters' answer where the server's OS has none.
const NO_INFO: u32 = u32::MAX;
const ACK: u8 = 0xA5;
/// The most messages one header may announce.
const MAX_COUNT: u32 = 1 << 16;
/// A stream's warm-up batch holds about this many bytes (at least one message).
const BATCH_BYTES: u64 = 1 << 20;
/// Later batches are sized to take about this long (judged by the warm-up), so the
/// announcement and acknowledgement of each stay a small share of it.
const BATCH_TARGET: Duration = Duration::from_millis(5);
/// The most messages in the warm-up batch, and in any stream batch (small messages).
const FIRST_BATCH: u64 = 4096;
const MAX_BATCH: u64 = 16384;
const MAX_BATCH_BYTES: u64 = 256 << 20;
/// Fewest samples a test keeps, whatever its time budget.
pub const MIN_SAMPLES: usize = 5;
/// The largest message a link test sends.
pub const MAX_BYTES: u64 = 256 << 20;

/// What every pair measures; rank 0's plan is the one all ranks follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairPlan {
    pub transports: Vec<TransportKind>,
    pub sizes: Vec<u64>,
    /// The most samples per test (ping-pongs, or stream batches).
    pub iters: u32,
    /// A test stops at this time once it has MIN_SAMPLES samples (TCP; RDMA runs `iters`).
    pub budget_ms: u64,
    pub bidir: bool,
    /// The limit on any one read or write from the peer.
    pub io_timeout_s: u64,
}

impl PairPlan {
    pub fn validate(&self) -> Result<(), String> {
        if self.transports.is_empty() {
            return Err("--transport: give tcp, rdma or tcp,rdma".into());
        }
        if self.sizes.is_empty() {
            return Err("--sizes: give at least one size, such as 8,64K,4M".into());
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s > MAX_BYTES) {
            return Err(format!(
                "--sizes: {s} B is outside 1 B ..= 256 MiB; give sizes such as 8,64K,4M"
            ));
        }
        if self.iters == 0 || self.iters > MAX_COUNT * 16 {
            return Err(format!(
                "--iters {}: give 1 to {}",
                self.iters,
                MAX_COUNT * 16
            ));
        }
        if self.budget_ms == 0 || self.budget_ms > 60_000 {
            return Err(format!("--budget-ms {}: give 1 to 60000", self.budget_ms));
        }
        if self.io_timeout_s == 0 || self.io_timeout_s > 3600 {
            return Err(format!(
                "--timeout {}: give 1 to 3600 seconds",
                self.io_timeout_s
            ));
        }
        Ok(())
    }

    /// The part of this plan that retests `rows` (each a transport, as links.csv names it,
    /// and a size): those transports at those sizes, the rest of the plan as it is.
    pub fn part(&self, rows: &[(String, u64)]) -> PairPlan {
        let has = |t: &TransportKind| rows.iter().any(|(name, _)| *name == t.to_string());
        let sized = |b: &u64| rows.iter().any(|(_, s)| s == b);
        PairPlan {
            transports: self.transports.iter().copied().filter(has).collect(),
            sizes: self.sizes.iter().copied().filter(sized).collect(),
            ..self.clone()
        }
    }

    /// Whether `self` asks for nothing `plan` does not (a follower's check of a retest).
    pub fn is_part_of(&self, plan: &PairPlan) -> bool {
        !self.transports.is_empty()
            && !self.sizes.is_empty()
            && self.transports.iter().all(|t| plan.transports.contains(t))
            && self.sizes.iter().all(|s| plan.sizes.contains(s))
            && PairPlan {
                transports: plan.transports.clone(),
                sizes: plan.sizes.clone(),
                ..self.clone()
            } == *plan
    }

    /// The tests one transport runs per size: ping-pong, each way, and both ways.
    fn kinds(&self) -> usize {
        3 + self.bidir as usize
    }

    /// The tests one pair runs.
    pub fn tests(&self) -> usize {
        self.transports.len() * self.sizes.len() * self.kinds()
    }

    /// An upper bound on one pair's time, for rank 0's wait: every test runs to its stall
    /// cap ([`super::tail::STALL_CAP`] budgets), and its last sample may take up to the I/O
    /// limit.
    pub fn pair_bound(&self) -> Duration {
        let tests = self.tests() as u64;
        let cap = super::tail::STALL_CAP as u64 + 1;
        Duration::from_millis(tests * (self.budget_ms * cap + self.io_timeout_s * 1000))
            + Duration::from_secs(10)
    }

    fn io(&self) -> Duration {
        Duration::from_secs(self.io_timeout_s)
    }
}

/// One test's result, as the measuring rank reports it to rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub transport: TransportKind,
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    /// "pingpong", "oneway" or "bidir" (as in links.csv).
    pub direction: String,
    /// µs: one-way latency per round trip, or time per message of a stream.
    pub summary: Summary,
    pub gbps: Option<f64>,
    /// The test's tail, for rank 0's stall count.
    #[serde(default)]
    pub tail: Tail,
    /// Segments both ends retransmitted during the test (TCP_INFO; None where unread).
    #[serde(default)]
    pub retransmits: Option<u64>,
}

fn header(op: u8, count: u32, bytes: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0] = op;
    h[4..8].copy_from_slice(&count.to_le_bytes());
    h[8..].copy_from_slice(&bytes.to_le_bytes());
    h
}

/// `protocol!("...", args)`: a [`PairError::Protocol`] with a formatted message.
macro_rules! protocol {
    ($($t:tt)*) => { PairError::Protocol(format!($($t)*)) };
}
pub(crate) use protocol;

/// What went wrong on a link between two ranks, by kind: the runner tells a peer that left
/// from one that went silent from one that sent something else.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PairError {
    #[error("the peer closed the link during {0}")]
    Closed(String),
    #[error("the peer stopped answering during {0}")]
    Silent(String),
    /// It sent something the test did not expect (a stranger, a wrong round, a bad stamp).
    #[error("{0}")]
    Protocol(String),
}

impl From<String> for PairError {
    fn from(s: String) -> Self {
        PairError::Protocol(s)
    }
}

impl From<&str> for PairError {
    fn from(s: &str) -> Self {
        PairError::Protocol(s.to_string())
    }
}

fn io_err(what: &str, e: std::io::Error) -> PairError {
    use std::io::ErrorKind::*;
    match e.kind() {
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe => {
            PairError::Closed(what.to_string())
        }
        WouldBlock | TimedOut => PairError::Silent(what.to_string()),
        _ => PairError::Protocol(format!("{what}: {e}")),
    }
}

/// Stamps message `seq` (its first bytes, and its last byte).
fn stamp(msg: &mut [u8], seq: u64) {
    let k = msg.len().min(8);
    msg[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
    if msg.len() > 8 {
        let last = msg.len() - 1;
        msg[last] = seq as u8;
    }
}

fn check_stamp(msg: &[u8], seq: u64, what: &str) -> Result<(), PairError> {
    // No allocation: this runs for every message inside the timed stream.
    let k = msg.len().min(8);
    let ok =
        msg[..k] == seq.to_le_bytes()[..k] && (msg.len() <= 8 || msg[msg.len() - 1] == seq as u8);
    if ok {
        Ok(())
    } else {
        Err(protocol!(
            "{what}: message {seq} arrived out of order, repeated or corrupted"
        ))
    }
}

/// Messages in the warm-up batch of a stream at `bytes`.
fn first_batch(bytes: u64) -> u32 {
    BATCH_BYTES.div_ceil(bytes).clamp(1, FIRST_BATCH) as u32
}

/// The most messages a stream batch at `bytes` may announce.
fn max_batch(bytes: u64) -> u32 {
    (MAX_BATCH_BYTES / bytes).clamp(1, MAX_BATCH) as u32
}

/// Messages per batch after a warm-up batch of `k0` took `us`: about BATCH_TARGET long.
fn sized_batch(bytes: u64, k0: u32, us: f64) -> u32 {
    let scale = BATCH_TARGET.as_secs_f64() * 1e6 / us.max(1.0);
    ((k0 as f64 * scale) as u64).clamp(1, max_batch(bytes) as u64) as u32
}

/// Every read and write bounded by `io`; small messages sent at once.
fn configure(s: &TcpStream, io: Duration) -> Result<(), PairError> {
    s.set_read_timeout(Some(io)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(io)).map_err(|e| e.to_string())?;
    s.set_nodelay(true)
        .map_err(|e| PairError::Protocol(e.to_string()))
}

/// The driver's side of the pair: `me` connects to `peer` and measures everything in `plan`.
/// Returns what it measured; the server may measure RDMA's reverse direction itself.
pub fn drive(
    addr: &str,
    plan: &PairPlan,
    me: u32,
    peer: u32,
    round: u32,
    choice: &crate::transport::rdma::DeviceChoice,
) -> Result<Vec<Measured>, PairError> {
    let io = plan.io();
    let target: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("the address {addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&target, io)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    configure(&s, io)?;
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
) -> Result<Vec<Measured>, PairError> {
    let io = plan.io();
    let deadline = Instant::now() + io;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
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
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
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

fn summary(samples: &[f64]) -> Result<Summary, PairError> {
    Summary::of(samples).ok_or_else(|| PairError::from("no valid samples"))
}

/// Whether a test has enough: `iters` samples, or MIN_SAMPLES and its budget spent (stall
/// time not charged) or its stall cap reached.
fn enough(n: usize, clock: &TestClock, plan: &PairPlan) -> bool {
    n >= plan.iters as usize
        || (n >= MIN_SAMPLES.min(plan.iters as usize) && (clock.spent() || clock.capped()))
}

/// How many more samples fit the budget, judging by the healthy samples' mean so far.
fn chunk(n: usize, clock: &TestClock, plan: &PairPlan, cap: u32) -> u32 {
    let fit = clock.fit(clock.left_us());
    let need = MIN_SAMPLES.saturating_sub(n) as u64;
    let left = plan.iters as u64 - n as u64;
    fit.max(need).clamp(1, left.min(cap as u64)) as u32
}

/// The samples a test that its stall cap stopped still owed the plan: what its budget left
/// would have taken at its healthy pace (none when the budget, not the cap, ended it).
fn missing(n: usize, clock: &TestClock, plan: &PairPlan) -> u32 {
    match n < plan.iters as usize && clock.capped() && !clock.spent() {
        true => clock.fit(clock.left_us()).min(plan.iters as u64 - n as u64) as u32,
        false => 0,
    }
}

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
