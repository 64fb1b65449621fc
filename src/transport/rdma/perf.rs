//! perftest-grade RDMA WRITE latency and bandwidth, the method of ib_write_lat and ib_write_bw.
//!
//! Each side's buffer has two halves: it writes from the first half of its own buffer into the
//! second half of the peer's.
//!
//! - Latency: ping-pong. The client stamps round r into the last byte of the message and writes
//!   it; the server spins on the last byte of its receive half until round r arrives, then writes
//!   its message back; the client spins likewise. One sample is the time from one round's post
//!   to the next (one round trip) / 2, as in ib_write_lat. Messages up to the queue pair's
//!   inline limit go inline.
//! - Bandwidth: the client keeps up to `window` writes outstanding, signalling every `cq_mod`-th;
//!   the last is a WRITE WITH IMM so the server learns the end. Average = bytes / (last
//!   completion - first post), and peak = the least time per write over any run of writes,
//!   from the first one's post to the last one's completion, both as ib_write_bw.
//!
//! Every message's bytes are checked at the receiver at the end of each size; a mismatch fails
//! the run.

use std::time::{Duration, Instant};

use super::oob::Params;
use super::verbs::{QpCaps, WriteFlags};
use super::{Link, LinkShape, RdmaError};

/// Whether latency, bandwidth or both run.
pub const TEST_LAT: u32 = 1;
pub const TEST_BW: u32 = 2;

/// Signal one write in this many (ib_write_bw's default cq_mod).
const CQ_MOD: u32 = 100;
/// Spins between looks at the clock while waiting for a byte.
const SPINS_PER_CLOCK_CHECK: u32 = 4096;

/// The registered buffer and queue sizes for a test (messages up to `largest` bytes).
pub fn shape(params: &Params) -> LinkShape {
    let (largest, window) = (params.largest(), params.window);
    let half = half_size(largest);
    LinkShape {
        buffer: 2 * half,
        exposed: 2 * half,
        remote_min: 2 * half as u64,
        caps: QpCaps {
            send_depth: window.max(CQ_MOD.min(window)) + 4,
            recv_depth: 8,
            max_inline: params.inline_size,
        },
    }
}

fn half_size(largest: u64) -> usize {
    (largest as usize).next_multiple_of(4096)
}

/// Byte i of a `size`-byte test message (the last byte carries the round instead).
fn pattern(size: u64, i: usize) -> u8 {
    ((i as u64).wrapping_mul(131).wrapping_add(size * 7) % 251) as u8
}

fn round_stamp(round: u32) -> u8 {
    (round % 255) as u8 + 1
}

#[derive(Debug)]
pub struct LatencyResult {
    pub bytes: u64,
    pub inline: bool,
    /// One-way latency per round, microseconds (round trip / 2), warm-up excluded.
    pub samples_us: Vec<f64>,
}

#[derive(Debug)]
pub struct BandwidthResult {
    pub bytes: u64,
    pub iters: u32,
    pub avg_gbps: f64,
    pub peak_gbps: f64,
    pub msg_rate_mpps: f64,
    /// Time per write, microseconds, over each batch of signalled completions.
    pub per_write_us: Vec<f64>,
}

/// Which end of the test this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

pub struct Session<'a> {
    pub link: &'a mut Link,
    pub role: Role,
    pub timeout: Duration,
    step: u32,
}

impl<'a> Session<'a> {
    pub fn new(link: &'a mut Link, role: Role, timeout: Duration) -> Self {
        Session {
            link,
            role,
            timeout,
            step: 0,
        }
    }

    fn half(&self) -> usize {
        self.link.mr.len() / 2
    }

    fn barrier(&mut self, ok: bool) -> Result<(), RdmaError> {
        self.step += 1;
        self.link.oob.barrier(self.step, ok)
    }

    /// Fills this side's send half with the size's pattern and clears its receive half's last
    /// byte, then meets the peer so neither writes into a buffer being reset.
    fn prepare(&mut self, size: u64) -> Result<(), RdmaError> {
        let n = size as usize;
        let msg: Vec<u8> = (0..n).map(|i| pattern(size, i)).collect();
        self.link.mr.write(0, &msg)?;
        self.link.mr.store_byte(self.half() + n - 1, 0);
        self.barrier(true)
    }

    /// Checks the receive half holds the size's pattern, with `last` in the final byte, and
    /// tells the peer whether it did.
    fn verify(&mut self, size: u64, last: Option<u8>) -> Result<(), RdmaError> {
        let n = size as usize;
        let mut got = vec![0u8; n];
        self.link.mr.read(self.half(), &mut got)?;
        let bad = (0..n.saturating_sub(1))
            .find(|&i| got[i] != pattern(size, i))
            .map(|i| {
                format!(
                    "byte {i} of a {size}-byte message is {}, expected {}",
                    got[i],
                    pattern(size, i)
                )
            })
            .or_else(|| match last {
                Some(v) if got[n - 1] != v => Some(format!(
                    "last byte of a {size}-byte message is {}, expected {v}",
                    got[n - 1]
                )),
                _ => None,
            });
        self.barrier(bad.is_none())?;
        match bad {
            Some(m) => Err(RdmaError::Verify(m)),
            None => Ok(()),
        }
    }

    /// One ping-pong write of the first `n` bytes into the peer's half at `half`, its completion
    /// reaped before it returns (as ib_write_lat does each round).
    fn write_and_reap(&self, n: usize, half: usize, flags: WriteFlags) -> Result<(), RdmaError> {
        let remote = self.link.remote;
        self.link
            .qp
            .write(&self.link.mr, 0, n, &remote, half as u64, flags)?;
        self.link.cq.wait(self.timeout)?;
        Ok(())
    }

    fn spin_until(&self, offset: usize, value: u8, what: &str) -> Result<(), RdmaError> {
        // The clock is read only once the byte is late: a read costs microseconds on some
        // hosts, and would land inside the round trip being measured.
        let mut start = None;
        loop {
            for _ in 0..SPINS_PER_CLOCK_CHECK {
                // No pause hint between looks, as ib_write_lat's loop: a pause costs up to
                // ~140 cycles on hardware, and under emulation (QEMU's TCG) leaves the
                // translated code each time, late to see the byte (docs/measured.md).
                if self.link.mr.load_byte(offset) == value {
                    return Ok(());
                }
            }
            let start = *start.get_or_insert_with(Instant::now);
            if start.elapsed() > self.timeout {
                return Err(RdmaError::Timeout(format!(
                    "{what} did not arrive within {:?} (the peer died or stalled)",
                    self.timeout
                )));
            }
        }
    }

    /// The ib_write_lat ping-pong at one size.
    pub fn latency(
        &mut self,
        size: u64,
        iters: u32,
        warmup: u32,
    ) -> Result<LatencyResult, RdmaError> {
        self.prepare(size)?;
        let n = size as usize;
        let half = self.half();
        let inline = size <= self.link.qp.max_inline() as u64;
        // As ib_write_lat: one timestamp per round, at its post; a sample is the time between
        // two posts (one round trip) / 2. One clock read per round keeps the overhead low.
        let mut stamps = Vec::with_capacity(iters as usize + 1);
        let rounds = warmup + iters;
        let mut last = 0;
        for r in 0..rounds {
            let v = round_stamp(r);
            last = v;
            // As ib_write_lat, every write is signalled and its completion reaped right after
            // its post, before the wait for the peer's byte: each round trip pays one poll,
            // as perftest's do (docs/measured.md).
            let flags = WriteFlags {
                signaled: true,
                inline,
                imm: None,
                wr_id: r as u64,
            };
            match self.role {
                Role::Client => {
                    self.link.mr.store_byte(n - 1, v);
                    if r >= warmup {
                        stamps.push(Instant::now());
                    }
                    self.write_and_reap(n, half, flags)?;
                    self.spin_until(half + n - 1, v, "the server's reply")?;
                    if r + 1 == rounds {
                        stamps.push(Instant::now());
                    }
                }
                Role::Server => {
                    self.spin_until(half + n - 1, v, "the client's message")?;
                    self.link.mr.store_byte(n - 1, v);
                    self.write_and_reap(n, half, flags)?;
                }
            }
        }
        self.verify(size, Some(last))?;
        Ok(LatencyResult {
            bytes: size,
            inline,
            samples_us: stamps
                .windows(2)
                .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / 2.0)
                .collect(),
        })
    }

    /// The ib_write_bw stream at one size. The server only receives; its result is None.
    pub fn bandwidth(
        &mut self,
        size: u64,
        iters: u32,
        window: u32,
    ) -> Result<Option<BandwidthResult>, RdmaError> {
        let half = self.half();
        if self.role == Role::Server {
            // One receive for the closing WRITE WITH IMM, posted before the barrier.
            self.link.qp.post_recv(&self.link.mr, 0, 0, u64::MAX)?;
        }
        self.prepare(size)?;
        if self.role == Role::Server {
            let c = self.link.cq.wait(
                self.timeout
                    + Duration::from_secs_f64(
                        // Generous: the whole stream at 1 MB/s.
                        size as f64 * iters as f64 / 1e6,
                    ),
            )?;
            if c.imm != Some(iters) {
                return Err(RdmaError::Verify(format!(
                    "the closing write carried {:?}, expected {iters}",
                    c.imm
                )));
            }
            self.verify(size, None)?;
            return Ok(None);
        }
        let n = size as usize;
        let cq_mod = CQ_MOD.min(window);
        let remote = self.link.remote;
        // As ib_write_bw, every post is stamped (for the peak below).
        let mut posted_at: Vec<Instant> = Vec::with_capacity(iters as usize);
        // (index of the last write in the batch, completion time)
        let mut completed_at: Vec<(u32, Instant)> =
            Vec::with_capacity((iters / cq_mod) as usize + 1);
        let (mut posted, mut completed) = (0u32, 0u32);
        while completed < iters {
            while posted < iters && posted - completed < window {
                let last = posted + 1 == iters;
                let flags = WriteFlags {
                    signaled: (posted + 1).is_multiple_of(cq_mod) || last,
                    inline: false,
                    imm: last.then_some(iters),
                    wr_id: posted as u64,
                };
                posted_at.push(Instant::now());
                self.link
                    .qp
                    .write(&self.link.mr, 0, n, &remote, half as u64, flags)?;
                posted += 1;
            }
            if let Some(c) = self.link.cq.poll()? {
                completed = c.wr_id as u32 + 1;
                completed_at.push((c.wr_id as u32, Instant::now()));
            } else if posted == iters || posted - completed >= window {
                // Nothing more to post: wait (bounded) for the next completion.
                let c = self.link.cq.wait(self.timeout)?;
                completed = c.wr_id as u32 + 1;
                completed_at.push((c.wr_id as u32, Instant::now()));
            }
        }
        // Meets the server's `verify`: fails here if the bytes it received were wrong.
        self.barrier(true)?;
        let first = posted_at[0];
        let (_, end) = *completed_at.last().expect("at least one completion");
        let total_s = (end - first).as_secs_f64();
        let bytes = size as f64 * iters as f64;
        let mut per_write_us = Vec::with_capacity(completed_at.len());
        let mut prev: Option<(u32, Instant)> = None;
        for &(j, t) in &completed_at {
            let batch = j + 1 - prev.map_or(0, |(p, _)| p + 1);
            let since = prev.map_or(first, |(_, tp)| tp);
            per_write_us.push((t - since).as_secs_f64() * 1e6 / batch as f64);
            prev = Some((j, t));
        }
        let avg_gbps = bytes / total_s / 1e9;
        let peak = peak_gbps(size, &posted_at, &completed_at, cq_mod);
        Ok(Some(BandwidthResult {
            bytes: size,
            iters,
            avg_gbps,
            peak_gbps: peak.max(avg_gbps),
            msg_rate_mpps: iters as f64 / total_s / 1e6,
            per_write_us,
        }))
    }
}

/// ib_write_bw's peak: the least time per write over any run of writes i..=j, from the post of
/// i to the completion of j (a write completes with the signalled one that follows it). Long
/// streams look back at most 64 batches, from batch starts only, to bound the work.
fn peak_gbps(
    size: u64,
    posted_at: &[Instant],
    completed_at: &[(u32, Instant)],
    cq_mod: u32,
) -> f64 {
    let exhaustive = posted_at.len() <= 20_000;
    let stride = if exhaustive { 1 } else { cq_mod as usize };
    let reach = if exhaustive {
        usize::MAX
    } else {
        64 * cq_mod as usize
    };
    let mut best = f64::INFINITY;
    for &(j, t) in completed_at {
        let j = j as usize;
        for i in (j.saturating_sub(reach)..=j).step_by(stride) {
            let per_write = (t - posted_at[i]).as_secs_f64() / (j - i + 1) as f64;
            if per_write > 0.0 {
                best = best.min(per_write);
            }
        }
    }
    size as f64 / best / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_is_the_least_time_per_write_over_any_run() {
        let t0 = Instant::now();
        let ms = |x: u64| t0 + Duration::from_millis(x);
        // Writes 0-3 posted at 0 ms; batch 0..=1 completes at 10 ms, 2..=3 at 12 ms.
        let posted = [ms(0), ms(0), ms(0), ms(0)];
        let completed = [(1, ms(10)), (3, ms(12))];
        // Best run: 0..=3, 12 ms for 4 writes = 3 ms per write.
        let peak = peak_gbps(3_000_000, &posted, &completed, 2);
        assert!((peak - 1.0).abs() < 1e-9, "{peak}");
        // A late post makes a short run faster: write 3 posted at 11.5 ms, done at 12 ms.
        let posted = [ms(0), ms(0), ms(0), t0 + Duration::from_micros(11_500)];
        let peak = peak_gbps(3_000_000, &posted, &completed, 2);
        assert!((peak - 6.0).abs() < 1e-6, "{peak}");
    }

    #[test]
    fn round_stamps_never_repeat_between_neighbours_and_are_never_zero() {
        for r in 0..1000 {
            assert_ne!(round_stamp(r), 0);
            assert_ne!(round_stamp(r), round_stamp(r + 1));
        }
    }
}
