//! Draws a run's figures: every registered table's charts, over the runs compared, into
//! `RUN/plots/`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::catalog;
use super::plot::charts::{render, Format, MAX_ELEMENTS};
use super::plot::{Figure, PlotOutcome};
use crate::record::Charts;

pub fn plot_run(dir: &Path, format: Format, compare: &[PathBuf]) -> Result<PlotOutcome> {
    let mut runs = vec![catalog::load(dir)?];
    for other in compare {
        runs.push(catalog::load(other)?);
    }
    let dirs = std::iter::once(dir).chain(compare.iter().map(PathBuf::as_path));
    let warnings: Vec<String> = runs
        .iter()
        .zip(dirs)
        .filter_map(|(r, d)| r.label.meta_warning(d))
        .collect();
    let title = if runs.len() > 1 {
        format!("{} runs", runs.len())
    } else {
        runs[0].label.short()
    };
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)
        .with_context(|| format!("cannot create {}", plots.display()))?;
    let mut outcome = PlotOutcome {
        warnings,
        ..PlotOutcome::default()
    };
    let registry = catalog::specs();
    // A cluster run (links, pipeline, the fleet gate) holds none of the single-node tables: nothing to say is
    // missing.
    let cluster_only = runs
        .iter()
        .all(|r| r.has("links") || r.has("pipeline") || r.has("fleet"));
    let mut charts = Vec::new();
    for t in &registry {
        if t.single_node && !cluster_only && !runs.iter().any(|r| r.has(t.name)) {
            outcome
                .skipped
                .push(format!("{}: not in this run", t.file()));
        }
        match &t.charts {
            Some(Charts::Compared(f)) => charts.extend(f(&runs, &title)?),
            Some(Charts::OfFirst(f)) => charts.extend(f(&runs[0])),
            None => {}
        }
    }
    // The fleet's overview is what an operator reads first.
    charts.sort_by_key(|(name, _, _)| name != "fleet_overview");
    for (name, about, chart) in charts {
        let n = chart.elements();
        if n > MAX_ELEMENTS {
            outcome.skipped.push(format!(
                "{name}: {n} elements, over the cap of {} a figure draws",
                MAX_ELEMENTS
            ));
            continue;
        }
        let files = render(&chart, &plots, &name, format)?;
        outcome.figures.push(Figure { name, about, files });
    }
    Ok(outcome)
}
