//! The `sim` bench: simulate schedules over scenarios (a delay sweep or a trace of
//! iterations), write `sim.csv`, and show timelines. Optionally calibrated from a measured run.

pub mod args;
mod bench;
pub mod calibrate;
mod command;
pub mod measured;
pub mod place;
pub mod plan;
pub mod runner;
mod scenario;
pub mod tables;
pub mod tail;
pub mod validate;
mod views;

pub use bench::{from_toml, SimBench, SimOutput};
pub use calibrate::{calibrate_from, Calibration};
pub use plan::{Case, Outcome, SimPlan, MAX_CASES, MAX_SIM_OPS, TAIL_ITERATIONS};
pub use runner::{export_torch, print_timelines, run, throughput_bench, write_trace};
pub use scenario::{MemLimit, Occupy, OneOrMany, SimConfig, SlowLink, SweepLink};
pub use tables::{total_delay, SimBenchTable, SimTable, TimelineTable, BENCH};
pub use tail::TailPlan;

/// The `sim` bench, for the registry (its command, with its modes beyond a run, is its own).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: BENCH,
    from_toml: Some(from_toml),
    command: args::command(command::plan),
    tables: || {
        use crate::record::TableSpec;
        vec![
            TableSpec::of::<SimTable>()
                .single_node()
                .headlines(views::headlines)
                .charts(crate::record::Charts::Compared(views::sim_charts)),
            TableSpec::of::<TimelineTable>(),
            TableSpec::of::<SimBenchTable>(),
            TableSpec::of::<tail::SimTailTable>(),
        ]
    },
};
