//! Op and link times for the simulator from a measured run (`sim --from`).

use std::path::Path;

use anyhow::{Context, Result};

use crate::bench::d2h::D2hTable;
use crate::bench::hol::{HolTable, Mode};
use crate::bench::kernels::KernelsTable;
use crate::record::{read_optional, read_table, CsvTable, Line};

/// Op durations taken from a measured run: one layer's forward is its largest GEMM plus its
/// largest layernorm (GPU timer, median); the input-gradient backward costs the same as the
/// forward and the weight-gradient backward one more GEMM (the usual 2x-forward backward).
/// Link costs come from the run's offloaded transfers where it has hol.csv (delay 0): the
/// D2H copy, map and copy out become the offload queue cost, the send and receive the link
/// latency. Without hol.csv, d2h.csv's end-to-end D2H latency of the largest size up to
/// 16 MiB (a typical activation) is the offload cost.
pub struct Calibration {
    pub tf_ms: f64,
    pub tb_ms: f64,
    pub tw_ms: f64,
    pub d2h_ms: Option<f64>,
    pub link_ms: Option<f64>,
    pub note: String,
}

/// (D2H cost, link latency) in ms from hol.csv's offload rows at delay 0.
pub(super) fn link_from_hol(rows: &[Line<HolTable>]) -> Option<(f64, f64)> {
    let r = rows
        .iter()
        .find(|r| r.params.mode == Mode::Offload && r.params.delay_ms == "0")?;
    let f = &r.figures;
    let d2h = f.d2h_copy_us? + f.map_us? + f.copy_out_us?;
    let link = f.send_us? + f.receive_us?;
    Some((d2h / 1e3, link / 1e3))
}

/// The p50 of the row with the largest `weight` among those it returns one for.
pub(super) fn largest_p50<T: CsvTable>(
    rows: &[Line<T>],
    weight: impl Fn(&Line<T>) -> Option<f64>,
) -> Option<f64> {
    rows.iter()
        .filter_map(|r| Some((weight(r)?, r.stats().p50_us)))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, p50)| p50)
}

pub fn calibrate_from(run_dir: &Path, layers_per_stage: f64) -> Result<Calibration> {
    let kernels = read_table::<KernelsTable>(&run_dir.join("kernels.csv"))?;
    let pick = |kernel: &'static str| {
        move |r: &Line<KernelsTable>| -> Option<f64> {
            let p = &r.params;
            if p.kernel != kernel {
                return None;
            }
            // Prefer GPU timestamps: host rows of the same size weigh less.
            let bonus = if r.figures.timer == "gpu" { 0.5 } else { 0.0 };
            let size: f64 = [p.size_m, p.size_n, p.size_k, p.rows, p.hidden]
                .iter()
                .flatten()
                .map(|&d| d as f64)
                .product();
            Some(size + bonus)
        }
    };
    let gemm_us = largest_p50(&kernels, pick("gemm"))
        .with_context(|| format!("{} has no gemm rows", run_dir.join("kernels.csv").display()))?;
    let ln_us = largest_p50(&kernels, pick("layernorm")).unwrap_or(0.0);
    let f = (gemm_us + ln_us) / 1e3 * layers_per_stage;
    let w = gemm_us / 1e3 * layers_per_stage;
    let from_hol = read_optional::<HolTable>(run_dir)?.and_then(|rows| link_from_hol(&rows));
    let d2h_ms = match from_hol {
        Some((d, _)) => Some(d),
        None => read_optional::<D2hTable>(run_dir)?.and_then(|rows| {
            largest_p50(&rows, |r| {
                let p = &r.params;
                (p.direction == "d2h" && p.part == "end_to_end" && p.bytes <= 16 << 20)
                    .then_some(p.bytes as f64)
            })
            .map(|us| us / 1e3)
        }),
    };
    let link_ms = from_hol.map(|(_, l)| l);
    Ok(Calibration {
        tf_ms: f,
        tb_ms: f,
        tw_ms: w,
        d2h_ms,
        link_ms,
        note: format!(
            "from {}: per layer gemm {:.3} ms + layernorm {:.3} ms; {layers_per_stage} layer(s) per stage: \
             tF = tB = {f:.3} ms, tW = {w:.3} ms{}{}",
            run_dir.display(),
            gemm_us / 1e3,
            ln_us / 1e3,
            d2h_ms.map(|d| format!(", D2H {d:.3} ms")).unwrap_or_default(),
            link_ms.map(|l| format!(", link {l:.3} ms (offloaded send + ack)")).unwrap_or_default()
        ),
    })
}
