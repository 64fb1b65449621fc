//! `sim --validate FILE`: the simulator's runtime presets against measured runs. FILE is a CSV
//! of runs (system, slow links, delay, op times per stage, and optionally the measured healthy
//! and slow iterations); each row is predicted from its own columns and the documented
//! machine constants only, and `validate.csv` gives every input column, the predictions and
//! the errors. A report: it exits 0 whatever the errors; a bad file is refused naming the row
//! and column.
//!
//! `file` reads validation CSVs, `pipeline_run` a `pipeline` run folder, `report` predicts,
//! writes validate.csv (and the ablation) and prints.

mod case;
mod file;
mod pipeline_run;
mod report;

use std::path::Path;

use anyhow::Result;

use crate::bench::descriptor::FromFlags;

pub use case::{error_added, errors, spread, Case, Input, ProfileFrom, BENCH};
pub use file::read;
pub use pipeline_run::{healthy_iterations, healthy_op_times};
pub use report::ValidateBench;

/// The validation of `file` as a bench, with the config meta.json keeps (`sim` runs it into a
/// run folder; its figures reach summary.json through meta.json's notes).
pub fn planned(file: &Path, ablation: bool) -> Result<FromFlags> {
    let input = read(file)?;
    let bench = ValidateBench {
        input,
        source: file.display().to_string(),
        ablation,
    };
    let config = serde_json::json!({ "validate": file.display().to_string() });
    Ok(FromFlags {
        // Its notes and host load are kept under `validate`, not the command's `sim`.
        name: Some(BENCH),
        ..FromFlags::new(bench, config)
    })
}

#[cfg(test)]
mod tests;
