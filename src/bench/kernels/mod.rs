//! The `kernels` bench: GEMM and layernorm sweeps on the GPU, each point verified before it is
//! timed, with native CPU baseline rows (SGEMM, memcpy) measured in the same run.

use anyhow::Result;

use serde::Deserialize;

use super::descriptor::{command, from_toml, Descriptor, Settings};
use super::flags::{parse_iters, parse_warmup};
use super::peak::{Ceilings, PeakTable};
use super::shared::check_iters;
use crate::gpu::kernels::select::Selection;
use crate::gpu::kernels::sizes::{parse_gemm, parse_layernorm};
use crate::gpu::kernels::{
    variant_help, variant_long_help, GemmKernel, GemmSize, LayernormKernel, LayernormSize,
    GEMM_VARIANTS, LAYERNORM_VARIANTS,
};
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

/// `kernels`' settings: `morphbench kernels`' flags, `[kernels]`' keys and their defaults,
/// declared once.
#[derive(Debug, Clone, clap::Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelsSettings {
    /// GEMM sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "MxNxK[,MxNxK...]", value_delimiter = ',', value_parser = parse_gemm)]
    #[serde(deserialize_with = "de_gemm")]
    pub gemm: Vec<GemmSize>,
    /// Layernorm sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "ROWSxHIDDEN[,...]", value_delimiter = ',', value_parser = parse_layernorm)]
    #[serde(deserialize_with = "de_layernorm")]
    pub layernorm: Vec<LayernormSize>,
    /// Timed iterations per point.
    #[arg(long, default_value_t = KernelsSettings::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per point (at most 100000).
    #[arg(long, default_value_t = KernelsSettings::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    /// "auto" (the measured choice) or a GEMM variant.
    #[arg(long = "variant", value_name = "NAME",
        help = variant_help("GEMM", GEMM_VARIANTS),
        long_help = variant_long_help("GEMM", GEMM_VARIANTS))]
    pub gemm_variant: Option<String>,
    #[arg(long, value_name = "NAME",
        help = variant_help("layernorm", LAYERNORM_VARIANTS),
        long_help = variant_long_help("layernorm", LAYERNORM_VARIANTS))]
    pub layernorm_variant: Option<String>,
    /// Probe the variants again instead of using the cached choice.
    #[arg(long)]
    pub reselect: bool,
    /// Skip the CPU baseline rows (`cpu_baseline = false`).
    #[arg(long = "no-cpu-baseline", action = clap::ArgAction::SetFalse)]
    pub cpu_baseline: bool,
    /// Also write every iteration's sample to kernels_samples.csv.
    #[arg(long)]
    #[serde(skip)]
    pub raw: bool,
}

impl Default for KernelsSettings {
    fn default() -> Self {
        // No sizes: a sweep names its own (`kernels` refuses an empty one).
        KernelsSettings {
            gemm: Vec::new(),
            layernorm: Vec::new(),
            iters: 20,
            warmup: 3,
            gemm_variant: None,
            layernorm_variant: None,
            reselect: false,
            cpu_baseline: true,
            raw: false,
        }
    }
}

/// `gemm = ["MxNxK", ...]`.
fn de_gemm<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<GemmSize>, D::Error> {
    sizes(d, parse_gemm, "kernels.gemm")
}

/// `layernorm = ["ROWSxHIDDEN", ...]`.
fn de_layernorm<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<LayernormSize>, D::Error> {
    sizes(d, parse_layernorm, "kernels.layernorm")
}

fn sizes<'de, T, D>(
    d: D,
    parse: fn(&str) -> anyhow::Result<T>,
    key: &str,
) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|s| parse(s))
        .collect::<Result<_, _>>()
        .map_err(|e| serde::de::Error::custom(format!("{key}: {e}")))
}

impl Settings for KernelsSettings {
    type Plan = KernelsPlan;
    fn plan(&self) -> anyhow::Result<KernelsPlan> {
        let plan = KernelsPlan {
            gemm: self.gemm.clone(),
            layernorm: self.layernorm.clone(),
            iters: self.iters,
            warmup: self.warmup,
            gemm_variant: self.gemm_variant.clone(),
            layernorm_variant: self.layernorm_variant.clone(),
            cpu_baseline: self.cpu_baseline,
            reselect: self.reselect,
        };
        check_iters("kernels.iters", plan.iters)?;
        super::shared::check_warmup("kernels.warmup", plan.warmup)?;
        if plan.gemm.is_empty() && plan.layernorm.is_empty() {
            return Err(anyhow::anyhow!(
                "nothing to run: give GEMM sizes (--gemm MxNxK[,...], or gemm = \
                        [\"MxNxK\", ...] in [kernels]) and/or layernorm sizes (--layernorm \
                        ROWSxHIDDEN[,...], or layernorm = [...])"
            ));
        }
        plan.check_cost()?;
        Ok(plan)
    }
    fn raw(&self) -> bool {
        self.raw
    }
}

/// The `kernels` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<KernelsSettings>),
    command: command::<KernelsSettings>(
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
    fn needs_gpu(&self) -> bool {
        true
    }
    fn points(&self) -> u64 {
        KernelsPlan::points(self)
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (_, selections) = run(cx.gpu(BENCH)?, self, cx.dir, cx.progress)?;
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
