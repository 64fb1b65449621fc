//! Drawing each kind of chart with plotters.

// plotters' prelude: its drawing types and traits, used throughout (the crate's own prelude).
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axes::{category, color, fmt_tick, range, tx, DrawResult, Ticked, WIDTH};
use super::key::anchored;
use crate::record::view::chart::{Gantt, LineChart, StackedBars};

pub(super) fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let xs = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| tx(p.0, c.x_log)));
    let ys = c.series.iter().flat_map(|s| {
        s.points
            .iter()
            .map(|p| p.1)
            .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
            .map(|v| tx(v, c.y_log))
    });
    let (x0, x1) = range(xs, false);
    let (y0, y1) = range(ys, !c.y_log);
    // Headroom above the data for the legend box.
    let y1 = y1 + (y1 - y0) * 0.3;
    let mut chart = frame(root, &c.title, 80)
        .build_cartesian_2d(Ticked::new(x0..x1, c.x_log), Ticked::new(y0..y1, c.y_log))?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_labels(10)
        .y_labels(10)
        .x_label_formatter(&|v| fmt_tick(*v, c.x_log))
        .y_label_formatter(&|v| fmt_tick(*v, c.y_log))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (i, s) in c.series.iter().enumerate() {
        let col = color(i);
        if !s.band.is_empty() {
            let mut poly: Vec<(f64, f64)> = s
                .band
                .iter()
                .map(|b| (tx(b.0, c.x_log), tx(b.2, c.y_log)))
                .collect();
            poly.extend(
                s.band
                    .iter()
                    .rev()
                    .map(|b| (tx(b.0, c.x_log), tx(b.1, c.y_log))),
            );
            chart.draw_series(std::iter::once(Polygon::new(poly, col.mix(0.18).filled())))?;
        }
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|p| (tx(p.0, c.x_log), tx(p.1, c.y_log)))
            .collect();
        let style = if s.reference {
            ShapeStyle::from(col.mix(0.7)).stroke_width(2)
        } else {
            ShapeStyle::from(col).stroke_width(3)
        };
        let drawn = if s.reference {
            chart.draw_series(dashes(&pts, style))?
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))?
        };
        drawn
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(3)));
        if !s.reference {
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, col.filled())))?;
        }
        for (x, y, note) in &s.marked {
            let p = (tx(*x, c.x_log), tx(*y, c.y_log));
            chart.draw_series([
                Circle::new(p, 8, ShapeStyle::from(BLACK).stroke_width(2)),
                Circle::new(p, 4, WHITE.filled()),
            ])?;
            chart.draw_series(std::iter::once(label(
                note,
                p,
                13,
                &BLACK,
                HPos::Left,
                VPos::Bottom,
            )))?;
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft, 0.85)?;
    root.present()?;
    Ok(())
}

pub(super) fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &StackedBars,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let top = c
        .bars
        .iter()
        .map(|(_, v)| v.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.6;
    let n = c.bars.len().max(1) as f64;
    let labels: Vec<String> = c.bars.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = frame(root, &c.title, 80).build_cartesian_2d(-0.5..n - 0.5, 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_labels(labels.len().max(1))
        .x_label_formatter(&|v| category(&labels, *v))
        .y_label_formatter(&|v| fmt_tick(*v, false))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .disable_x_mesh()
        .draw()?;
    for (p, part) in c.parts.iter().enumerate() {
        let col = color(p);
        let rects: Vec<_> = c
            .bars
            .iter()
            .enumerate()
            .map(|(i, (_, vals))| {
                let base: f64 = vals[..p].iter().sum();
                let x = i as f64;
                Rectangle::new([(x - 0.3, base), (x + 0.3, base + vals[p])], col.filled())
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(part)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight, 0.85)?;
    root.present()?;
    Ok(())
}

pub(super) fn draw_gantt<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Gantt) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let end = c
        .rows
        .iter()
        .flat_map(|(_, s)| s.iter().map(|x| x.1))
        .fold(0.0, f64::max)
        .max(1e-9);
    let n = c.rows.len().max(1) as f64;
    let names: Vec<String> = c.rows.iter().map(|(l, _)| l.clone()).collect();
    // Room on the right for the legend (its longest label is about a quarter of the width).
    let mut chart = frame(root, &c.title, 90).build_cartesian_2d(0.0..end * 1.45, -0.5..n - 0.5)?;
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_labels(names.len().max(1))
        .y_label_formatter(&|v| category(&names, *v))
        .x_label_formatter(&|v| fmt_tick(*v, false))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .disable_y_mesh()
        .draw()?;
    for (k, kind) in c.kinds.iter().enumerate() {
        let col = color(k);
        chart
            .draw_series(spans_of(c, k, col.filled()))?
            .label(kind)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
        // White outlines keep neighbouring ops of one kind apart.
        chart.draw_series(spans_of(c, k, WHITE.stroke_width(1)))?;
    }
    if !c.delays.is_empty() {
        let shade = RGBColor(200, 30, 30);
        let bands: Vec<_> = c
            .delays
            .iter()
            .map(|&(y, a, b)| {
                Rectangle::new([(a, y - 0.12), (b, y + 0.12)], shade.mix(0.45).filled())
            })
            .collect();
        chart
            .draw_series(bands)?
            .label("injected link delay")
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 3), (x + 14, y + 3)], shade.mix(0.45).filled())
            });
    }
    // Microbatch numbers on the bars wide enough to hold them.
    let px_per_unit = (WIDTH as f64 - 140.0) / (end * 1.22);
    let numbers: Vec<_> = c
        .rows
        .iter()
        .enumerate()
        .flat_map(|(r, (_, spans))| {
            spans
                .iter()
                .filter(move |s| (s.1 - s.0) * px_per_unit >= 16.0)
                .map(move |s| {
                    let at = ((s.0 + s.1) / 2.0, r as f64);
                    label(&s.3.to_string(), at, 11, &WHITE, HPos::Center, VPos::Center)
                })
        })
        .collect();
    chart.draw_series(numbers)?;
    legend(&mut chart, SeriesLabelPosition::UpperRight, 0.9)?;
    root.present()?;
    Ok(())
}

/// A chart's frame: its title, margin and label areas (`y_area` pixels for the y labels).
fn frame<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &'b str,
    y_area: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(y_area);
    builder
}

/// The series' legend, in a box whose background lets `background` of white through.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
    background: f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(background))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .position(position)
        .draw()?;
    Ok(())
}

/// A text placed at `at`, anchored at its (h, v) side.
fn label<'a>(
    text: &str,
    at: (f64, f64),
    size: u32,
    color: &RGBColor,
    h: HPos,
    v: VPos,
) -> Text<'a, (f64, f64), String> {
    Text::new(text.to_string(), at, anchored(size, *color, h, v))
}

/// A dashed line through `pts`: every other segment of a finely split line.
fn dashes(pts: &[(f64, f64)], style: ShapeStyle) -> Vec<PathElement<(f64, f64)>> {
    const STEPS: usize = 24;
    let mut out = Vec::new();
    for w in pts.windows(2) {
        let p = |t: f64| {
            (
                w[0].0 + (w[1].0 - w[0].0) * t,
                w[0].1 + (w[1].1 - w[0].1) * t,
            )
        };
        for k in (0..STEPS).step_by(2) {
            let (a, b) = (k as f64 / STEPS as f64, (k + 1) as f64 / STEPS as f64);
            out.push(PathElement::new(vec![p(a), p(b)], style));
        }
    }
    out
}

/// The Gantt's bars of op kind `k`, drawn in `style`.
fn spans_of(c: &Gantt, k: usize, style: ShapeStyle) -> Vec<Rectangle<(f64, f64)>> {
    c.rows
        .iter()
        .enumerate()
        .flat_map(|(r, (_, spans))| {
            spans.iter().filter(move |s| s.2 == k).map(move |s| {
                let y = r as f64;
                Rectangle::new([(s.0, y - 0.35), (s.1, y + 0.35)], style)
            })
        })
        .collect()
}
