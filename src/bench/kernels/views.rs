//! What readers take from `kernels.csv`: its headlines (GEMM and layernorm at the largest size
//! swept, GPU timer, with the variant, its share of the run's peak (GEMM) or copy bandwidth
//! (layernorm), and the ratio to the same run's CPU baseline of that size), its charts
//! (throughput against size; the roofline under the run's `peak` ceilings) and the figure
//! `check` compares (GFLOP/s, else GB/s).

use std::collections::BTreeMap;

use anyhow::Result;

use super::table::{KernelFigures, KernelParams, KernelsTable};
use crate::bench::peak::PeakTable;
use crate::record::view::chart::{label, push_lines, sorted, LineChart, Named, Series};
use crate::record::view::figure::{Checked, Figure};
use crate::record::view::headline::{ratio, source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::Line;

/// Its headlines (the module's header says which).
pub fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<KernelsTable>() else {
        return;
    };
    let dims = |p: &KernelParams| {
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
        let figure = |f: &KernelFigures| match unit {
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

fn title(kernel: &str) -> &'static str {
    match kernel {
        "gemm" => "GEMM",
        _ => "Layernorm",
    }
}

/// GEMM and layernorm throughput against size, GPU and host rows, over the runs.
fn kernel_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
const LAYERNORM_FLOPS_PER_ELEMENT: f64 = 8.0;

/// The roofline: GFLOP/s against arithmetic intensity (flops per byte of compulsory traffic),
/// under the roof of the run's measured ceilings (copy bandwidth, then the FP32 peak); each
/// GPU kernel size is a point (GPU-timestamp rows).
fn roofline_chart(runs: &[Loaded], title: &str) -> Vec<Named> {
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

/// The kernels' charts and the roofline (kernels against the peak's ceilings).
pub fn kernel_and_roofline_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut out = kernel_charts(runs, title)?;
    out.extend(roofline_chart(runs, title));
    Ok(out)
}

/// A kernel that runs for less than this is dominated by dispatch and scheduling overhead,
/// which moves from run to run with the machine's state (on lavapipe, 17x33x65 GEMMs took 63
/// to 132 µs across five back-to-back runs); the `peak` bench measures dispatch itself.
const LAUNCH_BOUND_US: f64 = 100.0;

impl Checked for KernelsTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let s = line.stats();
        let mut fig = Figure::rate_or_time(line.figures.gflops, line.figures.gbps, s);
        fig.detail = line.params.variant.clone();
        if s.p50_us < LAUNCH_BOUND_US {
            fig.caveat = Some(format!(
                "too short to judge ({:.0} us < {LAUNCH_BOUND_US:.0} us): its rate is launch and timer \
                 overhead more than the kernel",
                s.p50_us
            ));
        }
        Some(fig)
    }
    fn timer(line: &Line<Self>) -> &str {
        &line.figures.timer
    }
}
