//! Chart shapes drawn with plotters into PNG (embedded DejaVu font, so text renders on a
//! machine with no fonts installed) or SVG: lines with optional bands, stacked bars, Gantt,
//! heatmaps of ratios and strips of points on a categorical axis.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{anyhow, Result};

use crate::verdict::Verdict;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

mod draw;
#[allow(unused_imports)]
pub use draw::*;
mod grid;
use grid::draw_heatmap;
mod key;
mod strip;
use strip::draw_strip;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 620;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
    Both,
}

impl Format {
    fn extensions(self) -> &'static [&'static str] {
        match self {
            Format::Png => &["png"],
            Format::Svg => &["svg"],
            Format::Both => &["png", "svg"],
        }
    }
}

/// A palette that stays readable in print (Tableau 10).
pub fn color(i: usize) -> RGBColor {
    const P: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = P[i % P.len()];
    RGBColor(r, g, b)
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            let bytes = match style {
                FontStyle::Bold => dejavu::sans::bold(),
                _ => dejavu::sans::regular(),
            };
            if plotters::style::register_font("sans-serif", style, bytes).is_err() {
                tracing::warn!("could not register the embedded font");
            }
        }
    });
}

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

    /// The picture's size in pixels: a matrix or strip grows with its rows and names, so its
    /// labels keep a readable size (up to a bound: past it they are thinned).
    fn size(&self) -> (u32, u32) {
        match self {
            Chart::Heatmap(h) => {
                let (r, c) = (h.rows.len() as u32, h.cols.len() as u32);
                (
                    (420 + 16 * c).clamp(WIDTH, 1600),
                    (220 + 16 * r).clamp(HEIGHT, 1400),
                )
            }
            Chart::Strip(s) => (
                (WIDTH + 240).max(440 + 8 * s.categories.len().min(STRIP_NAMED) as u32),
                HEIGHT,
            ),
            _ => (WIDTH, HEIGHT),
        }
    }
}

fn tx(v: f64, log: bool) -> f64 {
    if log {
        v.max(1e-12).log10()
    } else {
        v
    }
}

fn fmt_tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    let a = x.abs();
    let trimmed = |s: String| match s.contains('.') {
        true => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => s,
    };
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{x:.0e}")
    } else if a >= 100.0 || (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        trimmed(format!("{x:.1}"))
    } else if a >= 1.0 {
        trimmed(format!("{x:.2}"))
    } else {
        trimmed(format!("{x:.3}"))
    }
}

/// Where an axis from `lo` to `hi` is labelled (in the axis's own coordinates: log10 of the
/// value on a log axis). A log axis is labelled at 1, 2 and 5 times a power of ten (powers
/// alone over more than 3 decades; 1 to 9 times one within less than one), never at 10^0.2 =
/// 1.585; a linear one at multiples of 1, 2 or 5 times a power of ten. At most 10 labels.
fn axis_ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    if log {
        let span = hi - lo;
        let mantissas: &[f64] = match span {
            s if s > 3.0 => &[1.0],
            s if s >= 0.7 => &[1.0, 2.0, 5.0],
            _ => &[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        };
        let mut ticks: Vec<f64> = (lo.floor() as i32 - 1..=hi.ceil() as i32 + 1)
            .flat_map(|k| mantissas.iter().map(move |m| (m * 10f64.powi(k)).log10()))
            .filter(|t| (lo - 1e-9..=hi + 1e-9).contains(t))
            .collect();
        if ticks.len() > 10 {
            let every = ticks.len().div_ceil(10);
            ticks = ticks.into_iter().step_by(every).collect();
        }
        if ticks.len() >= 2 {
            return ticks;
        }
        // Too narrow for round values' logs: round values, linearly, within it.
        let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
        return linear_ticks(a, b).into_iter().map(f64::log10).collect();
    }
    linear_ticks(lo, hi)
}

/// An f64 axis labelled at given points ([`axis_ticks`]). plotters' own `WithKeyPoints` has no
/// default formatting, so no mesh with a label formatter can be drawn on it.
#[derive(Clone)]
pub(super) struct Ticked {
    inner: plotters::coord::types::RangedCoordf64,
    ticks: Vec<f64>,
}

impl Ticked {
    pub(super) fn new(range: std::ops::Range<f64>, log: bool) -> Ticked {
        let ticks = axis_ticks(range.start, range.end, log);
        Ticked {
            inner: range.into(),
            ticks,
        }
    }
}

impl plotters::coord::ranged1d::Ranged for Ticked {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(v, limit)
    }
    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        match hint.weight().allow_light_points() {
            true => Vec::new(),
            false => self.ticks.clone(),
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let rough = (hi - lo) / 6.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power);
    // A hair of slack: 1.0 / 0.05 is 19.999999999999996.
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// The label of the category at integer position `v` on a categorical axis ("" between them).
fn category(labels: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() < 0.01 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

fn range(values: impl Iterator<Item = f64>, pad_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if pad_zero {
        lo = lo.min(0.0);
    }
    if hi - lo < 1e-12 {
        hi = lo + 1.0;
    }
    let pad = (hi - lo) * 0.05;
    (if pad_zero && lo == 0.0 { 0.0 } else { lo - pad }, hi + pad)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult
where
    DB::ErrorType: 'static,
{
    match chart {
        Chart::Lines(c) => draw_lines(&root, c),
        Chart::Bars(c) => draw_bars(&root, c),
        Chart::Gantt(c) => draw_gantt(&root, c),
        Chart::Heatmap(c) => draw_heatmap(&root, c),
        Chart::Strip(c) => draw_strip(&root, c),
    }
}

/// Renders `chart` as `dir/name.png` and/or `.svg`; returns the files written.
pub fn render(chart: &Chart, dir: &Path, name: &str, format: Format) -> Result<Vec<PathBuf>> {
    register_font();
    let mut out = Vec::new();
    for ext in format.extensions() {
        let path = dir.join(format!("{name}.{ext}"));
        let result = match *ext {
            "png" => draw(
                BitMapBackend::new(&path, chart.size()).into_drawing_area(),
                chart,
            ),
            _ => draw(
                SVGBackend::new(&path, chart.size()).into_drawing_area(),
                chart,
            ),
        };
        result.map_err(|e| anyhow!("cannot draw {}: {e}", path.display()))?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(lo: f64, hi: f64) -> Vec<String> {
        axis_ticks(lo.log10(), hi.log10(), true)
            .into_iter()
            .map(|t| fmt_tick(t, true))
            .collect()
    }

    #[test]
    fn log_axes_are_labelled_at_round_values() {
        assert_eq!(values(0.15, 3.0), ["0.2", "0.5", "1", "2"]);
        assert_eq!(
            values(1.0, 1e6),
            ["1", "10", "100", "1000", "10000", "100000", "1e6"]
        );
        // Many decades: at most 10 labels, still powers of ten.
        let wide = axis_ticks(-3.0, 12.0, true);
        assert!(
            wide.len() <= 10 && wide.iter().all(|t| t.fract() == 0.0),
            "{wide:?}"
        );
        // Under one decade: 1 to 9 times a power of ten.
        assert_eq!(values(2.5, 9.5), ["3", "4", "5", "6", "7", "8", "9"]);
        // Too narrow for those: round values between.
        assert_eq!(values(1.0, 1.2), ["1", "1.05", "1.1", "1.15", "1.2"]);
    }

    #[test]
    fn linear_axes_step_by_one_two_or_five() {
        assert_eq!(axis_ticks(0.0, 7.0, false), [0.0, 2.0, 4.0, 6.0]);
        assert_eq!(axis_ticks(-0.5, 0.5, false), [-0.4, -0.2, 0.0, 0.2, 0.4]);
        assert_eq!(fmt_tick(0.2, false), "0.2");
        assert_eq!(fmt_tick(2.5, false), "2.5");
    }
}
