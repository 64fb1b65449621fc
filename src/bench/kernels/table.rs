//! kernels.csv's rows: one per kernel, size and variant (and the CPU baseline's).

use crate::record::CsvTable;

pub const BENCH: &str = "kernels";

/// `kernels.csv`: one row per kernel, size and timer.
pub struct KernelsTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KernelParams {
    /// `gemm`, `layernorm`, or a CPU baseline: `cpu_sgemm`, `memcpy`.
    pub kernel: String,
    pub variant: String,
    /// GEMM sizes (empty for layernorm and memcpy).
    pub size_m: Option<u32>,
    pub size_n: Option<u32>,
    pub size_k: Option<u32>,
    /// Layernorm and memcpy sizes (empty for GEMM).
    pub rows: Option<u32>,
    pub hidden: Option<u32>,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KernelFigures {
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    /// `gpu` (timestamps) or `host` (submit to done).
    pub timer: String,
    pub verified: bool,
    pub rel_err: f64,
    /// GEMM: GFLOP/s as a percentage of the same run's FP32 multiply-add peak (`peak`).
    pub pct_peak: Option<f64>,
    /// Layernorm: GB/s as a percentage of the same run's WGSL copy bandwidth (`peak`).
    pub pct_bw: Option<f64>,
}

impl CsvTable for KernelsTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = KernelParams;
    type Figures = KernelFigures;
    const ADDED: &'static [&'static str] = &["pct_peak", "pct_bw"];
}
