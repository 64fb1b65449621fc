//! What a reader takes from a run's tables, as data each bench gives with its table: the run's
//! tables loaded ([`loaded`]), its headlines ([`headline`]), its charts ([`chart`]: drawn by
//! `report`), and the figures `check` compares ([`figure`]: judged by `check`).

pub mod chart;
pub mod figure;
pub mod headline;
pub mod loaded;
