//! `morphbench pipeline`: its flags, and its command (every rank runs it; `--local N` starts N
//! stages here).

use clap::Args;

use crate::bench::descriptor::{parsed, CommandSpec, GlobalArgs, LaunchArgs, Local, RunFn};
use crate::bench::flags::{parse_sweep, RdmaDeviceArgs, SweepLink};

/// The `pipeline` subcommand, running `run` (in mod.rs).
pub const fn command(run: RunFn) -> CommandSpec {
    CommandSpec::runs(
        "A real pipeline: each rank a stage running GEMM and layernorm forward and backward, \
         activations and gradients sent between them, in the simulator's schedule; measured \
         against the simulator's prediction; writes pipeline.csv",
        "Examples:\n  morphbench pipeline --local 2                            # 2 stages on this machine\n  morphbench pipeline --local 4 --schedule 1f1b,zb-h1,adaptive --comm inline,offload --slow 0:0,20\n  srun -n 4 morphbench pipeline --schedule adaptive --slow 1:30",
        PipelineArgs::augment_args,
        run,
    )
    .local(Local {
        max: super::plan::MAX_LOCAL_STAGES,
        gate: false,
        check: Some(|m, stages| {
            let a: PipelineArgs = parsed(m)?;
            let plan = a.plan()?;
            plan.validate(stages)
        }),
    })
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
    pub comm: Vec<super::exec::Comm>,
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
    pub fn options(&self, g: &GlobalArgs) -> anyhow::Result<super::plan::PipelineOptions> {
        Ok(super::plan::PipelineOptions {
            session: self.launch.session(g, Vec::new()),
            plan: self.plan()?,
            backend: g.backend,
            adapter: g.adapter.clone(),
            rdma: self.rdma.choice(),
            deadline_s: None,
        })
    }

    /// Every case: each schedule with each comm and each delay.
    fn plan(&self) -> anyhow::Result<super::plan::PipelinePlan> {
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
            let schedule: crate::sim::Schedule = name
                .parse()
                .map_err(|e| anyhow::anyhow!("--schedule: {e}"))?;
            for &comm in &self.comm {
                for &slow in &delays {
                    cases.push(super::plan::Case {
                        schedule: schedule.clone(),
                        comm,
                        slow,
                    });
                }
            }
        }
        Ok(super::plan::PipelinePlan {
            shape: super::shape::Shape {
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
        })
    }
}
