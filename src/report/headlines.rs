//! The headline figures of a run, chosen by rule so they are the figures a user would quote:
//! each names its size and part, and points at the CSV row it comes from.
//!
//! - Peak: the best FP32 multiply-add rate, the copy kernel's bandwidth, and dispatch latency.
//! - GEMM and layernorm: at the largest size swept (GPU timer), with the variant, its share of
//!   the run's peak (GEMM) or copy bandwidth (layernorm), and the ratio to the same run's CPU
//!   baseline of that size.
//! - D2H bandwidth: at the largest size swept, the GPU copy and the mapped transfer end to end,
//!   each against host memcpy of that size; D2H latency: mapped end to end at the smallest.
//! - HoL: the stall offload removed at each delay ("n/a" at zero, where there is none to remove).
//! - RDMA: WRITE latency (p50) at the smallest size; average bandwidth at 64 KiB and the largest.
//! - Simulator: adaptive against 1F1B at the most delayed case.
//! - Links: per transport, the median link's p50 latency at the smallest size and one-way
//!   bandwidth at the largest, and each flagged link at its worst slowdown.

use serde::Serialize;

use super::plot::Loaded;
use crate::bench::hol::HolTable;
use crate::bench::hol::Mode;
use crate::bench::kernels::KernelsTable;
use crate::bench::links::tables::LinksTable;
use crate::bench::peak::PeakTable;
use crate::bench::pipeline::table::PipelineTable;
use crate::bench::rdma::RdmaTable;
use crate::bench::sim::total_delay;
use crate::bench::sim::SimTable;
use crate::units::human_bytes;

/// One headline.
#[derive(Debug, Clone, Serialize)]
pub struct Headline {
    pub bench: &'static str,
    /// What it is, with the size and part: "D2H bandwidth, GPU copy, 256 MiB".
    pub what: String,
    /// The figure in `unit`; `None` where it does not apply ("n/a").
    pub value: Option<f64>,
    pub unit: &'static str,
    /// The figure as a person reads it, with its comparison.
    pub text: String,
    /// The row it comes from: "d2h.csv row 12" (rows count from 1 after the header).
    pub source: String,
}

fn source(file: &str, index: usize) -> String {
    format!("{file} row {}", index + 1)
}

fn ratio(value: f64, base: Option<f64>, what: &str) -> String {
    match base.filter(|b| *b > 0.0) {
        Some(b) => format!(", {:.3}x {what} ({b:.2})", value / b),
        None => String::new(),
    }
}

pub(crate) fn kernels(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<KernelsTable>() else {
        return;
    };
    let dims = |p: &crate::bench::kernels::KernelParams| {
        [p.size_m, p.size_n, p.size_k, p.rows, p.hidden]
            .iter()
            .flatten()
            .map(|&d| d as f64)
            .product::<f64>()
    };
    for (kernel, baseline, unit) in [
        ("gemm", "cpu_sgemm", "GFLOP/s"),
        ("layernorm", "memcpy", "GB/s"),
    ] {
        let figure = |f: &crate::bench::kernels::KernelFigures| match unit {
            "GFLOP/s" => f.gflops,
            _ => f.gbps,
        };
        let largest = t
            .iter()
            .enumerate()
            .filter(|(_, r)| r.params.kernel == kernel && r.figures.timer == "gpu")
            .filter(|(_, r)| figure(&r.figures).is_some())
            .max_by(|a, b| dims(&a.1.params).total_cmp(&dims(&b.1.params)));
        let Some((i, r)) = largest else { continue };
        let value = figure(&r.figures).unwrap_or(0.0);
        let base = t
            .iter()
            .filter(|b| b.params.kernel == baseline && dims(&b.params) == dims(&r.params))
            .find_map(|b| figure(&b.figures));
        let size = r.lead.case.trim_start_matches(kernel).trim();
        let against = if kernel == "gemm" {
            "the CPU SGEMM"
        } else {
            "host memcpy"
        };
        out.push(Headline {
            bench: "kernels",
            what: format!(
                "{} at the largest size, {size} ({})",
                title(kernel),
                r.params.variant
            ),
            value: Some(value),
            unit,
            text: format!(
                "{value:.2} {unit}{}{}",
                match (r.figures.pct_peak, r.figures.pct_bw) {
                    (Some(p), _) => format!(", {p:.0}% of the FP32 peak"),
                    (None, Some(p)) => format!(", {p:.0}% of the copy bandwidth"),
                    _ => String::new(),
                },
                ratio(value, base, against)
            ),
            source: source("kernels.csv", i),
        });
    }
}

pub(crate) fn peak(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<PeakTable>() else {
        return;
    };
    // The ceilings the kernels are shares of: the best iteration of the best kernel.
    if let Some((i, v)) = crate::bench::peak::fma_ceiling_row(t) {
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
    if let Some((i, v)) = crate::bench::peak::copy_ceiling_row(t) {
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

fn title(kernel: &str) -> &'static str {
    match kernel {
        "gemm" => "GEMM",
        _ => "Layernorm",
    }
}

pub(crate) fn d2h(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<crate::bench::d2h::D2hTable>() else {
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

pub(crate) fn hol(run: &Loaded, out: &mut Vec<Headline>) {
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
        let shape = match shapes.len() > 1 {
            true => format!(", every {} ops, {}", p.every, human_bytes(p.bytes)),
            false => String::new(),
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

pub(crate) fn rdma(run: &Loaded, out: &mut Vec<Headline>) {
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

pub(crate) fn sim(run: &Loaded, out: &mut Vec<Headline>) {
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

pub(crate) fn links(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<LinksTable>() else {
        return;
    };
    let t = &crate::bench::links::tables::matrix_rows(t);
    let mut transports: Vec<&str> = t.iter().map(|l| l.params.transport.as_str()).collect();
    transports.sort();
    transports.dedup();
    for tr in transports {
        // The median link (the lower median, the flagging baseline) at one size and direction.
        let median = |dir: &str,
                      pick: fn(&[u64]) -> Option<u64>,
                      figure: &dyn Fn(
            &crate::record::Line<crate::bench::links::tables::LinksTable>,
        ) -> f64| {
            let mut sizes: Vec<u64> = t
                .iter()
                .filter(|l| l.params.transport == tr && l.params.direction == dir)
                .map(|l| l.params.bytes)
                .collect();
            sizes.sort();
            let bytes = pick(&sizes)?;
            let mut rows: Vec<(usize, f64)> = t
                .iter()
                .enumerate()
                .filter(|(_, l)| {
                    l.params.transport == tr && l.params.direction == dir && l.params.bytes == bytes
                })
                .map(|(i, l)| (i, figure(l)))
                .collect();
            rows.sort_by(|a, b| a.1.total_cmp(&b.1));
            let (i, v) = rows[(rows.len() - 1) / 2];
            Some((i, bytes, v, rows.len()))
        };
        if let Some((i, bytes, us, n)) =
            median("pingpong", |s| s.first().copied(), &|l| l.stats().p50_us)
        {
            out.push(Headline {
                bench: "links",
                what: format!(
                    "{tr} link latency, {}, median of {n} links",
                    human_bytes(bytes)
                ),
                value: Some(us),
                unit: "µs",
                text: format!("{us:.1} µs (p50, round trip / 2)"),
                source: source("links.csv", i),
            });
        }
        if let Some((i, bytes, g, n)) = median("oneway", |s| s.last().copied(), &|l| {
            -l.figures.gbps.unwrap_or(0.0)
        }) {
            let g = -g;
            out.push(Headline {
                bench: "links",
                what: format!(
                    "{tr} link bandwidth, {}, median of {n} directions",
                    human_bytes(bytes)
                ),
                value: Some(g),
                unit: "GB/s",
                text: format!("{g:.3} GB/s (one way)"),
                source: source("links.csv", i),
            });
        }
    }
    // Each flagged link once, at its worst row.
    for ((a, b), i) in crate::bench::links::tables::worst_flagged(t) {
        let s = t[i].figures.slowdown.unwrap_or(0.0);
        let l = &t[i];
        out.push(Headline {
            bench: "links",
            what: format!("FLAGGED link r{a}-r{b}"),
            value: Some(s),
            unit: "x",
            text: format!(
                "{s:.2}x the links' baseline ({} {} {}, {} -> {})",
                l.params.transport,
                human_bytes(l.params.bytes),
                l.params.direction,
                l.params.src_host,
                l.params.dst_host
            ),
            source: source("links.csv", i),
        });
    }
}

/// Each pipeline case: measured iteration against the prediction.
pub(crate) fn pipeline(run: &Loaded, out: &mut Vec<Headline>) {
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

/// The fleet gate: how many nodes passed, then each node that did not, with its first reason.
pub(crate) fn fleet(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<crate::bench::fleet::table::FleetTable>() else {
        return;
    };
    use crate::verdict::Verdict;
    use std::collections::BTreeMap;
    // rank -> (host, verdict, the first row of that verdict)
    let mut nodes: BTreeMap<u32, (String, Verdict, usize)> = BTreeMap::new();
    for (i, r) in t.iter().enumerate() {
        let e = nodes
            .entry(r.params.rank)
            .or_insert((r.params.host.clone(), Verdict::Skip, i));
        let v = e.1.worse(r.figures.verdict);
        if v != e.1 {
            (e.1, e.2) = (v, i);
        }
    }
    let passed = nodes.values().filter(|n| n.1 == Verdict::Pass).count();
    out.push(Headline {
        bench: "fleet",
        what: "nodes that passed the gate".into(),
        value: Some(passed as f64),
        unit: "nodes",
        text: format!("{passed} of {} ranks PASS", nodes.len()),
        source: "fleet.csv".into(),
    });
    for (rank, (host, verdict, i)) in nodes.into_iter().filter(|n| n.1 .1 != Verdict::Pass) {
        let r = &t[i];
        out.push(Headline {
            bench: "fleet",
            what: format!("{verdict} node r{rank} {host}"),
            value: r.figures.value,
            unit: "",
            text: format!(
                "{} {}: {}",
                r.params.test, r.params.figure, r.figures.reason
            ),
            source: source("fleet.csv", i),
        });
    }
}
