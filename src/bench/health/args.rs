//! `morphbench health`: its flags, and its command. The exit code is the node's health (0, 1,
//! 2); with `--npd` an error is still node-problem-detector's one line (Unknown, exit 2), the
//! error itself on stderr.

use std::path::PathBuf;

use clap::Args;

use crate::bench::descriptor::{CommandSpec, RunFn};

/// The `health` subcommand, running `run` (in mod.rs).
pub const fn command(run: RunFn) -> CommandSpec {
    CommandSpec::runs(
        "One node's health check, for Slurm's HealthCheckProgram and prologs, Prometheus and \
         node-problem-detector: every GPU of this node (one rank each), quick's tests at short \
         deadlines, judged against a per-SKU baseline; bounded (at most 45 s with 8 GPUs)",
        "Exit codes: 0 healthy, 1 unhealthy (a figure FAILed, confirmed by a retest), 2 could not judge
    (no --baseline and fewer than 3 GPUs to judge by each other, no adapter, a bad flag, the run cut
    at its bound, a test cut by its deadline before 3 samples on its first try and its retest).

    Examples:
      morphbench health --baseline /etc/morphbench/h200.toml
      morphbench health --baseline B --slurm          # HealthCheckProgram: drain on FAIL, resume own drains
      morphbench health --baseline B --npd            # node-problem-detector: one line, exit 0/1/2
      morphbench health --baseline B --textfile /var/lib/prometheus/node-exporter

    --slurm drains this node (SLURMD_NODENAME, else the short hostname) on a FAIL with
    Reason=\"[morphbench] <test> <figure>: <measured> vs <expected> <unit>\" (at most 128
    characters), and on a healthy verdict resumes it only if its drain reason starts with
    [morphbench]: an operator's drain is never undone.",
        HealthArgs::augment_args,
        run,
    )
    .verdict()
}

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// Expected values per adapter and driver (`morphbench baseline RUN -o FILE`); without it
    /// the node is measured and reported, and judged only by its GPUs against each other.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Drain this node through scontrol on a FAIL; resume it on a healthy verdict if
    /// morphbench drained it.
    #[arg(long)]
    pub slurm: bool,
    /// node-problem-detector's custom plugin contract: one line of at most 80 characters,
    /// exit 0 OK, 1 NonOK, 2 Unknown.
    #[arg(long, conflicts_with = "json")]
    pub npd: bool,
    /// Also write the figures and verdicts as metrics for node_exporter's textfile collector
    /// (DIR/morphbench_health.prom, replaced atomically).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
}
