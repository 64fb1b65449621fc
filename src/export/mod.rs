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

/// The most bytes of meta.json that are read back.
pub const MAX_META_BYTES: u64 = 16 << 20;

/// Reads a file of a run folder, refusing what is not a regular file (a link to a device, a
/// folder) and what is larger than `cap`: a run folder may come from anywhere.
pub fn read_capped(path: &std::path::Path, cap: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > cap {
        return Err(format!(
            "{} bytes is over the {cap}-byte cap of a file read back",
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(cap + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > cap {
        return Err(format!("over the {cap}-byte cap of a file read back"));
    }
    Ok(bytes)
}
