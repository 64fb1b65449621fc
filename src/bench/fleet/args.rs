//! `morphbench fleet`: its flags, and its command (every rank runs it; `--local N` starts N
//! here). Rank 0's exit code is the gate's verdict (0 pass, 1 a node failed); an error is 2.

use clap::Args;

use crate::bench::descriptor::{CommandSpec, GlobalArgs, LaunchArgs, Local, RunFn};

/// The `fleet` subcommand, running `run` (in mod.rs).
pub const fn command(run: RunFn) -> CommandSpec {
    CommandSpec::runs(
        "A bring-up gate on every rank of a job (srun, mpirun, torchrun, a Kubernetes Indexed Job; \
         one rank per GPU): inventory and verified tests, each node judged against the fleet (and a \
         baseline); writes fleet.csv and drain.txt; exits 1 when a node fails",
        "Exit codes: 0 every node PASS (WARNs allowed), 1 some node FAIL, 2 the gate could not run.\n\n\
    Examples:\n  srun -N 16 --ntasks-per-node 8 morphbench fleet --level quick\n  \
    morphbench fleet --local 4 --level quick --json\n  \
    morphbench baseline results/FLEET_RUN -o h200.toml && srun -N 64 morphbench fleet --baseline h200.toml\n\n\
    Levels: quick (memcpy, GEMM, D2H, H2D, the FMA and memory bandwidth ceilings; at most 60 s a\n\
    rank), standard (longer and larger, the offload path, links quick; 5 min), extended (all-pairs\n\
    links, a short real pipeline; 20 min). Ranks of one machine take turns on what they share\n\
    (memory, CPU; all of a CPU driver's work); machines run side by side. A figure fails at 1.35x\n\
    slower than the fleet's healthy level (lower median, MAD z > 3.5, at least 3 nodes of its\n\
    adapter; a CPU driver's kernels at 2x) or below the baseline's expected x (1 - tolerance)^2,\n\
    confirmed by a retest. A busy node (other processes on its machine) is a WARN.",
        FleetArgs::augment_args,
        run,
    )
    .verdict()
    .local(Local {
        max: crate::cluster::launch::MAX_LOCAL,
        gate: true,
        check: None,
    })
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// How deep: quick (about a minute a rank), standard (5 minutes), extended (20 minutes).
    #[arg(long, value_enum, default_value = "quick")]
    pub level: super::checks::Level,
    /// Expected values per adapter and driver (`morphbench baseline FLEET_RUN -o FILE`).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<std::path::PathBuf>,
    /// Per-stage op times of the pipeline keep_cost.csv models, as a `sim --validate` file
    /// (its first row: stages, microbatches, tf_ms, tb_ms, tw_ms, activation_bytes...)
    /// [default: one stage per rank up to 8, 10 ms ops].
    #[arg(long, value_name = "FILE")]
    pub profile: Option<std::path::PathBuf>,
    /// Only these of the level's tests (memcpy, gemm, d2h, h2d, fma, bandwidth, hol, links,
    /// pipeline), such as
    /// `--only links` on a fleet whose GPUs were just judged.
    #[arg(long, value_delimiter = ',', value_name = "TESTS")]
    pub only: Option<Vec<String>>,
    /// Rank 0 drains each failed host through scontrol, with health's reason
    /// ("[morphbench] <test> <figure>: <measured> vs <expected>").
    #[arg(long)]
    pub slurm: bool,
    /// Each host's lowest rank writes its host's figures and verdicts as metrics for
    /// node_exporter's textfile collector (DIR/morphbench_fleet.prom).
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

impl FleetArgs {
    pub fn options(&self, g: &GlobalArgs) -> super::options::FleetOptions {
        super::options::FleetOptions {
            session: self.launch.session(g, Vec::new()),
            level: self.level,
            only: self.only.clone(),
            baseline: self.baseline.clone(),
            profile: self.profile.clone(),
            slurm: self.slurm,
            textfile: self.textfile.clone(),
            backend: g.backend,
            adapter: g.adapter.clone(),
        }
    }
}
