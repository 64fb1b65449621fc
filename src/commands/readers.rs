//! The commands that measure nothing: `info` (the adapters and the host), `plot` (a run's
//! figures and report) and `runs` (the runs in a folder).

use std::path::{Path, PathBuf};

use clap::Args;

use crate::bench::descriptor::{parsed, CommandSpec, GlobalArgs, Ran};
use crate::report::plot::charts::Format;

pub const INFO: CommandSpec = CommandSpec::runs(
    "Describe every GPU adapter and the host",
    "Examples:\n  morphbench info                 # adapters, limits, features, host\n  morphbench info --json          # the same, for scripts",
    InfoArgs::augment_args,
    |_, g| crate::info::run(g.backend, g.json).map(|()| Ran::done()),
);

#[derive(Debug, Args)]
struct InfoArgs {}

pub const PLOT: CommandSpec = CommandSpec::runs(
    "Draw a run's CSVs into RUN_DIR/plots/ and write report.md and report.html",
    "Examples:\n  morphbench plot results/latest\n  morphbench plot results/RUN_A --compare results/RUN_B --format svg",
    PlotArgs::augment_args,
    |m, g| {
        let a: PlotArgs = parsed(m)?;
        let outcome = plot(&a.run_dir, a.format, &a.compare, g.quiet || g.json)?;
        if g.json {
            println!("{}", serde_json::to_string_pretty(&outcome)?);
        }
        Ok(Ran::done())
    },
);

#[derive(Debug, Args)]
struct PlotArgs {
    /// The run folder (results/<run-id>).
    run_dir: PathBuf,
    /// Image format.
    #[arg(long, value_enum, default_value = "both")]
    format: Format,
    /// Other run folders drawn as extra series (labelled by host and adapter).
    #[arg(long, value_name = "RUN_DIR", num_args = 1..)]
    compare: Vec<PathBuf>,
}

pub const RUNS: CommandSpec = CommandSpec::runs(
    "List the runs in a folder with status, date, adapter and main headline",
    "Examples:\n  morphbench runs\n  morphbench runs /scratch/results",
    RunsArgs::augment_args,
    |m, g: &GlobalArgs| {
        let a: RunsArgs = parsed(m)?;
        crate::report::document::print_runs(&a.dir, g.json).map(|()| Ran::done())
    },
);

#[derive(Debug, Args)]
struct RunsArgs {
    /// The folder that holds the runs.
    #[arg(default_value = "results")]
    dir: PathBuf,
}

/// Draws a run's figures and writes its report.
pub fn plot(
    dir: &Path,
    format: Format,
    compare: &[PathBuf],
    quiet: bool,
) -> anyhow::Result<crate::report::plot::PlotOutcome> {
    for d in std::iter::once(dir).chain(compare.iter().map(|p| p.as_path())) {
        let meta = crate::record::read_meta(d);
        let has_csv = crate::record::run_dir::holds_csv(d);
        match meta {
            Err(why) if !has_csv => {
                anyhow::bail!("{why}, and the folder holds no CSV: nothing to draw")
            }
            Ok(None) if !has_csv => anyhow::bail!(
                "{} is not a run folder (results/<run-id> with meta.json or CSVs): check the path",
                d.display()
            ),
            _ => {}
        }
    }
    let outcome = crate::report::draw::plot_run(dir, format, compare)?;
    crate::report::document::write_report(dir, &outcome)?;
    for w in &outcome.warnings {
        eprintln!("warning: {w}");
    }
    if !quiet {
        for f in &outcome.figures {
            for p in &f.files {
                println!("figure  {}", p.display());
            }
        }
        for s in &outcome.skipped {
            println!("skipped {s}");
        }
        println!("report  {}", dir.join("report.md").display());
        println!("report  {}", dir.join("report.html").display());
    }
    Ok(outcome)
}
