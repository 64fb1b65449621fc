//! `fleet.csv`: one row per (rank, test, figure) with its verdict.

use serde::{Deserialize, Serialize};

use crate::record::csv::CsvTable;
use crate::verdict::Verdict;

pub struct FleetTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetParams {
    pub rank: u32,
    pub host: String,
    pub local_rank: Option<u32>,
    pub adapter: String,
    /// The adapter's driver (with `adapter`, what a baseline is kept for).
    pub driver: String,
    /// `inventory`, `memcpy`, `gemm`, `d2h`, `h2d`, or `gate` (the rank's answer itself).
    pub test: String,
    /// `gflops`, `gbps`, an inventory field (`driver`, `memory_gib`...), or `answer`.
    pub figure: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetFigures {
    /// The measured value (higher is better for every rate); empty for inventory text and for
    /// a rank that did not answer.
    pub value: Option<f64>,
    /// What it was judged against: the fleet's healthy level, or the baseline's expected value.
    pub expected: Option<f64>,
    /// How far below `expected`, as a fraction of it, a figure still passes: the baseline's
    /// tolerance, or the fleet's (a slowdown short of the noise policy's slow threshold).
    /// Empty in runs written before it was recorded.
    #[serde(default)]
    pub tolerance: Option<f64>,
    pub unit: String,
    /// PASS, WARN, FAIL or SKIP.
    pub verdict: Verdict,
    pub reason: String,
    /// A failed figure's value when measured again: it stays FAIL only if this fails too.
    pub retest_value: Option<f64>,
    /// CPU that other processes used on the rank's machine during its tests, in cores.
    pub others_cores: Option<f64>,
    /// Share of the machine's CPU time taken by the hypervisor during its tests (percent).
    pub steal_pct: Option<f64>,
    /// Whether the machine counted as busy (other processes, steal): its figures are left out
    /// of the fleet's level and of a baseline made from the run.
    pub busy: bool,
}

impl CsvTable for FleetTable {
    const NAME: &'static str = "fleet";
    const WITH_STATS: bool = false;
    type Params = FleetParams;
    type Figures = FleetFigures;
}
