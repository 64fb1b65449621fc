//! The device check's ratios: each figure against its ceiling or reference, measured side by
//! side on the same machine (GEMM and layernorm against the measured ceilings and the CPU
//! baseline, D2H and H2D against memcpy, the HoL stall the offload path removes). Read from
//! the run folders of `peak`, `kernels`, `d2h` and `hol` (`scripts/device-check`).

use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::bench::d2h::D2hTable;
use crate::bench::hol::{HolTable, Mode};
use crate::bench::kernels::KernelsTable;
use crate::bench::peak::PeakTable;
use crate::record::{read_optional, Line};

/// One ratio: ours over the reference, both measured in these runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    pub ratio: &'static str,
    pub value: f64,
    pub ours: f64,
    pub reference: f64,
    pub unit: &'static str,
    /// The row the figure came from (a case of the run's tables).
    pub case: String,
}

/// The tables a device check reads, each from its run (any may be missing).
#[derive(Default)]
pub struct Runs {
    pub peak: Vec<Line<PeakTable>>,
    pub kernels: Vec<Line<KernelsTable>>,
    pub d2h: Vec<Line<D2hTable>>,
    pub hol: Vec<Line<HolTable>>,
}

impl Runs {
    /// Reads each table from whichever of `dirs` holds it (the last one that does).
    pub fn read(dirs: &[&Path]) -> Result<Runs> {
        let mut runs = Runs::default();
        for dir in dirs {
            runs.peak = read_optional::<PeakTable>(dir)?.unwrap_or(runs.peak);
            runs.kernels = read_optional::<KernelsTable>(dir)?.unwrap_or(runs.kernels);
            runs.d2h = read_optional::<D2hTable>(dir)?.unwrap_or(runs.d2h);
            runs.hol = read_optional::<HolTable>(dir)?.unwrap_or(runs.hol);
        }
        Ok(runs)
    }
}

/// The ceiling of a peak metric: the best iteration's figure (the median's without it).
fn ceiling(runs: &Runs, metric: &str, variant_part: &str) -> Option<f64> {
    runs.peak
        .iter()
        .filter(|l| l.params.metric == metric && l.params.variant.contains(variant_part))
        .filter_map(|l| match metric {
            "fma" => l.figures.best_gflops.or(l.figures.gflops),
            _ => l.figures.best_gbps.or(l.figures.gbps),
        })
        .reduce(f64::max)
}

/// The GPU-timed row of `kernel` with the highest figure, and that figure.
fn best_kernel<'a>(runs: &'a Runs, kernel: &str) -> Option<(&'a Line<KernelsTable>, f64)> {
    runs.kernels
        .iter()
        .filter(|l| l.params.kernel == kernel && l.figures.timer == "gpu")
        .filter_map(|l| Some((l, l.figures.gflops.or(l.figures.gbps)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The CPU baseline row of `kernel` at the same size as `like`.
fn baseline_at(runs: &Runs, kernel: &str, like: &Line<KernelsTable>) -> Option<f64> {
    let p = &like.params;
    runs.kernels
        .iter()
        .filter(|l| l.params.kernel == kernel)
        .filter(|l| {
            let q = &l.params;
            (q.size_m, q.size_n, q.size_k, q.rows, q.hidden)
                == (p.size_m, p.size_n, p.size_k, p.rows, p.hidden)
        })
        .filter_map(|l| l.figures.gflops.or(l.figures.gbps))
        .reduce(f64::max)
}

/// A transfer direction's end-to-end figure at its largest size, against memcpy there.
fn transfer_vs_memcpy(runs: &Runs, direction: &str) -> Option<(f64, f64, String)> {
    let rows = || runs.d2h.iter().filter(|l| l.params.direction == direction);
    let end_to_end = rows().any(|l| l.params.part == "end_to_end");
    let wanted = |l: &&Line<D2hTable>| !end_to_end || l.params.part == "end_to_end";
    let bytes = rows().filter(wanted).map(|l| l.params.bytes).max()?;
    let at = |l: &&Line<D2hTable>| l.params.bytes == bytes;
    let ours = rows()
        .filter(wanted)
        .filter(at)
        .max_by(|a, b| a.figures.gbps.total_cmp(&b.figures.gbps))?;
    let memcpy = runs
        .d2h
        .iter()
        .filter(|l| l.params.direction == "memcpy" && l.params.bytes == bytes)
        .map(|l| l.figures.gbps)
        .reduce(f64::max)?;
    Some((ours.figures.gbps, memcpy, ours.lead.case.clone()))
}

/// Every ratio the runs hold the figures for, in the table's order.
pub fn ratios(runs: &Runs) -> Vec<Ratio> {
    let mut out = Vec::new();
    let mut push = |ratio, ours: f64, reference: f64, unit, case: &str| {
        if ours.is_finite() && reference.is_finite() && reference > 0.0 {
            out.push(Ratio {
                ratio,
                value: ours / reference,
                ours,
                reference,
                unit,
                case: case.to_string(),
            });
        }
    };
    if let Some((row, gflops)) = best_kernel(runs, "gemm") {
        if let Some(fma) = ceiling(runs, "fma", "") {
            push("gemm / fma ceiling", gflops, fma, "GFLOP/s", &row.lead.case);
        }
        if let Some(cpu) = baseline_at(runs, "cpu_sgemm", row) {
            push("gemm / cpu sgemm", gflops, cpu, "GFLOP/s", &row.lead.case);
        }
    }
    if let Some((row, gbps)) = best_kernel(runs, "layernorm") {
        if let Some(copy) = ceiling(runs, "bandwidth", "copy") {
            push(
                "layernorm / copy ceiling",
                gbps,
                copy,
                "GB/s",
                &row.lead.case,
            );
        }
        if let Some(memcpy) = baseline_at(runs, "memcpy", row) {
            push(
                "layernorm / cpu memcpy",
                gbps,
                memcpy,
                "GB/s",
                &row.lead.case,
            );
        }
    }
    for (direction, name) in [("d2h", "d2h / memcpy"), ("h2d", "h2d / memcpy")] {
        if let Some((ours, memcpy, case)) = transfer_vs_memcpy(runs, direction) {
            push(name, ours, memcpy, "GB/s", &case);
        }
    }
    // The HoL stall removed: 1 - offload stall / inline stall, as the ratio offload over
    // inline (0 is every stall removed), at the point where inline stalls most.
    let inline = runs
        .hol
        .iter()
        .filter(|l| l.params.mode == Mode::Inline)
        .max_by(|a, b| a.figures.stall_mean_us.total_cmp(&b.figures.stall_mean_us));
    if let Some(inline) = inline {
        let same = |l: &&Line<HolTable>| {
            let (p, q) = (&l.params, &inline.params);
            (&p.delay_ms, p.bytes, p.every, p.ops) == (&q.delay_ms, q.bytes, q.every, q.ops)
        };
        let offload = runs
            .hol
            .iter()
            .filter(|l| l.params.mode == Mode::Offload)
            .find(same);
        if let Some(offload) = offload {
            push(
                "hol stall offload / inline",
                offload.figures.stall_mean_us,
                inline.figures.stall_mean_us,
                "us",
                &offload.lead.case,
            );
        }
    }
    out
}

/// The table as printed: one line a ratio.
pub fn print(ratios: &[Ratio]) -> String {
    let mut s = format!(
        "{:<28} {:>9} {:>12} {:>12}  {:<8} {}\n",
        "ratio", "value", "ours", "reference", "unit", "case"
    );
    for r in ratios {
        s.push_str(&format!(
            "{:<28} {:>9.3} {:>12.4} {:>12.4}  {:<8} {}\n",
            r.ratio, r.value, r.ours, r.reference, r.unit, r.case
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::csv::Leading;

    fn line<T: crate::record::CsvTable>(
        case: &str,
        params: T::Params,
        figures: T::Figures,
    ) -> Line<T> {
        Line {
            lead: Leading {
                case: case.into(),
                ..Default::default()
            },
            params,
            stats: T::WITH_STATS.then(Default::default),
            figures,
        }
    }

    #[test]
    fn each_figure_is_put_over_its_reference_at_the_same_point() {
        use crate::bench::kernels::{KernelFigures, KernelParams};
        use crate::bench::peak::{PeakFigures, PeakParams};
        let gemm = |kernel: &str, m: u32, gflops: f64, timer: &str| {
            line::<KernelsTable>(
                &format!("{kernel} {m}"),
                KernelParams {
                    kernel: kernel.into(),
                    size_m: Some(m),
                    size_n: Some(m),
                    size_k: Some(m),
                    ..Default::default()
                },
                KernelFigures {
                    gflops: Some(gflops),
                    timer: timer.into(),
                    ..Default::default()
                },
            )
        };
        let runs = Runs {
            peak: vec![line::<PeakTable>(
                "fma",
                PeakParams {
                    metric: "fma".into(),
                    variant: "vec4".into(),
                    ..Default::default()
                },
                PeakFigures {
                    gflops: Some(90.0),
                    best_gflops: Some(100.0),
                    ..Default::default()
                },
            )],
            kernels: vec![
                gemm("gemm", 256, 40.0, "gpu"),
                gemm("gemm", 512, 60.0, "gpu"),
                gemm("gemm", 512, 55.0, "host"),
                gemm("cpu_sgemm", 256, 10.0, "host"),
                gemm("cpu_sgemm", 512, 20.0, "host"),
            ],
            ..Default::default()
        };
        let r = ratios(&runs);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!((r[0].ratio, r[0].value), ("gemm / fma ceiling", 0.6));
        // Against the CPU at the GPU row's size (512), not another size's.
        assert_eq!((r[1].ratio, r[1].value), ("gemm / cpu sgemm", 3.0));
        assert!(print(&r).contains("gemm / cpu sgemm"));
        assert!(ratios(&Runs::default()).is_empty());
    }
}
