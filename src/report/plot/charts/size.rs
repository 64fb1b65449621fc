//! How large a chart's picture is.

use super::axes::{HEIGHT, WIDTH};
use crate::record::view::chart::{Chart, STRIP_NAMED};

/// The picture's size in pixels: a matrix or strip grows with its rows and names, so its
/// labels keep a readable size (up to a bound: past it they are thinned).
pub(super) fn size_of(chart: &Chart) -> (u32, u32) {
    match chart {
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
