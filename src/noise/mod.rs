//! The noise policy: how a shared or noisy machine is told apart from a slow one.

pub mod load;
pub mod rank;
