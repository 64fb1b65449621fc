//! The what-if's pictures in the run's report: the workers' slowdown as a DP x PP heatmap
//! (at many DP ranks, the slowest drawn and the rest summarised, as the fleet overview does),
//! and S per step beside the step times.

use super::output::{AttributionTable, WhatifTable};
use crate::record::view::chart::{
    named, push_lines, Cell, Chart, Heatmap, LineChart, Mark, Named, Series,
};
use crate::record::view::loaded::Loaded;

/// DP ranks drawn one by one; the others share a summary row.
const ROWS_DRAWN: usize = 32;

pub fn whatif_charts(run: &Loaded) -> Vec<Named> {
    let mut out = Vec::new();
    if let Some(h) = heatmap(run) {
        out.push(named(
            "whatif_workers",
            "whatif: each worker's slowdown (the no-straggler step with only that worker's recorded times, over the no-straggler step), DP rank by stage",
            Chart::Heatmap(h),
        ));
    }
    if let Some(rows) = run.table::<WhatifTable>() {
        let mut s = LineChart::new("S per step".into(), "step", "slowdown", (false, false));
        s.series.push(Series {
            label: "S (no launch delays over no stragglers)".into(),
            points: rows
                .iter()
                .map(|l| (l.params.step as f64, l.figures.slowdown))
                .collect(),
            ..Default::default()
        });
        push_lines(
            &mut out,
            "whatif_slowdown",
            "whatif: the straggler slowdown S of each step",
            s,
        );
        let mut t = LineChart::new("Step time".into(), "step", "seconds", (false, false));
        let series = |label: &str, f: fn(&super::output::StepFigures) -> f64| Series {
            label: label.into(),
            points: rows
                .iter()
                .map(|l| (l.params.step as f64, f(&l.figures)))
                .collect(),
            ..Default::default()
        };
        t.series.push(series("as recorded", |f| f.base_s));
        t.series
            .push(series("without launch delays", |f| f.nodelay_s));
        t.series.push(series("without stragglers", |f| f.ideal_s));
        push_lines(
            &mut out,
            "whatif_steps",
            "whatif: each step as recorded and replayed",
            t,
        );
    }
    out
}

fn heatmap(run: &Loaded) -> Option<Heatmap> {
    let rows = run.table::<AttributionTable>()?;
    let mut cells: Vec<(usize, usize, f64)> = rows
        .iter()
        .filter(|l| l.params.dimension == "worker")
        .filter_map(|l| {
            let (d, s) = l.params.key.split_once(':')?;
            Some((d.parse().ok()?, s.parse().ok()?, l.figures.slowdown))
        })
        .collect();
    if cells.is_empty() {
        return None;
    }
    let dp = cells.iter().map(|c| c.0).max()? + 1;
    let pp = cells.iter().map(|c| c.1).max()? + 1;
    // The DP ranks with the slowest worker first; past ROWS_DRAWN the rest are one row.
    let mut worst = vec![f64::NEG_INFINITY; dp];
    for &(d, _, v) in &cells {
        worst[d] = worst[d].max(v);
    }
    let mut order: Vec<usize> = (0..dp).collect();
    order.sort_by(|a, b| worst[*b].total_cmp(&worst[*a]).then(a.cmp(b)));
    let drawn: Vec<usize> = if dp <= ROWS_DRAWN {
        (0..dp).collect()
    } else {
        order[..ROWS_DRAWN - 1].to_vec()
    };
    let row_of = |d: usize| drawn.iter().position(|&x| x == d);
    let rest = dp - drawn.len();
    let mut out: Vec<Cell> = Vec::new();
    let mut band = vec![f64::NEG_INFINITY; pp];
    cells.sort_by_key(|c| (c.0, c.1));
    for (d, s, v) in cells {
        match row_of(d) {
            Some(row) => out.push(cell(row, s, v, "")),
            None => band[s] = band[s].max(v),
        }
    }
    let mut names: Vec<(String, Mark)> = drawn
        .iter()
        .map(|d| (format!("DP {d}"), Mark::Plain))
        .collect();
    let mut note = None;
    if rest > 0 {
        for (s, v) in band.iter().enumerate().filter(|(_, v)| v.is_finite()) {
            out.push(cell(drawn.len(), s, *v, "≤"));
        }
        names.push((format!("other {rest}"), Mark::Plain));
        note = Some(format!(
            "The other {rest} DP ranks: each column shows the slowest of them \
             (whatif_attribution.csv has every worker)."
        ));
    }
    Some(Heatmap {
        title: format!(
            "Workers' slowdown, DP {dp} x PP {pp} — {}",
            run.label.host_name()
        ),
        row_label: "DP rank".into(),
        col_label: "stage".into(),
        rows: names,
        cols: (0..pp).map(|s| (s.to_string(), Mark::Plain)).collect(),
        cells: out,
        key: "the step with only this worker's recorded times over the step without stragglers"
            .into(),
        marks: vec![(Mark::Warn, "5% or more".into())],
        note,
        row_notes: Vec::new(),
    })
}

fn cell(row: usize, col: usize, slowdown: f64, prefix: &str) -> Cell {
    Cell {
        row,
        col,
        // Oriented as the heatmap wants: below 1.0 is worse.
        ratio: 1.0 / slowdown.max(1e-9),
        text: format!("{prefix}{slowdown:.2}x"),
        mark: if slowdown >= 1.05 {
            Mark::Warn
        } else {
            Mark::Plain
        },
    }
}
