//! `hol`'s settings: `morphbench hol`'s flags, `[hol]`'s keys and their defaults, declared
//! once, and the plan they give.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::plan::{parse_delay_trace, Delays, HolPlan, Mode};
use crate::bench::descriptor::Settings;
use crate::bench::flags::{parse_ms_list, parse_size_list, MsList, SizeList};
use crate::gpu::kernels::{variant_help, variant_long_help, GEMM_VARIANTS, LAYERNORM_VARIANTS};
use crate::transport::rdma::DeviceChoice;
use crate::transport::TransportKind;

/// The delays swept when neither `delays_ms` nor a trace is given.
const DEFAULT_DELAYS_MS: [f64; 2] = [0.0, 20.0];
/// The modes run when none is named.
const ALL_MODES: [Mode; 3] = [Mode::None, Mode::Inline, Mode::Offload];

#[derive(Debug, Clone, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HolSettings {
    /// Tokens (rows) of the activation; the GEMM is TOKENS x HIDDEN x HIDDEN.
    #[arg(long, default_value_t = HolSettings::default().tokens)]
    pub tokens: u32,
    /// Hidden size (a multiple of 4).
    #[arg(long, default_value_t = HolSettings::default().hidden)]
    pub hidden: u32,
    /// Compute ops per stream (GEMM and layernorm in turn).
    #[arg(long, default_value_t = HolSettings::default().ops)]
    pub ops: u32,
    /// A transfer after every K compute ops; comma list to sweep.
    #[arg(
        long,
        value_name = "K[,K...]",
        value_delimiter = ',',
        default_values_t = HolSettings::default().every
    )]
    pub every: Vec<u32>,
    /// Bytes per transfer (at most the activation); comma list to sweep [default: the activation].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_parser = parse_size_list)]
    pub bytes: Option<SizeList>,
    /// Injected straggler delay per transfer in ms; comma list to sweep [default: 0,20].
    #[arg(long = "delay-ms", value_name = "MS[,MS...]", value_parser = parse_ms_list, allow_hyphen_values = true)]
    pub delays_ms: Option<MsList>,
    /// Per-transfer delays from a file of `iteration;delay_ms` lines (iteration = transfer index).
    #[arg(long, value_name = "FILE", conflicts_with = "delays_ms")]
    pub trace: Option<PathBuf>,
    /// Modes to run [default: all three].
    #[arg(long = "mode", value_enum, value_delimiter = ',')]
    pub modes: Vec<Mode>,
    /// Repetitions of the stream per point (makespan statistics are over these).
    #[arg(long, default_value_t = HolSettings::default().reps)]
    pub reps: u32,
    /// Link bandwidth the inline stand-in charges for the bytes, GB/s.
    #[arg(long, default_value_t = HolSettings::default().link_gbps)]
    pub link_gbps: f64,
    /// Send offloaded bytes to a `morphbench sink` at ADDR instead of one in-process on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: Option<String>,
    /// What carries offloaded bytes: TCP, or RDMA WRITE through verbs.
    #[arg(long, value_enum, default_value_t = HolSettings::default().transport)]
    pub transport: TransportKind,
    /// RDMA device name from `morphbench info` [default: the first].
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Port of the device (from 1).
    #[arg(long, default_value_t = HolSettings::default().ib_port, value_parser = clap::value_parser!(u8).range(1..))]
    pub ib_port: u8,
    /// GID index (RoCE needs one whose address is routable between the nodes).
    #[arg(long, default_value_t = HolSettings::default().gid_index)]
    pub gid_index: u8,
    #[arg(long = "variant", value_name = "NAME",
        help = variant_help("GEMM", GEMM_VARIANTS),
        long_help = variant_long_help("GEMM", GEMM_VARIANTS))]
    pub gemm_variant: Option<String>,
    #[arg(long, value_name = "NAME",
        help = variant_help("layernorm", LAYERNORM_VARIANTS),
        long_help = variant_long_help("layernorm", LAYERNORM_VARIANTS))]
    pub layernorm_variant: Option<String>,
}

impl Default for HolSettings {
    fn default() -> Self {
        HolSettings {
            tokens: 256,
            hidden: 256,
            ops: 24,
            every: vec![2],
            bytes: None,
            delays_ms: None,
            trace: None,
            modes: Vec::new(),
            reps: 5,
            link_gbps: 12.5,
            peer: None,
            transport: TransportKind::Tcp,
            device: None,
            ib_port: 1,
            gid_index: 0,
            gemm_variant: None,
            layernorm_variant: None,
        }
    }
}

impl Settings for HolSettings {
    type Plan = HolPlan;
    fn plan(&self) -> anyhow::Result<HolPlan> {
        let plan = HolPlan {
            tokens: self.tokens,
            hidden: self.hidden,
            ops: self.ops,
            every: self.every.clone(),
            bytes: match &self.bytes {
                Some(list) => list.0.iter().copied().map(Some).collect(),
                None => vec![None],
            },
            delays: self.delays()?,
            modes: if self.modes.is_empty() {
                ALL_MODES.to_vec()
            } else {
                self.modes.clone()
            },
            reps: self.reps,
            link_gbps: self.link_gbps,
            peer: self.peer.clone(),
            transport: self.transport,
            rdma: DeviceChoice {
                device: self.device.clone(),
                port: self.ib_port,
                gid_index: self.gid_index,
            },
            gemm_variant: self.gemm_variant.clone(),
            layernorm_variant: self.layernorm_variant.clone(),
        };
        plan.validate().map_err(|e| anyhow::anyhow!("hol: {e}"))?;
        Ok(plan)
    }
}

impl HolSettings {
    /// The delays: a sweep, or a trace file's (never both).
    fn delays(&self) -> anyhow::Result<Delays> {
        match (&self.trace, &self.delays_ms) {
            (Some(_), Some(_)) => Err(anyhow::anyhow!("hol: give delays_ms or trace, not both")),
            (Some(path), None) => {
                let text = crate::record::read_input(path)
                    .map_err(|e| anyhow::anyhow!("cannot read trace {}: {e}", path.display()))?;
                let trace = parse_delay_trace(&text)
                    .map_err(|e| anyhow::anyhow!("trace {}: {e}", path.display()))?;
                Ok(Delays::Trace(trace))
            }
            (None, Some(ms)) => Ok(Delays::Sweep(ms.0.clone())),
            (None, None) => Ok(Delays::Sweep(DEFAULT_DELAYS_MS.to_vec())),
        }
    }
}
