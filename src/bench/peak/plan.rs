//! What a peak run measures: iterations, the bandwidth buffer, the dispatches of the
//! back-to-back pass; bounded before it starts. Its settings are its plan: `morphbench peak`'s
//! flags, `[peak]`'s keys and their defaults, declared once here.

use serde::{Deserialize, Serialize};

use crate::bench::flags::{de_size, parse_iters, parse_warmup};

#[derive(Debug, Clone, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PeakPlan {
    /// Timed iterations per metric.
    #[arg(long, default_value_t = PeakPlan::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per metric (at most 100000).
    #[arg(long, default_value_t = PeakPlan::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    /// Bandwidth buffer size (capped by the device's storage binding limit).
    #[arg(long, default_value_t = PeakPlan::default().bytes, value_parser = crate::units::parse_size)]
    #[serde(deserialize_with = "de_size")]
    pub bytes: u64,
    /// Empty dispatches in the back-to-back pass.
    #[arg(long, default_value_t = PeakPlan::default().dispatches)]
    pub dispatches: u32,
}

impl Default for PeakPlan {
    fn default() -> PeakPlan {
        PeakPlan {
            iters: 10,
            warmup: 2,
            bytes: 256 << 20,
            dispatches: 1000,
        }
    }
}

impl PeakPlan {
    /// Bounds the run before it starts: iterations as every bench, a buffer from 1 MiB to 4
    /// GiB, at most 100000 dispatches in the back-to-back pass.
    pub fn validate(&self) -> anyhow::Result<()> {
        crate::bench::shared::check_iters("peak.iters", self.iters)?;
        crate::bench::shared::check_warmup("peak.warmup", self.warmup)?;
        if !(1 << 20..=4 << 30).contains(&self.bytes) || !self.bytes.is_multiple_of(16) {
            return Err(anyhow::anyhow!(
                "peak.bytes = {}: give a multiple of 16 bytes from 1 MiB to 4 GiB (larger than \
                 the device's caches)",
                self.bytes
            ));
        }
        if !(1..=100_000).contains(&self.dispatches) {
            return Err(anyhow::anyhow!(
                "peak.dispatches = {}: give a count from 1 to 100000",
                self.dispatches
            ));
        }
        Ok(())
    }
}
