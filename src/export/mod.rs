//! Writers for run outputs: CSV tables (one per bench) and the run's metadata.

pub mod csv;
pub mod headlines;
pub mod meta;
pub mod plot;
pub mod report;
pub mod run_dir;
pub mod summary;

pub use self::csv::{
    read_optional, read_table, CsvSink, CsvTable, DataError, Line, SCHEMA_VERSION,
};
pub use self::run_dir::RunDir;
