//! `rdma.csv`'s rows.

use serde::Serialize;

use crate::record::CsvTable;

pub const BENCH: &str = "rdma";

/// `rdma.csv`: one row per test (`lat`, `bw`) and size.
pub struct RdmaTable;

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct RdmaParams {
    pub test: String,
    pub bytes: u64,
    pub iters: u32,
    pub window: u32,
    pub inline: bool,
    pub device: String,
    pub ib_port: u8,
    pub gid_index: u8,
    pub mtu: u32,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct RdmaFigures {
    /// Average bandwidth (bw rows only).
    pub gbps: Option<f64>,
    pub peak_gbps: Option<f64>,
    pub msg_rate_mpps: Option<f64>,
    pub verified: bool,
    pub timer: String,
    /// The client port's retransmission and sequence-error counters' increase over the
    /// test (None where the port has no hw_counters), and each that moved.
    pub retransmits: Option<u64>,
    pub counters_moved: String,
}

impl CsvTable for RdmaTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = RdmaParams;
    type Figures = RdmaFigures;
}
