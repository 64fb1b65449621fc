//! Charts of one node's benches: kernels, roofline, D2H, HoL, RDMA.

use std::collections::BTreeMap;

use anyhow::Result;

use super::charts::{Chart, LineChart, Series, StackedBars};
use super::parts::{label, named, push_lines, sorted, Band, Loaded, Named, Points};
use crate::bench::hol::HolTable;
use crate::bench::hol::Mode;
use crate::bench::kernels::KernelsTable;
use crate::bench::peak::PeakTable;
use crate::bench::rdma::RdmaTable;

pub(crate) fn kernel_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut gemm = LineChart::new(
        format!("GEMM throughput — {title}"),
        "size: cube root of M·N·K",
        "GFLOP/s",
        (true, true),
    );
    let mut ln = LineChart::new(
        format!("Layernorm throughput — {title}"),
        "elements (rows × hidden)",
        "GB/s (read + written)",
        (true, true),
    );
    for run in runs {
        let Some(t) = run.table::<KernelsTable>() else {
            continue;
        };
        // One series per kernel; a size run by another variant than the kernel's usual one
        // (a fallback for a shape the winner cannot run) is a marked point of that series.
        let mut by: BTreeMap<String, Vec<(f64, f64, String)>> = BTreeMap::new();
        for r in t {
            let (p, f) = (&r.params, &r.figures);
            let kernel = p.kernel.clone();
            // GPU kernels: the timestamp rows; the CPU rows only have the host clock.
            if (kernel == "gemm" || kernel == "layernorm") && f.timer != "gpu" {
                continue;
            }
            let dims =
                |d: &[Option<u32>]| d.iter().map(|x| x.map(f64::from)).product::<Option<f64>>();
            let point = match kernel.as_str() {
                "gemm" | "cpu_sgemm" => dims(&[p.size_m, p.size_n, p.size_k])
                    .map(f64::cbrt)
                    .zip(f.gflops),
                "layernorm" | "memcpy" => dims(&[p.rows, p.hidden]).zip(f.gbps),
                _ => continue,
            };
            let Some((x, y)) = point else { continue };
            by.entry(kernel)
                .or_default()
                .push((x, y, p.variant.clone()));
        }
        for (kernel, pts) in by {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, _, v) in &pts {
                *counts.entry(v.as_str()).or_default() += 1;
            }
            let usual = counts
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(v, _)| v.to_string())
                .unwrap_or_default();
            let what = match kernel.as_str() {
                "gemm" => format!("GPU GEMM ({usual})"),
                "cpu_sgemm" => format!("CPU SGEMM ({usual})"),
                "layernorm" => format!("GPU layernorm ({usual})"),
                _ => "host memcpy".to_string(),
            };
            let marked = pts
                .iter()
                .filter(|(_, _, v)| *v != usual)
                .map(|(x, y, v)| (*x, *y, format!(" {v} (fallback)")))
                .collect();
            let s = Series {
                label: label(runs, run, &what),
                points: sorted(pts.iter().map(|(x, y, _)| (*x, *y)).collect()),
                marked,
                ..Default::default()
            };
            if kernel == "gemm" || kernel == "cpu_sgemm" {
                gemm.series.push(s);
            } else {
                ln.series.push(s);
            }
        }
    }
    let mut out = Vec::new();
    push_lines(
        &mut out,
        "kernels_gemm",
        "GEMM GFLOP/s against size, GPU and CPU baseline",
        gemm,
    );
    push_lines(
        &mut out,
        "kernels_layernorm",
        "Layernorm GB/s against size, GPU and host memcpy",
        ln,
    );
    Ok(out)
}

/// Flops per layernorm element: mean (1), variance (3), normalize (2), scale and shift (2).
pub(super) const LAYERNORM_FLOPS_PER_ELEMENT: f64 = 8.0;

/// The roofline: GFLOP/s against arithmetic intensity (flops per byte of compulsory traffic),
/// under the roof of the run's measured ceilings (copy bandwidth, then the FP32 peak); each
/// GPU kernel size is a point (GPU-timestamp rows).
pub(crate) fn roofline_chart(runs: &[Loaded], title: &str) -> Vec<Named> {
    let mut chart = LineChart::new(
        format!("Roofline — {title}"),
        "arithmetic intensity (flop per byte)",
        "GFLOP/s",
        (true, true),
    );
    for run in runs {
        let (Some(peak), Some(kernels)) = (run.table::<PeakTable>(), run.table::<KernelsTable>())
        else {
            continue;
        };
        let Some(c) = crate::bench::peak::Ceilings::from_rows(peak) else {
            continue;
        };
        let mut gemm = Vec::new();
        let mut ln = Vec::new();
        for r in kernels.iter().filter(|r| r.figures.timer == "gpu") {
            let p = &r.params;
            match (
                p.kernel.as_str(),
                p.size_m,
                p.size_n,
                p.size_k,
                p.rows,
                p.hidden,
            ) {
                ("gemm", Some(m), Some(n), Some(k), _, _) => {
                    let (m, n, k) = (m as f64, n as f64, k as f64);
                    let bytes = 4.0 * (m * k + k * n + m * n);
                    if let Some(g) = r.figures.gflops {
                        gemm.push((2.0 * m * n * k / bytes, g));
                    }
                }
                ("layernorm", _, _, _, Some(rows), Some(hidden)) => {
                    let size = crate::gpu::kernels::LayernormSize { rows, hidden };
                    let flops = LAYERNORM_FLOPS_PER_ELEMENT * rows as f64 * hidden as f64;
                    if let Some(gbps) = r.figures.gbps {
                        let ai = flops / size.bytes_moved();
                        ln.push((ai, gbps * ai));
                    }
                }
                _ => {}
            }
        }
        let all: Vec<f64> = gemm.iter().chain(&ln).map(|p| p.0).collect();
        if all.is_empty() {
            continue;
        }
        let ridge = c.fma_gflops / c.copy_gbps;
        let lo = all.iter().copied().fold(ridge, f64::min) / 2.0;
        let hi = all.iter().copied().fold(ridge, f64::max) * 2.0;
        chart.series.push(Series {
            label: label(
                runs,
                run,
                &format!(
                    "roof: copy {:.1} GB/s, FP32 peak {:.1} GFLOP/s",
                    c.copy_gbps, c.fma_gflops
                ),
            ),
            points: vec![
                (lo, c.copy_gbps * lo),
                (ridge, c.fma_gflops),
                (hi, c.fma_gflops),
            ],
            reference: true,
            ..Default::default()
        });
        for (what, pts) in [("GPU GEMM", gemm), ("GPU layernorm", ln)] {
            if !pts.is_empty() {
                chart.series.push(Series {
                    label: label(runs, run, what),
                    points: sorted(pts),
                    ..Default::default()
                });
            }
        }
    }
    let mut out = Vec::new();
    push_lines(
        &mut out,
        "roofline",
        "Roofline: each GPU kernel size against the run's measured FP32 peak and copy bandwidth",
        chart,
    );
    out
}

pub(crate) fn d2h_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
        let Some(t) = run.table::<crate::bench::d2h::D2hTable>() else {
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

pub(super) fn delay_of(s: &str) -> f64 {
    s.parse().unwrap_or(0.0)
}

pub(crate) fn hol_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
    let mut split = StackedBars {
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
    };
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
    Ok(out)
}

pub(crate) fn rdma_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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

/// The kernels' charts and the roofline (kernels against the peak's ceilings).
pub(crate) fn kernel_and_roofline_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut out = kernel_charts(runs, title)?;
    out.extend(roofline_chart(runs, title));
    Ok(out)
}
