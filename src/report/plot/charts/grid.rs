//! Drawing a [`Heatmap`]: cells coloured by their ratio to what was expected, marked cells
//! outlined, names thinned so they never overlap (marked names always drawn, in red), the key
//! in its own panel right of the data and the note under it.

// plotters' prelude: its drawing types and traits, used throughout (the crate's own prelude).
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, VPos};

use super::axes::DrawResult;
use super::key::{
    anchored, draw_key, framed, ink_on, mark_color, name_style, ratio_color, step_for, text_width,
    thin, Swatch, NAME_FONT,
};
use crate::record::view::chart::{Heatmap, Mark};

fn name_lines(name: &str) -> Vec<&str> {
    match name.split_once(' ') {
        Some((a, b)) => vec![a, b],
        None => vec![name],
    }
}

pub(super) fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &Heatmap,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (main, side) = framed(root, &c.title)?;
    let main_h = main.dim_in_pixel().1 as i32;
    let (main, foot) = main.split_vertically(main_h - if c.note.is_some() { 34 } else { 4 });
    let (nr, nc) = (c.rows.len().max(1), c.cols.len().max(1));
    let row_w = c
        .rows
        .iter()
        .map(|r| text_width(root, &r.0, NAME_FONT))
        .max()
        .unwrap_or(0)
        .min(260);
    let col_lines = c
        .cols
        .iter()
        .map(|col| name_lines(&col.0).len())
        .max()
        .unwrap_or(1) as u32;
    let mut chart = ChartBuilder::on(&main)
        .margin(8)
        .margin_top(24)
        .x_label_area_size(col_lines * (NAME_FONT + 3) + 30)
        .y_label_area_size(row_w + 14)
        .build_cartesian_2d(-0.5..nc as f64 - 0.5, nr as f64 - 0.5..-0.5)?;
    let (pw, ph) = chart.plotting_area().dim_in_pixel();
    let (cell_w, cell_h) = (pw as f64 / nc as f64, ph as f64 / nr as f64);
    draw_cells(root, &mut chart, c, (cell_w, cell_h))?;
    draw_names(root, &chart, c, (cell_w, cell_h))?;
    if let Some(note) = &c.note {
        foot.draw(&Text::new(
            note.clone(),
            (12, 8),
            ("sans-serif", 13).into_font(),
        ))?;
    }
    let entries: Vec<(Swatch, String)> = c
        .marks
        .iter()
        .map(|(m, words)| (Swatch::Outline(mark_color(*m)), words.clone()))
        .collect();
    draw_key(&side, &c.key, true, &entries)?;
    root.present()?;
    Ok(())
}

/// The matrix's data area, one unit a cell.
type Grid<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The cells: filled by their ratio, marked ones outlined, their words where they fit.
fn draw_cells<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &mut Grid<DB>,
    c: &Heatmap,
    (cell_w, cell_h): (f64, f64),
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let rect = |r: usize, col: usize, inset: f64| {
        [
            (col as f64 - 0.5 + inset, r as f64 - 0.5 + inset),
            (col as f64 + 0.5 - inset, r as f64 + 0.5 - inset),
        ]
    };
    // A cell with nothing to compare with (no expected level) is grey.
    let fill = |r: f64| {
        if r.is_finite() {
            ratio_color(r)
        } else {
            RGBColor(215, 215, 215)
        }
    };
    let gap = if cell_w.min(cell_h) > 8.0 { 0.03 } else { 0.0 };
    chart.draw_series(
        c.cells
            .iter()
            .map(|x| Rectangle::new(rect(x.row, x.col, gap), fill(x.ratio).filled())),
    )?;
    let inset = if cell_w.min(cell_h) > 10.0 { 0.08 } else { 0.0 };
    let stroke = if cell_w.min(cell_h) > 10.0 { 3 } else { 2 };
    chart.draw_series(c.cells.iter().filter(|x| x.mark != Mark::Plain).map(|x| {
        Rectangle::new(
            rect(x.row, x.col, inset),
            mark_color(x.mark).stroke_width(stroke),
        )
    }))?;
    // A cell's words only where they fit inside it.
    let font = if cell_h >= 22.0 { 13 } else { 11 };
    chart.draw_series(
        c.cells
            .iter()
            .filter(|x| {
                !x.text.is_empty()
                    && cell_h >= font as f64 + 4.0
                    && (text_width(root, &x.text, font) as f64) + 6.0 <= cell_w
            })
            .map(|x| {
                Text::new(
                    x.text.clone(),
                    (x.col as f64, x.row as f64),
                    anchored(font, ink_on(x.ratio), HPos::Center, VPos::Center),
                )
            }),
    )?;
    Ok(())
}

/// The rows' notes, the rows' and columns' names (thinned, the marked ones always, in their
/// colour) and the axes' names.
fn draw_names<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Grid<DB>,
    c: &Heatmap,
    (cell_w, cell_h): (f64, f64),
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let (nr, nc) = (c.rows.len().max(1), c.cols.len().max(1));
    for (row, words) in &c.row_notes {
        let m = c.rows.get(*row).map(|r| r.1).unwrap_or_default();
        let (x, y) = chart.backend_coord(&(-0.5, *row as f64));
        root.draw(&Text::new(
            words.clone(),
            (x + 8, y),
            anchored(NAME_FONT, mark_color(m), HPos::Left, VPos::Center),
        ))?;
    }
    // Row names, thinned by the cells' height; the marked rows always.
    let keep: Vec<usize> = (0..c.rows.len())
        .filter(|&i| c.rows[i].1 != Mark::Plain)
        .collect();
    let shown = thin(c.rows.len(), step_for(NAME_FONT, cell_h), &keep);
    for (i, (name, m)) in c.rows.iter().enumerate().filter(|(i, _)| shown[*i]) {
        let (x, y) = chart.backend_coord(&(-0.5, i as f64));
        root.draw(&Text::new(
            name.clone(),
            (x - 6, y),
            name_style(*m, HPos::Right, VPos::Center),
        ))?;
    }
    // Column names, thinned by the widest's width.
    let widest = c
        .cols
        .iter()
        .flat_map(|col| {
            name_lines(&col.0)
                .into_iter()
                .map(|l| text_width(root, l, NAME_FONT))
        })
        .max()
        .unwrap_or(0);
    let keep: Vec<usize> = (0..c.cols.len())
        .filter(|&i| c.cols[i].1 != Mark::Plain)
        .collect();
    let shown = thin(c.cols.len(), step_for(widest, cell_w), &keep);
    let mut below = 0;
    for (j, (name, m)) in c.cols.iter().enumerate().filter(|(j, _)| shown[*j]) {
        let (x, y) = chart.backend_coord(&(j as f64, nr as f64 - 0.5));
        for (k, line) in name_lines(name).into_iter().enumerate() {
            let ly = y + 5 + k as i32 * (NAME_FONT as i32 + 3);
            root.draw(&Text::new(
                line.to_string(),
                (x, ly),
                name_style(*m, HPos::Center, VPos::Top),
            ))?;
            below = below.max(ly + NAME_FONT as i32 + 4);
        }
    }
    // The axes' names: the rows' above their names, the columns' under theirs.
    let (x0, y0) = chart.backend_coord(&(-0.5, -0.5));
    let (x1, _) = chart.backend_coord(&(nc as f64 - 0.5, -0.5));
    // The data area starts at the picture's left edge.
    root.draw(&Text::new(
        c.row_label.clone(),
        (8.min(x0 - 6), y0 - 6),
        anchored(13, BLACK, HPos::Left, VPos::Bottom),
    ))?;
    root.draw(&Text::new(
        c.col_label.clone(),
        ((x0 + x1) / 2, below + 2),
        anchored(13, BLACK, HPos::Center, VPos::Top),
    ))?;
    Ok(())
}
