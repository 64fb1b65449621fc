//! How a sweep point becomes rows: the GPU's timed passes and the CPU baseline, summarized,
//! judged against the device's ceilings, written as each point finishes.

use anyhow::{Context, Result};

use super::table::{KernelFigures, KernelParams, KernelsTable, BENCH};
use crate::bench::peak::Ceilings;
use crate::gpu::kernels::{GemmSize, LayernormSize, Verification};
use crate::gpu::timing::IterationTimes;
use crate::output::Progress;
use crate::record::csv::{round, sig, sig4, SamplesTable};
use crate::record::{CsvSink, Line, RunDir};
use crate::stats::Summary;

/// Medians of one point, for the summary the caller prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PointResult {
    pub kernel: &'static str,
    pub variant: String,
    pub size: String,
    pub median_us: f64,
    /// GFLOP/s for GEMM and SGEMM, GB/s for layernorm and memcpy.
    pub throughput: f64,
    pub timer: &'static str,
}

pub(super) struct Writer<'a> {
    pub(super) run: &'a RunDir,
    /// The device's ceilings measured in the same run, that rows are a share of.
    pub(super) ceilings: Option<Ceilings>,
    pub(super) table: CsvSink<KernelsTable>,
    pub(super) samples: Option<CsvSink<SamplesTable>>,
    pub(super) results: Vec<PointResult>,
    pub(super) progress: &'a Progress,
}

pub(super) enum Size {
    Gemm(GemmSize),
    Layernorm(LayernormSize),
    /// A host copy of a layernorm's input: read + written = 2 x its bytes.
    Memcpy(LayernormSize),
}

impl Size {
    fn params(&self, kernel: &str, variant: &str) -> KernelParams {
        let mut p = KernelParams {
            kernel: kernel.to_string(),
            variant: variant.to_string(),
            ..Default::default()
        };
        match self {
            Size::Gemm(s) => (p.size_m, p.size_n, p.size_k) = (Some(s.m), Some(s.n), Some(s.k)),
            Size::Layernorm(s) | Size::Memcpy(s) => {
                (p.rows, p.hidden) = (Some(s.rows), Some(s.hidden))
            }
        }
        p
    }
    fn label(&self) -> String {
        match self {
            Size::Gemm(s) => s.to_string(),
            Size::Layernorm(s) | Size::Memcpy(s) => s.to_string(),
        }
    }
    /// (gflops, gbps) for a time in µs.
    fn throughput(&self, us: f64) -> (Option<f64>, Option<f64>) {
        match self {
            Size::Gemm(s) => (Some(s.flops() / us / 1e3), None),
            Size::Layernorm(s) => (None, Some(s.bytes_moved() / us / 1e3)),
            Size::Memcpy(s) => (None, Some(s.elements() as f64 * 8.0 / us / 1e3)),
        }
    }
}

impl Writer<'_> {
    pub(super) fn row(
        &mut self,
        kernel: &'static str,
        variant: &str,
        size: &Size,
        timer: &'static str,
        samples: &[f64],
        v: Verification,
    ) -> Result<()> {
        let s = Summary::of(samples).context("no valid timing samples")?;
        let case = format!("{kernel} {}", size.label());
        let (gflops, gbps) = size.throughput(s.p50);
        // Only the device's kernels are a share of the device's ceilings, not the CPU baselines.
        let on_device = matches!(kernel, "gemm" | "layernorm");
        let share = |x: Option<f64>, ceiling: fn(&Ceilings) -> f64| {
            let c = self.ceilings.as_ref().filter(|_| on_device)?;
            Some(round(100.0 * x? / ceiling(c), 1))
        };
        let figures = KernelFigures {
            gflops: gflops.map(sig4),
            gbps: gbps.map(sig4),
            timer: timer.to_string(),
            verified: true,
            rel_err: sig(v.rel_err, 4),
            pct_peak: share(gflops, |c| c.fma_gflops),
            pct_bw: share(gbps, |c| c.copy_gbps),
        };
        self.table.write(&Line::new(
            &self.run.id,
            &case,
            size.params(kernel, variant),
            Some(&s),
            figures,
        ))?;
        if let Some(raw) = &mut self.samples {
            raw.samples(&self.run.id, BENCH, &case, timer, samples)?;
        }
        let throughput = gflops.or(gbps).unwrap_or(0.0);
        let unit = if gflops.is_some() { "GFLOP/s" } else { "GB/s" };
        self.progress.println(format!(
            "{kernel:<10} {variant:<22} {:<16} p50 {:>11.1} µs  {throughput:>9.2} {unit:<7} [{timer}] rel_err {:.1e}",
            size.label(),
            s.p50,
            v.rel_err
        ));
        self.results.push(PointResult {
            kernel,
            variant: variant.to_string(),
            size: size.label(),
            median_us: s.p50,
            throughput,
            timer,
        });
        Ok(())
    }

    /// Writes the GPU-timestamp row and the host-clock row of one GPU point.
    pub(super) fn gpu_rows(
        &mut self,
        kernel: &'static str,
        variant: &str,
        size: &Size,
        t: &IterationTimes,
        v: Verification,
    ) -> Result<()> {
        let host = Summary::of(&t.host_us).context("no host samples")?;
        match &t.gpu_us {
            Some(gpu_us) => {
                let gpu = Summary::of(gpu_us).context("no GPU samples")?;
                let gap = (host.p50 - gpu.p50).abs() / gpu.p50.max(1e-9);
                if gap > 0.10 {
                    self.progress.println(format!(
                        "note: {kernel} {}: GPU timestamps and host clock disagree by {:.0}% \
                         (p50 {:.1} vs {:.1} µs); the host figure includes submit and wake-up",
                        size.label(),
                        gap * 100.0,
                        gpu.p50,
                        host.p50
                    ));
                }
                self.row(kernel, variant, size, "gpu", gpu_us, v)?;
            }
            None => self.progress.println(format!(
                "note: {kernel} {}: {}; host clock only",
                size.label(),
                t.gpu_rejected
                    .as_deref()
                    .unwrap_or("adapter has no timestamp queries")
            )),
        }
        self.row(kernel, variant, size, "host", &t.host_us, v)
    }
}

pub(super) fn cpu_threads() -> usize {
    // matrixmultiply reads MATMUL_NUM_THREADS once; main sets it to every core (it caps at 4).
    std::env::var("MATMUL_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}
