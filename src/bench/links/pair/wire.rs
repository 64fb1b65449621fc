//! The pair's wire: opcodes and headers, stamped messages, the errors of a link by kind, the
//! batch sizes of a stream and when a test has enough samples.

use std::net::TcpStream;
use std::time::Duration;

use super::super::tail::TestClock;
use super::plan::{PairPlan, MIN_SAMPLES};
use crate::stats::Summary;

pub(super) const HELLO: [u8; 4] = *b"MBL1";
pub(super) const OP_END: u8 = 0;
pub(super) const OP_PING: u8 = 1;
/// The driver streams to the server.
pub(super) const OP_SINK: u8 = 2;
/// The server streams to the driver.
pub(super) const OP_SOURCE: u8 = 3;
/// Both stream at once.
pub(super) const OP_BOTH: u8 = 4;
/// The driver asks for the server's retransmission counters (8 bytes back: total, lost).
pub(super) const OP_INFO: u8 = 5;
/// The counters' answer where the server's OS has none.
pub(super) const NO_INFO: u32 = u32::MAX;
pub(super) const ACK: u8 = 0xA5;
/// A stream's warm-up batch holds about this many bytes (at least one message).
pub(super) const BATCH_BYTES: u64 = 1 << 20;
/// Later batches are sized to take about this long (judged by the warm-up), so the
/// announcement and acknowledgement of each stay a small share of it.
pub(super) const BATCH_TARGET: Duration = Duration::from_millis(5);
/// The most messages in the warm-up batch, and in any stream batch (small messages).
pub(super) const FIRST_BATCH: u64 = 4096;
pub(super) const MAX_BATCH: u64 = 16384;
pub(super) const MAX_BATCH_BYTES: u64 = 256 << 20;

pub(super) fn header(op: u8, count: u32, bytes: u64) -> [u8; 16] {
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

pub(super) fn io_err(what: &str, e: std::io::Error) -> PairError {
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
pub(super) fn stamp(msg: &mut [u8], seq: u64) {
    let k = msg.len().min(8);
    msg[..k].copy_from_slice(&seq.to_le_bytes()[..k]);
    if msg.len() > 8 {
        let last = msg.len() - 1;
        msg[last] = seq as u8;
    }
}

pub(super) fn check_stamp(msg: &[u8], seq: u64, what: &str) -> Result<(), PairError> {
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
pub(super) fn first_batch(bytes: u64) -> u32 {
    BATCH_BYTES.div_ceil(bytes).clamp(1, FIRST_BATCH) as u32
}

/// The most messages a stream batch at `bytes` may announce.
pub(super) fn max_batch(bytes: u64) -> u32 {
    (MAX_BATCH_BYTES / bytes).clamp(1, MAX_BATCH) as u32
}

/// Messages per batch after a warm-up batch of `k0` took `us`: about BATCH_TARGET long.
pub(super) fn sized_batch(bytes: u64, k0: u32, us: f64) -> u32 {
    let scale = BATCH_TARGET.as_secs_f64() * 1e6 / us.max(1.0);
    ((k0 as f64 * scale) as u64).clamp(1, max_batch(bytes) as u64) as u32
}

/// Every read and write bounded by `io`; small messages sent at once.
pub(super) fn configure(s: &TcpStream, io: Duration) -> Result<(), PairError> {
    s.set_read_timeout(Some(io)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(io)).map_err(|e| e.to_string())?;
    s.set_nodelay(true)
        .map_err(|e| PairError::Protocol(e.to_string()))
}

pub(super) fn summary(samples: &[f64]) -> Result<Summary, PairError> {
    Summary::of(samples).ok_or_else(|| PairError::from("no valid samples"))
}

/// Whether a test has enough: `iters` samples, or MIN_SAMPLES and its budget spent (stall
/// time not charged) or its stall cap reached.
pub(super) fn enough(n: usize, clock: &TestClock, plan: &PairPlan) -> bool {
    n >= plan.iters as usize
        || (n >= MIN_SAMPLES.min(plan.iters as usize) && (clock.spent() || clock.capped()))
}

/// How many more samples fit the budget, judging by the healthy samples' mean so far.
pub(super) fn chunk(n: usize, clock: &TestClock, plan: &PairPlan, cap: u32) -> u32 {
    let fit = clock.fit(clock.left_us());
    let need = MIN_SAMPLES.saturating_sub(n) as u64;
    let left = plan.iters as u64 - n as u64;
    fit.max(need).clamp(1, left.min(cap as u64)) as u32
}

/// The samples a test that its stall cap stopped still owed the plan: what its budget left
/// would have taken at its healthy pace (none when the budget, not the cap, ended it).
pub(super) fn missing(n: usize, clock: &TestClock, plan: &PairPlan) -> u32 {
    if n < plan.iters as usize && clock.capped() && !clock.spent() {
        clock.fit(clock.left_us()).min(plan.iters as u64 - n as u64) as u32
    } else {
        0
    }
}
