//! The device check's ratio table (`scripts/device-check`): reads the run folders given,
//! prints each figure against its ceiling or reference, and writes them to a CSV.
//!
//! Usage: device_ratios OUT.csv RUN_DIR...

use std::path::{Path, PathBuf};

use anyhow::Context;
use morphbench::report::ratios::{print, ratios, Runs};

fn main() -> anyhow::Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let Some((out, dirs)) = args.split_first() else {
        anyhow::bail!("usage: device_ratios OUT.csv RUN_DIR...");
    };
    let dirs: Vec<&Path> = dirs
        .iter()
        .map(PathBuf::as_path)
        .filter(|d| d.is_dir())
        .collect();
    let table = ratios(&Runs::read(&dirs)?);
    print!("{}", print(&table));
    let mut w =
        csv::Writer::from_path(out).with_context(|| format!("cannot write {}", out.display()))?;
    for r in &table {
        w.serialize(r)?;
    }
    w.flush()?;
    if table.is_empty() {
        anyhow::bail!("no ratio: the runs hold none of the figures (did every step fail?)");
    }
    Ok(())
}
