//! What readers take from `rdma.csv`: its headlines (WRITE latency, p50, at the smallest size;
//! average bandwidth at 64 KiB and the largest), its charts and the figure `check` compares.

use anyhow::Result;

use super::table::RdmaTable;
use crate::record::view::chart::{
    label, push_lines, sorted, Band, LineChart, Named, Points, Series,
};
use crate::record::view::figure::{Better, Checked, Figure};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::units::human_bytes;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<RdmaTable>() else {
        return;
    };
    let lat = t
        .iter()
        .enumerate()
        .filter(|(_, r)| r.params.test == "lat")
        .min_by_key(|(_, r)| r.params.bytes);
    if let Some((i, r)) = lat {
        let us = r.stats().p50_us;
        out.push(Headline {
            bench: "rdma",
            what: format!("RDMA WRITE latency, {}", human_bytes(r.params.bytes)),
            value: Some(us),
            unit: "µs",
            text: format!("{us:.2} µs (p50, one way)"),
            source: source("rdma.csv", i),
        });
    }
    let bw: Vec<_> = t
        .iter()
        .enumerate()
        .filter(|(_, r)| r.params.test == "bw" && r.figures.gbps.is_some())
        .collect();
    let largest = bw.iter().map(|(_, r)| r.params.bytes).max();
    for (i, r) in &bw {
        if r.params.bytes == 65536 || Some(r.params.bytes) == largest {
            let g = r.figures.gbps.unwrap_or(0.0);
            out.push(Headline {
                bench: "rdma",
                what: format!("RDMA WRITE bandwidth, {}", human_bytes(r.params.bytes)),
                value: Some(g),
                unit: "GB/s",
                text: format!("{g:.3} GB/s (average)"),
                source: source("rdma.csv", *i),
            });
        }
    }
}

/// Latency and bandwidth against message size, over the runs.
pub fn rdma_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut lat = LineChart::new(
        format!("RDMA latency — {title}"),
        "bytes",
        "latency (µs)",
        (true, true),
    );
    let mut bw = LineChart::new(
        format!("RDMA bandwidth — {title}"),
        "bytes",
        "GB/s",
        (true, true),
    );
    for run in runs {
        let Some(t) = run.table::<RdmaTable>() else {
            continue;
        };
        let (mut p50, mut band): (Points, Band) = Default::default();
        for r in t.iter().filter(|r| r.params.test == "lat") {
            let (b, s) = (r.params.bytes as f64, r.stats());
            p50.push((b, s.p50_us));
            band.push((b, s.p50_us, s.p99_us));
        }
        if !p50.is_empty() {
            lat.series.push(Series {
                label: label(runs, run, "RDMA WRITE latency"),
                points: sorted(p50),
                band,
                reference: false,
                marked: Vec::new(),
            });
        }
        let avg: Points = t
            .iter()
            .filter(|r| r.params.test == "bw")
            .filter_map(|r| Some((r.params.bytes as f64, r.figures.gbps?)))
            .collect();
        if !avg.is_empty() {
            bw.series.push(Series {
                label: label(runs, run, "RDMA WRITE average bandwidth"),
                points: sorted(avg),
                band: Vec::new(),
                reference: false,
                marked: Vec::new(),
            });
        }
    }
    let mut out = Vec::new();
    push_lines(
        &mut out,
        "rdma_latency",
        "RDMA latency percentiles against size",
        lat,
    );
    push_lines(
        &mut out,
        "rdma_bandwidth",
        "RDMA average bandwidth against size",
        bw,
    );
    Ok(out)
}

impl Checked for RdmaTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        Some(match line.figures.gbps {
            Some(x) if line.params.test == "bw" => {
                Figure::new("gbps", "GB/s", Better::Higher, x, s)
            }
            _ => Figure::time(s),
        })
    }
}
