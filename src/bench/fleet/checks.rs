//! What the gate measures on one rank, by level: each test's size, sample count and deadline,
//! the rank's inventory, and the run of its tests (each cut at its own deadline, keeping its
//! samples).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bench::probe::{self, Budget, Probed};
use crate::gpu::kernels::gemm::GemmSize;
use crate::gpu::Gpu;
use crate::host::HostInfo;
use crate::host_load;

/// How deep the gate goes (as DCGM's diagnostic levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Quick,
    Standard,
    Extended,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Level::Quick => "quick",
            Level::Standard => "standard",
            Level::Extended => "extended",
        })
    }
}

/// The tests of the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    /// Host memory bandwidth as a copy sees it.
    Memcpy,
    /// A verified GEMM on the rank's adapter.
    Gemm,
    /// Device-to-host copy with its map.
    D2h,
    /// Host-to-device copy through a mapped staging buffer.
    H2d,
}

impl TestKind {
    pub fn name(self) -> &'static str {
        match self {
            TestKind::Memcpy => "memcpy",
            TestKind::Gemm => "gemm",
            TestKind::D2h => "d2h",
            TestKind::H2d => "h2d",
        }
    }

    /// Whether the test loads what ranks on one machine share (memory bandwidth, the CPU):
    /// such tests take turns on a machine. A GEMM on a GPU of its own does not; on a CPU
    /// driver it is CPU work and does.
    pub fn shares_host(self, cpu_adapter: bool) -> bool {
        !matches!(self, TestKind::Gemm) || cpu_adapter
    }
}

/// One test as planned: its size (bytes, or the GEMM's edge), samples and deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    pub kind: TestKind,
    pub size: u64,
    pub iters: usize,
    pub deadline_s: f64,
}

impl Level {
    /// The tests, in the order they run. Deadlines bound each test; a fast node finishes
    /// each long before. Each level's deadlines leave room for a retest of every test within
    /// its node budget ([`rank_bound`]).
    pub fn tests(self) -> Vec<TestSpec> {
        let t = |kind, size, iters, deadline_s| TestSpec {
            kind,
            size,
            iters,
            deadline_s,
        };
        use TestKind::*;
        match self {
            Level::Quick => vec![
                t(Memcpy, 64 << 20, 20, 3.0),
                t(Gemm, 256, 20, 9.0),
                t(D2h, 16 << 20, 20, 4.0),
                t(H2d, 16 << 20, 20, 4.0),
            ],
            Level::Standard => vec![
                t(Memcpy, 256 << 20, 50, 15.0),
                t(Gemm, 512, 50, 65.0),
                t(D2h, 64 << 20, 50, 30.0),
                t(H2d, 64 << 20, 50, 30.0),
            ],
            Level::Extended => vec![
                t(Memcpy, 1 << 30, 100, 50.0),
                t(Gemm, 1024, 100, 300.0),
                t(D2h, 256 << 20, 100, 120.0),
                t(H2d, 256 << 20, 100, 120.0),
            ],
        }
    }

    /// The most a node may take at this level (the budget per node).
    pub fn node_budget(self) -> Duration {
        Duration::from_secs(match self {
            Level::Quick => 60,
            Level::Standard => 300,
            Level::Extended => 1200,
        })
    }
}

/// Beyond a batch of tests' deadlines: building kernels, the order and the reply.
pub const SETUP_MARGIN: Duration = Duration::from_secs(5);

/// The longest a batch of tests may take on a rank before rank 0 stops waiting for it.
pub fn batch_bound(tests: &[TestSpec]) -> Duration {
    let s: f64 = tests.iter().map(|t| t.deadline_s).sum();
    Duration::from_secs_f64(s) + SETUP_MARGIN
}

/// The most one rank's tests may take at `level`: each test in its batch (those on its own
/// GPU, then those in turns on its machine), and once more if every figure is retested.
pub fn rank_bound(level: Level) -> Duration {
    let tests = level.tests();
    let s: f64 = tests.iter().map(|t| t.deadline_s).sum();
    (Duration::from_secs_f64(s) + 2 * SETUP_MARGIN) * 2
}

/// What a rank is: its host, its adapter and what else a node of its kind must agree on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Inventory {
    pub rank: u32,
    pub local_rank: u32,
    pub host: HostInfo,
    /// /etc/machine-id (the hostname where there is none): ranks sharing it share a machine.
    pub machine_id: String,
    pub adapter: Option<String>,
    pub adapter_index: Option<usize>,
    pub driver: Option<String>,
    pub backend: Option<String>,
    pub device_type: Option<String>,
    /// Adapters this rank could see.
    pub adapters: usize,
    pub rdma_devices: Vec<String>,
    /// Why there is no adapter, when there is none.
    pub gpu_error: Option<String>,
}

impl Inventory {
    /// Whether the adapter is a CPU driver (its "GPU" work is the host's).
    pub fn cpu_adapter(&self) -> bool {
        self.device_type.as_deref() == Some("Cpu")
    }
}

pub fn inventory(rank: u32, local_rank: u32, gpu: Result<&Gpu, &str>) -> Inventory {
    let host = HostInfo::probe();
    let (adapter, index, driver, backend, device_type, gpu_error) = match gpu {
        Ok(g) => (
            Some(g.report.name.clone()),
            Some(g.report.index),
            Some(
                format!("{} {}", g.report.driver, g.report.driver_info)
                    .trim()
                    .to_string(),
            ),
            Some(g.report.backend.clone()),
            Some(g.report.device_type.clone()),
            None,
        ),
        Err(e) => (None, None, None, None, None, Some(e.to_string())),
    };
    Inventory {
        rank,
        local_rank,
        machine_id: crate::host::machine_id(),
        host,
        adapter,
        adapter_index: index,
        driver,
        backend,
        device_type,
        adapters: crate::gpu::enumerate(crate::gpu::BackendChoice::Auto).len(),
        rdma_devices: crate::rdma::verbs::list_devices()
            .map(|l| l.into_iter().map(|d| d.name).collect())
            .unwrap_or_default(),
        gpu_error,
    }
}

/// One test's outcome on one rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub test: TestKind,
    /// `gflops` or `gbps` (higher is better).
    pub figure: String,
    pub unit: String,
    /// The rate at the median sample.
    pub value: Option<f64>,
    /// µs per operation: median and 99th percentile, and the sample count.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub n: usize,
    /// The deadline cut it (its samples are kept).
    pub cut: bool,
    /// Why there is no figure (a failed verification, no adapter, over a device limit).
    pub error: Option<String>,
    /// Not run, with why (SKIP).
    pub skipped: Option<String>,
}

/// A batch of tests on one rank, with the host's load around them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Batch {
    pub results: Vec<Measured>,
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    pub busy: bool,
    pub cores: usize,
}

/// Runs `tests` on this rank, each until its samples or its deadline.
pub fn run_batch(gpu: Option<&Gpu>, tests: &[TestSpec]) -> Batch {
    let before = host_load::Sample::now();
    let results = tests.iter().map(|t| run_test(gpu, *t)).collect();
    let load = host_load::Load::between(&before, &host_load::Sample::now());
    let injected = host_load::injected();
    let others_cores = injected.or(load.other_cores);
    let busy = match injected {
        Some(c) => c > host_load::BUSY_OTHER_CORES,
        None => load.busy,
    };
    Batch {
        results,
        others_cores: others_cores.map(|c| crate::export::csv::round(c, 2)),
        steal_pct: load
            .steal_fraction
            .map(|s| crate::export::csv::round(100.0 * s, 2)),
        busy,
        cores: load.cores,
    }
}

fn run_test(gpu: Option<&Gpu>, t: TestSpec) -> Measured {
    let (figure, unit) = match t.kind {
        TestKind::Gemm => ("gflops", "GFLOP/s"),
        _ => ("gbps", "GB/s"),
    };
    let mut m = Measured {
        test: t.kind,
        figure: figure.into(),
        unit: unit.into(),
        value: None,
        p50_us: None,
        p99_us: None,
        n: 0,
        cut: false,
        error: None,
        skipped: None,
    };
    let budget = Budget {
        iters: t.iters,
        deadline: Instant::now() + Duration::from_secs_f64(t.deadline_s),
    };
    let gpu_test = !matches!(t.kind, TestKind::Memcpy);
    if gpu_test && gpu.is_none() {
        m.error = Some("no GPU adapter on this rank".into());
        return m;
    }
    if let Some(g) = gpu.filter(|_| gpu_test && t.kind != TestKind::Gemm) {
        if t.size > g.limits.max_buffer_size {
            m.skipped = Some(format!(
                "{} bytes is over the adapter's largest buffer ({})",
                t.size, g.limits.max_buffer_size
            ));
            return m;
        }
    }
    let edge = t.size as u32;
    let gemm = GemmSize {
        m: edge,
        n: edge,
        k: edge,
    };
    let probed: Result<Probed, String> = match (t.kind, gpu) {
        (TestKind::Memcpy, _) => probe::memcpy(t.size, budget),
        (TestKind::Gemm, Some(g)) => probe::gemm(g, gemm, budget),
        (TestKind::D2h, Some(g)) => probe::d2h(g, t.size, budget),
        (TestKind::H2d, Some(g)) => probe::h2d(g, t.size, budget),
        (_, None) => Err("no GPU adapter".into()),
    };
    match probed {
        Ok(p) => {
            let work = match t.kind {
                TestKind::Gemm => gemm.flops(),
                _ => t.size as f64,
            };
            // work per µs / 1e3 = G per second.
            m.value = Some(crate::export::csv::sig4(work / p.summary.p50 / 1e3));
            m.p50_us = Some(p.summary.p50);
            m.p99_us = Some(p.summary.p99);
            m.n = p.summary.n;
            m.cut = p.cut;
        }
        Err(e) => m.error = Some(e),
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_with_its_retests_fits_its_node_budget() {
        for level in [Level::Quick, Level::Standard, Level::Extended] {
            assert!(
                rank_bound(level) <= level.node_budget(),
                "{level}: {:?} over {:?}",
                rank_bound(level),
                level.node_budget()
            );
            assert!(level
                .tests()
                .iter()
                .all(|t| t.deadline_s > 0.0 && t.iters > 0));
        }
    }
}
