//! Chart shapes drawn with plotters into PNG (embedded DejaVu font, so text renders on a
//! machine with no fonts installed) or SVG: lines with optional bands, stacked bars, Gantt,
//! heatmaps of ratios and strips of points on a categorical axis.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{anyhow, Result};

use plotters::coord::Shift;
use plotters::prelude::*;

mod axes;
mod draw;
mod grid;
mod key;
mod size;
mod strip;

pub use crate::record::view::chart::{Chart, MAX_ELEMENTS};
pub use axes::color;

use axes::DrawResult;
use draw::{draw_bars, draw_gantt, draw_lines};
use grid::draw_heatmap;
use strip::draw_strip;

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
                BitMapBackend::new(&path, size::size_of(chart)).into_drawing_area(),
                chart,
            ),
            _ => draw(
                SVGBackend::new(&path, size::size_of(chart)).into_drawing_area(),
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
    use super::axes::{axis_ticks, fmt_tick};

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
