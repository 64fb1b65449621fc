//! What every chart's frame shares: its size, the palette, and the axes (linear or log
//! scales, their ticks and labels).

use plotters::prelude::*;

/// Every figure's size, in pixels.
pub(super) const WIDTH: u32 = 1000;
pub(super) const HEIGHT: u32 = 620;

pub(super) type DrawResult = Result<(), Box<dyn std::error::Error>>;

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

pub(super) fn tx(v: f64, log: bool) -> f64 {
    if log {
        v.max(1e-12).log10()
    } else {
        v
    }
}

pub(super) fn fmt_tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    let a = x.abs();
    let trimmed = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
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
pub(super) fn axis_ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
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
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }
}

pub(super) fn linear_ticks(lo: f64, hi: f64) -> Vec<f64> {
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
pub(super) fn category(labels: &[String], v: f64) -> String {
    let i = v.round();
    if (v - i).abs() < 0.01 && i >= 0.0 {
        labels.get(i as usize).cloned().unwrap_or_default()
    } else {
        String::new()
    }
}

pub(super) fn range(values: impl Iterator<Item = f64>, pad_zero: bool) -> (f64, f64) {
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
