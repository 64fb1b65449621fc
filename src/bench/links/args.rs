//! `morphbench links`: its flags, and its command (every rank runs it; `--local N` starts N
//! here).

use clap::Args;

use crate::bench::descriptor::{CommandSpec, GlobalArgs, LaunchArgs, Local, RunFn};
use crate::bench::flags::{parse_message_sizes, RdmaDeviceArgs, SizeList};

/// The `links` subcommand, running `run` (in mod.rs).
pub const fn command(run: RunFn) -> CommandSpec {
    CommandSpec::runs(
        "Every pair of ranks (launched by srun, mpirun or by hand): latency and bandwidth, slow \
         links and nodes flagged; rank 0 writes links.csv and nodes.csv",
        "Examples:\n  export MORPHBENCH_TOKEN=$(head -c 32 /dev/urandom | base64)   # the job's secret\n  srun -N 4 -n 4 morphbench links                         # rendezvous at the first node\n  mpirun -np 4 -x MASTER_ADDR=node1 -x MORPHBENCH_TOKEN morphbench links --transport tcp,rdma --device mlx5_0\n  morphbench links --rank 0 --world 2 --rendezvous 10.0.0.1:18700 --token-file T   # on node 1\n  morphbench links --rank 1 --world 2 --rendezvous 10.0.0.1:18700 --token-file T   # on node 2\n\n\
    Pairs run in the rounds of a round-robin tournament (no rank in two pairs at once). A link is\n\
    flagged when its p50 is at least 1.35x the baseline (the lower median) of the links of its\n\
    transport, size and direction, and an outlier by the MAD modified z-score (> 3.5).\n\
    Rank 0 listens at the rendezvous address: --rendezvous, else MORPHBENCH_RENDEZVOUS, else\n\
    MASTER_ADDR and MASTER_PORT, else the first host of the Slurm node list (port 18700).\n\
    Every rank proves the job's secret (--token-file, else MORPHBENCH_TOKEN; --local makes its\n\
    own): see docs/security.md.",
        LinksArgs::augment_args,
        run,
    )
    .local(Local {
        max: crate::cluster::launch::MAX_LOCAL,
        gate: false,
        check: None,
    })
}

#[derive(Debug, Args)]
pub struct LinksArgs {
    /// Transports to measure, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "tcp")]
    pub transport: Vec<crate::transport::TransportKind>,
    /// Message sizes such as 8,64K,4M (1 B to 256 MiB).
    #[arg(long, value_parser = parse_message_sizes, default_value = "8,64K,4M")]
    pub sizes: SizeList,
    /// The most samples per test (ping-pongs, or stream batches of about 1 MiB).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub iters: u32,
    /// A TCP test stops after this many milliseconds once it has 5 samples.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub budget_ms: u64,
    /// Also stream both ways at once (GB/s is the sum).
    #[arg(long)]
    pub bidir: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Seconds any one read or write from a peer may take before it counts as gone.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// Skip the nodes' GPU samples (nodes.csv).
    #[arg(long)]
    pub no_fingerprint: bool,
    /// The most pairs measured at once within a round [default: all of the round's]. 1 when
    /// the "hosts" share cores (namespaces or VMs on one machine), so pairs do not compete
    /// for the CPU that small messages are bound by.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrent: Option<u32>,
    /// Which pairs: all-pairs (every pair once, n-1 rounds), quick (3 rounds of random perfect
    /// matchings, then retests of the suspects) or rounds:K (K random matchings, 1 to 4096).
    /// A world of K+1 ranks or fewer is all-pairs.
    #[arg(long, default_value = "all-pairs", value_parser = parse_pattern)]
    pub pattern: super::pattern::Pattern,
    /// The seed of the random matchings [default: drawn, and kept in meta.json].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Refuse, before anything starts, a plan estimated to run longer than this (seconds).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub budget_s: u64,
    /// A Slurm topology.conf (SwitchName=... Nodes=... / Switches=...): each link is judged
    /// against links with as many switches between their hosts (same leaf, across leaves).
    #[arg(long, value_name = "FILE")]
    pub topology: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub rdma: RdmaDeviceArgs,
}

fn parse_pattern(s: &str) -> anyhow::Result<super::pattern::Pattern> {
    s.parse()
}

impl LinksArgs {
    pub fn options(&self, g: &GlobalArgs) -> super::options::LinksOptions {
        let mut transports = self.transport.clone();
        transports.dedup();
        super::options::LinksOptions {
            session: self.launch.session(
                g,
                crate::transport::rdma::verbs::list_devices()
                    .map(|l| l.into_iter().map(|d| d.name).collect())
                    .unwrap_or_default(),
            ),
            plan: super::pair::PairPlan {
                transports,
                sizes: self.sizes.0.clone(),
                iters: self.iters,
                budget_ms: self.budget_ms,
                bidir: self.bidir,
                io_timeout_s: self.timeout_s,
            },
            choice: self.rdma.choice(),
            fingerprint: !self.no_fingerprint,
            concurrent: self.concurrent.map(|c| c as usize),
            pattern: self.pattern,
            seed: self.seed.unwrap_or_else(seed),
            budget_s: self.budget_s,
            topology: self.topology.clone(),
            backend: g.backend,
            adapter: g.adapter.clone(),
            machines: None,
            deadline_s: None,
        }
    }
}

/// A seed for the random matchings when none is given: the clock's and this process's.
pub fn seed() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id())
}
