//! `d2h.csv`'s rows.

use crate::record::CsvTable;

pub const BENCH: &str = "d2h";

/// `d2h.csv`: one row per direction, method, size and part of a transfer.
pub struct D2hTable;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct D2hParams {
    /// `d2h`, `h2d`, or `memcpy` (the host ceiling).
    pub direction: String,
    pub method: String,
    pub bytes: u64,
    /// `gpu_copy`, `map`, `copy_out`, `copy_in`, `end_to_end`, ...
    pub part: String,
    pub copies: u32,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct D2hFigures {
    pub gbps: f64,
    pub timer: String,
    pub verified: bool,
}

impl CsvTable for D2hTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = D2hParams;
    type Figures = D2hFigures;
}
