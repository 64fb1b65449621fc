//! The command line: the command tree built from the registry (`registry.rs`), the dispatch
//! through each command's [`CommandSpec`], the steps after a run, and the exit codes. Names no
//! command; the few that measure nothing live here (`suite_run.rs`: `run`; `readers.rs`:
//! `info`, `plot`, `runs`; `check.rs`). `main.rs` only parses, calls [`run`] and reports an
//! error.

mod check;
mod readers;
pub mod registry;
mod suite_run;
mod values;

use std::process::ExitCode;

use clap::{FromArgMatches, Parser};

use crate::bench::descriptor::{Action, After, CommandSpec, LaunchArgs, Ran};
pub use crate::suite::GlobalArgs;
use crate::suite::{self, Planned};
pub use readers::plot;
pub use registry::Parsed;

#[derive(Debug, Parser)]
#[command(
    name = "morphbench",
    version,
    about = "Characterize GPU nodes for pipeline-parallel training: verified compute kernels, \
             head-of-line stalls, transfers, and a pipeline schedule simulator"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Parsed,
}

/// The exit code an error ends the command with (its spec's: 2 where a verdict is the exit
/// code, else 1).
pub fn error_code(command: &Parsed) -> u8 {
    (command.spec.error_code)(&command.matches)
}

/// Runs the parsed command, then the steps its spec says follow it; the exit code is its
/// verdict where it has one (`check`, `fleet`, `health`).
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Every run folder ends with its summary.json, for automation.
    crate::record::run_dir::on_end(crate::report::summary::write_summary);
    let g = &cli.global;
    let Parsed {
        name,
        spec,
        matches,
    } = &cli.command;
    let ran = match spec.action {
        Action::Plan(plan) => match plan(matches, g)? {
            Some(planned) => {
                let bench = Planned {
                    name: planned.name.unwrap_or(name),
                    bench: planned.bench,
                };
                let dir = suite::run(&g.options(planned.raw), &[bench], Some(planned.config))?;
                Ran::wrote(Some(dir.path), After::Noisy)
            }
            None => Ran::done(),
        },
        Action::Run(run) => match local_ranks(spec, matches)? {
            Some(code) => Ran::code(code),
            None => run(matches, g)?,
        },
    };
    after(&ran, g)?;
    Ok(ExitCode::from(ran.code))
}

/// `--local N` on a multi-rank command: starts its N ranks here and returns the exit code;
/// `None` when this process is itself a rank (or one of a launcher's).
fn local_ranks(spec: &CommandSpec, matches: &clap::ArgMatches) -> anyhow::Result<Option<u8>> {
    let Some(local) = spec.local else {
        return Ok(None);
    };
    let launch = LaunchArgs::from_arg_matches(matches)?;
    let Some(ranks) = launch.spawn_local() else {
        return Ok(None);
    };
    if let Some(check) = local.check {
        // Bad input is refused here, before any rank starts.
        check(matches, ranks)?;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if local.gate {
        return crate::cluster::local::run_local_gate(ranks, local.max, &args).map(Some);
    }
    crate::cluster::local::run_local(ranks, local.max, &args).map(|()| Some(0))
}

/// The steps after a command that wrote a run folder.
fn after(ran: &Ran, g: &GlobalArgs) -> anyhow::Result<()> {
    let Some(dir) = &ran.dir else {
        return Ok(());
    };
    match ran.after {
        After::Nothing => return Ok(()),
        After::Summary => {}
        After::Noisy => crate::report::document::warn_noisy(dir, g.quiet || g.json),
        After::Report => {
            if !g.quiet {
                // The figures are measured and kept: a report that cannot be drawn is a
                // warning, never a change of the exit code.
                if let Err(e) = plot(dir, crate::report::plot::charts::Format::Both, &[], true) {
                    eprintln!("warning: the run's report was not drawn: {e:#}");
                }
            }
        }
    }
    match (&ran.json, g.json) {
        (Some(doc), true) => println!("{}", serde_json::to_string_pretty(doc)?),
        (None, true) => print_summary(dir)?,
        _ => {}
    }
    Ok(())
}

/// Prints the run's summary.json (written when the run ended).
fn print_summary(dir: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(dir.join("summary.json"))
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", dir.join("summary.json").display()))?;
    println!("{text}");
    Ok(())
}
