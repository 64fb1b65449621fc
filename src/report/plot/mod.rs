//! `morphbench plot`: turns whichever CSVs a run folder holds into figures in `RUN/plots/`,
//! one series per run with `--compare`. Malformed CSVs are errors naming file and column;
//! absent ones are skipped and said so. Each bench makes its charts from its tables (as data:
//! `record::view::chart`); `charts` draws them.

pub mod charts;
mod outcome;

pub use outcome::{Figure, PlotOutcome};
