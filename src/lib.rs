//! morphbench: measures what makes pipeline-parallel training stall on a GPU node (kernel
//! speed, transfers, head-of-line blocking) and predicts its effect on a pipeline schedule.

#![deny(unsafe_code)]

pub mod bench;
pub mod check;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod gpu;
pub mod host;
pub mod info;
pub mod interrupt;
pub mod noise;
pub mod output;
pub mod pcie;
pub mod record;
pub mod report;
pub mod reported;
pub mod safe_fs;
pub mod sanitize;
pub mod sim;
pub mod slurm;
pub mod stats;
pub mod suite;
#[cfg(test)]
mod testing;
pub mod transport;
pub mod units;
pub mod verdict;
