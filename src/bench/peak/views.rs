//! What readers take from `peak.csv`: its headlines (the best FP32 multiply-add rate, the copy
//! kernel's bandwidth, and dispatch latency) and the figures `check` compares.

use super::table::{copy_ceiling_row, fma_ceiling_row, PeakTable};
use crate::record::view::figure::{Checked, Figure};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<PeakTable>() else {
        return;
    };
    // The ceilings the kernels are shares of: the best iteration of the best kernel.
    if let Some((i, v)) = fma_ceiling_row(t) {
        out.push(Headline {
            bench: "peak",
            what: format!(
                "FP32 peak, multiply-add ({}, best iteration)",
                t[i].params.variant
            ),
            value: Some(v),
            unit: "GFLOP/s",
            text: format!("{v:.1} GFLOP/s"),
            source: source("peak.csv", i),
        });
    }
    if let Some((i, v)) = copy_ceiling_row(t) {
        out.push(Headline {
            bench: "peak",
            what: format!(
                "Device copy bandwidth (WGSL kernel {}, read + written, best iteration)",
                t[i].params.variant
            ),
            value: Some(v),
            unit: "GB/s",
            text: format!("{v:.2} GB/s"),
            source: source("peak.csv", i),
        });
    }
    let latency = t
        .iter()
        .enumerate()
        .find(|(_, r)| r.params.metric == "dispatch" && r.params.variant == "latency");
    if let Some((i, r)) = latency {
        let v = r.stats().p50_us;
        out.push(Headline {
            bench: "peak",
            what: "Dispatch latency, empty kernel (p50, submit to done)".to_string(),
            value: Some(v),
            unit: "µs",
            text: format!("{v:.1} µs"),
            source: source("peak.csv", i),
        });
    }
}

impl Checked for PeakTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        // Dispatch latency and rate, and the timestamp tick, have no rate: times.
        Some(Figure::rate_or_time(
            line.figures.gflops,
            line.figures.gbps,
            line.stats(),
        ))
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}
