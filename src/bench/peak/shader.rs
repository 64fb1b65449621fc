//! The ceilings' kernels (shaders/peak*.wgsl), how one is built, dispatched and timed, and
//! the rows its measurements become.

use std::time::Instant;

use anyhow::{Context, Result};

use super::table::{PeakFigures, PeakParams, PeakTable};
use crate::gpu::timing::IterationTimes;
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::csv::{sig4, CsvSink, Line};
use crate::stats::Summary;

pub(super) const WGSL: &str = concat!(
    include_str!("../../../shaders/peak_fma.wgsl"),
    include_str!("../../../shaders/peak_grid.wgsl"),
    include_str!("../../../shaders/peak_f32.wgsl"),
    include_str!("../../../shaders/peak_copy.wgsl"),
    include_str!("../../../shaders/peak.wgsl")
);
pub(super) const MAD_WGSL: &str = concat!(
    include_str!("../../../shaders/peak_mad.wgsl"),
    include_str!("../../../shaders/peak_grid.wgsl"),
    include_str!("../../../shaders/peak_f32.wgsl"),
    include_str!("../../../shaders/peak_copy.wgsl"),
    include_str!("../../../shaders/peak.wgsl")
);
/// The copy kernels moving vec4<u64>, for adapters with 64-bit shader integers.
pub(super) const U64_WGSL: &str = concat!(
    include_str!("../../../shaders/peak_grid.wgsl"),
    include_str!("../../../shaders/peak_u64.wgsl"),
    include_str!("../../../shaders/peak_copy.wgsl")
);
/// Invocations per workgroup in shaders/peak.wgsl.
pub(super) const WG: u32 = 256;
/// Invocations per workgroup of the FMA kernels (64: lavapipe runs a workgroup of 256 at half
/// the rate).
pub(super) const FMA_WG: u32 = 64;
/// The most workgroups of the FMA kernels: a million invocations, enough to fill the largest
/// GPU.
pub(super) const FMA_GROUPS: u32 = 16384;
/// The most loop trips per FMA invocation (about 0.5 PFLOP per dispatch, vec4).
pub(super) const MAX_TRIPS: u32 = 1 << 20;
/// Multiply-adds per loop trip and invocation (each of `lanes` lanes): 8 chains x 4 steps
/// (scalar) or 4 chains x 8 steps (vec4).
pub(super) const FMAS_PER_TRIP: u32 = 32;
/// The most workgroups in one dimension every adapter allows.
pub(super) const MAX_GROUPS: u32 = 65535;
/// A dispatch is sized to run at least this long, so its timing is not its launch (and a CPU
/// driver's worker threads are all busy).
pub(super) const TARGET_US: f64 = 30000.0;

/// The uniform of shaders/peak.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) count: u32,
    pub(super) mul: f32,
    pub(super) add: f32,
    pub(super) threads: u32,
}

/// One measured row, written as it comes (`table` is `None` when the ceilings are measured
/// for another bench and not reported).
pub(super) struct Rows<'a> {
    pub(super) run_id: &'a str,
    pub(super) table: Option<CsvSink<PeakTable>>,
    pub(super) progress: &'a Progress,
}

impl Rows<'_> {
    pub(super) fn write(
        &mut self,
        metric: &str,
        variant: &str,
        work: f64,
        samples: &[f64],
        timer: &str,
        rate: Rate,
    ) -> Result<Summary> {
        let s = Summary::of(samples).context("no valid timing samples")?;
        let per_s = work / s.p50 / 1e3;
        let best = work / s.min / 1e3;
        let (gflops, gbps, best_gflops, best_gbps) = match rate {
            Rate::Flops => (Some(sig4(per_s)), None, Some(sig4(best)), None),
            Rate::Bytes => (None, Some(sig4(per_s)), None, Some(sig4(best))),
            Rate::None => (None, None, None, None),
        };
        let Some(table) = &mut self.table else {
            return Ok(s);
        };
        table.write(&Line::new(
            self.run_id,
            format!("{metric} {variant}"),
            PeakParams {
                metric: metric.into(),
                variant: variant.into(),
                bytes_or_flops: work,
            },
            Some(&s),
            PeakFigures {
                gflops,
                gbps,
                timer: timer.into(),
                verified: true,
                best_gflops,
                best_gbps,
            },
        ))?;
        let figure = match rate {
            Rate::Flops => format!("{per_s:>10.1} GFLOP/s (best {best:.1})"),
            Rate::Bytes => format!("{per_s:>10.1} GB/s (best {best:.1})"),
            Rate::None => String::new(),
        };
        self.progress.println(format!(
            "peak {metric:<10} {variant:<14} p50 {:>11.2} µs {figure} [{timer}]",
            s.p50
        ));
        self.progress.inc();
        Ok(s)
    }
}

#[derive(Clone, Copy)]
pub(super) enum Rate {
    Flops,
    Bytes,
    None,
}

/// The samples to use: GPU timestamps when the adapter has them, else the host clock.
pub(super) fn samples(t: &IterationTimes) -> (&[f64], &'static str) {
    match &t.gpu_us {
        Some(g) => (g, "gpu"),
        None => (&t.host_us, "host"),
    }
}

pub(super) struct Kernel {
    pub(super) pipeline: wgpu::ComputePipeline,
    pub(super) bind_group: wgpu::BindGroup,
}

pub(super) fn kernel(
    gpu: &Gpu,
    (wgsl, entry): (&str, &str),
    uniform: &wgpu::Buffer,
    src: Option<&wgpu::Buffer>,
    dst: &wgpu::Buffer,
) -> Result<Kernel> {
    let pipeline = gpu.compute_pipeline(&format!("peak {entry}"), wgsl, entry, true, &[])?;
    let mut entries = vec![
        wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        },
        wgpu::BindGroupEntry {
            binding: 2,
            resource: dst.as_entire_binding(),
        },
    ];
    if let Some(src) = src {
        entries.push(wgpu::BindGroupEntry {
            binding: 1,
            resource: src.as_entire_binding(),
        });
    }
    let bind_group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(entry),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    Ok(Kernel {
        pipeline,
        bind_group,
    })
}

pub(super) fn dispatch(pass: &mut wgpu::ComputePass<'_>, k: &Kernel, groups: u32) {
    pass.set_pipeline(&k.pipeline);
    pass.set_bind_group(0, &k.bind_group, &[]);
    pass.dispatch_workgroups(groups, 1, 1);
}

/// Host time of one dispatch of `groups` workgroups, submit to done.
pub(super) fn once_us(gpu: &Gpu, k: &Kernel, groups: u32) -> Result<f64> {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    dispatch(&mut enc.begin_compute_pass(&Default::default()), k, groups);
    let t0 = Instant::now();
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx)?;
    Ok(t0.elapsed().as_secs_f64() * 1e6)
}
