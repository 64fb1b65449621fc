//! One file per bench: its points, its measurement loop, its rows.

pub mod d2h;
pub mod hol;
pub mod kernels;
pub mod rdma;
pub mod sim;
