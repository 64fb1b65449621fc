//! Two ceilings as the fleet gate's short probes: the vec4 FMA kernel and one copy kernel, each
//! verified on a poisoned output first, then timed (GPU timestamps where the adapter has them)
//! until its samples or its deadline, as every probe of [`crate::bench::probe`] is.

use super::bandwidth::{fit_bytes, grid, verify_bandwidth, Layout, CHUNK};
use super::fma::{fit_fma, fma_flops, verify_fma, FmaBuffers};
use super::shader::{dispatch, kernel, once_us, samples, Kernel, WGSL};
use crate::bench::probe::{sample, Budget, Probed};
use crate::gpu::timing::time_compute_passes;
use crate::gpu::Gpu;

/// One dispatch's time: on the GPU's clock where the adapter has timestamps, else submit to
/// done.
fn timed_once(gpu: &Gpu, k: &Kernel, groups: u32) -> anyhow::Result<f64> {
    let t = time_compute_passes(gpu, 0, 1, None, |p| dispatch(p, k, groups))?;
    samples(&t)
        .0
        .first()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("the dispatch left no time"))
}

/// µs per dispatch of the vec4 FMA kernel (sized to take about 30 ms) and its FLOPs.
pub fn fma(gpu: &Gpu, budget: Budget) -> anyhow::Result<(Probed, f64)> {
    let bufs = FmaBuffers::new(gpu);
    let k = kernel(gpu, (WGSL, "chains_vec4"), &bufs.uniform, None, &bufs.out)?;
    let (groups, trips) = fit_fma(gpu, &k, &bufs)?;
    verify_fma(gpu, &k, &bufs.out, 4, groups)?;
    let probed = sample(budget, || timed_once(gpu, &k, groups))?;
    Ok((probed, fma_flops(groups, trips, 4)))
}

/// µs per dispatch of the copy kernel over `bytes` (within the device's binding limits) and
/// the bytes it moves, read plus written. The layout is the one the adapter streams best:
/// element-strided on a GPU, contiguous chunks on a CPU driver.
pub fn copy(gpu: &Gpu, bytes: u64, budget: Budget) -> anyhow::Result<(Probed, f64)> {
    let bytes = fit_bytes(gpu, bytes)?;
    let n = (bytes / 16) as u32;
    // Small integers, as the peak bench's copies use: a wrong element is seen.
    let src_data: Vec<f32> = (0..n as usize * 4).map(|i| (i % 4) as f32).collect();
    let src = gpu.storage_from("probe copy src", &src_data);
    drop(src_data);
    let dst = gpu.storage_from("probe copy dst", &vec![0u8; bytes as usize]);
    let (layout, entry, per_invocation) = match gpu.report.device_type.as_str() {
        "Cpu" => (Layout::Chunked, "copy_chunk", 4 * CHUNK),
        _ => (Layout::Strided, "copy", 4),
    };
    let (groups, threads, uniform) = grid(gpu, n, per_invocation);
    let k = kernel(gpu, (WGSL, entry), &uniform, Some(&src), &dst)?;
    gpu.poison(&dst);
    once_us(gpu, &k, groups)?;
    verify_bandwidth(gpu, "copy", layout, &dst, n, threads)?;
    let probed = sample(budget, || timed_once(gpu, &k, groups))?;
    Ok((probed, 2.0 * bytes as f64))
}
