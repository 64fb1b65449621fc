//! What a health check found: the node's health (its exit code) and what it was judged by.

use std::path::PathBuf;
use std::time::Duration;

use crate::bench::fleet::table::FleetTable;
use crate::record::csv::Line;
use crate::slurm::Action;

/// 0 healthy, 1 unhealthy, 2 could not judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    Healthy,
    Unhealthy,
    Unknown,
}

impl Health {
    pub fn exit_code(self) -> u8 {
        match self {
            Health::Healthy => 0,
            Health::Unhealthy => 1,
            Health::Unknown => 2,
        }
    }
}

/// What the check found and did.
pub struct Outcome {
    pub node: String,
    pub health: Health,
    /// Why it is [`Health::Unknown`], or what was judged by.
    pub judged_by: String,
    pub gpus: usize,
    pub adapter: String,
    /// The plan's bound, and the whole run's (the plan and the most it waits its turn).
    pub plan: Duration,
    pub bound: Duration,
    pub took: Duration,
    pub run_dir: Option<PathBuf>,
    pub rows: Vec<Line<FleetTable>>,
    pub slurm: Option<Action>,
    pub textfile: Option<PathBuf>,
}
