//! Running benches into a run folder: opens the GPU, creates `results/<run-id>/`, runs what a
//! plan names with progress, and records the outcome in meta.json. Knows no bench internals.

use anyhow::Result;

use crate::bench::d2h::{self, D2hPlan};
use crate::bench::hol::{self, HolPlan};
use crate::bench::kernels::{self, KernelsPlan};
use crate::bench::sim::{self as sim_bench, SimPlan};
use crate::cli::GlobalArgs;
use crate::config::SuiteConfig;
use crate::export::meta::RunMeta;
use crate::export::RunDir;
use crate::gpu::Gpu;
use crate::host::HostInfo;
use crate::output::Progress;

/// Everything one run does.
#[derive(Debug, Clone, Default)]
pub struct SuitePlan {
    pub kernels: Option<KernelsPlan>,
    pub d2h: Option<D2hPlan>,
    pub hol: Option<HolPlan>,
    pub sim: Option<SimPlan>,
    pub sim_output: SimOutput,
}

/// What `sim` shows besides sim.csv.
#[derive(Debug, Clone, Default)]
pub struct SimOutput {
    /// Schedules whose ASCII timelines are printed.
    pub timelines: Vec<String>,
    pub width: usize,
    pub trace_out: Option<std::path::PathBuf>,
    /// Repetitions of the simulator throughput benchmark (none when 0).
    pub bench_reps: u32,
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
            d2h: cfg
                .d2h
                .as_ref()
                .map(|d| d.plan())
                .transpose()
                .map_err(anyhow::Error::msg)?,
            hol: cfg
                .hol
                .as_ref()
                .map(|h| h.plan())
                .transpose()
                .map_err(anyhow::Error::msg)?,
            sim: cfg
                .sim
                .as_ref()
                .map(SimPlan::from_config)
                .transpose()
                .map_err(|e| anyhow::anyhow!("[sim] {e}"))?,
            sim_output: SimOutput {
                timelines: vec!["adaptive".into()],
                width: 100,
                trace_out: None,
                bench_reps: 0,
            },
        })
    }

    fn points(&self) -> u64 {
        self.kernels.as_ref().map_or(0, |k| k.points())
            + self.d2h.as_ref().map_or(0, |d| d.sizes.len() as u64)
            + self.hol.as_ref().map_or(0, |h| h.points())
            + self.sim.as_ref().map_or(0, |s| s.cases.len() as u64)
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
    // Open the GPU (when a bench needs one) before creating the run folder: no adapter
    // leaves nothing behind.
    let needs_gpu = plan.kernels.is_some() || plan.d2h.is_some() || plan.hol.is_some();
    let gpu = match needs_gpu {
        true => Some(Gpu::open(global.backend, global.adapter.as_deref())?),
        false => None,
    };
    let mut meta = RunMeta::new(HostInfo::probe());
    if let Some(gpu) = &gpu {
        meta.adapter = Some(serde_json::to_value(&gpu.report)?);
    }
    meta.config = config;
    let mut dir = RunDir::create(&global.out, meta, raw)?;
    let progress = Progress::new(plan.points(), global.quiet);
    let on = gpu
        .as_ref()
        .map(|g| format!(" on {} ({})", g.report.name, g.report.backend))
        .unwrap_or_default();
    progress.println(format!("run {}{on} -> {}", dir.id, dir.path.display()));
    let result = run_benches(gpu.as_ref(), plan, &mut dir, &progress);
    progress.finish();
    dir.finish(&result)?;
    result.map(|_| dir)
}

fn run_benches(
    gpu: Option<&Gpu>,
    plan: &SuitePlan,
    dir: &mut RunDir,
    progress: &Progress,
) -> Result<()> {
    if let (Some(k), Some(gpu)) = (&plan.kernels, gpu) {
        let (_, selections) = kernels::run(gpu, k, dir, progress)?;
        dir.meta.notes.insert(
            "variant_selection".into(),
            serde_json::to_value(selections)?,
        );
        dir.write_meta()?;
    }
    if let (Some(d), Some(gpu)) = (&plan.d2h, gpu) {
        let sizes = d2h::run(gpu, d, dir, progress)?;
        dir.meta
            .notes
            .insert("d2h".into(), serde_json::to_value(sizes)?);
        dir.write_meta()?;
    }
    if let (Some(h), Some(gpu)) = (&plan.hol, gpu) {
        let (points, calibration) = hol::run(gpu, h, dir, progress)?;
        dir.meta.notes.insert(
            "hol".into(),
            serde_json::json!({ "points": points, "standin_calibration": calibration }),
        );
        dir.write_meta()?;
    }
    if let Some(s) = &plan.sim {
        let out = &plan.sim_output;
        let outcomes = sim_bench::run(s, dir, progress)?;
        let shown: Vec<_> = outcomes
            .iter()
            .filter(|o| out.timelines.iter().any(|t| t == &o.schedule))
            .collect();
        sim_bench::print_timelines(&shown, out.width, progress);
        if let Some(path) = &out.trace_out {
            sim_bench::write_trace(&outcomes, path)?;
            progress.println(format!("trace written to {}", path.display()));
        }
        if out.bench_reps > 0 {
            progress.println("simulator throughput (S = 64, N = 1024):".into());
            let rate = sim_bench::throughput_bench(dir, out.bench_reps, progress)?;
            dir.meta
                .notes
                .insert("sim_ops_per_s".into(), serde_json::json!(rate));
            dir.write_meta()?;
        }
    }
    Ok(())
}
