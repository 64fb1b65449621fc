//! `morphbench hol`'s flags, turned into the bench's config.

use std::path::PathBuf;

use super::plan::{HolConfig, HolPlan, Mode};
use crate::bench::descriptor::BenchArgs;
use crate::bench::flags::{
    parse_ms_list, parse_size_list, MsList, RdmaDeviceArgs, SizeList, VariantArgs,
};

#[derive(Debug, clap::Args)]
pub struct HolArgs {
    /// Tokens (rows) of the activation; the GEMM is TOKENS x HIDDEN x HIDDEN.
    #[arg(long, default_value_t = HolPlan::default().tokens)]
    pub tokens: u32,
    /// Hidden size (a multiple of 4).
    #[arg(long, default_value_t = HolPlan::default().hidden)]
    pub hidden: u32,
    /// Compute ops per stream (GEMM and layernorm in turn).
    #[arg(long, default_value_t = HolPlan::default().ops)]
    pub ops: u32,
    /// A transfer after every K compute ops; comma list to sweep.
    #[arg(
        long,
        value_name = "K[,K...]",
        value_delimiter = ',',
        default_values_t = HolPlan::default().every
    )]
    pub every: Vec<u32>,
    /// Bytes per transfer (at most the activation); comma list to sweep [default: the activation].
    #[arg(long, value_name = "SIZE[,SIZE...]", value_parser = parse_size_list)]
    pub bytes: Option<SizeList>,
    /// Injected straggler delay per transfer in ms; comma list to sweep.
    #[arg(long, value_name = "MS[,MS...]", value_parser = parse_ms_list, allow_hyphen_values = true)]
    pub delay_ms: Option<MsList>,
    /// Per-transfer delays from a file of `iteration;delay_ms` lines (iteration = transfer index).
    #[arg(long, value_name = "FILE", conflicts_with = "delay_ms")]
    pub trace: Option<PathBuf>,
    /// Modes to run [default: all three].
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mode: Vec<Mode>,
    /// Repetitions of the stream per point (makespan statistics are over these).
    #[arg(long, default_value_t = HolPlan::default().reps)]
    pub reps: u32,
    /// Link bandwidth the inline stand-in charges for the bytes, GB/s.
    #[arg(long, default_value_t = HolPlan::default().link_gbps)]
    pub link_gbps: f64,
    /// Send offloaded bytes to a `morphbench sink` at ADDR instead of one in-process on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    pub peer: Option<String>,
    /// What carries offloaded bytes: TCP, or RDMA WRITE through verbs.
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: crate::transport::TransportKind,
    #[command(flatten)]
    pub rdma: RdmaDeviceArgs,
    #[command(flatten)]
    pub variants: VariantArgs,
}

impl BenchArgs for HolArgs {
    type Config = HolConfig;
    fn config(&self) -> Result<HolConfig, String> {
        Ok(HolConfig {
            tokens: Some(self.tokens),
            hidden: Some(self.hidden),
            ops: Some(self.ops),
            every: Some(self.every.clone()),
            bytes: self.bytes.as_ref().map(SizeList::texts),
            delays_ms: self.delay_ms.as_ref().map(|m| m.0.clone()),
            modes: (!self.mode.is_empty()).then(|| self.mode.clone()),
            reps: Some(self.reps),
            link_gbps: Some(self.link_gbps),
            peer: self.peer.clone(),
            transport: Some(self.transport),
            trace: self.trace.as_ref().map(|p| p.display().to_string()),
            device: self.rdma.device.clone(),
            ib_port: Some(self.rdma.ib_port),
            gid_index: Some(self.rdma.gid_index),
            gemm_variant: self.variants.variant.clone(),
            layernorm_variant: self.variants.layernorm_variant.clone(),
        })
    }
}
