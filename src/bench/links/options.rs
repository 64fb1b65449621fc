//! What a links run is told: each rank's options, rank 0's orders and the others' replies.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::nodes::NodeSample;
use super::pair::{Measured, PairPlan};
use super::pattern;
use crate::cluster::SessionOptions;
use crate::gpu::BackendChoice;
use crate::noise::rank as load;
use crate::transport::rdma::DeviceChoice;

/// Everything one rank needs to take part.
#[derive(Debug, Clone)]
pub struct LinksOptions {
    pub session: SessionOptions,
    pub plan: PairPlan,
    /// This rank's RDMA device (each host names its own).
    pub choice: DeviceChoice,
    /// Sample each node's GPU (a verified GEMM, a D2H copy).
    pub fingerprint: bool,
    /// The most pairs measured at once within a round (None: all of the round's).
    pub concurrent: Option<usize>,
    /// Which pairs, in which rounds (rank 0's).
    pub pattern: pattern::Pattern,
    /// The seed of the random matchings (in meta.json).
    pub seed: u64,
    /// A plan estimated to take longer than this is refused before it starts.
    pub budget_s: u64,
    /// A Slurm topology.conf: links are judged within their hop class (rank 0 reads it).
    pub topology: Option<std::path::PathBuf>,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
    /// Each rank's machine, when rank 0 knows them (the fleet gate's inventory): a wave holds
    /// no machine twice ([`pattern::waves`]).
    pub machines: Option<Vec<String>>,
    /// Stop starting rounds this many seconds in (the gate's deadline for links): the rows
    /// so far are kept, and their suspects still retested.
    pub deadline_s: Option<f64>,
}

/// Rank 0's orders.
#[derive(Debug, Serialize, Deserialize)]
pub enum Order {
    /// The plan every rank follows (rank 0's).
    Plan(PairPlan),
    Fingerprint,
    /// Play round r's pairs listed (all of the round's, or a wave of them).
    Round(u32, Vec<(u32, u32)>),
    /// Measure this suspect pair again, on its own (r tells the pair's connection apart), at
    /// the sizes and transports of its suspect rows only (a part of the plan).
    Retest(u32, (u32, u32), PairPlan),
}

/// The others' replies.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Ready,
    Node(Box<NodeSample>),
    /// The rows a rank measured in a wave, and its machine's load over it.
    Round(Vec<Measured>, load::RankLoad),
}

/// How long any rank waits for one fingerprint.
pub(crate) const FINGERPRINT_WAIT: Duration = Duration::from_secs(120);
