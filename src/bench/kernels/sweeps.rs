//! The GEMM and layernorm sweeps: every size, each kernel verified, then timed.

use anyhow::Result;

use super::plan::KernelsPlan;
use super::writer::{cpu_threads, Size, Writer};
use crate::bench::shared::time_host;
use crate::gpu::kernels::gemm::{cpu_sgemm, verify_dense};
use crate::gpu::kernels::select::{choose, first_fitting, Selection, SKIPPED};
use crate::gpu::kernels::{
    GemmKernel, GemmSize, GpuKernel, LayernormKernel, LayernormSize, Verification, GEMM_VARIANTS,
    LAYERNORM_VARIANTS,
};
use crate::gpu::timing::time_compute_passes;
use crate::gpu::Gpu;
use crate::output::Progress;

/// The GEMM sweep: the variant choice, then each size verified, timed, and its CPU SGEMM row.
pub(super) fn sweep_gemm(
    gpu: &Gpu,
    plan: &KernelsPlan,
    w: &mut Writer<'_>,
    selections: &mut Vec<Selection>,
    progress: &Progress,
) -> Result<()> {
    // Probe at the largest size up to 512^3 in the sweep (large enough to be compute bound).
    let probe = plan
        .gemm
        .iter()
        .copied()
        .filter(|s| s.flops() <= 2.0 * 512f64.powi(3))
        .max_by(|a, b| a.flops().total_cmp(&b.flops()))
        .unwrap_or(GemmSize {
            m: 256,
            n: 256,
            k: 256,
        });
    let (ranked, sel) = choose(
        gpu,
        "gemm",
        GEMM_VARIANTS,
        plan.gemm_variant.as_deref(),
        probe.to_string(),
        plan.reselect,
        |v| GemmKernel::new(gpu, v, probe),
    )?;
    keep_selection(sel, selections, progress);
    for &size in &plan.gemm {
        progress.set_message(format!("gemm {size}"));
        let (k, variant) = first_fitting(&ranked, |v| GemmKernel::new(gpu, v, size))?;
        let v = k.verify()?;
        let t = time_compute_passes(gpu, plan.warmup, plan.iters, k.upload(), |p| k.encode(p))?;
        w.gpu_rows("gemm", variant.name, &Size::Gemm(size), &t, v)?;
        progress.inc();
        if plan.cpu_baseline {
            let mut c = vec![0.0f32; size.m as usize * size.n as usize];
            cpu_sgemm(size, &k.a, &k.b, &mut c);
            let label = format!("matrixmultiply,threads={}", cpu_threads());
            let v = verify_dense(size, &c, &k.reference, "matrixmultiply")?;
            let samples = time_host(plan.warmup, plan.iters, || {
                cpu_sgemm(size, &k.a, &k.b, &mut c)
            });
            w.row("cpu_sgemm", &label, &Size::Gemm(size), "host", &samples, v)?;
            progress.inc();
        }
    }
    Ok(())
}

/// The layernorm sweep: the variant choice, then each size verified, timed, and its memcpy row.
pub(super) fn sweep_layernorm(
    gpu: &Gpu,
    plan: &KernelsPlan,
    w: &mut Writer<'_>,
    selections: &mut Vec<Selection>,
    progress: &Progress,
) -> Result<()> {
    // Sizes that the same variants fit share one probe, at the largest of them: a variant that
    // holds only short rows (u64x4_resident) is still chosen for those when the sweep also has
    // long ones.
    let fitting = |size: LayernormSize| -> Vec<bool> {
        LAYERNORM_VARIANTS
            .iter()
            .map(|v| v.misfit(|_| size.hidden).is_none())
            .collect()
    };
    let mut classes: Vec<(Vec<bool>, LayernormSize)> = Vec::new();
    let mut class_of = Vec::with_capacity(plan.layernorm.len());
    for &size in &plan.layernorm {
        let fits = fitting(size);
        let i = match classes.iter().position(|(f, _)| *f == fits) {
            Some(i) => i,
            None => {
                classes.push((fits, size));
                classes.len() - 1
            }
        };
        let probe = &mut classes[i].1;
        if size.elements() > probe.elements() {
            *probe = size;
        }
        class_of.push(i);
    }
    let mut rankings = Vec::with_capacity(classes.len());
    for &(_, probe) in &classes {
        let (ranked, sel) = choose(
            gpu,
            "layernorm",
            LAYERNORM_VARIANTS,
            plan.layernorm_variant.as_deref(),
            probe.to_string(),
            plan.reselect,
            |v| LayernormKernel::new(gpu, v, probe),
        )?;
        keep_selection(sel, selections, progress);
        rankings.push(ranked);
    }
    for (&size, &class) in plan.layernorm.iter().zip(&class_of) {
        progress.set_message(format!("layernorm {size}"));
        let ranked = &rankings[class];
        let (k, variant) = first_fitting(ranked, |v| LayernormKernel::new(gpu, v, size))?;
        let v = k.verify()?;
        let t = time_compute_passes(gpu, plan.warmup, plan.iters, k.upload(), |p| k.encode(p))?;
        w.gpu_rows("layernorm", variant.name, &Size::Layernorm(size), &t, v)?;
        progress.inc();
        if plan.cpu_baseline {
            // memcpy of the layernorm's bytes into a pre-touched buffer.
            let src = crate::gpu::kernels::random_vec(size.elements());
            let mut dst = vec![0.0f32; size.elements()];
            let samples = time_host(plan.warmup, plan.iters, || {
                dst.copy_from_slice(std::hint::black_box(&src))
            });
            let rel_err = if dst == src { 0.0 } else { f64::INFINITY };
            anyhow::ensure!(
                rel_err == 0.0,
                "memcpy baseline produced a different buffer"
            );
            let v = Verification {
                rel_err,
                tolerance: 0.0,
            };
            w.row(
                "memcpy",
                "copy_from_slice",
                &Size::Memcpy(size),
                "host",
                &samples,
                v,
            )?;
            progress.inc();
        }
    }
    Ok(())
}

/// A measured choice (none when the variant was forced) is said and kept for the run's notes.
fn keep_selection(sel: Option<Selection>, selections: &mut Vec<Selection>, progress: &Progress) {
    if let Some(sel) = sel {
        progress.println(selection_line(&sel));
        selections.push(sel);
    }
}

pub(super) fn selection_line(sel: &Selection) -> String {
    let trials: Vec<String> = sel
        .trials
        .iter()
        .map(|t| match t.median_us {
            Some(us) => format!("{} {:.0} µs", t.variant, us),
            None if t.note.starts_with(SKIPPED) => format!("{} skipped", t.variant),
            None => format!("{} failed", t.variant),
        })
        .collect();
    format!(
        "{} variant: {}{} (probe {}: {})",
        sel.kernel,
        sel.winner,
        if sel.cached { " (cached)" } else { "" },
        sel.probe,
        trials.join(", ")
    )
}
