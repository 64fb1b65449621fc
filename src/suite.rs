//! Running benches into a run folder: opens the GPU, creates `results/<run-id>/`, runs what a
//! plan names with progress, and records the outcome in meta.json. Knows no bench internals.

use anyhow::Result;

use crate::bench::kernels::{self, KernelsPlan};
use crate::cli::GlobalArgs;
use crate::config::SuiteConfig;
use crate::export::meta::RunMeta;
use crate::export::RunDir;
use crate::gpu::Gpu;
use crate::host::HostInfo;
use crate::output::Progress;

/// Everything one run does.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SuitePlan {
    pub kernels: Option<KernelsPlan>,
}

impl SuitePlan {
    pub fn from_config(cfg: &SuiteConfig) -> Result<SuitePlan> {
        Ok(SuitePlan {
            kernels: cfg
                .kernels
                .as_ref()
                .map(|k| k.plan())
                .transpose()
                .map_err(anyhow::Error::msg)?,
        })
    }

    fn points(&self) -> u64 {
        self.kernels.as_ref().map_or(0, |k| k.points())
    }
}

/// Runs a suite and returns the run folder. Rows are on disk as each point finishes; on
/// failure meta.json says "failed" with the error, and the rows written so far stay.
pub fn run(
    global: &GlobalArgs,
    plan: &SuitePlan,
    config: Option<serde_json::Value>,
    raw: bool,
) -> Result<RunDir> {
    // Open the GPU before creating the run folder: no adapter leaves nothing behind.
    let gpu = Gpu::open(global.backend, global.adapter.as_deref())?;
    let mut meta = RunMeta::new(HostInfo::probe());
    meta.adapter = Some(serde_json::to_value(&gpu.report)?);
    meta.config = config.or_else(|| serde_json::to_value(plan).ok());
    let mut dir = RunDir::create(&global.out, meta, raw)?;
    let progress = Progress::new(plan.points(), global.quiet);
    progress.println(format!(
        "run {} on {} ({}) -> {}",
        dir.id,
        gpu.report.name,
        gpu.report.backend,
        dir.path.display()
    ));
    let result = run_benches(&gpu, plan, &mut dir, &progress);
    progress.finish();
    dir.finish(&result)?;
    result.map(|_| dir)
}

fn run_benches(gpu: &Gpu, plan: &SuitePlan, dir: &mut RunDir, progress: &Progress) -> Result<()> {
    if let Some(k) = &plan.kernels {
        let (_, selections) = kernels::run(gpu, k, dir, progress)?;
        dir.meta.notes.insert(
            "variant_selection".into(),
            serde_json::to_value(selections)?,
        );
        dir.write_meta()?;
    }
    Ok(())
}
