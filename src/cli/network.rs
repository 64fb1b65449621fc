//! The flags of the commands that talk over the network: links, pipeline, rdma, sink.

use clap::Args;

use super::sim::parse_sweep;
use super::GlobalArgs;
use crate::bench::flags::{parse_message_sizes, RdmaDeviceArgs, SizeList};
use crate::bench::sim::SweepLink;

#[derive(Debug, Args)]
pub struct SinkArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:18600")]
    pub listen: String,
    /// Serve one connection, then exit.
    #[arg(long)]
    pub once: bool,
    /// Largest payload accepted, in bytes (K/M/G units allowed).
    #[arg(long, value_parser = crate::units::parse_size, default_value = "256M")]
    pub max_payload: u64,
    /// Seconds a frame may take to arrive before the peer counts as gone (1 to 3600). It must
    /// exceed the largest delay the sender injects.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// What the sender uses: TCP, or RDMA WRITE through verbs (`hol --transport rdma`).
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: crate::transport::TransportKind,
    #[command(flatten)]
    pub rdma: RdmaDeviceArgs,
}

/// How a multi-rank command finds its place when no launcher says (`links`, `pipeline`).
#[derive(Debug, Clone, Args)]
pub struct LaunchArgs {
    /// This process's rank, when no launcher says (with --world and --rendezvous).
    #[arg(long, requires = "world")]
    pub rank: Option<u32>,
    /// The number of ranks, when no launcher says.
    #[arg(long, requires = "rank")]
    pub world: Option<u32>,
    /// Where rank 0 listens, HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub rendezvous: Option<String>,
    /// Seconds the ranks wait for each other to arrive.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub wait_s: u64,
    /// Start N ranks of this program on this machine, each with its own device (a CPU driver
    /// gets its share of the cores via LP_NUM_THREADS).
    #[arg(long, value_name = "N")]
    pub local: Option<u32>,
    /// The job's secret, which every rank proves it holds (the same file on every rank; else
    /// MORPHBENCH_TOKEN; --local makes its own). See docs/security.md.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Run without the job's secret: anyone who reaches rank 0's port can join (said in
    /// meta.json and on the console).
    #[arg(long)]
    pub insecure: bool,
}

impl LaunchArgs {
    /// `--local N` on the command line as given: a process started with `--rank` is one of the
    /// ranks such a launcher started, not a launcher itself.
    pub fn spawn_local(&self) -> Option<u32> {
        self.local.filter(|_| self.rank.is_none())
    }

    pub fn session(
        &self,
        g: &GlobalArgs,
        rdma_devices: Vec<String>,
    ) -> crate::cluster::SessionOptions {
        crate::cluster::SessionOptions {
            world: crate::cluster::world::WorldOptions {
                explicit: self.rank.zip(self.world),
                rendezvous: self.rendezvous.clone(),
                timeout: std::time::Duration::from_secs(self.wait_s),
                adapter: None,
                rdma_devices,
                trust: crate::cluster::auth::TrustSource {
                    token_file: self.token_file.clone(),
                    insecure: self.insecure,
                },
            },
            out: g.out.clone(),
            // With --json, standard output carries the summary alone.
            quiet: g.quiet || g.json,
        }
    }
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
    pub pattern: crate::bench::links::pattern::Pattern,
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

fn parse_pattern(s: &str) -> Result<crate::bench::links::pattern::Pattern, String> {
    s.parse()
}

impl LinksArgs {
    pub fn options(&self, g: &GlobalArgs) -> crate::bench::links::LinksOptions {
        let mut transports = self.transport.clone();
        transports.dedup();
        crate::bench::links::LinksOptions {
            session: self.launch.session(
                g,
                crate::transport::rdma::verbs::list_devices()
                    .map(|l| l.into_iter().map(|d| d.name).collect())
                    .unwrap_or_default(),
            ),
            plan: crate::bench::links::pair::PairPlan {
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
            seed: self.seed.unwrap_or_else(|| {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
                now.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id())
            }),
            budget_s: self.budget_s,
            topology: self.topology.clone(),
            backend: g.backend,
            adapter: g.adapter.clone(),
            machines: None,
            deadline_s: None,
        }
    }
}

#[derive(Debug, Args)]
pub struct PipelineArgs {
    /// Schedules to run, each replaying the simulator's order (1f1b, interleaved:V, zb-h1,
    /// zb-h2, zb-v, greedy, adaptive, static:X).
    #[arg(long, default_value = "1f1b,adaptive")]
    pub schedule: String,
    /// inline: a stage waits for each send to be acknowledged; offload: a host thread sends.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "inline,offload"
    )]
    pub comm: Vec<crate::bench::pipeline::exec::Comm>,
    /// LINK:MS[,MS...]: delay every message on link LINK (both ways) by each MS in turn.
    #[arg(long, value_parser = parse_sweep, value_name = "LINK:MS[,MS...]")]
    pub slow: Option<SweepLink>,
    #[arg(long, default_value_t = 2)]
    pub layers: u32,
    #[arg(long, default_value_t = 256)]
    pub hidden: u32,
    #[arg(long, default_value_t = 64)]
    pub tokens: u32,
    #[arg(long, default_value_t = 8)]
    pub microbatches: u32,
    /// Timed iterations per case (1 to 10000).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub iters: u32,
    /// Untimed iterations first (0 to 1000).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub warmup: u32,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Seconds any message between stages may take.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_s: u64,
    /// What carries activations and gradients between stages (rank 0's choice holds for all).
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: crate::transport::TransportKind,
    #[command(flatten)]
    pub rdma: RdmaDeviceArgs,
}

impl PipelineArgs {
    pub fn options(
        &self,
        g: &GlobalArgs,
    ) -> Result<crate::bench::pipeline::PipelineOptions, String> {
        use crate::bench::pipeline::{Case, PipelinePlan};
        let delays: Vec<Option<(u32, f64)>> = match &self.slow {
            None => vec![None],
            Some(s) => s
                .delays_ms
                .iter()
                .map(|&d| Some((s.link as u32, d)))
                .collect(),
        };
        let mut cases = Vec::new();
        for name in self.schedule.split(',').map(str::trim) {
            let schedule: crate::sim::Schedule =
                name.parse().map_err(|e| format!("--schedule: {e}"))?;
            for &comm in &self.comm {
                for &slow in &delays {
                    cases.push(Case {
                        schedule: schedule.clone(),
                        comm,
                        slow,
                    });
                }
            }
        }
        Ok(crate::bench::pipeline::PipelineOptions {
            session: self.launch.session(g, Vec::new()),
            plan: PipelinePlan {
                shape: crate::bench::pipeline::shape::Shape {
                    layers: self.layers,
                    hidden: self.hidden,
                    tokens: self.tokens,
                    microbatches: self.microbatches,
                },
                cases,
                iters: self.iters,
                warmup: self.warmup,
                timeout_s: self.timeout_s,
                transport: self.transport,
            },
            backend: g.backend,
            adapter: g.adapter.clone(),
            rdma: self.rdma.choice(),
            deadline_s: None,
        })
    }
}

#[derive(Debug, Args)]
pub struct FleetArgs {
    /// How deep: quick (about a minute a rank), standard (5 minutes), extended (20 minutes).
    #[arg(long, value_enum, default_value = "quick")]
    pub level: crate::bench::fleet::checks::Level,
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
    pub fn options(&self, g: &GlobalArgs) -> crate::bench::fleet::FleetOptions {
        crate::bench::fleet::FleetOptions {
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

#[derive(Debug, Args)]
pub struct BaselineArgs {
    /// A fleet run folder (healthy nodes: only those that passed every test are used).
    #[arg(value_name = "FLEET_RUN")]
    pub run_dir: std::path::PathBuf,
    /// Where to write the baseline (TOML).
    #[arg(short, long, value_name = "FILE")]
    pub output: std::path::PathBuf,
}
