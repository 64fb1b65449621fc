//! The command line: flags and subcommands (clap), turned into typed plans. Measures nothing.

mod values;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::gpu::BackendChoice;

mod bench;
mod network;
mod sim;

pub use bench::BenchCommand;
pub use network::{BaselineArgs, FleetArgs, LaunchArgs, LinksArgs, PipelineArgs, SinkArgs};
pub use sim::SimArgs;

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
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
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
    pub fn options(&self, raw: bool) -> crate::suite::RunOptions {
        crate::suite::RunOptions {
            backend: self.backend,
            adapter: self.adapter.clone(),
            out: self.out.clone(),
            // With --json the summary is the output: no tables, no progress.
            quiet: self.quiet || self.json,
            raw,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe every GPU adapter and the host.
    #[command(
        after_help = "Examples:\n  morphbench info                 # adapters, limits, features, host\n  morphbench info --json          # the same, for scripts"
    )]
    Info(InfoArgs),
    /// A bench with a subcommand of its own (`peak`, `kernels`, `d2h`, `hol`, ...): its flags,
    /// help and plan come from its descriptor in the registry.
    #[command(flatten)]
    Bench(BenchCommand),
    /// Run a suite from a TOML config (default: the built-in quick suite).
    #[command(
        after_help = "Examples:\n  morphbench run                                  # the built-in quick suite\n  morphbench run --config bench-configs/full.toml --out /scratch/results\n  morphbench run --no-plots -q"
    )]
    Run(RunArgs),
    /// Simulate pipeline schedules under link stragglers and write sim.csv.
    #[command(
        after_help = "Examples:\n  morphbench sim --stages 4 --microbatches 12 --sweep 0:0,20,60\n  morphbench sim --slow 1:30 --schedule 1f1b,adaptive --timeline 1f1b,adaptive\n  morphbench sim --from results/latest --sweep 0:0,10,20  # op times measured by a run"
    )]
    Sim(Box<SimArgs>),
    /// Receive offloaded transfers from `hol --peer` on another node.
    #[command(
        after_help = "Examples:\n  morphbench sink                                 # loopback, port 18600\n  morphbench sink --listen 0.0.0.0:18600 --transport rdma --device mlx5_0"
    )]
    Sink(SinkArgs),
    /// RDMA WRITE latency and bandwidth between two nodes, perftest-style; writes rdma.csv.
    #[command(
        after_help = "Examples:\n  morphbench rdma --server --listen 0.0.0.0:18515 --device mlx5_0      # on node A\n  morphbench rdma --connect nodeA --device mlx5_0 --test lat             # on node B"
    )]
    Rdma(crate::bench::rdma::RdmaArgs),
    /// Every pair of ranks (launched by srun, mpirun or by hand): latency and bandwidth, slow
    /// links and nodes flagged; rank 0 writes links.csv and nodes.csv.
    #[command(
        after_help = "Examples:\n  export MORPHBENCH_TOKEN=$(head -c 32 /dev/urandom | base64)   # the job's secret\n  srun -N 4 -n 4 morphbench links                         # rendezvous at the first node\n  mpirun -np 4 -x MASTER_ADDR=node1 -x MORPHBENCH_TOKEN morphbench links --transport tcp,rdma --device mlx5_0\n  morphbench links --rank 0 --world 2 --rendezvous 10.0.0.1:18700 --token-file T   # on node 1\n  morphbench links --rank 1 --world 2 --rendezvous 10.0.0.1:18700 --token-file T   # on node 2\n\n\
Pairs run in the rounds of a round-robin tournament (no rank in two pairs at once). A link is\n\
flagged when its p50 is at least 1.35x the baseline (the lower median) of the links of its\n\
transport, size and direction, and an outlier by the MAD modified z-score (> 3.5).\n\
Rank 0 listens at the rendezvous address: --rendezvous, else MORPHBENCH_RENDEZVOUS, else\n\
MASTER_ADDR and MASTER_PORT, else the first host of the Slurm node list (port 18700).\n\
Every rank proves the job's secret (--token-file, else MORPHBENCH_TOKEN; --local makes its\n\
own): see docs/security.md."
    )]
    Links(Box<LinksArgs>),
    /// A real pipeline: each rank a stage running GEMM and layernorm forward and backward,
    /// activations and gradients sent between them, in the simulator's schedule; measured
    /// against the simulator's prediction; writes pipeline.csv.
    #[command(
        after_help = "Examples:\n  morphbench pipeline --local 2                            # 2 stages on this machine\n  morphbench pipeline --local 4 --schedule 1f1b,zb-h1,adaptive --comm inline,offload --slow 0:0,20\n  srun -n 4 morphbench pipeline --schedule adaptive --slow 1:30"
    )]
    Pipeline(Box<PipelineArgs>),
    /// Draw a run's CSVs into RUN_DIR/plots/ and write report.md and report.html.
    #[command(
        after_help = "Examples:\n  morphbench plot results/latest\n  morphbench plot results/RUN_A --compare results/RUN_B --format svg"
    )]
    Plot(PlotArgs),
    /// List the runs in a folder with status, date, adapter and main headline.
    #[command(after_help = "Examples:\n  morphbench runs\n  morphbench runs /scratch/results")]
    Runs(RunsArgs),
    /// Is this node normal? Verdicts (PASS, WARN, FAIL) per figure against a baseline run or
    /// a fleet of runs; writes check.csv; exits 1 on a FAIL.
    #[command(
        after_help = "Exit codes: 0 all PASS or WARN, 1 a FAIL (or a WARN with --warn-exit), 2 an error.\n\n\
Examples:\n  morphbench check results/latest --baseline results/known-good\n  \
morphbench check results/latest --baseline results/known-good --policy bench-configs/check-policy.toml\n  \
morphbench check results/latest --baseline good/run1 good/run2 good/run3   # drift measured\n  \
morphbench check /shared/runs/node* --fleet                     # one run per node\n\n\
A FAIL is a figure worse by at least fail_pct (10%) and significant (p < alpha = 0.01: Welch's t\n\
from the rows, or Mann-Whitney U where both runs kept samples with --raw); a WARN is worse by\n\
warn_pct (5%) and significant, worse by fail_pct but not significant, or not comparable (one run\n\
only, different adapters or drivers). --fleet: a figure is an outlier when its modified z-score\n\
against the fleet's median exceeds z (3.5) and it is off by warn_pct."
    )]
    Check(CheckArgs),
    /// A bring-up gate on every rank of a job (srun, mpirun, torchrun, a Kubernetes Indexed
    /// Job; one rank per GPU): inventory and verified tests, each node judged against the fleet
    /// (and a baseline); writes fleet.csv and drain.txt; exits 1 when a node fails.
    #[command(
        after_help = "Exit codes: 0 every node PASS (WARNs allowed), 1 some node FAIL, 2 the gate could not run.\n\n\
Examples:\n  srun -N 16 --ntasks-per-node 8 morphbench fleet --level quick\n  \
morphbench fleet --local 4 --level quick --json\n  \
morphbench baseline results/FLEET_RUN -o h200.toml && srun -N 64 morphbench fleet --baseline h200.toml\n\n\
Levels: quick (memcpy, GEMM, D2H, H2D, the FMA and memory bandwidth ceilings; at most 60 s a\n\
rank), standard (longer and larger, the offload path, links quick; 5 min), extended (all-pairs\n\
links, a short real pipeline; 20 min). Ranks of one machine take turns on what they share\n\
(memory, CPU; all of a CPU driver's work); machines run side by side. A figure fails at 1.35x\n\
slower than the fleet's healthy level (lower median, MAD z > 3.5, at least 3 nodes of its\n\
adapter; a CPU driver's kernels at 2x) or below the baseline's expected x (1 - tolerance)^2,\n\
confirmed by a retest. A busy node (other processes on its machine) is a WARN."
    )]
    Fleet(Box<FleetArgs>),
    /// One node's health check, for Slurm's HealthCheckProgram and prologs, Prometheus and
    /// node-problem-detector: every GPU of this node (one rank each), quick's tests at short
    /// deadlines, judged against a per-SKU baseline; bounded (at most 45 s with 8 GPUs).
    #[command(
        after_help = "Exit codes: 0 healthy, 1 unhealthy (a figure FAILed, confirmed by a retest), 2 could not judge
(no --baseline and fewer than 3 GPUs to judge by each other, no adapter, a bad flag, the run cut
at its bound).

Examples:
  morphbench health --baseline /etc/morphbench/h200.toml
  morphbench health --baseline B --slurm          # HealthCheckProgram: drain on FAIL, resume own drains
  morphbench health --baseline B --npd            # node-problem-detector: one line, exit 0/1/2
  morphbench health --baseline B --textfile /var/lib/prometheus/node-exporter

--slurm drains this node (SLURMD_NODENAME, else the short hostname) on a FAIL with
Reason=\"[morphbench] <test> <figure>: <measured> vs <expected> <unit>\" (at most 128
characters), and on a healthy verdict resumes it only if its drain reason starts with
[morphbench]: an operator's drain is never undone."
    )]
    Health(HealthArgs),
    /// Write a fleet baseline (each figure's expected value and tolerance per adapter and
    /// driver) from a healthy fleet run, for `fleet --baseline`.
    #[command(
        after_help = "Examples:\n  morphbench baseline results/FLEET_RUN -o bench-configs/baseline-h200.toml"
    )]
    Baseline(BaselineArgs),
}

#[derive(Debug, Args)]
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

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The run folder to judge (with --fleet: every node's run folder).
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// A known-good run folder to compare with; give several runs of the known-good node to
    /// judge each figure against its run-to-run spread (a t-test against them).
    #[arg(long, value_name = "BASE_RUN_DIR", num_args = 1.., conflicts_with = "fleet")]
    pub baseline: Vec<PathBuf>,
    /// Judge each run against the median of all of them (one run per node).
    #[arg(long)]
    pub fleet: bool,
    /// Thresholds per bench or figure (TOML: fail_pct, warn_pct, alpha, z, ignore).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Exit 1 on a WARN too.
    #[arg(long)]
    pub warn_exit: bool,
    /// Print every PASS row, not just the first ones.
    #[arg(long)]
    pub all: bool,
    /// Write check.csv into DIR instead of each judged run's folder (their reports stay as
    /// they are).
    #[arg(long = "check-out", value_name = "DIR")]
    pub check_out: Option<PathBuf>,
    /// Also write each judged figure and its verdict as metrics for node_exporter's textfile
    /// collector (DIR/morphbench_check.prom).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The folder that holds the runs.
    #[arg(default_value = "results")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The run folder (results/<run-id>).
    pub run_dir: PathBuf,
    /// Image format.
    #[arg(long, value_enum, default_value = "both")]
    pub format: crate::report::plot::charts::Format,
    /// Other run folders drawn as extra series (labelled by host and adapter).
    #[arg(long, value_name = "RUN_DIR", num_args = 1..)]
    pub compare: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InfoArgs {}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Suite config (TOML); the built-in bench-configs/quick.toml when omitted.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Also write every iteration's sample to <bench>_samples.csv.
    #[arg(long)]
    pub raw: bool,
    /// Skip the figures and report written at the end of the run.
    #[arg(long)]
    pub no_plots: bool,
    /// Also write the run's headline figures as metrics for node_exporter's textfile
    /// collector (DIR/morphbench_run.prom).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
}
