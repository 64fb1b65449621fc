//! The flags of `sim`, and its subcommand.

use std::path::PathBuf;

use clap::Args;

use super::scenario::{MemLimit, Occupy, OneOrMany, SimConfig, SlowLink};
use super::tail::{parse_stall, Stall};
use crate::bench::descriptor::{CommandSpec, PlanFn};
use crate::bench::flags::{parse_ms_list, parse_sweep, MsList, SweepLink};
use crate::sim::CommModel;

/// `sim`'s subcommand, planned by `plan` (`command.rs`).
pub const fn command(plan: PlanFn) -> CommandSpec {
    CommandSpec::plans(
        "Simulate pipeline schedules under link stragglers and write sim.csv",
        "Examples:\n  morphbench sim --stages 4 --microbatches 12 --sweep 0:0,20,60\n  morphbench sim --slow 1:30 --schedule 1f1b,adaptive --timeline 1f1b,adaptive\n  morphbench sim --from results/latest --sweep 0:0,10,20  # op times measured by a run",
        SimArgs::augment_args,
        plan,
    )
    // `--validate` tells its verdict from an error, as check does.
    .error_code(|m| match m.get_one::<PathBuf>("validate") {
        Some(_) => 2,
        None => 1,
    })
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Scenario TOML (the keys of a suite's [sim] table); flags given here override it.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Pipeline stages S [default: 4].
    #[arg(long)]
    pub stages: Option<usize>,
    /// Microbatches N per iteration [default: 12].
    #[arg(long)]
    pub microbatches: Option<usize>,
    /// Forward time in ms: one value or one per stage, comma separated [default: 10].
    #[arg(long, value_name = "MS[,MS...]", value_parser = parse_ms_list, allow_hyphen_values = true)]
    pub tf: Option<MsList>,
    /// Input-gradient backward time in ms (one or per stage) [default: 10].
    #[arg(long, value_name = "MS[,MS...]", value_parser = parse_ms_list, allow_hyphen_values = true)]
    pub tb: Option<MsList>,
    /// Weight-gradient backward time in ms (one or per stage) [default: 10].
    #[arg(long, value_name = "MS[,MS...]", value_parser = parse_ms_list, allow_hyphen_values = true)]
    pub tw: Option<MsList>,
    /// DualPipeV's overlapped forward-and-backward in ms (one or per stage) [default: tf + tb
    /// + tw, no overlap gain].
    #[arg(long, value_parser = parse_ms_list, value_name = "MS[,MS...]")]
    pub tfb: Option<MsList>,
    /// Base latency of every link in ms [default: 0].
    #[arg(long, allow_hyphen_values = true)]
    pub link_ms: Option<f64>,
    /// Extra delay on link LINK (between stages LINK and LINK+1); repeatable.
    #[arg(long = "slow", value_name = "LINK:DELAY_MS", value_parser = parse_slow)]
    pub slow: Vec<SlowLink>,
    /// Each transfer over LINK holds it MS (its bytes over the link's bandwidth): sends over a
    /// link queue behind each other, one FIFO per direction; repeatable.
    #[arg(long = "occupy", value_name = "LINK:MS", value_parser = parse_occupy)]
    pub occupy: Vec<Occupy>,
    /// One scenario per delay on LINK (on top of --slow); repeatable.
    #[arg(long = "sweep", value_name = "LINK:MS[,MS...]", value_parser = parse_sweep)]
    pub sweep: Vec<SweepLink>,
    /// How a transfer uses the sender's compute queue [default: latency].
    #[arg(long, value_enum)]
    pub comm: Option<CommModel>,
    /// D2H copy time on the sender's queue under --comm offload, in ms [default: 0.5].
    #[arg(long, allow_hyphen_values = true)]
    pub d2h_ms: Option<f64>,
    /// Schedules, comma separated: gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipev, zb-fill, interleaved:V[:G], greedy, adaptive, static:<schedule>, interleaved-zb-paper:V [default: 1f1b,static:1f1b,zb-h1,static:zb-fill,greedy,adaptive].
    #[arg(long, value_name = "LIST")]
    pub schedule: Option<String>,
    /// Memory limit adaptive keeps to: microbatches in flight (a number), or bytes per stage
    /// with a unit (e.g. 40GiB; parameters included; needs the model's shape) [default: 2 x
    /// 1F1B's first stage].
    #[arg(long, value_name = "N|SIZE")]
    pub mem_limit: Option<MemLimit>,
    /// The model's hidden size (with --heads, --seq-len, --micro-batch: memory in bytes,
    /// layers from --layers-per-stage).
    #[arg(long)]
    pub hidden: Option<u64>,
    /// Attention heads.
    #[arg(long)]
    pub heads: Option<u64>,
    /// Sequence length in tokens.
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Sequences per microbatch.
    #[arg(long)]
    pub micro_batch: Option<u64>,
    /// Transfers over LINK stall MS with probability PROB each (a lossy link's what-if): the
    /// base case runs --iterations times with stalls drawn; repeatable.
    #[arg(long = "stall", value_name = "LINK:PROB:MS", value_parser = parse_stall)]
    pub stall: Vec<Stall>,
    /// Iterations drawn with --stall [default: 1000].
    #[arg(long)]
    pub iterations: Option<u32>,
    /// The seed of the stalls' draws (the same seed, the same iterations) [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Straggler trace: lines of iteration;link;delay_ms, one simulated iteration each.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// A measured run folder, repeatable: tF/tB/tW from a node run (kernels.csv; its D2H cost
    /// too) or a pipeline run (pipeline.csv: its healthy case's medians per stage); from a
    /// links run (links.csv), the stages are its ranks, each link costs what the matrix says
    /// and its tails are drawn from the measured distributions. One links run and one op-times
    /// run: `--from LINKS_RUN --from PIPELINE_RUN`.
    #[arg(long, value_name = "RUN_DIR")]
    pub from: Vec<PathBuf>,
    /// With --from a links run: the bytes each link carries per transfer (the activation),
    /// costed from the run's fitted links [default: the largest size it measured].
    #[arg(long, value_parser = crate::units::parse_byte_count, value_name = "SIZE")]
    pub activation: Option<u64>,
    /// With --from a links run: search the order of ranks into stages for the least predicted
    /// iteration time under adaptive and 1f1b (exhaustive up to 8 ranks, a heuristic above).
    #[arg(long, requires = "from")]
    pub place: bool,
    /// Layers per stage: for calibrating with --from, and the model's shape.
    #[arg(long, default_value_t = 1.0)]
    pub layers_per_stage: f64,
    /// Schedules whose ASCII timeline is printed, or "none" [default: static:1f1b,adaptive].
    #[arg(long, value_name = "LIST")]
    pub timeline: Option<String>,
    /// Timeline width in characters (20 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(20..=1000))]
    pub width: u64,
    /// Simulate PyTorch's schedule CSV (torch.distributed.pipelining's _dump_csv: one row per
    /// rank, cells such as 0F0, 5I3, 5W3, 2B0; in the compute_comms format its SEND/RECV/WAIT
    /// calls run as transfers); its ranks and microbatches set the scenario's.
    #[arg(long, value_name = "FILE")]
    pub schedule_file: Option<PathBuf>,
    /// Write each simulated schedule's order (the first case's, as it ran) in another tool's
    /// format: `torch FILE` writes PyTorch's schedule CSV (FILE-<schedule>.csv for several).
    #[arg(long, num_args = 2, value_names = ["FORMAT", "FILE"])]
    pub export_schedule: Vec<String>,
    /// Write a Chrome trace / Perfetto JSON of every simulated schedule.
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,
    /// Measure simulator throughput on S = 64, N = 1024 (writes sim_bench.csv).
    #[arg(long)]
    pub bench: bool,
    /// Predict measured runs with the runtime presets and report the errors (validate.csv):
    /// a CSV with system, slow_links, delay_ms, stages, microbatches, tf_ms, tb_ms, tw_ms
    /// (per stage, ';'), optionally activation_bytes, offload_channels, hidden, healthy_ms,
    /// slow_ms, healthy_iterations_ms (the healthy run's iterations before the fault, ';': its
    /// trend is reported); other columns are carried through. Or a `pipeline` run folder (its delayed
    /// cases against its healthy ones). Exit 0 whatever the errors; 2 on a bad file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from", "trace", "place", "bench", "sweep"])]
    pub validate: Option<PathBuf>,
    /// With --validate: predict again with each runtime mechanism switched off in turn
    /// (validate_ablation.csv).
    #[arg(long, requires = "validate")]
    pub ablation: bool,
}

pub fn parse_slow(s: &str) -> anyhow::Result<SlowLink> {
    let (link, ms) = s
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("'{s}': expected LINK:DELAY_MS, e.g. 0:20"))?;
    Ok(SlowLink {
        link: link
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("'{s}': link '{link}' is not a whole number"))?,
        delay_ms: ms
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("'{s}': delay '{ms}' is not a number"))?,
    })
}

pub fn parse_occupy(s: &str) -> anyhow::Result<Occupy> {
    let slow = parse_slow(s)
        .map_err(|e| anyhow::anyhow!(e.to_string().replace("LINK:DELAY_MS", "LINK:MS")))?;
    Ok(Occupy {
        link: slow.link,
        ms: slow.delay_ms,
    })
}

impl SimArgs {
    /// Where `--export-schedule torch FILE` writes, if given.
    pub fn export_torch(&self) -> anyhow::Result<Option<PathBuf>> {
        match self.export_schedule.as_slice() {
            [] => Ok(None),
            [format, file] if format == "torch" => Ok(Some(PathBuf::from(file))),
            [format, _] => anyhow::bail!(
                "--export-schedule {format}: the format it writes is `torch` (PyTorch's schedule CSV)"
            ),
            _ => anyhow::bail!("--export-schedule takes FORMAT FILE, e.g. torch order.csv"),
        }
    }

    /// The scenario file (if any) with every given flag laid over it.
    pub fn config(&self) -> anyhow::Result<SimConfig> {
        let mut c = match &self.scenario {
            Some(p) => SimConfig::load(p)?,
            None => SimConfig::default(),
        };
        let many = |v: &Option<MsList>| v.as_ref().map(|m| OneOrMany::Many(m.0.clone()));
        c.stages = self.stages.or(c.stages);
        c.microbatches = self.microbatches.or(c.microbatches);
        c.tf = many(&self.tf).or(c.tf);
        c.tb = many(&self.tb).or(c.tb);
        c.tw = many(&self.tw).or(c.tw);
        c.tfb = many(&self.tfb).or(c.tfb);
        c.link_ms = self.link_ms.or(c.link_ms);
        c.slow.extend(self.slow.iter().cloned());
        c.sweep.extend(self.sweep.iter().cloned());
        c.occupy.extend(self.occupy.iter().cloned());
        c.stall.extend(self.stall.iter().cloned());
        c.iterations = self.iterations.or(c.iterations);
        c.seed = self.seed.or(c.seed);
        c.comm = self.comm.or(c.comm);
        c.d2h_ms = self.d2h_ms.or(c.d2h_ms);
        c.mem_limit = self.mem_limit.clone().or(c.mem_limit);
        c.schedule_file = self.schedule_file.clone().or(c.schedule_file);
        let shape = [self.hidden, self.heads, self.seq_len, self.micro_batch];
        if shape.iter().any(Option::is_some) {
            let names = ["--hidden", "--heads", "--seq-len", "--micro-batch"];
            let missing: Vec<&str> = names
                .iter()
                .zip(shape)
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .collect();
            if !missing.is_empty() {
                anyhow::bail!(
                    "the model's shape needs {} too (or a [model] table in the scenario)",
                    missing.join(", ")
                );
            }
            c.model = Some(crate::sim::memory::ModelShape {
                hidden: self.hidden.unwrap_or_default(),
                heads: self.heads.unwrap_or_default(),
                seq_len: self.seq_len.unwrap_or_default(),
                micro_batch: self.micro_batch.unwrap_or_default(),
                layers_per_stage: self.layers_per_stage,
            });
        }
        if let Some(list) = &self.schedule {
            c.schedules = Some(list.split(',').map(|s| s.trim().to_string()).collect());
        }
        Ok(c)
    }
}
