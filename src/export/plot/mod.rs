//! `morphbench plot`: turns whichever CSVs a run folder holds into figures in `RUN/plots/`,
//! one series per run with `--compare`. Malformed CSVs are errors naming file and column;
//! absent ones are skipped and said so.

pub mod charts;
pub mod data;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use charts::{render, Chart, Format, Gantt, LineChart, Series, StackedBars};
use data::RunLabel;

use crate::bench::d2h::D2hTable;
use crate::bench::hol::{HolTable, Mode};
use crate::bench::kernels::KernelsTable;
use crate::bench::rdma::RdmaTable;
use crate::bench::sim::{total_delay, SimTable, TimelineTable};
use crate::export::{read_optional, DataError, Line};

/// The tables of one run folder (each `None` when the bench did not run).
pub struct Loaded {
    pub label: RunLabel,
    pub kernels: Option<Vec<Line<KernelsTable>>>,
    pub d2h: Option<Vec<Line<D2hTable>>>,
    pub hol: Option<Vec<Line<HolTable>>>,
    pub rdma: Option<Vec<Line<RdmaTable>>>,
    pub sim: Option<Vec<Line<SimTable>>>,
    pub timeline: Option<Vec<Line<TimelineTable>>>,
    pub peak: Option<Vec<Line<crate::bench::peak::PeakTable>>>,
    pub links: Option<Vec<Line<crate::bench::links::tables::LinksTable>>>,
    pub pipeline: Option<Vec<Line<crate::bench::pipeline::table::PipelineTable>>>,
    pub pipeline_timeline: Option<Vec<Line<crate::bench::pipeline::table::TimelineTable>>>,
    /// The verdicts of `morphbench check` on this run, when it was checked.
    pub check: Option<Vec<Line<crate::check::CheckTable>>>,
}

impl Loaded {
    pub fn load(dir: &Path) -> Result<Loaded, DataError> {
        Ok(Loaded {
            label: RunLabel::of(dir),
            kernels: read_optional(dir)?,
            d2h: read_optional(dir)?,
            hol: read_optional(dir)?,
            rdma: read_optional(dir)?,
            sim: read_optional(dir)?,
            timeline: read_optional(dir)?,
            peak: read_optional(dir)?,
            links: read_optional(dir)?,
            pipeline: read_optional(dir)?,
            pipeline_timeline: read_optional(dir)?,
            check: read_optional(dir)?,
        })
    }
}

/// A written figure and what it shows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub name: String,
    pub about: String,
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PlotOutcome {
    pub figures: Vec<Figure>,
    pub skipped: Vec<String>,
}

/// A figure to draw: file name, what it shows, the chart.
type Named = (String, String, Chart);

fn named(name: &str, about: &str, chart: Chart) -> Named {
    (name.to_string(), about.to_string(), chart)
}

/// Adds a line chart to `out` when it has any series.
fn push_lines(out: &mut Vec<Named>, name: &str, about: &str, chart: LineChart) {
    if !chart.series.is_empty() {
        out.push(named(name, about, Chart::Lines(chart)));
    }
}

type Points = Vec<(f64, f64)>;
/// (stage, start, end, kind, microbatch) of one simulated op.
type TimelineOp = (usize, f64, f64, usize, usize);
type Band = Vec<(f64, f64, f64)>;

fn label(runs: &[Loaded], run: &Loaded, what: &str) -> String {
    if runs.len() > 1 {
        format!("{} — {what}", run.label.short())
    } else {
        what.to_string()
    }
}

fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

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
        let Some(t) = &run.kernels else { continue };
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
        let (Some(peak), Some(kernels)) = (&run.peak, &run.kernels) else {
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

fn d2h_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
        let Some(t) = &run.d2h else { continue };
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

fn delay_of(s: &str) -> f64 {
    s.parse().unwrap_or(0.0)
}

fn hol_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
        let Some(t) = &run.hol else { continue };
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

fn rdma_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
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
        let Some(t) = &run.rdma else { continue };
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

fn sim_charts(runs: &[Loaded], title: &str) -> Result<Vec<Named>> {
    let mut iter = LineChart::new(
        format!("Iteration time against straggler delay — {title}"),
        "extra link delay (ms)",
        "iteration time (ms)",
        (false, false),
    );
    let mut out = Vec::new();
    for run in runs {
        let Some(t) = &run.sim else { continue };
        let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in t {
            by.entry(r.params.schedule.clone())
                .or_default()
                .push((total_delay(&r.params.slow), r.figures.iteration_ms));
        }
        for (sched, pts) in by {
            if pts.len() > 1 {
                iter.series.push(Series {
                    label: label(runs, run, &sched),
                    points: sorted(pts),
                    ..Default::default()
                });
            }
        }
    }
    push_lines(
        &mut out,
        "sim_iteration",
        "Simulated iteration time against delay, per schedule",
        iter,
    );
    // Gantt charts of the first run, for its most delayed case.
    if let Some(t) = runs.first().and_then(|r| r.timeline.as_ref()) {
        let mut cases: BTreeMap<String, BTreeMap<String, Vec<TimelineOp>>> = BTreeMap::new();
        let kinds = ["F", "B", "W"];
        for r in t {
            let p = &r.params;
            let kind = kinds.iter().position(|k| *k == p.kind).unwrap_or(0);
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
        let delayed = runs[0].sim.as_ref().and_then(|s| {
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
                .sim
                .as_ref()
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
                let mut rows: Vec<(String, Vec<charts::Span>)> = (0..stages)
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
    Ok(out)
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

/// Draws every figure the run (and the compared runs) has data for into `RUN/plots/`.
/// One Gantt chart per pipeline case: the measured stages above, the simulator's prediction
/// for the same orders on the measured times below (copy out and inline sends shaded).
fn pipeline_charts(run: &Loaded) -> Vec<Named> {
    let Some(rows) = &run.pipeline_timeline else {
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
                let spans: Vec<charts::Span> = mine
                    .iter()
                    .filter(|l| l.params.lane == lane && l.params.stage == s)
                    .flat_map(|l| {
                        let p = &l.params;
                        let kind = match p.kind.as_str() {
                            "F" => 0,
                            "B" => 1,
                            _ => 2,
                        };
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

/// Rank-by-rank heatmaps of a links run (its own run only: matrices do not overlay): per
/// transport, p50 latency at the smallest and the largest size, one-way GB/s at the largest.
fn links_charts(run: &Loaded) -> Vec<Named> {
    use crate::bench::links::tables::LinksTable;
    let Some(rows) = &run.links else {
        return Vec::new();
    };
    let n = rows
        .iter()
        .map(|l| l.params.src_rank.max(l.params.dst_rank) as usize + 1)
        .max()
        .unwrap_or(0);
    if !(2..=256).contains(&n) {
        return Vec::new();
    }
    let mut names = vec![String::new(); n];
    for l in rows {
        names[l.params.src_rank as usize] = format!("r{} {}", l.params.src_rank, l.params.src_host);
        names[l.params.dst_rank as usize] = format!("r{} {}", l.params.dst_rank, l.params.dst_host);
    }
    let mut transports: Vec<&str> = rows.iter().map(|l| l.params.transport.as_str()).collect();
    transports.sort();
    transports.dedup();
    let mut out = Vec::new();
    for t in transports {
        let of = |dir: &str, bytes: u64| -> Vec<&Line<LinksTable>> {
            rows.iter()
                .filter(|l| {
                    l.params.transport == t && l.params.direction == dir && l.params.bytes == bytes
                })
                .collect()
        };
        let sizes = |dir: &str| -> Vec<u64> {
            let mut v: Vec<u64> = rows
                .iter()
                .filter(|l| l.params.transport == t && l.params.direction == dir)
                .map(|l| l.params.bytes)
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let flag = |l: &Line<LinksTable>| l.figures.flagged == Some(true);
        let lat_sizes = sizes("pingpong");
        let mut picks: Vec<u64> = lat_sizes
            .first()
            .into_iter()
            .chain(lat_sizes.last())
            .copied()
            .collect();
        picks.dedup();
        for bytes in picks {
            // A ping-pong is one figure per pair: both cells of the pair show it.
            let cells: Vec<(usize, usize, f64, bool)> = of("pingpong", bytes)
                .iter()
                .flat_map(|l| {
                    let (a, b) = (l.params.src_rank as usize, l.params.dst_rank as usize);
                    let v = l.stats().p50_us;
                    [(a, b, v, flag(l)), (b, a, v, flag(l))]
                })
                .collect();
            let size = crate::units::human_bytes(bytes);
            out.push(named(
                &format!("links_latency_{t}_{bytes}"),
                &format!("{t} latency between every pair of ranks at {size}: p50 of round trip / 2, flagged links outlined"),
                Chart::Heatmap(charts::Heatmap {
                    title: format!("{t} latency at {size}, p50 µs — {}", run.label.short()),
                    value_label: "p50 µs".into(),
                    row_label: "rank".into(),
                    col_label: "rank".into(),
                    names: names.clone(),
                    cells,
                    higher_is_better: false,
                }),
            ));
        }
        if let Some(&bytes) = sizes("oneway").last() {
            let cells = of("oneway", bytes)
                .iter()
                .filter_map(|l| {
                    l.figures.gbps.map(|g| {
                        (
                            l.params.src_rank as usize,
                            l.params.dst_rank as usize,
                            g,
                            flag(l),
                        )
                    })
                })
                .collect();
            let size = crate::units::human_bytes(bytes);
            out.push(named(
                &format!("links_bandwidth_{t}_{bytes}"),
                &format!("{t} bandwidth from each rank (row) to each other (column) at {size}, GB/s; flagged links outlined"),
                Chart::Heatmap(charts::Heatmap {
                    title: format!("{t} bandwidth at {size}, GB/s (row sends to column) — {}", run.label.short()),
                    value_label: "GB/s".into(),
                    row_label: "from rank".into(),
                    col_label: "to rank".into(),
                    names: names.clone(),
                    cells,
                    higher_is_better: true,
                }),
            ));
        }
    }
    out
}

pub fn plot_run(dir: &Path, format: Format, compare: &[PathBuf]) -> Result<PlotOutcome> {
    let mut runs = vec![Loaded::load(dir)?];
    for other in compare {
        runs.push(Loaded::load(other)?);
    }
    let title = if runs.len() > 1 {
        format!("{} runs", runs.len())
    } else {
        runs[0].label.short()
    };
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)
        .with_context(|| format!("cannot create {}", plots.display()))?;
    let mut outcome = PlotOutcome::default();
    let present = |r: &Loaded, file: &str| match file {
        "kernels.csv" => r.kernels.is_some(),
        "d2h.csv" => r.d2h.is_some(),
        "hol.csv" => r.hol.is_some(),
        "rdma.csv" => r.rdma.is_some(),
        "peak.csv" => r.peak.is_some(),
        _ => r.sim.is_some(),
    };
    // A cluster run (links) holds none of the single-node tables: nothing to say is missing.
    let cluster_only = runs
        .iter()
        .all(|r| r.links.is_some() || r.pipeline.is_some());
    for file in [
        "peak.csv",
        "kernels.csv",
        "d2h.csv",
        "hol.csv",
        "rdma.csv",
        "sim.csv",
    ] {
        if !cluster_only && !runs.iter().any(|r| present(r, file)) {
            outcome.skipped.push(format!("{file}: not in this run"));
        }
    }
    let mut charts = Vec::new();
    charts.extend(kernel_charts(&runs, &title)?);
    charts.extend(roofline_chart(&runs, &title));
    charts.extend(d2h_charts(&runs, &title)?);
    charts.extend(hol_charts(&runs, &title)?);
    charts.extend(rdma_charts(&runs, &title)?);
    charts.extend(sim_charts(&runs, &title)?);
    charts.extend(links_charts(&runs[0]));
    charts.extend(pipeline_charts(&runs[0]));
    for (name, about, chart) in charts {
        let n = chart.elements();
        if n > charts::MAX_ELEMENTS {
            outcome.skipped.push(format!(
                "{name}: {n} elements, over the cap of {} a figure draws",
                charts::MAX_ELEMENTS
            ));
            continue;
        }
        let files = render(&chart, &plots, &name, format)?;
        outcome.figures.push(Figure { name, about, files });
    }
    Ok(outcome)
}
