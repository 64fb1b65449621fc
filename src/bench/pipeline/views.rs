//! What readers take from `pipeline.csv`: its headlines and its charts (a Gantt chart per case,
//! the measured stages above the simulator's prediction).

use super::table::{PipelineTable, TimelineTable as PipelineTimelineTable};
use crate::record::view::chart::{named, Chart, Gantt, Named, Span};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;

/// Each pipeline case: measured iteration against the prediction.
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<PipelineTable>() else {
        return;
    };
    for (i, l) in t.iter().enumerate() {
        let f = &l.figures;
        out.push(Headline {
            bench: "pipeline",
            what: format!("Pipeline iteration, {}", l.lead.case),
            value: Some(f.iteration_ms),
            unit: "ms",
            text: format!(
                "{:.1} ms measured, {:.1} ms predicted ({:+.1}%), bubble {:.3}, gradients {}",
                f.iteration_ms,
                f.predicted_ms,
                f.error * 100.0,
                f.bubble,
                if f.verified {
                    "verified"
                } else {
                    "NOT verified"
                }
            ),
            source: source("pipeline.csv", i),
        });
    }
    // PipeMorph's claim, per delay: adapted schedule plus offload against 1F1B with inline
    // sends, measured side by side in the run and as predicted.
    let find = |schedule: &str, comm: &str, slow: &str| {
        t.iter().position(|l| {
            l.params.schedule == schedule && l.params.comm == comm && l.params.slow == slow
        })
    };
    let mut delays: Vec<&str> = Vec::new();
    for l in t.iter() {
        if !delays.contains(&l.params.slow.as_str()) {
            delays.push(&l.params.slow);
        }
    }
    for slow in delays {
        let (Some(a), Some(b)) = (
            find("1f1b", "inline", slow),
            find("adaptive", "offload", slow),
        ) else {
            continue;
        };
        let (base, ours) = (&t[a].figures, &t[b].figures);
        if ours.iteration_ms <= 0.0 || ours.predicted_ms <= 0.0 {
            continue;
        }
        let measured = base.iteration_ms / ours.iteration_ms;
        let predicted = base.predicted_ms / ours.predicted_ms;
        out.push(Headline {
            bench: "pipeline",
            what: format!("Pipeline speed-up, adaptive + offload over 1f1b inline, slow {slow}"),
            value: Some(measured),
            unit: "x",
            text: format!("{measured:.3}x measured, {predicted:.3}x predicted"),
            source: format!("pipeline.csv rows {} and {}", a + 1, b + 1),
        });
    }
}

/// One Gantt chart per pipeline case: the measured stages above, the simulator's prediction
/// for the same orders on the measured times below (copy out and inline sends shaded).
pub fn pipeline_charts(run: &Loaded) -> Vec<Named> {
    let Some(rows) = run.table::<PipelineTimelineTable>() else {
        return Vec::new();
    };
    let mut cases: Vec<&str> = rows.iter().map(|l| l.lead.case.as_str()).collect();
    cases.dedup();
    let mut out = Vec::new();
    for case in cases {
        let mine: Vec<_> = rows.iter().filter(|l| l.lead.case == case).collect();
        let mut gantt_rows = Vec::new();
        for lane in ["measured", "predicted"] {
            let stages = mine
                .iter()
                .filter(|l| l.params.lane == lane)
                .map(|l| l.params.stage + 1)
                .max()
                .unwrap_or(0);
            for s in 0..stages {
                let spans: Vec<Span> = mine
                    .iter()
                    .filter(|l| l.params.lane == lane && l.params.stage == s)
                    .flat_map(|l| {
                        let p = &l.params;
                        let kind = p.kind.index();
                        let mb = p.microbatch as usize;
                        let mut v = vec![(p.start_ms, p.end_ms, kind, mb)];
                        if p.queue_end_ms > p.end_ms + 1e-6 {
                            v.push((p.end_ms, p.queue_end_ms, 3, mb));
                        }
                        v
                    })
                    .collect();
                gantt_rows.push((format!("{lane} s{s}"), spans));
            }
        }
        out.push(named(
            &format!("pipeline_gantt_{case}"),
            &format!("pipeline {case}: each stage's ops as measured (top) and as the simulator predicts them from the measured op and link times (bottom)"),
            Chart::Gantt(Gantt {
                title: format!("{case}: measured vs predicted — {}", run.label.host_name()),
                x_label: "ms from the iteration's start".into(),
                kinds: vec!["F".into(), "B".into(), "W".into(), "copy out / send on the queue".into()],
                rows: gantt_rows,
                delays: Vec::new(),
            }),
        ));
    }
    out
}
