//! What a peak run measures: iterations, the bandwidth buffer, the dispatches of the
//! back-to-back pass; bounded before it starts.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct PeakPlan {
    pub iters: u32,
    pub warmup: u32,
    /// The bandwidth buffers' size (capped by the device's binding limit).
    pub bytes: u64,
    /// Dispatches in the back-to-back pass.
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
    pub fn validate(&self) -> Result<(), String> {
        crate::bench::shared::check_iters("peak.iters", self.iters)?;
        crate::bench::shared::check_warmup("peak.warmup", self.warmup)?;
        if !(1 << 20..=4 << 30).contains(&self.bytes) || !self.bytes.is_multiple_of(16) {
            return Err(format!(
                "peak.bytes = {}: give a multiple of 16 bytes from 1 MiB to 4 GiB (larger than \
                 the device's caches)",
                self.bytes
            ));
        }
        if !(1..=100_000).contains(&self.dispatches) {
            return Err(format!(
                "peak.dispatches = {}: give a count from 1 to 100000",
                self.dispatches
            ));
        }
        Ok(())
    }
}
