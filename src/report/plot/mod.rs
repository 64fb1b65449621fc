//! `morphbench plot`: turns whichever CSVs a run folder holds into figures in `RUN/plots/`,
//! one series per run with `--compare`. Malformed CSVs are errors naming file and column;
//! absent ones are skipped and said so. `charts` draws; each `*_charts` module makes one
//! bench's charts from its tables.

pub mod charts;
mod fleet_charts;
mod links_charts;
mod node_charts;
mod parts;
mod pipeline_charts;

pub(crate) use fleet_charts::fleet_charts;
pub(crate) use links_charts::links_charts;
pub(crate) use node_charts::{d2h_charts, hol_charts, kernel_and_roofline_charts, rdma_charts};
pub use parts::{Figure, Loaded, Named, PlotOutcome};
pub(crate) use pipeline_charts::{pipeline_charts, sim_charts};
