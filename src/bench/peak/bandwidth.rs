//! The bandwidth ceilings: copy, read and write kernels and the buffer copy, each verified.

use std::time::Instant;

use anyhow::{ensure, Result};

use super::plan::PeakPlan;
use super::shader::{
    dispatch, kernel, once_us, samples, Kernel, Params, Rate, Rows, MAX_GROUPS, U64_WGSL, WG, WGSL,
};
use crate::gpu::timing::{time_compute_passes, PassTimer};
use crate::gpu::Gpu;
use crate::stats::Summary;
use crate::units::human_bytes;

/// Device memory bandwidth; returns the copy kernel's GB/s.
pub(super) fn bandwidth(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<f64> {
    let bytes = fit_bytes(gpu, plan.bytes)?;
    let n = (bytes / 16) as u32;
    // Small integers keep the read kernels' sums exact.
    let src_data: Vec<f32> = (0..n as usize * 4).map(|i| (i % 4) as f32).collect();
    let src = gpu.storage_from("peak src", &src_data);
    let dst = gpu.storage_from("peak dst", &vec![0u8; bytes as usize]);
    let grid = |count: u32, per_invocation: u32| grid(gpu, count, per_invocation);
    // Four elements, or four chunks of CHUNK, per invocation.
    let strided = grid(n, 4);
    let chunked = grid(n, 4 * CHUNK);
    let sums = gpu.storage_from(
        "peak sums",
        &vec![0u8; strided.1.max(chunked.1) as usize * 16],
    );
    let mut copy_gbps: f64 = 0.0;
    for (layout, (groups, threads, uniform), suffix) in [
        (Layout::Strided, &strided, ""),
        (Layout::Chunked, &chunked, "_chunk"),
    ] {
        let cases: [(&str, &str, Option<&wgpu::Buffer>, &wgpu::Buffer, f64); 3] = [
            (
                "read",
                "read_only",
                Some(&src),
                &sums,
                bytes as f64 + *threads as f64 * 16.0,
            ),
            ("write", "write_only", None, &dst, bytes as f64),
            ("copy", "copy", Some(&src), &dst, 2.0 * bytes as f64),
        ];
        for (what, entry, input, output, moved) in cases {
            let entry = match layout {
                Layout::Strided => entry.to_string(),
                Layout::Chunked => format!("{what}_chunk"),
            };
            let variant = format!("{what}{suffix}");
            let k = kernel(gpu, (WGSL, &entry), uniform, input, output)?;
            let verify = || verify_bandwidth(gpu, what, layout, output, n, *threads);
            let timed = Timed {
                kernel: &k,
                groups: *groups,
                output,
            };
            let sum = timed.measure(gpu, plan, rows, &variant, moved, verify)?;
            if what == "copy" {
                copy_gbps = copy_gbps.max(moved / sum.min / 1e3);
            }
        }
    }
    // The widest access the kernels use (layernorm's u64x4 variants) gets a copy of its own, so
    // the copy ceiling bounds them too.
    if gpu.features.contains(wgpu::Features::SHADER_INT64) {
        // Half as many elements, each of 32 bytes; the same bytes per invocation as above.
        for (entry, per_invocation) in [("copy", 2), ("copy_chunk", 2 * CHUNK)] {
            let (groups, threads, uniform) = grid(n / 2, per_invocation);
            let k = kernel(gpu, (U64_WGSL, entry), &uniform, Some(&src), &dst)?;
            // The bytes are copied as they are: the same check as the vec4<f32> copy.
            let verify = || verify_bandwidth(gpu, "copy", Layout::Strided, &dst, n, threads);
            let timed = Timed {
                kernel: &k,
                groups,
                output: &dst,
            };
            let moved = 2.0 * bytes as f64;
            let variant = entry.replace("copy", "copy_u64");
            let sum = timed.measure(gpu, plan, rows, &variant, moved, verify)?;
            copy_gbps = copy_gbps.max(moved / sum.min / 1e3);
        }
    }
    // The buffer-to-buffer copy, between encoder timestamps where the adapter has them.
    gpu.poison(&dst);
    let (us, timer) = time_buffer_copy(gpu, &src, &dst, bytes, plan)?;
    verify_bandwidth(gpu, "copy", Layout::Strided, &dst, n, strided.1)?;
    rows.write(
        "bandwidth",
        "buffer_copy",
        2.0 * bytes as f64,
        &us,
        timer,
        Rate::Bytes,
    )?;
    Ok(copy_gbps)
}

/// The bandwidth kernels' size of `bytes` within the device's binding limits (a multiple of
/// 32), refused under 1 MiB.
pub(super) fn fit_bytes(gpu: &Gpu, bytes: u64) -> Result<u64> {
    let limits = gpu.device.limits();
    let bytes = bytes
        .min(limits.max_storage_buffer_binding_size)
        .min(limits.max_buffer_size)
        / 32
        * 32;
    ensure!(
        bytes >= 1 << 20,
        "the device binds at most {} per storage buffer: too small for a bandwidth test",
        human_bytes(bytes)
    );
    Ok(bytes)
}

/// `per_invocation` of `count` elements per invocation, within one dimension of groups:
/// (groups, threads, the kernel's uniform).
pub(super) fn grid(gpu: &Gpu, count: u32, per_invocation: u32) -> (u32, u32, wgpu::Buffer) {
    let groups = count
        .div_ceil(per_invocation)
        .div_ceil(WG)
        .clamp(1, MAX_GROUPS);
    let threads = groups * WG;
    let uniform = gpu.uniform_from(
        "peak bandwidth params",
        &Params {
            count,
            mul: 2.0,
            add: 0.0,
            threads,
        },
    );
    (groups, threads, uniform)
}

/// A bandwidth kernel ready to dispatch, and the buffer it writes.
pub(super) struct Timed<'a> {
    kernel: &'a Kernel,
    groups: u32,
    output: &'a wgpu::Buffer,
}

impl Timed<'_> {
    /// Runs the kernel once on a poisoned output and checks it with `verify`, then times it
    /// and writes its row; returns the timing summary.
    fn measure(
        &self,
        gpu: &Gpu,
        plan: &PeakPlan,
        rows: &mut Rows,
        variant: &str,
        moved: f64,
        verify: impl FnOnce() -> Result<()>,
    ) -> Result<Summary> {
        gpu.poison(self.output);
        once_us(gpu, self.kernel, self.groups)?;
        verify()?;
        let t = time_compute_passes(gpu, plan.warmup, plan.iters, None, |p| {
            dispatch(p, self.kernel, self.groups)
        })?;
        let (s, timer) = samples(&t);
        rows.write("bandwidth", variant, moved, s, timer, Rate::Bytes)
    }
}

/// How the bandwidth kernels walk the buffer: element by element across the grid (what a GPU
/// coalesces), or CHUNK contiguous elements per invocation (what a CPU driver streams).
#[derive(Clone, Copy)]
pub(super) enum Layout {
    Strided,
    Chunked,
}

/// Elements per chunk in the `_chunk` kernels (CHUNK in shaders/peak_grid.wgsl).
pub(super) const CHUNK: u32 = 8;

pub(super) fn verify_bandwidth(
    gpu: &Gpu,
    what: &str,
    layout: Layout,
    out: &wgpu::Buffer,
    n: u32,
    threads: u32,
) -> Result<()> {
    let bytes = gpu.read_back(out)?;
    let got: &[[f32; 4]] = bytemuck::cast_slice(&bytes);
    let (n, threads) = (n as usize, threads as usize);
    // How many elements invocation i summed (each element is (0, 1, 2, 3)).
    let count = |i: usize| -> f32 {
        match layout {
            Layout::Strided => n.saturating_sub(i).div_ceil(threads) as f32,
            Layout::Chunked => {
                let (chunk, stride) = (CHUNK as usize, threads * CHUNK as usize);
                (0..)
                    .map(|s| i * chunk + s * stride)
                    .take_while(|&base| base < n)
                    .map(|base| chunk.min(n - base))
                    .sum::<usize>() as f32
            }
        }
    };
    let bad = match what {
        "read" => got.iter().take(threads).enumerate().position(|(i, v)| {
            let c = count(i);
            *v != [0.0, c, 2.0 * c, 3.0 * c]
        }),
        "write" => got.iter().take(n).position(|v| *v != [2.0; 4]),
        _ => got.iter().take(n).position(|v| *v != [0.0, 1.0, 2.0, 3.0]),
    };
    if let Some(i) = bad {
        anyhow::bail!(
            "the {what} bandwidth kernel left {:?} at element {i}: its time is not reported",
            got[i]
        );
    }
    Ok(())
}

pub(super) fn time_buffer_copy(
    gpu: &Gpu,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    bytes: u64,
    plan: &PeakPlan,
) -> Result<(Vec<f64>, &'static str)> {
    let timer = gpu.has_encoder_timestamps().then(|| PassTimer::new(gpu, 1));
    let mut out = Vec::new();
    for rep in 0..plan.warmup + plan.iters {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        if let Some(t) = &timer {
            t.encoder_write(&mut enc, 0, false);
        }
        enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
        if let Some(t) = &timer {
            t.encoder_write(&mut enc, 0, true);
        }
        let t0 = Instant::now();
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx)?;
        let host = t0.elapsed().as_secs_f64() * 1e6;
        if rep < plan.warmup {
            continue;
        }
        out.push(match &timer {
            Some(t) => t.read(gpu, 1)?[0],
            None => host,
        });
    }
    Ok((out, if timer.is_some() { "gpu" } else { "host" }))
}
