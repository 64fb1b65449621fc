//! `morphbench plot`: turns whichever CSVs a run folder holds into figures in `RUN/plots/`,
//! one series per run with `--compare`. Malformed CSVs are errors naming file and column;
//! absent ones are skipped and said so.

pub mod charts;
pub mod data;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use charts::{render, Chart, Format, Gantt, LineChart, Series, StackedBars};
use data::RunLabel;

use crate::bench::d2h::D2hTable;
use crate::bench::hol::{HolTable, Mode};
use crate::bench::kernels::KernelsTable;
use crate::bench::rdma::RdmaTable;
use crate::bench::sim::{total_delay, SimTable, TimelineTable};
use crate::export::{read_optional, DataError, Line};

mod node_charts;
#[allow(unused_imports)]
pub use node_charts::*;

mod pipeline_charts;
#[allow(unused_imports)]
pub use pipeline_charts::*;

/// The tables of one run folder (each `None` when the bench did not run).
pub struct Loaded {
    pub label: RunLabel,
    pub kernels: Option<Vec<Line<KernelsTable>>>,
    pub d2h: Option<Vec<Line<D2hTable>>>,
    pub hol: Option<Vec<Line<HolTable>>>,
    pub rdma: Option<Vec<Line<RdmaTable>>>,
    pub sim: Option<Vec<Line<SimTable>>>,
    pub timeline: Option<Vec<Line<TimelineTable>>>,
    pub peak: Option<Vec<Line<crate::bench::peak::PeakTable>>>,
    pub links: Option<Vec<Line<crate::bench::links::tables::LinksTable>>>,
    pub pipeline: Option<Vec<Line<crate::bench::pipeline::table::PipelineTable>>>,
    pub pipeline_timeline: Option<Vec<Line<crate::bench::pipeline::table::TimelineTable>>>,
    /// The verdicts of `morphbench check` on this run, when it was checked.
    pub check: Option<Vec<Line<crate::check::CheckTable>>>,
}

impl Loaded {
    pub fn load(dir: &Path) -> Result<Loaded, DataError> {
        Ok(Loaded {
            label: RunLabel::of(dir),
            kernels: read_optional(dir)?,
            d2h: read_optional(dir)?,
            hol: read_optional(dir)?,
            rdma: read_optional(dir)?,
            sim: read_optional(dir)?,
            timeline: read_optional(dir)?,
            peak: read_optional(dir)?,
            links: read_optional(dir)?,
            pipeline: read_optional(dir)?,
            pipeline_timeline: read_optional(dir)?,
            check: read_optional(dir)?,
        })
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
}

/// A figure to draw: file name, what it shows, the chart.
type Named = (String, String, Chart);

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
    let title = if runs.len() > 1 {
        format!("{} runs", runs.len())
    } else {
        runs[0].label.short()
    };
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)
        .with_context(|| format!("cannot create {}", plots.display()))?;
    let mut outcome = PlotOutcome::default();
    let present = |r: &Loaded, file: &str| match file {
        "kernels.csv" => r.kernels.is_some(),
        "d2h.csv" => r.d2h.is_some(),
        "hol.csv" => r.hol.is_some(),
        "rdma.csv" => r.rdma.is_some(),
        "peak.csv" => r.peak.is_some(),
        _ => r.sim.is_some(),
    };
    // A cluster run (links) holds none of the single-node tables: nothing to say is missing.
    let cluster_only = runs
        .iter()
        .all(|r| r.links.is_some() || r.pipeline.is_some());
    for file in [
        "peak.csv",
        "kernels.csv",
        "d2h.csv",
        "hol.csv",
        "rdma.csv",
        "sim.csv",
    ] {
        if !cluster_only && !runs.iter().any(|r| present(r, file)) {
            outcome.skipped.push(format!("{file}: not in this run"));
        }
    }
    let mut charts = Vec::new();
    charts.extend(kernel_charts(&runs, &title)?);
    charts.extend(roofline_chart(&runs, &title));
    charts.extend(d2h_charts(&runs, &title)?);
    charts.extend(hol_charts(&runs, &title)?);
    charts.extend(rdma_charts(&runs, &title)?);
    charts.extend(sim_charts(&runs, &title)?);
    charts.extend(links_charts(&runs[0]));
    charts.extend(pipeline_charts(&runs[0]));
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
