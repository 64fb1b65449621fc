//! Drawing each kind of chart with plotters.

// plotters' prelude: its drawing types and traits, used throughout (the crate's own prelude).
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::{category, color, fmt_tick, range, tx, DrawResult, Ticked, WIDTH};
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
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
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
            // Dashes: every other segment of a finely split line.
            let mut dashes = Vec::new();
            for w in pts.windows(2) {
                let steps = 24;
                for k in (0..steps).step_by(2) {
                    let a = k as f64 / steps as f64;
                    let b = (k + 1) as f64 / steps as f64;
                    let p = |t: f64| {
                        (
                            w[0].0 + (w[1].0 - w[0].0) * t,
                            w[0].1 + (w[1].1 - w[0].1) * t,
                        )
                    };
                    dashes.push(PathElement::new(vec![p(a), p(b)], style));
                }
            }
            chart.draw_series(dashes)?
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
            chart.draw_series(std::iter::once(Text::new(
                note.clone(),
                p,
                ("sans-serif", 13)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            )))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
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
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..top)?;
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
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
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
    let mut chart = ChartBuilder::on(root)
        .caption(&c.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        // Room on the right for the legend (its longest label is about a quarter of the width).
        .build_cartesian_2d(0.0..end * 1.45, -0.5..n - 0.5)?;
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
        let rects: Vec<_> = c
            .rows
            .iter()
            .enumerate()
            .flat_map(|(r, (_, spans))| {
                spans.iter().filter(move |s| s.2 == k).map(move |s| {
                    let y = r as f64;
                    Rectangle::new([(s.0, y - 0.35), (s.1, y + 0.35)], col.filled())
                })
            })
            .collect();
        // White outlines keep neighbouring ops of one kind apart.
        let outlines: Vec<_> = c
            .rows
            .iter()
            .enumerate()
            .flat_map(|(r, (_, spans))| {
                spans.iter().filter(move |s| s.2 == k).map(move |s| {
                    let y = r as f64;
                    Rectangle::new([(s.0, y - 0.35), (s.1, y + 0.35)], WHITE.stroke_width(1))
                })
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(kind)
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], col.filled()));
        chart.draw_series(outlines)?;
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
                    Text::new(
                        s.3.to_string(),
                        ((s.0 + s.1) / 2.0, r as f64),
                        ("sans-serif", 11)
                            .into_font()
                            .color(&WHITE)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )
                })
        })
        .collect();
    chart.draw_series(numbers)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}
