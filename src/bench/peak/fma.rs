//! The FMA throughput ceiling: a vec4 FMA chain sized to run long enough, verified against
//! its closed form, then timed.

use anyhow::{ensure, Result};

use super::plan::PeakPlan;
use super::shader::{
    dispatch, kernel, once_us, samples, Kernel, Params, Rate, Rows, FMAS_PER_TRIP, FMA_GROUPS,
    FMA_WG, MAD_WGSL, MAX_TRIPS, TARGET_US, WGSL,
};
use crate::gpu::timing::time_compute_passes;
use crate::gpu::Gpu;

/// FMA throughput, scalar and vec4; returns the best iteration of the better one in GFLOP/s.
pub(super) fn fma(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<f64> {
    let bufs = FmaBuffers::new(gpu);
    let mut best: f64 = 0.0;
    let variants = [
        ("scalar", WGSL, "chains_scalar", 1u32),
        ("vec4", WGSL, "chains_vec4", 4),
        ("mad_scalar", MAD_WGSL, "chains_scalar", 1),
        ("mad_vec4", MAD_WGSL, "chains_vec4", 4),
    ];
    for (variant, wgsl, entry, lanes) in variants {
        let k = kernel(gpu, (wgsl, entry), &bufs.uniform, None, &bufs.out)?;
        bufs.set_trips(gpu, 1);
        verify_fma(gpu, &k, &bufs.out, lanes, FMA_GROUPS)?;
        let (groups, trips) = fit_fma(gpu, &k, &bufs)?;
        let t = time_compute_passes(gpu, plan.warmup, plan.iters, None, |p| {
            dispatch(p, &k, groups)
        })?;
        let flops = fma_flops(groups, trips, lanes);
        let (s, timer) = samples(&t);
        let sum = rows.write("fma", variant, flops, s, timer, Rate::Flops)?;
        best = best.max(flops / sum.min / 1e3);
        verify_fma(gpu, &k, &bufs.out, lanes, groups)?;
    }
    Ok(best)
}

/// The FMA kernels' uniform (the loop's trip count) and output (every invocation's chains).
pub(super) struct FmaBuffers {
    pub(super) uniform: wgpu::Buffer,
    pub(super) out: wgpu::Buffer,
}

impl FmaBuffers {
    pub(super) fn new(gpu: &Gpu) -> FmaBuffers {
        let uniform = gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("peak fma params"),
            size: std::mem::size_of::<Params>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let out = gpu.storage_from(
            "peak fma out",
            &vec![0u8; (FMA_GROUPS * FMA_WG) as usize * 16],
        );
        FmaBuffers { uniform, out }
    }

    /// A multiplier of 1 and an addend of 0: the output is known whatever the trip count.
    fn set_trips(&self, gpu: &Gpu, trips: u32) {
        let p = Params {
            count: trips,
            mul: 1.0,
            add: 0.0,
            threads: 0,
        };
        gpu.queue
            .write_buffer(&self.uniform, 0, bytemuck::bytes_of(&p));
    }
}

/// Grows the grid, then the loop, until one dispatch takes TARGET_US, so launch cost is a
/// rounding error; returns (groups, trips). Long loops first: a CPU driver runs invocations in
/// turn and pays for each one's start, a GPU needs the whole grid to fill its cores.
pub(super) fn fit_fma(gpu: &Gpu, k: &Kernel, bufs: &FmaBuffers) -> Result<(u32, u32)> {
    let (mut groups, mut trips) = (1, 1024);
    bufs.set_trips(gpu, trips);
    while once_us(gpu, k, groups)? < TARGET_US {
        if groups < FMA_GROUPS {
            groups *= 2;
        } else if trips < MAX_TRIPS {
            trips *= 2;
            bufs.set_trips(gpu, trips);
        } else {
            break;
        }
    }
    Ok((groups, trips))
}

/// The FLOPs of one dispatch (a multiply-add is 2).
pub(super) fn fma_flops(groups: u32, trips: u32, lanes: u32) -> f64 {
    (groups * FMA_WG) as f64 * trips as f64 * FMAS_PER_TRIP as f64 * lanes as f64 * 2.0
}

/// With a multiplier of 1 and an addend of 0, every chain keeps its start value: the output is
/// known exactly, whatever the trip count.
pub(super) fn verify_fma(
    gpu: &Gpu,
    k: &Kernel,
    out: &wgpu::Buffer,
    lanes: u32,
    groups: u32,
) -> Result<()> {
    gpu.poison(out);
    once_us(gpu, k, groups)?;
    let bytes = gpu.read_back(out)?;
    let got: &[[f32; 4]] = bytemuck::cast_slice(&bytes);
    for (i, v) in got.iter().take((groups * FMA_WG) as usize).enumerate() {
        let x = (i % 7) as f32;
        let want = if lanes == 1 {
            [2.0 * x + 1.0, 2.0 * x + 5.0, 2.0 * x + 9.0, 2.0 * x + 13.0]
        } else {
            [4.0 * x + 6.0, 10.0, 14.0, 18.0]
        };
        ensure!(
            *v == want,
            "the FMA kernel ({lanes} lanes) wrote {v:?} at invocation {i}, not {want:?}: the \
             driver miscompiled it, so its time is not reported"
        );
    }
    Ok(())
}
