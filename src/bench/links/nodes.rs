//! A node's fingerprint for `links`: its adapter and host facts, and two short samples that
//! show a slow or misconfigured node beside its peers: a verified GEMM and a device-to-host
//! copy (map included). Ranks on one host take turns, so they do not share the device.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::gpu::kernels::gemm::{GemmKernel, GemmSize, GEMM_VARIANTS};
use crate::gpu::kernels::{find_variant, run_once, GpuKernel};
use crate::gpu::Gpu;
use crate::host::HostInfo;
use crate::stats::Summary;

/// The GEMM sampled: small enough for a CPU driver, large enough to be compute.
pub const GEMM: GemmSize = GemmSize {
    m: 256,
    n: 256,
    k: 256,
};
/// The portable variant (workgroup tiles, no optional features).
const GEMM_VARIANT: &str = "tiled64";
pub const D2H_BYTES: u64 = 1 << 20;
const ITERS: usize = 20;
/// Untimed runs first: page faults and first-use costs stay out of the samples.
const WARMUP: usize = 3;

/// One rank's fingerprint, as it reports it to rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeSample {
    pub rank: u32,
    /// Its place among the ranks on its host, which picks its adapter.
    pub local_rank: u32,
    pub host: HostInfo,
    pub adapter: Option<String>,
    /// The adapter's index in `morphbench info`'s list.
    pub adapter_index: Option<usize>,
    /// µs per GEMM, host-timed submit to done; None without a GPU.
    pub gemm: Option<Summary>,
    /// µs per D2H copy and map of D2H_BYTES.
    pub d2h: Option<Summary>,
    /// Why there are no GPU samples, when there are none.
    pub note: Option<String>,
}

/// Samples this node: host facts always; the GPU ones when `gpu` is there.
pub fn fingerprint(rank: u32, local_rank: u32, gpu: Option<&Gpu>) -> Result<NodeSample, String> {
    let host = HostInfo::probe();
    let Some(gpu) = gpu else {
        return Ok(NodeSample {
            rank,
            local_rank,
            host,
            adapter: None,
            adapter_index: None,
            gemm: None,
            d2h: None,
            note: Some("no GPU adapter".into()),
        });
    };
    let adapter = Some(gpu.report.name.clone());
    let gemm = sample_gemm(gpu).map_err(|e| format!("the node's GEMM sample: {e}"))?;
    let d2h = sample_d2h(gpu).map_err(|e| format!("the node's D2H sample: {e}"))?;
    Ok(NodeSample {
        rank,
        local_rank,
        host,
        adapter,
        adapter_index: Some(gpu.report.index),
        gemm: Some(gemm),
        d2h: Some(d2h),
        note: None,
    })
}

fn sample_gemm(gpu: &Gpu) -> Result<Summary, String> {
    let variant = find_variant(GEMM_VARIANTS, GEMM_VARIANT).expect("a built-in variant");
    let kernel = GemmKernel::new(gpu, variant, GEMM).map_err(|e| e.to_string())?;
    // Verified against the f64 reference (output poisoned first) before any timing.
    kernel.verify().map_err(|e| e.to_string())?;
    let mut us = Vec::with_capacity(ITERS);
    for i in 0..WARMUP + ITERS {
        let t0 = Instant::now();
        run_once(gpu, &kernel).map_err(|e| e.to_string())?;
        if i >= WARMUP {
            us.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    Summary::of(&us).ok_or_else(|| "no samples".into())
}

fn sample_d2h(gpu: &Gpu) -> Result<Summary, String> {
    let n = D2H_BYTES as usize;
    let pattern: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let device = gpu.storage_from("fingerprint d2h", &pattern);
    let staging = gpu.staging("fingerprint staging", D2H_BYTES, wgpu::MapMode::Read);
    let mut host = vec![0u8; n];
    let mut us = Vec::with_capacity(ITERS);
    for i in 0..WARMUP + ITERS {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&device, 0, &staging, 0, D2H_BYTES);
        let t0 = Instant::now();
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx.clone()).map_err(|e| e.to_string())?;
        gpu.map_read_into(&staging, &mut host, Some(idx))
            .map_err(|e| e.to_string())?;
        let t = t0.elapsed().as_secs_f64() * 1e6;
        if i == 0 {
            if host != pattern {
                return Err("the copy delivered wrong bytes".into());
            }
        } else if i >= WARMUP {
            us.push(t);
        }
    }
    Summary::of(&us).ok_or_else(|| "no samples".into())
}
