//! `morphbench peak`: the device's own ceilings, measured the way vkpeak and clpeak do, so the
//! kernels can be read as a share of them: FP32 FMA throughput (independent chains, scalar and
//! vec4), device memory bandwidth (read-only, write-only and copy kernels over buffers far
//! larger than caches, and the buffer-to-buffer copy), dispatch latency (an empty kernel,
//! submit to done), back-to-back dispatch rate within one pass, and the timestamp tick.
//! Every kernel's output is checked before its time counts.

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::descriptor::{command, from_toml, BenchArgs, BenchConfig, Descriptor};
use super::flags::{parse_iters, parse_warmup};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::{RunDir, TableSpec};

mod bandwidth;
mod fma;
mod overheads;
mod plan;
pub mod probe;
mod shader;
mod table;
mod views;

use bandwidth::bandwidth;
use fma::fma;
use overheads::{dispatch_cost, timestamp_tick};
use shader::Rows;

pub use plan::PeakPlan;
pub use table::{
    copy_ceiling_row, fma_ceiling_row, Ceilings, PeakFigures, PeakParams, PeakTable, BENCH,
};

// The peak kernels share one body; the part in front says which multiply-add they measure.
/// `[peak]` in a suite config.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeakConfig {
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
    /// Bandwidth buffer size, such as "256M".
    pub bytes: Option<String>,
    pub dispatches: Option<u32>,
}

impl BenchConfig for PeakConfig {
    type Plan = PeakPlan;
    fn plan(&self) -> Result<PeakPlan, String> {
        let d = PeakPlan::default();
        let plan = PeakPlan {
            iters: self.iters.unwrap_or(d.iters),
            warmup: self.warmup.unwrap_or(d.warmup),
            bytes: match &self.bytes {
                Some(s) => crate::units::parse_size(s).map_err(|e| format!("peak.bytes: {e}"))?,
                None => d.bytes,
            },
            dispatches: self.dispatches.unwrap_or(d.dispatches),
        };
        plan.validate()?;
        Ok(plan)
    }
}

/// `morphbench peak`'s flags.
#[derive(Debug, clap::Args)]
pub struct PeakArgs {
    /// Timed iterations per metric.
    #[arg(long, default_value_t = PeakPlan::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per metric (at most 100000).
    #[arg(long, default_value_t = PeakPlan::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    /// Bandwidth buffer size (capped by the device's storage binding limit).
    #[arg(long, default_value = "256M", value_parser = crate::units::parse_size)]
    pub bytes: u64,
    /// Empty dispatches in the back-to-back pass.
    #[arg(long, default_value_t = PeakPlan::default().dispatches)]
    pub dispatches: u32,
}

impl BenchArgs for PeakArgs {
    type Config = PeakConfig;
    fn config(&self) -> Result<PeakConfig, String> {
        Ok(PeakConfig {
            iters: Some(self.iters),
            warmup: Some(self.warmup),
            bytes: Some(self.bytes.to_string()),
            dispatches: Some(self.dispatches),
        })
    }
}

/// The `peak` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<PeakConfig>),
    command: command::<PeakArgs>(
        "The device's own ceilings: FMA throughput, memory bandwidth, dispatch latency and \
         rate, timestamp tick; writes peak.csv",
        "Examples:\n  morphbench peak                                 # 256 MiB buffers (or the device's binding limit)\n  morphbench peak --iters 20 --bytes 1G",
    ),
    tables: || {
        vec![TableSpec::compared::<PeakTable>()
            .single_node()
            .headlines(views::headlines)]
    },
};

impl crate::suite::Bench for PeakPlan {
    fn points(&self) -> u64 {
        // fma x4, bandwidth x7 (x9 with 64-bit integers), dispatch x2, timestamp.
        16
    }
    fn run(
        &self,
        gpu: Option<&Gpu>,
        dir: &RunDir,
        progress: &Progress,
    ) -> Result<crate::suite::Notes> {
        let gpu = super::shared::need_gpu(gpu, BENCH)?;
        let ceilings = run(gpu, self, dir, progress)?;
        super::shared::note(BENCH, ceilings)
    }
}

/// Measures every ceiling and writes peak.csv.
pub fn run(gpu: &Gpu, plan: &PeakPlan, dir: &RunDir, progress: &Progress) -> Result<Ceilings> {
    let mut rows = Rows {
        run_id: &dir.id,
        table: Some(dir.table()?),
        progress,
    };
    let fma_gflops = fma(gpu, plan, &mut rows)?;
    let copy_gbps = bandwidth(gpu, plan, &mut rows)?;
    dispatch_cost(gpu, plan, &mut rows)?;
    timestamp_tick(gpu, plan, &mut rows)?;
    Ok(Ceilings {
        fma_gflops,
        copy_gbps,
    })
}

/// The ceilings alone, briefly and unreported, for a bench run without `peak` (`kernels`).
pub fn quick_ceilings(gpu: &Gpu) -> Result<Ceilings> {
    let plan = PeakPlan {
        iters: 5,
        warmup: 1,
        bytes: 64 << 20,
        ..PeakPlan::default()
    };
    let hidden = Progress::new(0, true);
    let mut rows = Rows {
        run_id: "",
        table: None,
        progress: &hidden,
    };
    Ok(Ceilings {
        fma_gflops: fma(gpu, &plan, &mut rows)?,
        copy_gbps: bandwidth(gpu, &plan, &mut rows)?,
    })
}
