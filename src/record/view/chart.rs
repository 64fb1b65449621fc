//! What a chart shows, as data: lines, stacked bars, a Gantt, a heatmap, a strip. A bench
//! makes its charts from its rows; `report` draws them (`report::plot::charts`).

use super::loaded::Loaded;
use crate::verdict::Verdict;

#[derive(Debug, Clone, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// (x, low, high) drawn as a shaded band behind the line.
    pub band: Vec<(f64, f64, f64)>,
    /// A reference line (dashed look, no markers).
    pub reference: bool,
    /// Points of the line that stand apart, drawn with a hollow marker and their note (a size
    /// run by a fallback variant, say).
    pub marked: Vec<(f64, f64, String)>,
}

#[derive(Debug, Clone, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_log: bool,
    pub y_log: bool,
    pub series: Vec<Series>,
}

impl LineChart {
    /// A chart with no series yet; `(x_log, y_log)` says which axes are logarithmic.
    pub fn new(title: String, x_label: &str, y_label: &str, (x_log, y_log): (bool, bool)) -> Self {
        LineChart {
            title,
            x_label: x_label.into(),
            y_label: y_label.into(),
            x_log,
            y_log,
            series: Vec::new(),
        }
    }
}

/// One bar made of stacked parts (label, value), at a category.
#[derive(Debug, Clone, Default)]
pub struct StackedBars {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub parts: Vec<String>,
    /// (category label, value of each part in `parts` order).
    pub bars: Vec<(String, Vec<f64>)>,
}

/// (start, end, index into `Gantt::kinds`).
/// (start, end, kind, microbatch) of one bar.
pub type Span = (f64, f64, usize, usize);

/// Rows of spans, each with its label.
#[derive(Debug, Clone, Default)]
pub struct Gantt {
    pub title: String,
    pub x_label: String,
    pub kinds: Vec<String>,
    pub rows: Vec<(String, Vec<Span>)>,
    /// Injected delays on links: (y between two rows, start, end), shaded.
    pub delays: Vec<(f64, f64, f64)>,
}

/// How a cell, point or name stands: drawn plain, or marked as a warning or a failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    #[default]
    Plain,
    Warn,
    Fail,
}

impl Mark {
    /// A verdict as a mark (PASS and SKIP are plain).
    pub fn of_verdict(verdict: Verdict) -> Mark {
        match verdict {
            Verdict::Fail => Mark::Fail,
            Verdict::Warn => Mark::Warn,
            Verdict::Pass | Verdict::Skip => Mark::Plain,
        }
    }
}

/// One cell of a [`Heatmap`].
#[derive(Debug, Clone, Default)]
pub struct Cell {
    pub row: usize,
    pub col: usize,
    /// Against what was expected, oriented so that 1.0 is as expected and below 1.0 is worse
    /// (a rate over its expected rate; a time's expected over the time). It sets the colour.
    pub ratio: f64,
    /// What the cell says, when it is large enough to say it.
    pub text: String,
    pub mark: Mark,
}

/// A matrix of cells, each coloured by its ratio to what was expected on a diverging scale
/// centred at 1.0x (worse red, better blue, as expected pale), whatever the absolute values:
/// healthy is one colour and slow another. Marked cells are outlined; marked rows and columns
/// have their names always drawn and in red. The scale and the marks' key sit outside the data.
#[derive(Debug, Clone, Default)]
pub struct Heatmap {
    pub title: String,
    pub row_label: String,
    pub col_label: String,
    /// Row and column names, with their marks (a failed node's name is always drawn).
    pub rows: Vec<(String, Mark)>,
    pub cols: Vec<(String, Mark)>,
    pub cells: Vec<Cell>,
    /// What a cell's colour and text mean, for the key.
    pub key: String,
    /// What each mark means (FAIL, a flagged slow link), for the key.
    pub marks: Vec<(Mark, String)>,
    /// A line under the data (what was left out of it, summarised).
    pub note: Option<String>,
    /// Words written across a row that has no cells (why a node has no figures).
    pub row_notes: Vec<(usize, String)>,
}

/// One value (or several: a distribution) per category on a categorical axis, as points, with
/// the expected level and its band per category. Past [`STRIP_NAMED`] categories the axis
/// names only the marked ones, beside their points.
#[derive(Debug, Clone, Default)]
pub struct Strip {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub y_log: bool,
    pub categories: Vec<String>,
    /// (category, value, mark).
    pub points: Vec<(usize, f64, Mark)>,
    /// (category, expected, band low, band high).
    pub expected: Vec<(usize, f64, f64, f64)>,
    /// What the expected level and its band are, for the key.
    pub expected_label: String,
    /// What each mark means, for the key (PASS, WARN and FAIL when empty).
    pub marks: Vec<(Mark, String)>,
    /// Words at the top of the key.
    pub note: Option<String>,
}

/// The most categories a strip names one by one on its axis.
pub const STRIP_NAMED: usize = 64;

/// One chart, of any shape.
pub enum Chart {
    Lines(LineChart),
    Bars(StackedBars),
    Gantt(Gantt),
    Heatmap(Heatmap),
    Strip(Strip),
}

/// The most elements (points, band points, bar parts, spans, rows) one chart draws; a chart
/// over it is skipped and named, so no input makes an unbounded figure.
pub const MAX_ELEMENTS: usize = 100_000;

impl Chart {
    /// What the chart would draw: its points, band points, bar parts, spans and rows.
    pub fn elements(&self) -> usize {
        match self {
            Chart::Lines(c) => c.series.iter().map(|s| s.points.len() + s.band.len()).sum(),
            Chart::Bars(b) => b.bars.iter().map(|(_, v)| v.len()).sum(),
            Chart::Gantt(g) => {
                g.rows.len() + g.delays.len() + g.rows.iter().map(|(_, s)| s.len()).sum::<usize>()
            }
            Chart::Heatmap(h) => h.cells.len() + h.rows.len() + h.cols.len(),
            Chart::Strip(c) => c.points.len() + c.expected.len() + c.categories.len(),
        }
    }
}

/// A chart with its file name and what it shows.
pub type Named = (String, String, Chart);

/// A chart with its file name and what it shows, as the chart modules hand it on.
pub fn named(name: &str, about: &str, chart: Chart) -> Named {
    (name.to_string(), about.to_string(), chart)
}

/// Adds a line chart to `out` when it has any series.
pub fn push_lines(out: &mut Vec<Named>, name: &str, about: &str, chart: LineChart) {
    if !chart.series.is_empty() {
        out.push(named(name, about, Chart::Lines(chart)));
    }
}

/// A series' (x, y) points.
pub type Points = Vec<(f64, f64)>;
/// (stage, start, end, kind, microbatch) of one simulated op.
pub type TimelineOp = (usize, f64, f64, usize, usize);
/// A shaded band: (x, low, high).
pub type Band = Vec<(f64, f64, f64)>;

/// A series' label: prefixed by its run's short name when several runs are compared.
pub fn label(runs: &[Loaded], run: &Loaded, what: &str) -> String {
    if runs.len() > 1 {
        format!("{} — {what}", run.label.short())
    } else {
        what.to_string()
    }
}

/// Points in the order of x, as a line is drawn.
pub fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}
