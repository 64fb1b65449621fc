//! The `kernels` bench: GEMM and layernorm sweeps on the GPU, each point verified before it is
//! timed, with native CPU baseline rows (SGEMM, memcpy) measured in the same run.

use anyhow::Result;

use serde::{Deserialize, Serialize};

use super::descriptor::{command, from_toml, BenchArgs, BenchConfig, Descriptor};
use super::flags::{parse_iters, parse_warmup, VariantArgs};
use super::peak::{Ceilings, PeakTable};
use super::shared::check_iters;
use crate::gpu::kernels::select::Selection;
use crate::gpu::kernels::sizes::{parse_gemm, parse_layernorm};
use crate::gpu::kernels::{GemmKernel, GemmSize, LayernormKernel, LayernormSize};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::read_optional;
use crate::record::{RunDir, TableSpec};

mod plan;
mod sweeps;
mod table;
mod views;
mod writer;

pub use plan::{KernelsPlan, MAX_BYTES, MAX_FLOPS};
use sweeps::{sweep_gemm, sweep_layernorm};
pub use table::{KernelFigures, KernelParams, KernelsTable, BENCH};
pub use writer::PointResult;
use writer::Writer;

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
    /// Probe the variants again instead of using the cached choice.
    pub reselect: Option<bool>,
}

impl BenchConfig for KernelsConfig {
    type Plan = KernelsPlan;
    fn plan(&self) -> Result<KernelsPlan, String> {
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
            reselect: self.reselect.unwrap_or(d.reselect),
        };
        check_iters("kernels.iters", plan.iters)?;
        super::shared::check_warmup("kernels.warmup", plan.warmup)?;
        if plan.gemm.is_empty() && plan.layernorm.is_empty() {
            return Err(
                "nothing to run: give GEMM sizes (--gemm MxNxK[,...], or gemm = \
                        [\"MxNxK\", ...] in [kernels]) and/or layernorm sizes (--layernorm \
                        ROWSxHIDDEN[,...], or layernorm = [...])"
                    .into(),
            );
        }
        plan.check_cost()?;
        Ok(plan)
    }
}

/// `morphbench kernels`'s flags.
#[derive(Debug, clap::Args)]
pub struct KernelsArgs {
    /// GEMM sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "MxNxK[,MxNxK...]", value_parser = parse_gemm_list)]
    pub gemm: Vec<Vec<GemmSize>>,
    /// Layernorm sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "ROWSxHIDDEN[,...]", value_parser = parse_layernorm_list)]
    pub layernorm: Vec<Vec<LayernormSize>>,
    /// Timed iterations per point.
    #[arg(long, default_value_t = KernelsPlan::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per point (at most 100000).
    #[arg(long, default_value_t = KernelsPlan::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    #[command(flatten)]
    pub variants: VariantArgs,
    /// Probe the variants again instead of using the cached choice.
    #[arg(long)]
    pub reselect: bool,
    /// Skip the CPU baseline rows.
    #[arg(long)]
    pub no_cpu_baseline: bool,
    /// Also write every iteration's sample to kernels_samples.csv.
    #[arg(long)]
    pub raw: bool,
}

// Each occurrence of a list flag parses into one Vec; `config` flattens them.
fn parse_gemm_list(s: &str) -> Result<Vec<GemmSize>, String> {
    crate::gpu::kernels::sizes::parse_list(s, parse_gemm)
}

fn parse_layernorm_list(s: &str) -> Result<Vec<LayernormSize>, String> {
    crate::gpu::kernels::sizes::parse_list(s, parse_layernorm)
}

impl BenchArgs for KernelsArgs {
    type Config = KernelsConfig;
    fn config(&self) -> Result<KernelsConfig, String> {
        Ok(KernelsConfig {
            gemm: self.gemm.concat().iter().map(|g| g.to_string()).collect(),
            layernorm: self
                .layernorm
                .concat()
                .iter()
                .map(|l| l.to_string())
                .collect(),
            iters: Some(self.iters),
            warmup: Some(self.warmup),
            gemm_variant: self.variants.variant.clone(),
            layernorm_variant: self.variants.layernorm_variant.clone(),
            cpu_baseline: Some(!self.no_cpu_baseline),
            reselect: Some(self.reselect),
        })
    }
    fn raw(&self) -> bool {
        self.raw
    }
}

/// The `kernels` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<KernelsConfig>),
    command: command::<KernelsArgs>(
        "Sweep GEMM and layernorm kernels (verified, then timed) and write kernels.csv",
        "Examples:\n  morphbench kernels --gemm 512x512x512,1024x1024x1024 --layernorm 4096x1024\n  morphbench kernels --gemm 256x256x256 --variant tiled64 --iters 50\n  morphbench kernels --gemm 2048x2048x2048 --reselect      # probe the variants again",
    ),
    tables: || {
        vec![TableSpec::compared::<KernelsTable>()
            .single_node()
            .headlines(views::headlines)
            .charts(crate::record::Charts::Compared(views::kernel_and_roofline_charts))]
    },
};

impl crate::suite::Bench for KernelsPlan {
    fn points(&self) -> u64 {
        KernelsPlan::points(self)
    }
    fn run(
        &self,
        gpu: Option<&Gpu>,
        dir: &RunDir,
        progress: &Progress,
    ) -> Result<crate::suite::Notes> {
        let (_, selections) = run(super::shared::need_gpu(gpu, BENCH)?, self, dir, progress)?;
        super::shared::note("variant_selection", selections)
    }
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
        progress,
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
