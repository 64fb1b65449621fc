//! `morphbench check`: is this node normal? Its verdict is the exit code, and each judged
//! run's report gains the check.

use std::path::PathBuf;

use clap::Args;

use crate::bench::descriptor::{parsed, CommandSpec, GlobalArgs, Ran};
use crate::report::plot::charts::Format;

pub const COMMAND: CommandSpec = CommandSpec::runs(
    "Is this node normal? Verdicts (PASS, WARN, FAIL) per figure against a baseline run or a \
     fleet of runs; writes check.csv; exits 1 on a FAIL",
    "Exit codes: 0 all PASS or WARN, 1 a FAIL (or a WARN with --warn-exit), 2 an error.\n\n\
Examples:\n  morphbench check results/latest --baseline results/known-good\n  \
morphbench check results/latest --baseline results/known-good --policy bench-configs/check-policy.toml\n  \
morphbench check results/latest --baseline good/run1 good/run2 good/run3   # drift measured\n  \
morphbench check /shared/runs/node* --fleet                     # one run per node\n\n\
A FAIL is a figure worse by at least fail_pct (10%) and significant (p < alpha = 0.01: Welch's t\n\
from the rows, or Mann-Whitney U where both runs kept samples with --raw); a WARN is worse by\n\
warn_pct (5%) and significant, worse by fail_pct but not significant, or not comparable (one run\n\
only, different adapters or drivers). --fleet: a figure is an outlier when its modified z-score\n\
against the fleet's median exceeds z (3.5) and it is off by warn_pct.",
    CheckArgs::augment_args,
    run,
)
.verdict();

#[derive(Debug, Args)]
struct CheckArgs {
    /// The run folder to judge (with --fleet: every node's run folder).
    #[arg(required = true, value_name = "RUN_DIR")]
    runs: Vec<PathBuf>,
    /// A known-good run folder to compare with; give several runs of the known-good node to
    /// judge each figure against its run-to-run spread (a t-test against them).
    #[arg(long, value_name = "BASE_RUN_DIR", num_args = 1.., conflicts_with = "fleet")]
    baseline: Vec<PathBuf>,
    /// Judge each run against the median of all of them (one run per node).
    #[arg(long)]
    fleet: bool,
    /// Thresholds per bench or figure (TOML: fail_pct, warn_pct, alpha, z, ignore).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Exit 1 on a WARN too.
    #[arg(long)]
    warn_exit: bool,
    /// Print every PASS row, not just the first ones.
    #[arg(long)]
    all: bool,
    /// Write check.csv into DIR instead of each judged run's folder (their reports stay as
    /// they are).
    #[arg(long = "check-out", value_name = "DIR")]
    check_out: Option<PathBuf>,
    /// Also write each judged figure and its verdict as metrics for node_exporter's textfile
    /// collector (DIR/morphbench_check.prom).
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
}

fn run(m: &clap::ArgMatches, g: &GlobalArgs) -> anyhow::Result<Ran> {
    let a: CheckArgs = parsed(m)?;
    let opts = crate::check::CheckOptions {
        runs: a.runs,
        baseline: a.baseline,
        fleet: a.fleet,
        policy: a.policy,
        out: a.check_out,
        warn_exit: a.warn_exit,
        all: a.all,
        quiet: g.quiet,
        json: g.json,
        textfile: a.textfile,
    };
    let (passed, written) = crate::check::run(&opts)?;
    // The verdict is given (and with --json printed with its exit code): a report that cannot
    // be redrawn is a warning, never a change of the exit code.
    for dir in written {
        if dir.join("meta.json").exists() {
            if let Err(e) = super::plot(&dir, Format::Both, &[], true) {
                eprintln!(
                    "warning: the report of {} was not redrawn: {e:#}",
                    dir.display()
                );
            }
        }
    }
    Ok(Ran::code(if passed { 0 } else { 1 }))
}
