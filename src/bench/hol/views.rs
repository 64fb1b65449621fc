//! What readers take from `hol.csv`: its headlines (the stall offload removed at each delay,
//! "n/a" at zero, where there is none to remove), its charts and the figure `check` compares
//! (the makespan).

use std::collections::BTreeMap;

use anyhow::Result;

use super::plan::Mode;
use super::rows::HolTable;
use crate::record::view::chart::{
    label, named, sorted, Chart, LineChart, Named, Points, Series, StackedBars,
};
use crate::record::view::figure::{Checked, Figure};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::units::human_bytes;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<HolTable>() else {
        return;
    };
    let offload: Vec<_> = t
        .iter()
        .enumerate()
        .filter(|(_, r)| r.params.mode == Mode::Offload)
        .collect();
    let shapes: std::collections::BTreeSet<_> = offload
        .iter()
        .map(|(_, r)| (r.params.every, r.params.bytes))
        .collect();
    for (i, r) in offload {
        let p = &r.params;
        let shape = if shapes.len() > 1 {
            format!(", every {} ops, {}", p.every, human_bytes(p.bytes))
        } else {
            String::new()
        };
        let what = format!(
            "HoL stall removed by offload, {} ms delay{shape}",
            p.delay_ms
        );
        let (value, text) = match (p.delay_ms.as_str(), r.figures.stall_removed) {
            ("0", _) => (None, "n/a (no delay, so no stall to remove)".to_string()),
            (_, None) => (None, "n/a (no inline run at this delay)".to_string()),
            (_, Some(x)) if x >= 0.0 => (
                Some(x * 100.0),
                format!("{:.1}% of the inline stall", x * 100.0),
            ),
            (_, Some(x)) => (
                Some(0.0),
                format!(
                    "none: offload stalled {:.0}% longer than inline",
                    -x * 100.0
                ),
            ),
        };
        out.push(Headline {
            bench: "hol",
            what,
            value,
            unit: "%",
            text,
            source: source("hol.csv", i),
        });
    }
}

/// A delay column in ms (0 when it is not a number).
fn delay_of(s: &str) -> f64 {
    s.parse().unwrap_or(0.0)
}

/// The stall, makespan and GPU busy fraction against the delay, each mode a series, and
/// where an offloaded transfer's time goes.
pub fn hol_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mk = |t: &str, y: &str| {
        LineChart::new(
            format!("{t} — {title}"),
            "injected delay per transfer (ms)",
            y,
            (false, false),
        )
    };
    let mut stall = mk("Head-of-line stall per compute op (mean)", "stall (µs)");
    let mut makespan = mk("Stream makespan", "makespan (µs)");
    let mut busy = mk("GPU busy fraction", "busy fraction");
    let mut split = offload_split_chart(title);
    for run in runs {
        let Some(t) = run.table::<HolTable>() else {
            continue;
        };
        let mut groups: BTreeMap<(String, String, String), [Points; 3]> = BTreeMap::new();
        let mut delays = Vec::new();
        for r in t {
            let (p, f) = (&r.params, &r.figures);
            let d = delay_of(&p.delay_ms);
            delays.push(d);
            let key = (p.mode.to_string(), p.every.to_string(), p.bytes.to_string());
            let g = groups.entry(key).or_default();
            g[0].push((d, f.stall_mean_us));
            g[1].push((d, f.makespan_us));
            g[2].push((d, f.busy_fraction));
            if p.mode == Mode::Offload && runs.len() == 1 {
                let parts = [
                    f.d2h_copy_us,
                    f.map_us,
                    f.copy_out_us,
                    f.delay_us,
                    f.send_us,
                    f.receive_us,
                ];
                let vals = parts.iter().map(|v| v.unwrap_or(0.0)).collect();
                split.bars.push((p.delay_ms.clone(), vals));
            }
        }
        let max_delay = delays.iter().copied().fold(0.0, f64::max);
        let several = groups
            .keys()
            .map(|k| (&k.1, &k.2))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            > 1;
        for ((mode, every, bytes), [s, m, b]) in groups {
            let what = if several {
                format!("{mode} (every {every}, {bytes} B)")
            } else {
                mode.clone()
            };
            // The baseline does not depend on the delay: draw it across the whole range.
            let widen = |mut v: Vec<(f64, f64)>| {
                if mode == "none" && v.len() == 1 {
                    v.push((max_delay, v[0].1));
                }
                sorted(v)
            };
            for (chart, pts) in [(&mut stall, s), (&mut makespan, m), (&mut busy, b)] {
                chart.series.push(Series {
                    label: label(runs, run, &what),
                    points: widen(pts),
                    reference: mode == "none",
                    ..Default::default()
                });
            }
        }
    }
    Ok(named_charts(stall, makespan, busy, split))
}

/// The empty "where the time goes" bars for offloaded transfers, one part per stage.
fn offload_split_chart(title: &str) -> StackedBars {
    StackedBars {
        title: format!("Offloaded transfer, where the time goes — {title}"),
        x_label: "injected delay (ms)".into(),
        y_label: "µs (mean per transfer)".into(),
        parts: [
            "D2H copy (GPU)",
            "queue wait + map",
            "copy out",
            "injected delay",
            "send",
            "receive + ack",
        ]
        .map(String::from)
        .to_vec(),
        bars: Vec::new(),
    }
}

/// The charts worth drawing: the three line charts only when some run had rows, the split
/// only when a single run offloaded.
fn named_charts(
    stall: LineChart,
    makespan: LineChart,
    busy: LineChart,
    split: StackedBars,
) -> Vec<Named> {
    let mut out = Vec::new();
    if !stall.series.is_empty() {
        out.push(named(
            "hol_stall",
            "HoL stall against injected delay: none, inline, offload",
            Chart::Lines(stall),
        ));
        out.push(named(
            "hol_makespan",
            "Makespan against injected delay",
            Chart::Lines(makespan),
        ));
        out.push(named(
            "hol_busy",
            "GPU busy fraction against injected delay",
            Chart::Lines(busy),
        ));
    }
    if !split.bars.is_empty() {
        out.push(named(
            "hol_offload_split",
            "Offload latency split (D2H, map, copy, delay, send, receive)",
            Chart::Bars(split),
        ));
    }
    out
}

impl Checked for HolTable {
    /// The statistics block is the makespan over repetitions.
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let mut fig = Figure::time(line.stats());
        fig.column = "makespan_p50_us";
        Some(fig)
    }
}
