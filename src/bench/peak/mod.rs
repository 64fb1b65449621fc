//! `morphbench peak`: the device's own ceilings, measured the way vkpeak and clpeak do, so the
//! kernels can be read as a share of them: FP32 FMA throughput (independent chains, scalar and
//! vec4), device memory bandwidth (read-only, write-only and copy kernels over buffers far
//! larger than caches, and the buffer-to-buffer copy), dispatch latency (an empty kernel,
//! submit to done), back-to-back dispatch rate within one pass, and the timestamp tick.
//! Every kernel's output is checked before its time counts.

use anyhow::Result;

use super::descriptor::{command, from_toml, Descriptor, Settings};
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

impl Settings for PeakPlan {
    type Plan = PeakPlan;
    fn plan(&self) -> anyhow::Result<PeakPlan> {
        self.validate()?;
        Ok(self.clone())
    }
}

/// The `peak` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<PeakPlan>),
    command: command::<PeakPlan>(
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
    fn needs_gpu(&self) -> bool {
        true
    }
    fn points(&self) -> u64 {
        // fma x4, bandwidth x7 (x9 with 64-bit integers), dispatch x2, timestamp.
        16
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let ceilings = run(cx.gpu(BENCH)?, self, cx.dir, cx.progress)?;
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
