//! A node's fingerprint for `links`: its adapter and host facts, and two short samples that
//! show a slow or misconfigured node beside its peers: a verified GEMM and a device-to-host
//! copy (map included). Ranks on one host take turns, so they do not share the device.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::bench::probe;
use crate::gpu::kernels::gemm::GemmSize;
use crate::gpu::Gpu;
use crate::host::HostInfo;
use crate::stats::Summary;

/// The GEMM sampled: small enough for a CPU driver, large enough to be compute.
pub const GEMM: GemmSize = GemmSize {
    m: 256,
    n: 256,
    k: 256,
};
pub const D2H_BYTES: u64 = 1 << 20;
const ITERS: usize = 20;

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
pub fn fingerprint(rank: u32, local_rank: u32, gpu: Option<&Gpu>) -> anyhow::Result<NodeSample> {
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
    let gemm = sample_gemm(gpu).map_err(|e| anyhow::anyhow!("the node's GEMM sample: {e}"))?;
    let d2h = sample_d2h(gpu).map_err(|e| anyhow::anyhow!("the node's D2H sample: {e}"))?;
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

/// The fingerprint's probes have no deadline of their own: rank 0 bounds each turn.
fn budget() -> probe::Budget {
    probe::Budget {
        iters: ITERS,
        deadline: Instant::now() + std::time::Duration::from_secs(3600),
    }
}

fn sample_gemm(gpu: &Gpu) -> anyhow::Result<Summary> {
    probe::gemm(gpu, GEMM, budget()).map(|p| p.summary)
}

fn sample_d2h(gpu: &Gpu) -> anyhow::Result<Summary> {
    probe::d2h(gpu, D2H_BYTES, budget()).map(|p| p.summary)
}
