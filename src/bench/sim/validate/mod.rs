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

use anyhow::{Context, Result};

pub use case::{error_added, errors, spread, Case, Input, ProfileFrom, BENCH};
pub use file::read;
pub use pipeline_run::healthy_op_times;
pub use report::ValidateBench;

/// Runs the validation of `file` into a run folder; its line goes into summary.json too.
pub fn run(
    file: &Path,
    ablation: bool,
    options: &crate::suite::RunOptions,
) -> Result<std::path::PathBuf> {
    let input = read(file)?;
    let bench = ValidateBench {
        input,
        source: file.display().to_string(),
        ablation,
    };
    let config = serde_json::json!({ "validate": file.display().to_string() });
    let benches = [crate::suite::Planned::new(BENCH, bench)];
    let dir = crate::suite::run(options, &benches, Some(config))?;
    add_to_summary(&dir.path)?;
    Ok(dir.path.clone())
}

/// Copies meta.json's validation figures into summary.json (`validate`).
fn add_to_summary(dir: &Path) -> Result<()> {
    let read = |name: &str| -> Result<serde_json::Value> {
        let p = dir.join(name);
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", p.display()))
    };
    let meta = read("meta.json")?;
    let mut summary = read("summary.json")?;
    let figures = meta.pointer("/notes/validate").cloned();
    if let (Some(obj), Some(v)) = (summary.as_object_mut(), figures) {
        obj.insert("validate".into(), v);
    }
    let p = dir.join("summary.json");
    let tmp = dir.join("summary.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&summary)?)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
