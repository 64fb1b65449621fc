//! One file per bench: its points, its measurement loop, its rows.

pub mod kernels;
pub mod sim;
