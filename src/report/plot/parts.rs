//! What every chart module shares: a run's loaded tables, a chart with its name, the outcome
//! of drawing, and small helpers for series.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::charts::{Chart, LineChart};
use crate::record::label::RunLabel;
use crate::record::{CsvTable, DataError, Line};

/// The tables of one run folder, as listed in [`crate::report::catalog`].
pub struct Loaded {
    pub label: RunLabel,
    tables: BTreeMap<&'static str, crate::record::AnyRows>,
}

impl Loaded {
    pub fn load(dir: &Path) -> Result<Loaded, DataError> {
        let mut tables = BTreeMap::new();
        for t in crate::report::catalog::specs() {
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

pub(super) fn named(name: &str, about: &str, chart: Chart) -> Named {
    (name.to_string(), about.to_string(), chart)
}

/// Adds a line chart to `out` when it has any series.
pub(super) fn push_lines(out: &mut Vec<Named>, name: &str, about: &str, chart: LineChart) {
    if !chart.series.is_empty() {
        out.push(named(name, about, Chart::Lines(chart)));
    }
}

pub(super) type Points = Vec<(f64, f64)>;
/// (stage, start, end, kind, microbatch) of one simulated op.
pub(super) type TimelineOp = (usize, f64, f64, usize, usize);
pub(super) type Band = Vec<(f64, f64, f64)>;

pub(super) fn label(runs: &[Loaded], run: &Loaded, what: &str) -> String {
    if runs.len() > 1 {
        format!("{} — {what}", run.label.short())
    } else {
        what.to_string()
    }
}

pub(super) fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}
