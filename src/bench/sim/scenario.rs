//! The simulator's scenario as TOML gives it (`[sim]` in a suite, `sim --scenario FILE`):
//! every field optional, the `morphbench sim` defaults filling the rest.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

/// A number or a list of numbers (per-stage durations).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(f64),
    Many(Vec<f64>),
}

impl OneOrMany {
    pub fn values(&self) -> Vec<f64> {
        match self {
            OneOrMany::One(x) => vec![*x],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlowLink {
    pub link: usize,
    pub delay_ms: f64,
}

pub use crate::bench::flags::SweepLink;

/// A simulator scenario (`[sim]` in a suite, or a `morphbench sim --scenario FILE`).
/// Anything left out takes the `morphbench sim` flag defaults.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    pub stages: Option<usize>,
    pub microbatches: Option<usize>,
    pub tf: Option<OneOrMany>,
    pub tb: Option<OneOrMany>,
    pub tw: Option<OneOrMany>,
    /// DualPipeV's overlapped forward-and-backward (default tf + tb + tw).
    pub tfb: Option<OneOrMany>,
    pub link_ms: Option<f64>,
    pub comm: Option<crate::sim::CommModel>,
    pub d2h_ms: Option<f64>,
    /// Microbatches (a number) or bytes per stage (a size such as "40GiB", which needs
    /// `model`).
    pub mem_limit: Option<MemLimit>,
    pub schedules: Option<Vec<String>>,
    /// The model's shape, for memory in bytes.
    pub model: Option<crate::sim::memory::ModelShape>,
    /// A schedule to simulate from PyTorch's schedule CSV (its ranks and microbatches are the
    /// scenario's unless given).
    pub schedule_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub slow: Vec<SlowLink>,
    #[serde(default)]
    pub sweep: Vec<SweepLink>,
    /// Links held by each transfer (bytes / bandwidth), `[{ link, ms }]`.
    #[serde(default)]
    pub occupy: Vec<Occupy>,
    /// Transfers that stall at random, `[{ link, prob, ms }]`: the base case is run
    /// `iterations` times with stalls drawn from `seed`.
    #[serde(default)]
    pub stall: Vec<super::tail::Stall>,
    /// Links whose transfers draw their excess from a links run's distributions (`sim --from
    /// LINKS_RUN`, which says so; not a setting of a file).
    #[serde(skip)]
    pub measured_tail: Vec<super::measured::MeasuredLink>,
    /// Each schedule's measured healthy iteration (ms, its p50) in the op-times run (`sim
    /// --from PIPELINE_RUN`): the tail's figures are also given on it (not a setting of a file).
    #[serde(skip)]
    pub measured_healthy: std::collections::BTreeMap<String, f64>,
    pub iterations: Option<u32>,
    pub seed: Option<u64>,
}

/// The activation memory the adaptive planner keeps to: microbatches in flight, or bytes per
/// stage (parameters included).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum MemLimit {
    Microbatches(usize),
    Size(String),
}

impl std::str::FromStr for MemLimit {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<MemLimit> {
        match s.trim().parse::<usize>() {
            Ok(n) => Ok(MemLimit::Microbatches(n)),
            Err(_) => crate::units::parse_byte_count(s)
                .map(|_| MemLimit::Size(s.trim().to_string()))
                .map_err(|e| anyhow::anyhow!("--mem-limit: {e}; or give a number of microbatches")),
        }
    }
}

/// A link each transfer holds for `ms` (its bytes over its bandwidth; a FIFO per direction).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Occupy {
    pub link: usize,
    pub ms: f64,
}

impl SimConfig {
    pub fn load(path: &Path) -> Result<SimConfig> {
        let text = crate::record::read_input(path)
            .with_context(|| format!("cannot read scenario {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("invalid scenario {}: {e}", path.display()))
    }
}
