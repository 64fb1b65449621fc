//! A run's figures, as `check` compares them: every table that gives figures (a bench's
//! table implementing [`crate::record::view::figure::Checked`], named in its descriptor) read
//! from the run folder, with what names the run.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use crate::record::label::RunLabel;
use crate::record::view::figure::AddFigures;
pub use crate::record::view::figure::{Better, Figure, Key};

/// Every figure of one run, with what names the run.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub dir: std::path::PathBuf,
    pub run_id: String,
    pub label: RunLabel,
    pub figures: BTreeMap<Key, Figure>,
}

/// Every table `check` compares, in the registry's order: its name and how its figures are
/// read (the benches' tables that give figures).
pub fn checked() -> Vec<(&'static str, AddFigures)> {
    crate::bench::REGISTRY
        .iter()
        .flat_map(|d| (d.tables)())
        .filter_map(|t| Some((t.name, t.checked?)))
        .collect()
}

/// Reads every figure of the run in `dir`.
pub fn collect(dir: &Path) -> Result<RunFigures> {
    if !dir.is_dir() {
        anyhow::bail!(
            "{} is not a folder: give a run folder (results/<run-id>)",
            dir.display()
        );
    }
    let mut figures = BTreeMap::new();
    let mut files = Vec::new();
    for (name, add) in checked() {
        add(dir, &mut figures)?;
        files.push(format!("{name}.csv"));
    }
    // A check must know what it compares: which run (a copy of the baseline passes
    // whatever it measured), on which adapter and host. A damaged meta.json is named first;
    // a folder with neither figures nor meta.json is no run at all.
    let label = RunLabel::of(dir);
    let unknown = label.meta_warning(dir).map(|why| {
        anyhow::anyhow!(
            "{why}; a check needs each run's identity: give the run folder as the run wrote it"
        )
    });
    if let (Some(e), Some(_)) = (unknown.as_ref(), &label.meta_problem) {
        anyhow::bail!("{e}");
    }
    if figures.is_empty() {
        anyhow::bail!(
            "{} holds no measured figures ({}): give a run folder of a run that measured \
             something",
            dir.display(),
            files.join(", ")
        );
    }
    if let Some(e) = unknown {
        return Err(e);
    }
    let run_id = label.run_id.clone().unwrap_or_else(|| {
        dir.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    });
    Ok(RunFigures {
        dir: dir.to_path_buf(),
        run_id,
        label,
        figures,
    })
}
