//! Running benches into a run folder: opens the GPU when a bench needs one, creates
//! `results/<run-id>/`, runs each bench with progress, and records the outcome and each
//! bench's notes in meta.json. Knows no bench internals (they are `dyn Bench`).

use std::path::PathBuf;

use anyhow::Result;

use crate::gpu::{BackendChoice, Gpu};
use crate::host::HostInfo;
use crate::noise;
use crate::output::Progress;
use crate::record::meta::RunMeta;
use crate::record::RunDir;

/// What a bench leaves in meta.json's `notes`: its key and value pairs.
pub type Notes = serde_json::Map<String, serde_json::Value>;

/// A planned bench, ready to run.
pub trait Bench {
    /// Whether the run must open a GPU adapter for it.
    fn needs_gpu(&self) -> bool {
        false
    }
    /// Progress steps, known before it starts.
    fn points(&self) -> u64;
    /// Measures, writing its tables into the run folder row by row; returns its notes for
    /// meta.json.
    fn run(&self, cx: &Context) -> Result<Notes>;
}

/// What a bench runs with: the GPU (opened when its `needs_gpu` says so), the run folder its
/// tables go into, and the progress display.
pub struct Context<'a> {
    gpu: Option<&'a Gpu>,
    pub dir: &'a RunDir,
    pub progress: &'a Progress,
}

impl<'a> Context<'a> {
    /// The GPU of a bench whose `needs_gpu` is true (`bench` names it in the error otherwise).
    pub fn gpu(&self, bench: &str) -> Result<&'a Gpu> {
        self.gpu
            .ok_or_else(|| anyhow::anyhow!("internal error: {bench} ran without a GPU"))
    }
}

/// A planned bench with its registry name (its config table, its CSV's `bench`), which
/// meta.json's notes are kept under.
pub struct Planned {
    pub name: &'static str,
    pub bench: Box<dyn Bench>,
}

impl Planned {
    pub fn new(name: &'static str, bench: impl Bench + 'static) -> Planned {
        Planned {
            name,
            bench: Box::new(bench),
        }
    }
}

/// The flags every command takes (before or after its name).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Global options (before or after the command)")]
pub struct GlobalArgs {
    /// Which graphics API backends to consider.
    #[arg(long, global = true, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Adapter to use: an index or part of a name from `morphbench info` (default: the best).
    #[arg(long, global = true, value_name = "INDEX|NAME")]
    pub adapter: Option<String>,
    /// Folder that receives one subfolder per run.
    #[arg(long, global = true, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Print nothing but errors and warnings.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// More log detail (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Print JSON instead of tables: a run's summary.json when it ends (`info`: the adapters
    /// and host).
    #[arg(long, global = true)]
    pub json: bool,
}

impl GlobalArgs {
    /// The run options these flags give (the orchestrator never sees clap types).
    pub fn options(&self, raw: bool) -> RunOptions {
        RunOptions {
            backend: self.backend,
            adapter: self.adapter.clone(),
            out: self.out.clone(),
            // With --json the summary is the output: no tables, no progress.
            quiet: self.quiet || self.json,
            raw,
        }
    }
}

/// Where and how a run happens, whatever it runs (the global flags, without clap).
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub backend: BackendChoice,
    /// An adapter index or name part; `None`: the best.
    pub adapter: Option<String>,
    /// The folder that receives the run folder.
    pub out: PathBuf,
    pub quiet: bool,
    /// Keep every sample in `<bench>_samples.csv`.
    pub raw: bool,
}

/// Runs the benches and returns the run folder. Rows are on disk as each point finishes; on
/// failure meta.json says "failed" with the error, and the rows written so far stay.
pub fn run(
    options: &RunOptions,
    benches: &[Planned],
    config: Option<serde_json::Value>,
) -> Result<RunDir> {
    // Open the GPU (when a bench needs one) before creating the run folder: no adapter
    // leaves nothing behind.
    let gpu = if benches.iter().any(|p| p.bench.needs_gpu()) {
        Some(Gpu::open(options.backend, options.adapter.as_deref())?)
    } else {
        None
    };
    let mut meta = RunMeta::new(HostInfo::probe());
    if let Some(gpu) = &gpu {
        meta.adapter = Some(serde_json::to_value(&gpu.report)?);
    }
    meta.config = config;
    let mut dir = RunDir::create(&options.out, meta, options.raw)?;
    let points = benches.iter().map(|p| p.bench.points()).sum();
    let progress = Progress::new(points, options.quiet);
    let on = gpu
        .as_ref()
        .map(|g| format!(" on {} ({})", g.report.name, g.report.backend))
        .unwrap_or_default();
    progress.println(format!("run {}{on} -> {}", dir.id, dir.path.display()));
    // A panic anywhere in a bench ends the run as failed, with its message, never "running".
    let result = catching(|| run_benches(gpu.as_ref(), benches, &mut dir, &progress));
    progress.finish();
    dir.finish(&result)?;
    result.map(|_| dir)
}

/// Runs `f`; a panic in it becomes an error with the panic's message, so a run folder is
/// finished as failed rather than left running.
pub fn catching<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        Err(anyhow::anyhow!(
            "internal error (a panic): {}",
            panic_message(&*payload)
        ))
    })
}

/// The text a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

fn run_benches(
    gpu: Option<&Gpu>,
    benches: &[Planned],
    dir: &mut RunDir,
    progress: &Progress,
) -> Result<()> {
    for Planned { name, bench } in benches {
        let before = noise::load::Sample::now();
        let result = bench.run(&Context { gpu, dir, progress });
        // The host's load is recorded for a bench that failed too: it may be why.
        let load = noise::load::Load::between(&before, &noise::load::Sample::now());
        let warning = load.warning(name);
        if let Some(w) = &warning {
            progress.println(format!("warning: {w}"));
        }
        let mut entry = serde_json::to_value(&load)?;
        entry["warning"] = serde_json::json!(warning);
        dir.meta
            .notes
            .entry("host_load")
            .or_insert_with(|| serde_json::json!({}))[*name] = entry;
        let notes = result?;
        dir.meta.notes.extend(notes);
        dir.write_meta()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench that panics.
    pub struct PanicBench;

    impl Bench for PanicBench {
        fn points(&self) -> u64 {
            1
        }
        fn run(&self, _: &Context) -> Result<Notes> {
            panic!("deliberate panic from PanicBench")
        }
    }

    #[test]
    fn a_panicking_bench_leaves_the_run_failed_with_its_message() {
        let out = tempfile::tempdir().unwrap();
        let options = RunOptions {
            backend: BackendChoice::Auto,
            adapter: None,
            out: out.path().to_path_buf(),
            quiet: true,
            raw: false,
        };
        let benches = [Planned::new("panic", PanicBench)];
        let err = run(&options, &benches, None).unwrap_err().to_string();
        assert!(err.contains("deliberate panic"), "{err}");
        let dir = std::fs::read_dir(out.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let meta: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(meta["status"], "failed");
        assert!(meta["error"].as_str().unwrap().contains("deliberate panic"));
    }
}
