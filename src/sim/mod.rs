//! The pipeline schedule simulator: a pure model (no I/O) of S stages and N microbatches under
//! link delays, the schedules that run them, and pictures of the result.

pub mod builder;
pub mod comms;
pub mod engine;
pub mod hand;
pub mod memory;
pub mod model;
pub mod policy;
pub mod render;
pub mod replay;
pub mod runtime;
pub mod schedules;
pub mod torch_csv;
pub mod trace;
pub mod zb;
pub mod zbv;

pub use builder::ScenarioBuilder;
pub use engine::{simulate, Policy, Run, SimError};
pub use model::{link_between, links_of, Layout};
pub use model::{CommModel, Executed, Op, OpKind, Scenario, ScenarioError};
pub use schedules::{
    adaptive, bubble_rate, default_mem_limit, evaluate, policy_of, Schedule, DEFAULT_SCHEDULES,
};

#[cfg(test)]
mod published;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod torch_files;
