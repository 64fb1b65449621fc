//! What readers take from `d2h.csv`: its headlines (bandwidth at the largest size swept, the
//! GPU copy and the mapped transfer end to end, each against host memcpy of that size;
//! latency: mapped end to end at the smallest), its charts and the figure `check` compares.

use std::collections::BTreeMap;

use anyhow::Result;

use super::table::D2hTable;
use crate::record::view::chart::{
    label, named, sorted, Band, Chart, LineChart, Named, Points, Series,
};
use crate::record::view::figure::{Better, Checked, Figure};
use crate::record::view::headline::{ratio, source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;
use crate::units::human_bytes;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<D2hTable>() else {
        return;
    };
    let find = |dir: &str, method: &str, part: &str, bytes: u64| {
        t.iter().enumerate().find(|(_, r)| {
            let p = &r.params;
            p.direction == dir && p.method == method && p.part == part && p.bytes == bytes
        })
    };
    let sizes = t
        .iter()
        .filter(|r| r.params.direction == "d2h")
        .map(|r| r.params.bytes);
    let (Some(largest), Some(smallest)) = (sizes.clone().max(), sizes.min()) else {
        return;
    };
    let memcpy =
        find("memcpy", "copy_from_slice", "end_to_end", largest).map(|(_, r)| r.figures.gbps);
    for (method, part, name) in [
        ("copy", "gpu_copy", "GPU copy"),
        ("mapped", "end_to_end", "mapped, end to end"),
    ] {
        if let Some((i, r)) = find("d2h", method, part, largest) {
            let g = r.figures.gbps;
            out.push(Headline {
                bench: "d2h",
                what: format!("D2H bandwidth, {name}, {}", human_bytes(largest)),
                value: Some(g),
                unit: "GB/s",
                text: format!("{g:.2} GB/s{}", ratio(g, memcpy, "host memcpy")),
                source: source("d2h.csv", i),
            });
        }
    }
    if let Some((i, r)) = find("d2h", "mapped", "end_to_end", smallest) {
        let us = r.stats().p50_us;
        out.push(Headline {
            bench: "d2h",
            what: format!("D2H latency, mapped, end to end, {}", human_bytes(smallest)),
            value: Some(us),
            unit: "µs",
            text: format!("{us:.1} µs (p50)"),
            source: source("d2h.csv", i),
        });
    }
}

/// Latency (p50, band to p99) and bandwidth against size, a line per direction, method and
/// part, over the runs.
pub fn d2h_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut lat = LineChart::new(
        format!("Transfer latency (p50, band to p99) — {title}"),
        "bytes",
        "end-to-end latency (µs)",
        (true, true),
    );
    let mut bw = LineChart::new(
        format!("Transfer bandwidth — {title}"),
        "bytes",
        "GB/s",
        (true, false),
    );
    for run in runs {
        let Some(t) = run.table::<D2hTable>() else {
            continue;
        };
        let mut lat_s: BTreeMap<String, (Points, Band)> = BTreeMap::new();
        let mut bw_s: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in t {
            let p = &r.params;
            let (dir, method, part) = (p.direction.as_str(), &p.method, p.part.as_str());
            let bytes = p.bytes as f64;
            let s = r.stats();
            if part == "end_to_end" && dir != "memcpy" {
                let e = lat_s.entry(format!("{dir} {method}")).or_default();
                e.0.push((bytes, s.p50_us));
                e.1.push((bytes, s.p50_us, s.p99_us));
            }
            let key = match (dir, part) {
                ("memcpy", _) => "host memcpy (ceiling)".to_string(),
                (_, "gpu_copy") => format!("{dir} GPU copy"),
                ("d2h", "end_to_end") => format!("{dir} {method} end to end"),
                _ => continue,
            };
            bw_s.entry(key).or_default().push((bytes, r.figures.gbps));
        }
        for (k, (pts, mut band)) in lat_s {
            band.sort_by(|a, b| a.0.total_cmp(&b.0));
            lat.series.push(Series {
                label: label(runs, run, &k),
                points: sorted(pts),
                band,
                reference: false,
                marked: Vec::new(),
            });
        }
        for (k, pts) in bw_s {
            bw.series.push(Series {
                reference: k.starts_with("host memcpy"),
                label: label(runs, run, &k),
                points: sorted(pts),
                band: Vec::new(),
                marked: Vec::new(),
            });
        }
    }
    let mut out = Vec::new();
    if !lat.series.is_empty() {
        out.push(named(
            "d2h_latency",
            "D2H/H2D end-to-end latency against size (log-log)",
            Chart::Lines(lat),
        ));
        out.push(named(
            "d2h_bandwidth",
            "D2H/H2D bandwidth against size, memcpy as the ceiling",
            Chart::Lines(bw),
        ));
    }
    Ok(out)
}

/// Transfers from 1 MiB up are judged by bandwidth, smaller ones by latency (as perftest and
/// nvbandwidth report them); mapping a buffer moves no bytes, so it is always a latency.
const BANDWIDTH_FROM_BYTES: u64 = 1 << 20;

impl Checked for D2hTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        Some(
            if line.params.bytes >= BANDWIDTH_FROM_BYTES
                && line.figures.gbps > 0.0
                && line.params.part != "map"
            {
                Figure::new("gbps", "GB/s", Better::Higher, line.figures.gbps, s)
            } else {
                Figure::time(s)
            },
        )
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}
