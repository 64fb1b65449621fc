//! Streams between a pair: messages written in 128 KiB writes, read and checked in order, acknowledged.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::super::tail::{Tail, TestClock};
use super::plan::PairPlan;
use super::wire::{
    check_stamp, enough, first_batch, header, io_err, missing, protocol, sized_batch, stamp,
    PairError, ACK, OP_BOTH, OP_SINK, OP_SOURCE,
};

/// Writes `count` stamped messages of `n` bytes.
/// The largest single write: a large message goes out in writes of this size (iperf3's
/// default), which keeps the socket buffer fed instead of one huge write blocking and waking.
pub(super) const WRITE_CHUNK: usize = 128 << 10;

/// Writes `count` stamped messages of `msg.len()` bytes (the buffer is the caller's, so no
/// batch pays for allocating and faulting in a fresh one).
pub(super) fn write_messages(
    s: &mut TcpStream,
    count: u32,
    msg: &mut [u8],
) -> Result<(), PairError> {
    for seq in 0..count as u64 {
        stamp(msg, seq);
        for part in msg.chunks(WRITE_CHUNK) {
            s.write_all(part).map_err(|e| io_err("a stream", e))?;
        }
    }
    Ok(())
}

/// Reads `count` messages of `n` bytes and checks their stamps, in reads of at most
/// [`WRITE_CHUNK`] into one buffer (iperf3's reads): a buffer that fits the CPU's cache, where
/// a whole 4 MiB message read at once costs the copy out of the kernel its cache misses.
pub(super) fn read_messages(
    s: &mut TcpStream,
    count: u32,
    n: usize,
    buf: &mut Vec<u8>,
) -> Result<(), PairError> {
    if n > WRITE_CHUNK {
        return read_large_messages(s, count, n, buf);
    }
    let per_read = (WRITE_CHUNK / n).max(1);
    let mut seq = 0u64;
    while seq < count as u64 {
        let k = per_read.min((count as u64 - seq) as usize);
        buf.resize(k * n, 0);
        s.read_exact(buf).map_err(|e| io_err("a stream", e))?;
        for m in buf.chunks(n) {
            check_stamp(m, seq, "stream")?;
            seq += 1;
        }
    }
    Ok(())
}

/// [`read_messages`] for messages over one read: each in reads of [`WRITE_CHUNK`], its stamp
/// checked at its first bytes and its last.
fn read_large_messages(
    s: &mut TcpStream,
    count: u32,
    n: usize,
    buf: &mut Vec<u8>,
) -> Result<(), PairError> {
    buf.resize(WRITE_CHUNK, 0);
    let (mut head, mut last) = ([0u8; 8], 0u8);
    for seq in 0..count as u64 {
        let mut left = n;
        while left > 0 {
            let k = left.min(WRITE_CHUNK);
            s.read_exact(&mut buf[..k])
                .map_err(|e| io_err("a stream", e))?;
            if left == n {
                head.copy_from_slice(&buf[..8]);
            }
            left -= k;
            last = buf[k - 1];
        }
        // As stamped: the sequence number in the first 8 bytes, its low byte last (n > 8).
        if head != seq.to_le_bytes() || last != seq as u8 {
            return Err(super::wire::protocol!(
                "stream: message {seq} arrived out of order, repeated or corrupted"
            ));
        }
    }
    Ok(())
}

/// Writes on a clone of the socket in a thread while `read` runs here.
pub(super) fn both_ways(
    s: &mut TcpStream,
    count: u32,
    msg: &mut Vec<u8>,
    buf: &mut Vec<u8>,
) -> Result<(), PairError> {
    let n = msg.len();
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let mut out = std::mem::take(msg);
    let writer = std::thread::spawn(move || {
        let r = write_messages(&mut w, count, &mut out);
        (r, out)
    });
    let read = read_messages(s, count, n, buf);
    let (wrote, out) = writer
        .join()
        .map_err(|_| "the stream writer panicked".to_string())?;
    *msg = out;
    read.and(wrote)
}

pub(super) fn read_ack(s: &mut TcpStream) -> Result<(), PairError> {
    let mut a = [0u8; 1];
    s.read_exact(&mut a).map_err(|e| io_err("a stream", e))?;
    if a[0] != ACK {
        return Err(protocol!("the peer acknowledged a stream with {:#x}", a[0]));
    }
    Ok(())
}

/// A stream batch from the driver's side, in two halves, so the next batch can be announced
/// before this one is finished.
struct Batches {
    op: u8,
    bytes: u64,
    msg: Vec<u8>,
    buf: Vec<u8>,
}

impl Batches {
    /// Announces a batch of `k` messages and, toward the server, writes them; both ways, runs
    /// the whole batch (its messages each way and its acknowledgement).
    fn start(&mut self, s: &mut TcpStream, k: u32) -> Result<(), PairError> {
        s.write_all(&header(self.op, k, self.bytes))
            .map_err(|e| io_err("a stream", e))?;
        match self.op {
            OP_SINK => write_messages(s, k, &mut self.msg),
            OP_SOURCE => Ok(()),
            _ => {
                both_ways(s, k, &mut self.msg, &mut self.buf)?;
                read_ack(s)
            }
        }
    }

    /// Waits for the oldest batch started: its acknowledgement, or its messages from the server
    /// (both ways, `start` already did).
    fn finish(&mut self, s: &mut TcpStream, k: u32) -> Result<(), PairError> {
        match self.op {
            OP_SINK => read_ack(s),
            OP_SOURCE => read_messages(s, k, self.bytes as usize, &mut self.buf),
            _ => Ok(()),
        }
    }
}

/// One stream test from the driver's side: batches until the budget (stall time not charged);
/// returns µs per message, GB/s over the whole test, and its tail in batches. One way, the next
/// batch is announced before the current one is finished, so the sender never idles waiting
/// for it (iperf3 and ib_write_bw keep their pipe full the same way): a batch's time, from the
/// end of the one before, is the link's pace, the first's alone carrying one announcement.
/// Both ways (`--bidir`) each batch ends before the next starts (its acknowledgement would
/// arrive among the next batch's messages).
pub(super) fn tcp_stream(
    s: &mut TcpStream,
    plan: &PairPlan,
    op: u8,
    bytes: u64,
) -> Result<(Vec<f64>, f64, Tail), PairError> {
    let n = bytes as usize;
    let mut b = Batches {
        op,
        bytes,
        msg: vec![0u8; n],
        buf: Vec::new(),
    };
    let k0 = first_batch(bytes);
    let warm = Instant::now();
    b.start(s, k0)?;
    b.finish(s, k0)?;
    let k = sized_batch(bytes, k0, warm.elapsed().as_secs_f64() * 1e6); // the warm-up sizes the batches
    let ahead = op != OP_BOTH;
    let mut clock = TestClock::start(plan.budget_ms);
    let (mut per_msg, mut batches, mut total_us) = (Vec::new(), Vec::new(), 0.0);
    let mut last = Instant::now();
    if ahead {
        b.start(s, k)?;
    }
    loop {
        let more = !enough(per_msg.len() + 1, &clock, plan);
        if more || !ahead {
            b.start(s, k)?; // ahead: the next batch; else this one
        }
        b.finish(s, k)?;
        let now = Instant::now();
        let us = (now - last).as_secs_f64() * 1e6;
        last = now;
        clock.note(us, us);
        total_us += us;
        per_msg.push(us / k as f64);
        batches.push(us);
        if !more {
            break;
        }
    }
    let ways = if op == OP_BOTH { 2.0 } else { 1.0 };
    let moved = ways * per_msg.len() as f64 * k as f64 * bytes as f64;
    let tail = Tail::of(&batches, missing(per_msg.len(), &clock, plan));
    Ok((per_msg, moved / total_us / 1e3, tail))
}
