//! What a pair measures (transports, sizes, directions, the budget of each test) and what it
//! reports to rank 0.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::super::tail::Tail;
use crate::stats::hist::LogHist;
use crate::stats::Summary;
use crate::transport::TransportKind;

/// Fewest samples a test keeps, whatever its time budget.
/// The most messages one header may announce.
pub(super) const MAX_COUNT: u32 = 1 << 16;
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
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.transports.is_empty() {
            return Err(anyhow::anyhow!("--transport: give tcp, rdma or tcp,rdma"));
        }
        if self.sizes.is_empty() {
            return Err(anyhow::anyhow!(
                "--sizes: give at least one size, such as 8,64K,4M"
            ));
        }
        if let Some(s) = self.sizes.iter().find(|&&s| s == 0 || s > MAX_BYTES) {
            return Err(anyhow::anyhow!(
                "--sizes: {s} B is outside 1 B ..= 256 MiB; give sizes such as 8,64K,4M"
            ));
        }
        if self.iters == 0 || self.iters > MAX_COUNT * 16 {
            return Err(anyhow::anyhow!(
                "--iters {}: give 1 to {}",
                self.iters,
                MAX_COUNT * 16
            ));
        }
        if self.budget_ms == 0 || self.budget_ms > 60_000 {
            return Err(anyhow::anyhow!(
                "--budget-ms {}: give 1 to 60000",
                self.budget_ms
            ));
        }
        if self.io_timeout_s == 0 || self.io_timeout_s > 3600 {
            return Err(anyhow::anyhow!(
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
    /// cap ([`super::super::tail::STALL_CAP`] budgets), and its last sample may take up to the I/O
    /// limit.
    pub fn pair_bound(&self) -> Duration {
        let tests = self.tests() as u64;
        let cap = super::super::tail::STALL_CAP as u64 + 1;
        Duration::from_millis(tests * (self.budget_ms * cap + self.io_timeout_s * 1000))
            + Duration::from_secs(10)
    }

    pub(super) fn io(&self) -> Duration {
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
    /// The samples' distribution (µs, as the summary's), for what a tail costs a pipeline
    /// (`sim --from`; links_hist.csv).
    #[serde(default)]
    pub hist: LogHist,
}

/// The directions a row may have.
const DIRECTIONS: [&str; 3] = ["pingpong", "oneway", "bidir"];

impl Measured {
    /// Why a row another rank reported is refused, if it is: rank 0 keeps a rank's rows only
    /// for the pair it played (`pair`), at the plan's sizes and transports, with finite
    /// figures and a tail of bounded length. Nothing in a refused row reaches a table.
    pub fn fault(&self, plan: &PairPlan, pair: (u32, u32)) -> Option<String> {
        let (a, b) = pair;
        let s = &self.summary;
        let figures = [
            s.mean, s.stddev, s.min, s.p50, s.p90, s.p99, s.p999, s.max, s.cv,
        ];
        let tail = &self.tail;
        if !((self.src, self.dst) == (a, b) || (self.src, self.dst) == (b, a)) {
            Some(format!(
                "a row for {}-{}, a pair it did not play",
                self.src, self.dst
            ))
        } else if !plan.sizes.contains(&self.bytes) || !plan.transports.contains(&self.transport) {
            Some(format!(
                "a row of {} bytes over {:?}, outside the plan",
                self.bytes, self.transport
            ))
        } else if !DIRECTIONS.contains(&self.direction.as_str()) {
            Some("a row of no known direction".into())
        } else if !figures.iter().all(|f| f.is_finite() && *f >= 0.0)
            || self.gbps.is_some_and(|g| !g.is_finite() || g < 0.0)
            || s.n > MAX_COUNT as usize * 16
        {
            Some("a row whose figures are not finite and non-negative".into())
        } else if tail.over_floor_us.len() > super::super::tail::MAX_KEPT
            || !tail.over_floor_us.iter().all(|f| f.is_finite())
            || !(tail.p99_us.is_finite() && tail.p50_us.is_finite())
        {
            Some("a row whose tail is out of bounds".into())
        } else if let Err(why) = self.hist.check() {
            Some(format!("a row whose histogram is malformed: {why}"))
        } else if self.hist.count() > s.n as u64 {
            Some("a row whose histogram holds more samples than its n".into())
        } else {
            None
        }
    }
}
