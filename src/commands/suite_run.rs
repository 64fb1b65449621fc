//! `morphbench run`: a suite from a TOML config (default: the embedded quick suite), its
//! figures and report, and its headlines as metrics when asked.

use std::path::PathBuf;

use clap::Args;

use crate::bench::descriptor::{parsed, After, CommandSpec, GlobalArgs, Ran};
use crate::config::SuiteConfig;
use crate::report::plot::charts::Format;

pub const COMMAND: CommandSpec = CommandSpec::runs(
    "Run a suite from a TOML config (default: the built-in quick suite)",
    "Examples:\n  morphbench run                                  # the built-in quick suite\n  morphbench run --config bench-configs/full.toml --out /scratch/results\n  morphbench run --no-plots -q",
    RunArgs::augment_args,
    run,
);

#[derive(Debug, Args)]
struct RunArgs {
    /// Suite config (TOML); the built-in bench-configs/quick.toml when omitted.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Also write every iteration's sample to <bench>_samples.csv.
    #[arg(long)]
    raw: bool,
    /// Skip the figures and report written at the end of the run.
    #[arg(long)]
    no_plots: bool,
    /// Also write the run's headline figures as metrics for node_exporter's textfile
    /// collector (DIR/morphbench_run.prom).
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
}

fn run(m: &clap::ArgMatches, g: &GlobalArgs) -> anyhow::Result<Ran> {
    let a: RunArgs = parsed(m)?;
    let cfg = match &a.config {
        Some(path) => SuiteConfig::load(path)?,
        None => SuiteConfig::embedded(),
    };
    let benches = cfg.benches()?;
    let config = serde_json::to_value(&cfg)?;
    if let Some(d) = &a.textfile {
        crate::record::metrics::check_dir(d)?;
    }
    let started = std::time::Instant::now();
    let dir = crate::suite::run(&g.options(a.raw), &benches, Some(config))?;
    if let Some(d) = &a.textfile {
        crate::report::metrics::run_textfile(&dir.path, started.elapsed())?.write(d)?;
    }
    crate::report::document::warn_noisy(&dir.path, g.quiet || g.json);
    if !a.no_plots {
        super::plot(&dir.path, Format::Both, &[], g.quiet || g.json)?;
    }
    // Noisy rows are named above, before the figures: only the summary follows.
    Ok(Ran::wrote(Some(dir.path), After::Summary))
}
