//! The command line: flags and subcommands (clap), turned into typed plans. Measures nothing.

pub mod sizes;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::bench::kernels::KernelsPlan;
use crate::config::check_iters;
use crate::gpu::kernels::{GemmSize, LayernormSize};
use crate::gpu::BackendChoice;

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
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Describe every GPU adapter and the host.
    Info(InfoArgs),
    /// Sweep GEMM and layernorm kernels (verified, then timed) and write kernels.csv.
    Kernels(KernelsArgs),
    /// Run a suite from a TOML config (default: the built-in quick suite).
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KernelsArgs {
    /// GEMM sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "MxNxK[,MxNxK...]", value_parser = parse_gemm_list)]
    pub gemm: Vec<Vec<GemmSize>>,
    /// Layernorm sizes, comma separated (the flag may repeat).
    #[arg(long, value_name = "ROWSxHIDDEN[,...]", value_parser = parse_layernorm_list)]
    pub layernorm: Vec<Vec<LayernormSize>>,
    /// Timed iterations per point.
    #[arg(long, default_value_t = 20, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up iterations per point.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// Force a GEMM variant instead of the measured selection (naive, tiled64, rb4x4, rb8x4, sg8x4).
    #[arg(long, value_name = "NAME")]
    pub variant: Option<String>,
    /// Force a layernorm variant (row, workgroup256, subgroup).
    #[arg(long, value_name = "NAME")]
    pub layernorm_variant: Option<String>,
    /// Probe the variants again instead of using the cached choice.
    #[arg(long)]
    pub reselect: bool,
    /// Skip the CPU baseline rows.
    #[arg(long)]
    pub no_cpu_baseline: bool,
    /// Also write every iteration's sample to kernels_samples.csv.
    #[arg(long)]
    pub raw: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Suite config (TOML); the built-in bench-configs/quick.toml when omitted.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Also write every iteration's sample to <bench>_samples.csv.
    #[arg(long)]
    pub raw: bool,
}

// Each occurrence of a list flag parses into one Vec; `plan` flattens them.
fn parse_gemm_list(s: &str) -> Result<Vec<GemmSize>, String> {
    sizes::parse_list(s, sizes::parse_gemm)
}

fn parse_layernorm_list(s: &str) -> Result<Vec<LayernormSize>, String> {
    sizes::parse_list(s, sizes::parse_layernorm)
}

fn parse_iters(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    check_iters("--iters", n)?;
    Ok(n)
}

impl KernelsArgs {
    pub fn plan(&self) -> Result<KernelsPlan, String> {
        let gemm: Vec<GemmSize> = self.gemm.concat();
        let layernorm: Vec<LayernormSize> = self.layernorm.concat();
        if gemm.is_empty() && layernorm.is_empty() {
            return Err(
                "nothing to run: give --gemm MxNxK[,...] and/or --layernorm ROWSxHIDDEN[,...]"
                    .into(),
            );
        }
        Ok(KernelsPlan {
            gemm,
            layernorm,
            iters: self.iters,
            warmup: self.warmup,
            gemm_variant: self.variant.clone(),
            layernorm_variant: self.layernorm_variant.clone(),
            cpu_baseline: !self.no_cpu_baseline,
            reselect: self.reselect,
        })
    }
}
