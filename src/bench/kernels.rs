//! The `kernels` bench: GEMM and layernorm sweeps on the GPU, each point verified before it is
//! timed, with native CPU baseline rows (SGEMM, memcpy) measured in the same run.

use std::time::Instant;

use anyhow::{Context, Result};

use serde::{Deserialize, Serialize};

use super::check_iters;
use super::peak::{Ceilings, PeakTable};
use crate::gpu::kernels::gemm::{cpu_sgemm, verify_dense};
use crate::gpu::kernels::select::{choose, first_fitting, Selection, SKIPPED};
use crate::gpu::kernels::sizes::{parse_gemm, parse_layernorm};
use crate::gpu::kernels::{
    GemmKernel, GemmSize, GpuKernel, LayernormKernel, LayernormSize, Verification, GEMM_VARIANTS,
    LAYERNORM_VARIANTS,
};
use crate::gpu::timing::{time_compute_passes, IterationTimes};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::csv::{round, sig, sig4, SamplesTable};
use crate::record::read_optional;
use crate::record::{CsvSink, CsvTable, Line, RunDir};
use crate::stats::Summary;

mod sweeps;
#[allow(unused_imports)]
pub use sweeps::*;

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

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KernelsConfig {
    /// GEMM sizes as "MxNxK".
    #[serde(default)]
    pub gemm: Vec<String>,
    /// Layernorm sizes as "ROWSxHIDDEN".
    #[serde(default)]
    pub layernorm: Vec<String>,
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
    /// "auto" (measured selection) or a variant name.
    pub gemm_variant: Option<String>,
    pub layernorm_variant: Option<String>,
    pub cpu_baseline: Option<bool>,
}

impl KernelsConfig {
    pub fn plan(&self) -> Result<KernelsPlan, String> {
        let gemm = self
            .gemm
            .iter()
            .map(|s| parse_gemm(s).map_err(|e| format!("kernels.gemm: {e}")))
            .collect::<Result<_, _>>()?;
        let layernorm = self
            .layernorm
            .iter()
            .map(|s| parse_layernorm(s).map_err(|e| format!("kernels.layernorm: {e}")))
            .collect::<Result<_, _>>()?;
        let d = KernelsPlan::default();
        let plan = KernelsPlan {
            gemm,
            layernorm,
            iters: self.iters.unwrap_or(d.iters),
            warmup: self.warmup.unwrap_or(d.warmup),
            gemm_variant: self.gemm_variant.clone().or(d.gemm_variant),
            layernorm_variant: self.layernorm_variant.clone().or(d.layernorm_variant),
            cpu_baseline: self.cpu_baseline.unwrap_or(d.cpu_baseline),
            reselect: d.reselect,
        };
        check_iters("kernels.iters", plan.iters)?;
        super::check_warmup("kernels.warmup", plan.warmup)?;
        plan.check_cost()?;
        Ok(plan)
    }
}

/// `[kernels]` in a suite config.
pub fn from_toml(v: toml::Value) -> Result<Box<dyn crate::suite::Bench>, String> {
    Ok(Box::new(super::table::<KernelsConfig>(v)?.plan()?))
}

impl Default for KernelsPlan {
    fn default() -> Self {
        // No sizes: a sweep names its own (`kernels` refuses an empty one).
        KernelsPlan {
            gemm: Vec::new(),
            layernorm: Vec::new(),
            iters: 20,
            warmup: 3,
            gemm_variant: None,
            layernorm_variant: None,
            cpu_baseline: true,
            reselect: false,
        }
    }
}

impl crate::suite::Bench for KernelsPlan {
    fn name(&self) -> &'static str {
        BENCH
    }
    fn points(&self) -> u64 {
        KernelsPlan::points(self)
    }
    fn run(
        &self,
        gpu: Option<&Gpu>,
        dir: &RunDir,
        progress: &Progress,
    ) -> Result<crate::suite::Notes> {
        let (_, selections) = run(super::need_gpu(gpu, BENCH)?, self, dir, progress)?;
        super::note("variant_selection", selections)
    }
}

/// The most floating-point work one kernels run may ask for (GEMM flops over every timed and
/// warm-up iteration, CPU baseline included): about 80 minutes at lavapipe's 40 GFLOP/s, a
/// few seconds on a datacenter GPU.
pub const MAX_FLOPS: f64 = 2e14;
/// The most bytes one run may move (layernorm and memcpy over every iteration).
pub const MAX_BYTES: f64 = 1e13;

impl KernelsPlan {
    /// Refuses, before anything runs, a sweep whose work is over the caps.
    pub fn check_cost(&self) -> Result<(), String> {
        let runs = (self.iters + self.warmup) as f64 * if self.cpu_baseline { 2.0 } else { 1.0 };
        let flops: f64 = self.gemm.iter().map(|s| s.flops()).sum::<f64>() * runs;
        if flops > MAX_FLOPS {
            return Err(format!(
                "this sweep asks for {flops:.2e} GEMM flops, over the cap of {MAX_FLOPS:.0e}: \
                 fewer sizes or iterations"
            ));
        }
        let bytes: f64 = self.layernorm.iter().map(|s| s.bytes_moved()).sum::<f64>() * runs;
        if bytes > MAX_BYTES {
            return Err(format!(
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

struct Writer<'a> {
    run: &'a RunDir,
    /// The device's ceilings measured in the same run, that rows are a share of.
    ceilings: Option<Ceilings>,
    table: CsvSink<KernelsTable>,
    samples: Option<CsvSink<SamplesTable>>,
    results: Vec<PointResult>,
}

enum Size {
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
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        kernel: &'static str,
        variant: &str,
        size: &Size,
        timer: &'static str,
        samples: &[f64],
        v: Verification,
        progress: &Progress,
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
        progress.println(format!(
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
    fn gpu_rows(
        &mut self,
        kernel: &'static str,
        variant: &str,
        size: &Size,
        t: &IterationTimes,
        v: Verification,
        progress: &Progress,
    ) -> Result<()> {
        let host = Summary::of(&t.host_us).context("no host samples")?;
        match &t.gpu_us {
            Some(gpu_us) => {
                let gpu = Summary::of(gpu_us).context("no GPU samples")?;
                let gap = (host.p50 - gpu.p50).abs() / gpu.p50.max(1e-9);
                if gap > 0.10 {
                    progress.println(format!(
                        "note: {kernel} {}: GPU timestamps and host clock disagree by {:.0}% \
                         (p50 {:.1} vs {:.1} µs); the host figure includes submit and wake-up",
                        size.label(),
                        gap * 100.0,
                        gpu.p50,
                        host.p50
                    ));
                }
                self.row(kernel, variant, size, "gpu", gpu_us, v, progress)?;
            }
            None => progress.println(format!(
                "note: {kernel} {}: {}; host clock only",
                size.label(),
                t.gpu_rejected
                    .as_deref()
                    .unwrap_or("adapter has no timestamp queries")
            )),
        }
        self.row(kernel, variant, size, "host", &t.host_us, v, progress)
    }
}

fn cpu_threads() -> usize {
    // matrixmultiply reads MATMUL_NUM_THREADS once; main sets it to every core (it caps at 4).
    std::env::var("MATMUL_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn time_host(warmup: u32, iters: u32, mut f: impl FnMut()) -> Vec<f64> {
    for _ in 0..warmup {
        f();
    }
    (0..iters)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

/// Runs the plan, writing `kernels.csv` row by row. Returns the medians and the selections.
pub fn run(
    gpu: &Gpu,
    plan: &KernelsPlan,
    run: &RunDir,
    progress: &Progress,
) -> Result<(Vec<PointResult>, Vec<Selection>)> {
    // Every size must fit the device before anything runs.
    for &size in &plan.gemm {
        GemmKernel::check_fits(gpu, size)?;
    }
    for &size in &plan.layernorm {
        LayernormKernel::check_fits(gpu, size)?;
    }
    let ceilings = match read_optional::<PeakTable>(&run.path)?
        .and_then(|rows| Ceilings::from_rows(&rows))
    {
        Some(c) => c,
        None => {
            progress.println(
                "kernels: no peak.csv in this run; measuring the device's ceilings briefly".into(),
            );
            super::peak::quick_ceilings(gpu)?
        }
    };
    progress.println(format!(
        "kernels: shares of this run's ceilings: FP32 peak {:.1} GFLOP/s, copy {:.1} GB/s",
        ceilings.fma_gflops, ceilings.copy_gbps
    ));
    let mut w = Writer {
        run,
        ceilings: Some(ceilings),
        table: run.table()?,
        samples: run.samples_table(BENCH)?,
        results: Vec::new(),
    };
    let mut selections = Vec::new();

    if !plan.gemm.is_empty() {
        sweep_gemm(gpu, plan, &mut w, &mut selections, progress)?;
    }
    if !plan.layernorm.is_empty() {
        sweep_layernorm(gpu, plan, &mut w, &mut selections, progress)?;
    }
    Ok((w.results, selections))
}

fn selection_line(sel: &Selection) -> String {
    let trials: Vec<String> = sel
        .trials
        .iter()
        .map(|t| match t.median_us {
            Some(us) => format!("{} {:.0} µs", t.variant, us),
            None if t.note.starts_with(SKIPPED) => format!("{} skipped", t.variant),
            None => format!("{} failed", t.variant),
        })
        .collect();
    format!(
        "{} variant: {}{} (probe {}: {})",
        sel.kernel,
        sel.winner,
        if sel.cached { " (cached)" } else { "" },
        sel.probe,
        trials.join(", ")
    )
}
