//! `morphbench plot`: turns whichever CSVs a run folder holds into figures in `RUN/plots/`,
//! one series per run with `--compare`. Malformed CSVs are errors naming file and column;
//! absent ones are skipped and said so.

pub mod charts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::record::label::RunLabel;
use charts::{render, Chart, Format, Gantt, LineChart, Series, StackedBars};

use crate::bench::hol::Mode;
use crate::bench::sim::total_delay;
use crate::record::{CsvTable, DataError, Line};

mod node_charts;
#[allow(unused_imports)]
pub use node_charts::*;

mod fleet_charts;
#[allow(unused_imports)]
pub use fleet_charts::*;

mod pipeline_charts;
#[allow(unused_imports)]
pub use pipeline_charts::*;

mod links_charts;
#[allow(unused_imports)]
pub use links_charts::*;

/// The tables of one run folder, as registered in [`crate::report::tables`].
pub struct Loaded {
    pub label: RunLabel,
    tables: BTreeMap<&'static str, crate::report::tables::AnyRows>,
}

impl Loaded {
    pub fn load(dir: &Path) -> Result<Loaded, DataError> {
        let mut tables = BTreeMap::new();
        for t in crate::report::tables::tables() {
            if let Some(rows) = (t.load)(dir)? {
                tables.insert(t.name, rows);
            }
        }
        Ok(Loaded {
            label: RunLabel::of(dir),
            tables,
        })
    }

    /// The rows of table `T`; `None` when the run did not write it.
    pub fn table<T: CsvTable + 'static>(&self) -> Option<&Vec<Line<T>>> {
        self.tables.get(T::NAME)?.downcast_ref()
    }

    /// Whether the run wrote the table named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tables.contains_key(name)
    }
}

/// A written figure and what it shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub name: String,
    pub about: String,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlotOutcome {
    pub figures: Vec<Figure>,
    pub skipped: Vec<String>,
    /// What could not be used (a missing or damaged meta.json), with why.
    pub warnings: Vec<String>,
}

/// A figure to draw: file name, what it shows, the chart.
/// A chart with its file name and what it shows.
pub type Named = (String, String, Chart);

fn named(name: &str, about: &str, chart: Chart) -> Named {
    (name.to_string(), about.to_string(), chart)
}

/// Adds a line chart to `out` when it has any series.
fn push_lines(out: &mut Vec<Named>, name: &str, about: &str, chart: LineChart) {
    if !chart.series.is_empty() {
        out.push(named(name, about, Chart::Lines(chart)));
    }
}

type Points = Vec<(f64, f64)>;
/// (stage, start, end, kind, microbatch) of one simulated op.
type TimelineOp = (usize, f64, f64, usize, usize);
type Band = Vec<(f64, f64, f64)>;

fn label(runs: &[Loaded], run: &Loaded, what: &str) -> String {
    if runs.len() > 1 {
        format!("{} — {what}", run.label.short())
    } else {
        what.to_string()
    }
}

fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

pub fn plot_run(dir: &Path, format: Format, compare: &[PathBuf]) -> Result<PlotOutcome> {
    let mut runs = vec![Loaded::load(dir)?];
    for other in compare {
        runs.push(Loaded::load(other)?);
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
    let registry = crate::report::tables::tables();
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
            Some(crate::report::tables::Charts::Compared(f)) => charts.extend(f(&runs, &title)?),
            Some(crate::report::tables::Charts::OfFirst(f)) => charts.extend(f(&runs[0])),
            None => {}
        }
    }
    // The fleet's overview is what an operator reads first.
    charts.sort_by_key(|(name, _, _)| name != "fleet_overview");
    for (name, about, chart) in charts {
        let n = chart.elements();
        if n > charts::MAX_ELEMENTS {
            outcome.skipped.push(format!(
                "{name}: {n} elements, over the cap of {} a figure draws",
                charts::MAX_ELEMENTS
            ));
            continue;
        }
        let files = render(&chart, &plots, &name, format)?;
        outcome.figures.push(Figure { name, about, files });
    }
    Ok(outcome)
}
