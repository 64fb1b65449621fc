//! Drawing a [`Strip`]: points on a categorical axis (never joined: ranks are not a trend),
//! each category's expected level and band behind them, marked points in their colour. A
//! category of several values is drawn as its spread (a line from least to most) and its
//! median. Up to [`STRIP_NAMED`] categories the axis names them (thinned so they never touch);
//! past it only the marked ones are named, beside their points, where no other name is.

// plotters' prelude: its drawing types and traits, used throughout (the crate's own prelude).
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axes::{fmt_tick, range, tx, DrawResult, Ticked};
use super::key::{
    draw_key, framed, mark_color, mark_word, name_style, place_labels, step_for, text_width, thin,
    Swatch, Wanted, NAME_FONT,
};
use crate::record::view::chart::{Mark, Strip, STRIP_NAMED};

const MAX_POINT_NAMES: usize = 40;

/// Per category: its values and its worst mark.
fn by_category(c: &Strip) -> Vec<(Vec<f64>, Mark)> {
    let mut out = vec![(Vec::new(), Mark::Plain); c.categories.len()];
    for &(i, v, m) in &c.points {
        if let Some(slot) = out.get_mut(i) {
            slot.0.push(v);
            slot.1 = slot.1.max(m);
        }
    }
    for slot in &mut out {
        slot.0.sort_by(f64::total_cmp);
    }
    out
}

pub(super) fn draw_strip<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, c: &Strip) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (main, side) = framed(root, &c.title)?;
    let n = c.categories.len().max(1);
    let named = c.categories.len() <= STRIP_NAMED;
    let cats = by_category(c);
    let ys = c
        .points
        .iter()
        .map(|p| p.1)
        .chain(c.expected.iter().flat_map(|e| [e.1, e.2, e.3]))
        .map(|v| tx(v, c.y_log));
    let (y0, y1) = range(ys, !c.y_log);
    let mut chart = ChartBuilder::on(&main)
        .margin(10)
        .margin_top(16)
        .margin_right(24)
        .x_label_area_size(if named { 56 } else { 40 })
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, Ticked::new(y0..y1, c.y_log))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .x_labels(2)
        .x_label_formatter(&|_| String::new())
        .y_labels(10)
        .y_label_formatter(&|v| fmt_tick(*v, c.y_log))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    draw_points(&mut chart, c, &cats)?;
    let green = RGBColor(44, 160, 44);
    draw_category_names(root, &chart, c, &cats, y0)?;
    let mut entries: Vec<(Swatch, String)> = if c.marks.is_empty() {
        [Mark::Plain, Mark::Warn, Mark::Fail]
            .into_iter()
            .map(|m| (Swatch::Point(mark_color(m)), mark_word(m).to_string()))
            .collect()
    } else {
        c.marks
            .iter()
            .map(|(m, words)| (Swatch::Point(mark_color(*m)), words.clone()))
            .collect()
    };
    if !c.expected.is_empty() {
        entries.push((Swatch::Line(green), c.expected_label.clone()));
        entries.push((Swatch::Shaded(green), "within tolerance".to_string()));
    }
    let title = c.note.clone().unwrap_or_default();
    draw_key(&side, &title, false, &entries)?;
    root.present()?;
    Ok(())
}

/// The strip's data area.
type Area<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, Ticked>>;

/// The expected bands and levels, then each category's point or spread and median.
fn draw_points<DB: DrawingBackend>(
    chart: &mut Area<DB>,
    c: &Strip,
    cats: &[(Vec<f64>, Mark)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let green = RGBColor(44, 160, 44);
    chart.draw_series(c.expected.iter().map(|&(i, _, lo, hi)| {
        let x = i as f64;
        Rectangle::new(
            [(x - 0.5, tx(lo, c.y_log)), (x + 0.5, tx(hi, c.y_log))],
            green.mix(0.16).filled(),
        )
    }))?;
    chart.draw_series(c.expected.iter().map(|&(i, e, _, _)| {
        let (x, y) = (i as f64, tx(e, c.y_log));
        PathElement::new(vec![(x - 0.5, y), (x + 0.5, y)], green.stroke_width(2))
    }))?;
    for (i, (values, mark)) in cats.iter().enumerate() {
        let x = i as f64;
        let color = mark_color(*mark);
        match values.as_slice() {
            [] => {}
            [v] => {
                let r = if *mark == Mark::Plain { 4 } else { 6 };
                chart.draw_series([Circle::new((x, tx(*v, c.y_log)), r, color.filled())])?;
            }
            vs => {
                let (lo, hi) = (vs[0], vs[vs.len() - 1]);
                let median = crate::stats::robust::median(vs);
                chart.draw_series([PathElement::new(
                    vec![(x, tx(lo, c.y_log)), (x, tx(hi, c.y_log))],
                    color.mix(0.6).stroke_width(1),
                )])?;
                chart.draw_series([Circle::new(
                    (x, tx(median, c.y_log)),
                    if *mark == Mark::Plain { 3 } else { 5 },
                    color.filled(),
                )])?;
            }
        }
    }
    Ok(())
}

/// The categories' names: on the axis (thinned, the marked always) up to [`STRIP_NAMED`];
/// beyond, the marked ones beside their points where no other name is.
fn draw_category_names<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Area<DB>,
    c: &Strip,
    cats: &[(Vec<f64>, Mark)],
    y0: f64,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let n = c.categories.len().max(1);
    let named = c.categories.len() <= STRIP_NAMED;
    let (pw, _) = chart.plotting_area().dim_in_pixel();
    let pitch = pw as f64 / n as f64;
    let marked: Vec<usize> = (0..cats.len())
        .filter(|&i| cats[i].1 != Mark::Plain)
        .collect();
    if named {
        let widest = c
            .categories
            .iter()
            .map(|s| text_width(root, s, NAME_FONT))
            .max()
            .unwrap_or(0);
        let shown = thin(c.categories.len(), step_for(widest, pitch), &marked);
        for (i, name) in c.categories.iter().enumerate().filter(|(i, _)| shown[*i]) {
            let (x, y) = chart.backend_coord(&(i as f64, y0));
            root.draw(&Text::new(
                name.clone(),
                (x, y + 6),
                name_style(cats[i].1, HPos::Center, VPos::Top),
            ))?;
        }
    } else {
        // Marked categories named beside their points (worst first), where no name is yet.
        let mut order = marked.clone();
        order.sort_by_key(|&i| std::cmp::Reverse(cats[i].1));
        let named_here: Vec<usize> = order.into_iter().take(MAX_POINT_NAMES).collect();
        let wanted: Vec<Wanted> = named_here
            .iter()
            .map(|&i| {
                let v = crate::stats::robust::median(&cats[i].0);
                let (x, y) = chart.backend_coord(&(i as f64, tx(v, c.y_log)));
                (
                    (x + 8, y),
                    (text_width(root, &c.categories[i], NAME_FONT), NAME_FONT),
                )
            })
            .collect();
        let (_, bottom) = chart.backend_coord(&(0.0, y0));
        let spots = place_labels(&wanted, bottom);
        let mut unnamed = marked.len() - named_here.len();
        for (&i, spot) in named_here.iter().zip(spots) {
            match spot {
                Some(p) => root.draw(&Text::new(
                    c.categories[i].clone(),
                    p,
                    name_style(cats[i].1, HPos::Left, VPos::Top),
                ))?,
                None => unnamed += 1,
            }
        }
        if unnamed > 0 {
            let (x, y) = chart.backend_coord(&(-0.5, y0));
            root.draw(&Text::new(
                format!("{unnamed} more marked, not named here: see the CSV"),
                (x + 4, y + 8),
                ("sans-serif", 12).into_font(),
            ))?;
        }
    }
    Ok(())
}
