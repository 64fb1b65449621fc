//! What the gate measures on one rank, by level: each test's size, sample count and deadline,
//! the rank's inventory, and the run of its tests (each cut at its own deadline, keeping its
//! samples).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::bench::hol::{HolPlan, Mode};
use crate::bench::links::pair::PairPlan;
use crate::bench::links::pattern::Pattern;
use crate::bench::probe::{self, Budget, Probed};
use crate::gpu::kernels::gemm::GemmSize;
use crate::gpu::Gpu;
use crate::noise;

// What a rank is lives beside the rows that judge it.
pub use super::inventory::{inventory, Inventory};

/// How deep the gate goes (as DCGM's diagnostic levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// `morphbench health`: quick's tests and sizes in short deadlines, so that a node of
    /// 8 GPUs is judged within Slurm's HealthCheckProgram limit ([`HEALTH_BUDGET`]).
    Health,
    Quick,
    Standard,
    Extended,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Level::Health => "health",
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
    /// A pipeline stage's stream with its sends on a delayed link offloaded to the host
    /// (the offload path: a device-to-host copy, a host thread's send), against inline.
    Hol,
    /// The adapter's FP32 multiply-add ceiling (`peak`'s vec4 FMA kernel).
    Fma,
    /// The adapter's memory bandwidth ceiling (`peak`'s copy kernel).
    Bandwidth,
}

impl TestKind {
    pub fn name(self) -> &'static str {
        match self {
            TestKind::Memcpy => "memcpy",
            TestKind::Gemm => "gemm",
            TestKind::D2h => "d2h",
            TestKind::H2d => "h2d",
            TestKind::Hol => "hol",
            TestKind::Fma => "fma",
            TestKind::Bandwidth => "bandwidth",
        }
    }

    /// Whether the test loads what ranks on one machine share (memory bandwidth, the CPU):
    /// such tests take turns on a machine. A kernel on a GPU of its own (GEMM, the ceilings)
    /// does not; on a CPU driver it is CPU work and does.
    pub fn shares_host(self, cpu_adapter: bool) -> bool {
        !matches!(self, TestKind::Gemm | TestKind::Fma | TestKind::Bandwidth) || cpu_adapter
    }

    /// The figure a test reports (higher is better), and its unit.
    pub fn figure(self) -> (&'static str, &'static str) {
        match self {
            TestKind::Gemm | TestKind::Fma => ("gflops", "GFLOP/s"),
            TestKind::Hol => ("ops_per_s", "op/s"),
            _ => ("gbps", "GB/s"),
        }
    }
}

/// One test as planned: its size (bytes, the GEMM's edge, or the HoL stream's tokens and
/// hidden size), samples and deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TestSpec {
    pub kind: TestKind,
    pub size: u64,
    pub iters: usize,
    pub deadline_s: f64,
    /// A retest of a failed figure: placement-dependent tests (memcpy, d2h, h2d) measure on
    /// fresh placements ([`probe::memcpy_placed`]), so the retest can disagree with the first
    /// measurement.
    #[serde(default)]
    pub retest: bool,
}

impl Level {
    /// The tests, in the order they run. Deadlines bound each test; a fast node finishes
    /// each long before. Each level's deadlines leave room for a retest of every test within
    /// its node budget ([`rank_bound`]).
    pub fn tests(self) -> Vec<TestSpec> {
        let t = |kind, size, iters, deadline_s| TestSpec {
            retest: false,
            kind,
            size,
            iters,
            deadline_s,
        };
        use TestKind::*;
        match self {
            // Quick's sizes (a baseline from a quick gate judges it), half its samples.
            Level::Health => vec![
                t(Memcpy, 64 << 20, 10, 0.4),
                t(Gemm, 256, 10, 1.2),
                t(D2h, 16 << 20, 10, 0.5),
                t(H2d, 16 << 20, 10, 0.5),
                t(Fma, 0, 5, 0.8),
                // Its setup (64 MiB filled, a copy checked) took 1.2 s on a loaded CPU
                // driver in CI, leaving 2 samples: the gate could not check it.
                t(Bandwidth, 64 << 20, 5, 2.0),
            ],
            Level::Quick => vec![
                t(Memcpy, 64 << 20, 20, 2.0),
                t(Gemm, 256, 20, 5.0),
                t(D2h, 16 << 20, 20, 3.0),
                t(H2d, 16 << 20, 20, 3.0),
                t(Fma, 0, 10, 3.0),
                // Its setup (buffers filled, a copy checked) is most of it on a CPU driver.
                t(Bandwidth, 64 << 20, 20, 4.0),
            ],
            Level::Standard => vec![
                t(Memcpy, 256 << 20, 50, 12.0),
                t(Gemm, 512, 50, 31.0),
                t(D2h, 64 << 20, 50, 22.0),
                t(H2d, 64 << 20, 50, 22.0),
                t(Hol, 256, 10, 15.0),
                t(Fma, 0, 20, 6.0),
                t(Bandwidth, 256 << 20, 50, 8.0),
            ],
            Level::Extended => vec![
                t(Memcpy, 1 << 30, 100, 40.0),
                t(Gemm, 1024, 100, 170.0),
                t(D2h, 256 << 20, 100, 80.0),
                t(H2d, 256 << 20, 100, 80.0),
                t(Hol, 512, 20, 55.0),
                t(Fma, 0, 50, 10.0),
                t(Bandwidth, 512 << 20, 100, 20.0),
            ],
        }
    }

    /// The links between the ranks, at levels that measure them ([`LinksSpec`]).
    pub fn links(self) -> Option<LinksSpec> {
        let (pattern, deadline_s) = match self {
            Level::Health | Level::Quick => return None,
            Level::Standard => (Pattern::Quick, 30.0),
            // All pairs when they fit the deadline, else as many random rounds as do.
            Level::Extended => (Pattern::AllPairs, 150.0),
        };
        Some(LinksSpec {
            pattern,
            plan: PairPlan {
                transports: vec![crate::transport::TransportKind::Tcp],
                sizes: vec![8, LINK_BANDWIDTH_BYTES],
                // 10,000 round trips find a host dropping 0.1% (links::tail), in about 0.1 s.
                iters: match self {
                    Level::Extended => 10_000,
                    _ => 1000,
                },
                budget_ms: 200,
                bidir: false,
                io_timeout_s: 20,
            },
            deadline_s,
        })
    }

    /// The time allowed the short real pipeline, at the level that runs one (extended): its
    /// stages' setup, calibration, a warm-up and 3 timed iterations of 2 cases, on small
    /// shapes; its links' timeouts bound a stage that stops.
    pub fn pipeline(self) -> Option<Duration> {
        (self == Level::Extended).then_some(Duration::from_secs(100))
    }

    /// The most a node may take at this level (the budget per node).
    pub fn node_budget(self) -> Duration {
        Duration::from_secs(match self {
            Level::Health => HEALTH_BUDGET.as_secs(),
            Level::Quick => 60,
            Level::Standard => 300,
            Level::Extended => 1200,
        })
    }
}

/// Beyond a batch of tests' deadlines: building kernels, the order and the reply.
pub const SETUP_MARGIN: Duration = Duration::from_secs(5);

/// The health check's whole run on a node of [`HEALTH_PLAN_GPUS`] GPUs, by its plan: under the
/// 60 s after which slurmd kills a HealthCheckProgram.
pub const HEALTH_BUDGET: Duration = Duration::from_secs(45);

/// Beyond the health gate's own bound: starting its rank processes and reading their verdict.
pub const HEALTH_START: Duration = Duration::from_secs(2);

/// The node the health level's budget is planned for.
pub const HEALTH_PLAN_GPUS: u32 = 8;

impl Level {
    /// Beyond a batch's deadlines (see [`SETUP_MARGIN`]); the health level's kernels are small
    /// and its ranks already hold their adapters.
    pub fn setup_margin(self) -> Duration {
        match self {
            Level::Health => Duration::from_millis(300),
            _ => SETUP_MARGIN,
        }
    }

    /// How long a rank may take to open its adapter and report what it is.
    pub fn inventory_wait(self) -> Duration {
        match self {
            Level::Health => Duration::from_secs(5),
            _ => Duration::from_secs(60),
        }
    }

    /// The whole gate on `machines` alike, each of `per_machine` ranks (`cpu`: on a CPU
    /// driver), by its plan: the inventory, then the first pass and a retest of everything
    /// (the tests on a rank's own GPU at once, those on what a machine shares in turns).
    pub fn gate_bound(self, per_machine: u32, cpu: bool) -> Duration {
        let tests = self.tests();
        let batch = |shared: bool| -> Duration {
            let part: Vec<TestSpec> = tests
                .iter()
                .copied()
                .filter(|t| t.kind.shares_host(cpu) == shared)
                .collect();
            if part.is_empty() {
                Duration::ZERO
            } else {
                batch_bound(&part, self.setup_margin())
            }
        };
        let pass = batch(false) + batch(true) * per_machine;
        let links = self.links().map_or(Duration::ZERO, |l| l.allowance());
        self.inventory_wait() + pass * 2 + links + self.pipeline().unwrap_or_default()
    }
}

/// The longest a batch of tests may take on a rank before rank 0 stops waiting for it.
pub fn batch_bound(tests: &[TestSpec], margin: Duration) -> Duration {
    let s: f64 = tests.iter().map(|t| t.deadline_s).sum();
    Duration::from_secs_f64(s) + margin
}

/// The most one rank's tests may take at `level`: each test in its batch (those on its own
/// GPU, then those in turns on its machine), and once more if every figure is retested; then
/// the links' rounds and their retests.
pub fn rank_bound(
    tests: &[TestSpec],
    links: Option<&LinksSpec>,
    pipeline: Option<Duration>,
    margin: Duration,
) -> Duration {
    let s: f64 = tests.iter().map(|t| t.deadline_s).sum();
    let links = links.map_or(Duration::ZERO, LinksSpec::allowance);
    (Duration::from_secs_f64(s) + 2 * margin) * 2 + links + pipeline.unwrap_or_default()
}

/// Every test's name, as `--only` takes them.
pub const TEST_NAMES: [&str; 9] = [
    "memcpy",
    "gemm",
    "d2h",
    "h2d",
    "fma",
    "bandwidth",
    "hol",
    "links",
    "pipeline",
];

/// Checks `--only`: each name a test of `level`.
pub fn check_only(level: Level, only: &[String]) -> anyhow::Result<()> {
    for name in only {
        let at_level = level.tests().iter().any(|t| t.kind.name() == name)
            || (name == "links" && level.links().is_some())
            || (name == "pipeline" && level.pipeline().is_some());
        if at_level {
            continue;
        }
        return Err(if TEST_NAMES.contains(&name.as_str()) {
            anyhow::anyhow!(
                "--only {name}: {name} is not a test of --level {level}; it runs at {}",
                match name.as_str() {
                    "pipeline" => "extended",
                    "hol" | "links" => "standard and extended",
                    _ => "every level",
                }
            )
        } else {
            anyhow::anyhow!(
                "--only {name}: no such test; give some of {}",
                TEST_NAMES.join(",")
            )
        });
    }
    Ok(())
}

/// The gate's links: a pattern, what each pair measures (TCP latency at 8 B and bandwidth at
/// 1 MiB: the control plane's and a pipeline's activations' view of the path), and the
/// deadline after which no more rounds start.
#[derive(Debug, Clone)]
pub struct LinksSpec {
    pub pattern: Pattern,
    pub plan: PairPlan,
    pub deadline_s: f64,
}

/// The gate's links' bandwidth size: an activation's order of size.
pub const LINK_BANDWIDTH_BYTES: u64 = 1 << 20;

impl LinksSpec {
    /// The rounds' deadline, a round that started just before it, and [`noise::GATE_LINK_RETESTS`]
    /// suspects' retests (each at most its pair's tests).
    pub fn allowance(&self) -> Duration {
        let pair = self.plan.tests() as u32 * Duration::from_millis(self.plan.budget_ms + 20);
        Duration::from_secs_f64(self.deadline_s)
            + pair * (1 + noise::GATE_LINK_RETESTS)
            + SETUP_MARGIN
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
    /// µs per operation: median and 99th percentile, and the sample count. The FMA probe
    /// sizes its dispatch to the adapter, so its times are µs per GFLOP, comparable across
    /// ranks as every other test's are.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub n: usize,
    /// The deadline cut it: its samples are kept, and with fewer than
    /// [`probe::MIN_SAMPLES`] (`n`) there is no figure and it could not be checked.
    pub cut: bool,
    /// Why there is no figure (a failed verification, no adapter, over a device limit).
    pub error: Option<String>,
    /// Not run, with why (SKIP).
    pub skipped: Option<String>,
    /// What else the test saw, for the row's reason (the stall offload removed).
    #[serde(default)]
    pub note: Option<String>,
    /// The adapter's PCIe link read while this test copied (D2H), or why it is not exposed.
    #[serde(default)]
    pub pcie: Option<crate::reported::Reported<crate::pcie::Pcie>>,
    /// Where a host copy's buffers and thread were (memcpy), so placement is told from
    /// hardware; a retest's names every placement it tried.
    #[serde(default)]
    pub placement: Option<String>,
}

impl Measured {
    /// A `kind` test's outcome before it runs: its figure and unit, nothing measured yet.
    pub fn of(kind: TestKind) -> Measured {
        let (figure, unit) = kind.figure();
        Measured {
            test: kind,
            figure: figure.into(),
            unit: unit.into(),
            value: None,
            p50_us: None,
            p99_us: None,
            n: 0,
            cut: false,
            error: None,
            skipped: None,
            note: None,
            pcie: None,
            placement: None,
        }
    }
}

/// A batch of tests on one rank, with the host's load around them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Batch {
    pub results: Vec<Measured>,
    /// The adapter's PCIe link before and after the batch (for its AER counters' deltas).
    #[serde(default)]
    pub pcie_around: Option<(crate::pcie::Pcie, crate::pcie::Pcie)>,
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    pub busy: bool,
    pub cores: usize,
}

/// Runs `tests` on this rank, each until its samples or its deadline.
pub fn run_batch(gpu: Option<&Gpu>, tests: &[TestSpec]) -> Batch {
    let before = noise::load::Sample::now();
    let link = || {
        let bus = gpu.map(|g| g.report.pci_bus_id.clone())?;
        crate::pcie::read(&crate::pcie::sysfs_root(), &bus).ok()
    };
    let link_before = link();
    let results = tests.iter().map(|t| run_test(gpu, *t)).collect();
    let pcie_around = link_before.zip(link());
    let load = noise::load::Load::between(&before, &noise::load::Sample::now());
    let injected = noise::injected_other_cores();
    let others_cores = injected.or(load.other_cores);
    let busy = match injected {
        Some(c) => noise::is_busy(noise::MIN_BUSY_WINDOW_S, Some(c), None),
        None => load.busy,
    };
    Batch {
        results,
        pcie_around,
        others_cores: others_cores.map(|c| crate::record::csv::round(c, 2)),
        steal_pct: load
            .steal_fraction
            .map(|s| crate::record::csv::round(100.0 * s, 2)),
        busy,
        cores: load.cores,
    }
}

fn run_test(gpu: Option<&Gpu>, t: TestSpec) -> Measured {
    let mut m = Measured::of(t.kind);
    let budget = Budget {
        iters: t.iters,
        deadline: Instant::now() + Duration::from_secs_f64(t.deadline_s),
    };
    let gpu_test = !matches!(t.kind, TestKind::Memcpy);
    if gpu_test && gpu.is_none() {
        m.error = Some("no GPU adapter on this rank".into());
        return m;
    }
    // The ceilings fit their buffers to the adapter's limits themselves.
    let sized = matches!(t.kind, TestKind::D2h | TestKind::H2d);
    if let Some(g) = gpu.filter(|_| sized) {
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
    if let (TestKind::Hol, Some(g)) = (t.kind, gpu) {
        hol_test(g, t, budget, &mut m);
        return m;
    }
    let bytes = |p: Probed| (p, t.size as f64);
    // Each probe's samples and the work (FLOPs or bytes) of one of them.
    let probed: anyhow::Result<(Probed, f64)> = match (t.kind, gpu) {
        (TestKind::Memcpy, _) => probe::memcpy_placed(t.size, budget, t.retest).map(|p| {
            m.placement = Some(placement_text(&p));
            bytes(p.probed)
        }),
        (TestKind::Gemm, Some(g)) => probe::gemm(g, gemm, budget).map(|p| (p, gemm.flops())),
        (TestKind::D2h, Some(g)) => {
            // The link's state is read while the copies run (a link trains down when idle).
            let bus = g.report.pci_bus_id.clone();
            let reader = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                crate::pcie::read(&crate::pcie::sysfs_root(), &bus)
            });
            let out = probe::d2h_placed(g, t.size, budget, t.retest).map(|p| {
                m.placement = Some(placement_text(&p));
                bytes(p.probed)
            });
            m.pcie = reader.join().ok().map(Into::into);
            out
        }
        (TestKind::H2d, Some(g)) => probe::h2d_placed(g, t.size, budget, t.retest).map(|p| {
            m.placement = Some(placement_text(&p));
            bytes(p.probed)
        }),
        (TestKind::Fma, Some(g)) => crate::bench::peak::probe::fma(g, budget),
        (TestKind::Bandwidth, Some(g)) => crate::bench::peak::probe::copy(g, t.size, budget),
        (TestKind::Hol, Some(_)) => unreachable!("run above"),
        (_, None) => Err(anyhow::anyhow!("no GPU adapter")),
    };
    match probed {
        Ok((p, work)) => {
            // work per µs / 1e3 = G per second.
            m.value = Some(crate::record::csv::sig4(work / p.summary.p50 / 1e3));
            let per = match t.kind {
                TestKind::Fma => 1e9 / work,
                _ => 1.0,
            };
            m.p50_us = Some(p.summary.p50 * per);
            m.p99_us = Some(p.summary.p99 * per);
            m.n = p.summary.n;
            m.cut = p.cut;
        }
        Err(e) => failed(&mut m, e),
    }
    m
}

/// A test that ended in `e`: cut by its deadline before its fewest samples, it has no
/// figure and is not judged (the node was not shown slow, only not measured); any other
/// error (wrong bytes, no adapter) is the node's failure.
fn failed(m: &mut Measured, e: anyhow::Error) {
    match e.downcast_ref::<probe::Cut>() {
        Some(cut) => (m.cut, m.n) = (true, cut.samples),
        None => m.error = Some(format!("{e:#}")),
    }
}

/// A copy's placement for its row: the one kept, and with a retest's several placements
/// each with its rate.
fn placement_text(p: &probe::Placed) -> String {
    if p.tried.len() <= 1 {
        return p.placement.to_string();
    }
    let each: Vec<String> = p
        .tried
        .iter()
        .map(|(at, us)| format!("{at}: {:.0} us", us))
        .collect();
    format!("{} (best of {})", p.placement, each.join("; "))
}

/// The HoL test's stream: a transformer layer's GEMM and layernorm at `size` tokens and hidden
/// size, 12 ops, a send of the activation after every 2, each on a 12.5 Gbit/s link delayed
/// 5 ms, offloaded through TCP on loopback.
fn hol_plan(size: u32) -> HolPlan {
    use crate::bench::descriptor::Settings;
    let settings = crate::bench::hol::HolSettings {
        tokens: size,
        hidden: size,
        ops: 12,
        every: vec![2],
        delays_ms: Some(crate::bench::flags::MsList(vec![5.0])),
        modes: vec![Mode::Inline, Mode::Offload],
        reps: 1,
        ..Default::default()
    };
    settings
        .plan()
        .expect("the HoL test's stream is a valid plan")
}

/// The figure is the offloaded stream's compute rate (ops per second of its makespan): a node
/// whose offload path is slow (its copies, its host thread, its loopback) computes fewer ops
/// while its sends are on the wire. The reason keeps the stall offload removed.
fn hol_test(gpu: &Gpu, t: TestSpec, budget: Budget, m: &mut Measured) {
    match crate::bench::hol::probe(gpu, &hol_plan(t.size as u32), budget.iters, budget.deadline) {
        Ok(p) => {
            m.value = Some(crate::record::csv::sig4(
                f64::from(p.ops) * 1e6 / p.offload.p50,
            ));
            m.p50_us = Some(p.offload.p50);
            m.p99_us = Some(p.offload.p99);
            m.n = p.offload.n;
            m.cut = p.cut;
            m.note = Some(format!(
                "offload removed {:.0}% of inline's stall (inline {:.0} µs a stream, offload {:.0} µs)",
                100.0 * p.stall_removed,
                p.inline.p50,
                p.offload.p50
            ));
        }
        Err(e) => failed(m, e),
    }
}

#[cfg(test)]
#[path = "checks_tests.rs"]
mod tests;
