//! peak.csv's rows, and the ceilings a run found (what kernels and the roofline compare to).

use serde::{Deserialize, Serialize};

use crate::record::csv::{CsvTable, Line};

/// The bench's name, as in its config table and its CSV.
pub const BENCH: &str = "peak";

/// `peak.csv`: one row per metric and variant.
pub struct PeakTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeakParams {
    /// `fma`, `bandwidth`, `dispatch` or `timestamp`.
    pub metric: String,
    /// `scalar`/`vec4` (the fma builtin), `mad_scalar`/`mad_vec4` (a * b + c) (fma);
    /// `read`/`write`/`copy` (element-strided), `read_chunk`/`write_chunk`/`copy_chunk` (8
    /// contiguous elements per invocation), `copy_u64`/`copy_u64_chunk` (the same copies
    /// moving vec4<u64>, with 64-bit shader integers), `buffer_copy` (bandwidth);
    /// `latency`/`back_to_back` (dispatch); `tick` (timestamp).
    pub variant: String,
    /// The work of one timed iteration: flops, or bytes read plus bytes written.
    pub bytes_or_flops: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeakFigures {
    /// From the median iteration, like every other table's rates.
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    /// `gpu` (timestamps) or `host` (submit to done).
    pub timer: String,
    pub verified: bool,
    /// From the best (fastest) iteration: what the ceilings are. Noise only ever slows a kernel
    /// down, so the best iteration is what the device can do; the median moves with a
    /// machine's slow spells (lavapipe's copy kernels ran at about 4 or about 8 GB/s, changing
    /// between dispatches or between runs).
    pub best_gflops: Option<f64>,
    pub best_gbps: Option<f64>,
}

impl PeakFigures {
    /// The best iteration's GFLOP/s, or the median's in a peak.csv from before `best_gflops`.
    pub fn ceiling_gflops(&self) -> Option<f64> {
        self.best_gflops.or(self.gflops)
    }

    /// The best iteration's GB/s, or the median's in a peak.csv from before `best_gbps`.
    pub fn ceiling_gbps(&self) -> Option<f64> {
        self.best_gbps.or(self.gbps)
    }
}

impl CsvTable for PeakTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = PeakParams;
    type Figures = PeakFigures;
    const ADDED: &'static [&'static str] = &["best_gflops", "best_gbps"];
}

/// The ceilings other benches are read against.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ceilings {
    /// The best FP32 multiply-add rate (any of the four forms, best iteration), GFLOP/s.
    pub fma_gflops: f64,
    /// The best copy kernel's bandwidth (bytes read plus written, best iteration), GB/s.
    pub copy_gbps: f64,
}

impl Ceilings {
    /// The ceilings a run's peak.csv holds, if it has them.
    pub fn from_rows(rows: &[Line<PeakTable>]) -> Option<Ceilings> {
        Some(Ceilings {
            fma_gflops: fma_ceiling_row(rows)?.1,
            copy_gbps: copy_ceiling_row(rows)?.1,
        })
    }
}

/// The row the FP32 ceiling comes from (the fastest of the FMA forms) and its rate.
pub fn fma_ceiling_row(rows: &[Line<PeakTable>]) -> Option<(usize, f64)> {
    fastest(
        rows,
        |l| l.params.metric == "fma",
        PeakFigures::ceiling_gflops,
    )
}

/// The row the copy ceiling comes from (the fastest copy kernel, not the buffer-to-buffer
/// copy) and its rate.
pub fn copy_ceiling_row(rows: &[Line<PeakTable>]) -> Option<(usize, f64)> {
    let copy = |l: &Line<PeakTable>| {
        l.params.metric == "bandwidth" && l.params.variant.starts_with("copy")
    };
    fastest(rows, copy, PeakFigures::ceiling_gbps)
}

fn fastest(
    rows: &[Line<PeakTable>],
    keep: impl Fn(&Line<PeakTable>) -> bool,
    rate: fn(&PeakFigures) -> Option<f64>,
) -> Option<(usize, f64)> {
    rows.iter()
        .enumerate()
        .filter(|(_, l)| keep(l))
        .filter_map(|(i, l)| Some((i, rate(&l.figures)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}
