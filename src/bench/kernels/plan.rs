//! What a kernels sweep runs: sizes, iterations, variants, the CPU baseline; and its cost,
//! bounded before it starts.

use crate::gpu::kernels::{GemmSize, LayernormSize};

/// What to run: sizes, iteration counts, and optionally forced variants.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KernelsPlan {
    pub gemm: Vec<GemmSize>,
    pub layernorm: Vec<LayernormSize>,
    pub iters: u32,
    pub warmup: u32,
    /// `None` or "auto": measured selection.
    pub gemm_variant: Option<String>,
    pub layernorm_variant: Option<String>,
    pub cpu_baseline: bool,
    /// Ignore the cached variant choice and probe again.
    pub reselect: bool,
}

/// The most floating-point work one kernels run may ask for (GEMM flops over every timed and
/// warm-up iteration, CPU baseline included): about 80 minutes at lavapipe's 40 GFLOP/s, a
/// few seconds on a datacenter GPU.
pub const MAX_FLOPS: f64 = 2e14;
/// The most bytes one run may move (layernorm and memcpy over every iteration).
pub const MAX_BYTES: f64 = 1e13;

impl KernelsPlan {
    /// Refuses, before anything runs, a sweep whose work is over the caps.
    pub fn check_cost(&self) -> anyhow::Result<()> {
        let runs = (self.iters + self.warmup) as f64 * if self.cpu_baseline { 2.0 } else { 1.0 };
        let flops: f64 = self.gemm.iter().map(|s| s.flops()).sum::<f64>() * runs;
        if flops > MAX_FLOPS {
            return Err(anyhow::anyhow!(
                "this sweep asks for {flops:.2e} GEMM flops, over the cap of {MAX_FLOPS:.0e}: \
                 fewer sizes or iterations"
            ));
        }
        let bytes: f64 = self.layernorm.iter().map(|s| s.bytes_moved()).sum::<f64>() * runs;
        if bytes > MAX_BYTES {
            return Err(anyhow::anyhow!(
                "this sweep moves {bytes:.2e} bytes, over the cap of {MAX_BYTES:.0e}: fewer \
                 sizes or iterations"
            ));
        }
        Ok(())
    }

    pub fn points(&self) -> u64 {
        let per = if self.cpu_baseline { 2 } else { 1 };
        ((self.gemm.len() + self.layernorm.len()) * per) as u64
    }
}
