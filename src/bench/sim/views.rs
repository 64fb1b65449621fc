//! What readers take from the simulator's tables: its headline (adaptive against 1F1B at the
//! most delayed case) and its charts (each schedule against the delay; Gantt charts of the
//! timelines). Predictions, not measurements: `check` does not compare them.

use std::collections::BTreeMap;

use anyhow::Result;

use super::tables::{total_delay, SimTable, TimelineTable as SimTimelineTable};
use crate::record::view::chart::{
    label, push_lines, sorted, Chart, Gantt, LineChart, Named, Series, Span, TimelineOp,
};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<SimTable>() else {
        return;
    };
    let most_delayed = t
        .iter()
        .enumerate()
        .filter(|(_, r)| r.params.schedule == "adaptive")
        .max_by(|a, b| total_delay(&a.1.params.slow).total_cmp(&total_delay(&b.1.params.slow)));
    if let Some((i, r)) = most_delayed {
        let x = r.figures.speedup_vs_1f1b;
        out.push(Headline {
            bench: "sim",
            what: format!(
                "Adaptive schedule against 1F1B (simulated), {}",
                r.lead.case
            ),
            value: Some(x),
            unit: "x",
            text: format!("{x:.2}x the speed of 1F1B"),
            source: source("sim.csv", i),
        });
    }
}

/// Each schedule's iteration, bubble rate and memory against the delay, and Gantt charts.
pub fn sim_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let chart = |what: &str, y: &str| {
        LineChart::new(
            format!("{what} against straggler delay — {title}"),
            "extra link delay (ms)",
            y,
            (false, false),
        )
    };
    // Every schedule side by side: its iteration, its bubble rate and its peak memory (bytes
    // with a model shape, else activations), each against the delay.
    let mut iter = chart("Iteration time", "iteration time (ms)");
    let mut bubble = chart("Bubble rate", "bubble rate (T - m(F+B+W)) / T");
    let mut memory = chart("Peak activation memory", "peak activations per stage");
    let mut out = Vec::new();
    for run in runs {
        let Some(t) = run.table::<SimTable>() else {
            continue;
        };
        type Points = Vec<(f64, f64)>;
        let mut by: BTreeMap<String, [Points; 3]> = BTreeMap::new();
        for r in t {
            let d = total_delay(&r.params.slow);
            let f = &r.figures;
            let peak = match f.peak_activation_bytes_max {
                Some(bytes) => bytes / (1u64 << 30) as f64,
                None => f.peak_activations_max as f64,
            };
            if f.peak_activation_bytes_max.is_some() {
                memory.y_label = "peak activation memory per stage (GiB)".into();
            }
            let entry = by.entry(r.params.schedule.clone()).or_default();
            entry[0].push((d, f.iteration_ms));
            entry[1].push((d, f.bubble_rate));
            entry[2].push((d, peak));
        }
        for (sched, [i, b, m]) in by {
            if i.len() > 1 {
                for (c, pts) in [(&mut iter, i), (&mut bubble, b), (&mut memory, m)] {
                    c.series.push(Series {
                        label: label(runs, run, &sched),
                        points: sorted(pts),
                        ..Default::default()
                    });
                }
            }
        }
    }
    push_lines(
        &mut out,
        "sim_iteration",
        "Simulated iteration time against delay, per schedule",
        iter,
    );
    push_lines(
        &mut out,
        "sim_bubble",
        "Simulated bubble rate against delay, per schedule",
        bubble,
    );
    push_lines(
        &mut out,
        "sim_memory",
        "Peak activation memory against delay, per schedule",
        memory,
    );
    sim_gantts(runs, title, &mut out);
    Ok(out)
}

/// Gantt charts of the first run, for its most delayed case.
fn sim_gantts(runs: &[Loaded], title: &str, out: &mut Vec<Named>) {
    if let Some(t) = runs.first().and_then(|r| r.table::<SimTimelineTable>()) {
        let mut cases: BTreeMap<String, BTreeMap<String, Vec<TimelineOp>>> = BTreeMap::new();
        for r in t {
            let p = &r.params;
            let kind = p.kind.index();
            cases
                .entry(r.lead.case.clone())
                .or_default()
                .entry(p.schedule.clone())
                .or_default()
                .push((
                    p.stage,
                    r.figures.start_ms,
                    r.figures.end_ms,
                    kind,
                    p.microbatch,
                ));
        }
        let delayed = runs[0].table::<SimTable>().and_then(|s| {
            s.iter()
                .max_by(|a, b| total_delay(&a.params.slow).total_cmp(&total_delay(&b.params.slow)))
                .map(|r| r.lead.case.clone())
        });
        let case = delayed
            .filter(|c| cases.contains_key(c))
            .or_else(|| cases.keys().next().cloned());
        // The injected delay per link of a case, from its sim.csv rows.
        let slow_of = |case: &str| -> BTreeMap<usize, f64> {
            let slow = runs[0]
                .table::<SimTable>()
                .and_then(|s| s.iter().find(|r| r.lead.case == case))
                .map(|r| r.params.slow.clone())
                .unwrap_or_default();
            slow.split(';')
                .filter_map(|p| p.split_once(':'))
                .filter_map(|(l, d)| Some((l.trim().parse().ok()?, d.trim().parse().ok()?)))
                .filter(|&(_, d): &(usize, f64)| d > 0.0)
                .collect()
        };
        if let Some(case) = case {
            for (i, (sched, ops)) in cases[&case].iter().enumerate() {
                let stages = ops.iter().map(|o| o.0).max().unwrap_or(0) + 1;
                let mut rows: Vec<(String, Vec<Span>)> = (0..stages)
                    .map(|s| (format!("stage {s}"), Vec::new()))
                    .collect();
                for &(s, a, b, k, mb) in ops {
                    rows[s].1.push((a, b, k, mb));
                }
                let delays = delay_windows(ops, &slow_of(&case), stages);
                // Stage 0 on top, as pipeline diagrams draw it.
                rows.reverse();
                let safe: String = sched
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                out.push((
                    format!("sim_gantt_{i}_{safe}"),
                    format!("Gantt chart of {sched}, {case}"),
                    Chart::Gantt(Gantt {
                        title: format!("{sched}: {case} — {title}"),
                        x_label: "time (ms)".into(),
                        kinds: ["F (forward)", "B (backward)", "W (weight grad)"]
                            .map(String::from)
                            .to_vec(),
                        rows,
                        delays,
                    }),
                ));
            }
        }
    }
}

/// Where injected delays sit: for each op whose output crosses a slow link (F down from stage
/// i, B up from stage i + 1), the delay after it ends, as (y between the two stages' rows,
/// start, end) in the Gantt's reversed rows (stage 0 on top).
fn delay_windows(
    ops: &[TimelineOp],
    slow: &BTreeMap<usize, f64>,
    stages: usize,
) -> Vec<(f64, f64, f64)> {
    let mut out = Vec::new();
    for &(s, _, end, kind, _) in ops {
        let link = match kind {
            0 if s + 1 < stages => s,
            1 if s > 0 => s - 1,
            _ => continue,
        };
        if let Some(&d) = slow.get(&link) {
            // Row of stage j is stages - 1 - j; the link sits between its two stages.
            let y = stages as f64 - 1.5 - link as f64;
            out.push((y, end, end + d));
        }
    }
    out
}
