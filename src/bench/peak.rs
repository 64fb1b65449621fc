//! `morphbench peak`: the device's own ceilings, measured the way vkpeak and clpeak do, so the
//! kernels can be read as a share of them: FP32 FMA throughput (independent chains, scalar and
//! vec4), device memory bandwidth (read-only, write-only and copy kernels over buffers far
//! larger than caches, and the buffer-to-buffer copy), dispatch latency (an empty kernel,
//! submit to done), back-to-back dispatch rate within one pass, and the timestamp tick.
//! Every kernel's output is checked before its time counts.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::gpu::timing::{time_compute_passes, IterationTimes, PassTimer};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::record::csv::{sig4, CsvSink, CsvTable, Line};
use crate::record::RunDir;
use crate::stats::Summary;
use crate::units::human_bytes;

mod bandwidth;
#[allow(unused_imports)]
pub use bandwidth::*;

mod overheads;
#[allow(unused_imports)]
pub use overheads::*;

pub mod probe;

pub const BENCH: &str = "peak";

// The peak kernels share one body; the part in front says which multiply-add they measure.
const WGSL: &str = concat!(
    include_str!("../../shaders/peak_fma.wgsl"),
    include_str!("../../shaders/peak_grid.wgsl"),
    include_str!("../../shaders/peak_f32.wgsl"),
    include_str!("../../shaders/peak_copy.wgsl"),
    include_str!("../../shaders/peak.wgsl")
);
const MAD_WGSL: &str = concat!(
    include_str!("../../shaders/peak_mad.wgsl"),
    include_str!("../../shaders/peak_grid.wgsl"),
    include_str!("../../shaders/peak_f32.wgsl"),
    include_str!("../../shaders/peak_copy.wgsl"),
    include_str!("../../shaders/peak.wgsl")
);
/// The copy kernels moving vec4<u64>, for adapters with 64-bit shader integers.
const U64_WGSL: &str = concat!(
    include_str!("../../shaders/peak_grid.wgsl"),
    include_str!("../../shaders/peak_u64.wgsl"),
    include_str!("../../shaders/peak_copy.wgsl")
);
/// Invocations per workgroup in shaders/peak.wgsl.
const WG: u32 = 256;
/// Invocations per workgroup of the FMA kernels (64: lavapipe runs a workgroup of 256 at half
/// the rate).
const FMA_WG: u32 = 64;
/// The most workgroups of the FMA kernels: a million invocations, enough to fill the largest
/// GPU.
const FMA_GROUPS: u32 = 16384;
/// The most loop trips per FMA invocation (about 0.5 PFLOP per dispatch, vec4).
const MAX_TRIPS: u32 = 1 << 20;
/// Multiply-adds per loop trip and invocation (each of `lanes` lanes): 8 chains x 4 steps
/// (scalar) or 4 chains x 8 steps (vec4).
const FMAS_PER_TRIP: u32 = 32;
/// The most workgroups in one dimension every adapter allows.
const MAX_GROUPS: u32 = 65535;
/// A dispatch is sized to run at least this long, so its timing is not its launch (and a CPU
/// driver's worker threads are all busy).
const TARGET_US: f64 = 30000.0;

/// `peak.csv`: one row per metric and variant.
pub struct PeakTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeakParams {
    /// `fma`, `bandwidth`, `dispatch` or `timestamp`.
    pub metric: String,
    /// `scalar`/`vec4` (the fma builtin), `mad_scalar`/`mad_vec4` (a * b + c) (fma);
    /// `read`/`write`/`copy` (element-strided), `read_chunk`/`write_chunk`/`copy_chunk` (8
    /// contiguous elements per invocation), `copy_u64`/`copy_u64_chunk` (the same copies
    /// moving vec4<u64>, with 64-bit shader integers), `buffer_copy` (bandwidth);
    /// `latency`/`back_to_back` (dispatch); `tick` (timestamp).
    pub variant: String,
    /// The work of one timed iteration: flops, or bytes read plus bytes written.
    pub bytes_or_flops: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeakFigures {
    /// From the median iteration, like every other table's rates.
    pub gflops: Option<f64>,
    pub gbps: Option<f64>,
    /// `gpu` (timestamps) or `host` (submit to done).
    pub timer: String,
    pub verified: bool,
    /// From the best (fastest) iteration: what the ceilings are. Noise only ever slows a kernel
    /// down, so the best iteration is what the device can do; the median moves with a
    /// machine's slow spells (lavapipe's copy kernels ran at about 4 or about 8 GB/s, changing
    /// between dispatches or between runs).
    pub best_gflops: Option<f64>,
    pub best_gbps: Option<f64>,
}

impl PeakFigures {
    /// The best iteration's GFLOP/s, or the median's in a peak.csv from before `best_gflops`.
    pub fn ceiling_gflops(&self) -> Option<f64> {
        self.best_gflops.or(self.gflops)
    }

    /// The best iteration's GB/s, or the median's in a peak.csv from before `best_gbps`.
    pub fn ceiling_gbps(&self) -> Option<f64> {
        self.best_gbps.or(self.gbps)
    }
}

impl CsvTable for PeakTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = PeakParams;
    type Figures = PeakFigures;
    const ADDED: &'static [&'static str] = &["best_gflops", "best_gbps"];
}

#[derive(Debug, Clone, Serialize)]
pub struct PeakPlan {
    pub iters: u32,
    pub warmup: u32,
    /// The bandwidth buffers' size (capped by the device's binding limit).
    pub bytes: u64,
    /// Dispatches in the back-to-back pass.
    pub dispatches: u32,
}

impl Default for PeakPlan {
    fn default() -> PeakPlan {
        PeakPlan {
            iters: 10,
            warmup: 2,
            bytes: 256 << 20,
            dispatches: 1000,
        }
    }
}

/// `[peak]` in a suite config.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeakConfig {
    pub iters: Option<u32>,
    pub warmup: Option<u32>,
    /// Bandwidth buffer size, such as "256M".
    pub bytes: Option<String>,
    pub dispatches: Option<u32>,
}

impl PeakConfig {
    pub fn plan(&self) -> Result<PeakPlan, String> {
        let d = PeakPlan::default();
        let plan = PeakPlan {
            iters: self.iters.unwrap_or(d.iters),
            warmup: self.warmup.unwrap_or(d.warmup),
            bytes: match &self.bytes {
                Some(s) => crate::units::parse_size(s).map_err(|e| format!("peak.bytes: {e}"))?,
                None => d.bytes,
            },
            dispatches: self.dispatches.unwrap_or(d.dispatches),
        };
        plan.validate()?;
        Ok(plan)
    }
}

pub fn from_toml(v: toml::Value) -> Result<Box<dyn crate::suite::Bench>, String> {
    Ok(Box::new(super::table::<PeakConfig>(v)?.plan()?))
}

impl PeakPlan {
    /// Bounds the run before it starts: iterations as every bench, a buffer from 1 MiB to 4
    /// GiB, at most 100000 dispatches in the back-to-back pass.
    pub fn validate(&self) -> Result<(), String> {
        super::check_iters("peak.iters", self.iters)?;
        super::check_warmup("peak.warmup", self.warmup)?;
        if !(1 << 20..=4 << 30).contains(&self.bytes) || !self.bytes.is_multiple_of(16) {
            return Err(format!(
                "peak.bytes = {}: give a multiple of 16 bytes from 1 MiB to 4 GiB (larger than \
                 the device's caches)",
                self.bytes
            ));
        }
        if !(1..=100_000).contains(&self.dispatches) {
            return Err(format!(
                "peak.dispatches = {}: give a count from 1 to 100000",
                self.dispatches
            ));
        }
        Ok(())
    }
}

impl crate::suite::Bench for PeakPlan {
    fn name(&self) -> &'static str {
        BENCH
    }
    fn points(&self) -> u64 {
        // fma x4, bandwidth x7 (x9 with 64-bit integers), dispatch x2, timestamp.
        16
    }
    fn run(
        &self,
        gpu: Option<&Gpu>,
        dir: &RunDir,
        progress: &Progress,
    ) -> Result<crate::suite::Notes> {
        let gpu = super::need_gpu(gpu, BENCH)?;
        let ceilings = run(gpu, self, dir, progress)?;
        super::note(BENCH, ceilings)
    }
}

/// The ceilings other benches are read against.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Ceilings {
    /// The best FP32 multiply-add rate (any of the four forms, best iteration), GFLOP/s.
    pub fma_gflops: f64,
    /// The best copy kernel's bandwidth (bytes read plus written, best iteration), GB/s.
    pub copy_gbps: f64,
}

impl Ceilings {
    /// The ceilings a run's peak.csv holds, if it has them.
    pub fn from_rows(rows: &[Line<PeakTable>]) -> Option<Ceilings> {
        Some(Ceilings {
            fma_gflops: fma_ceiling_row(rows)?.1,
            copy_gbps: copy_ceiling_row(rows)?.1,
        })
    }
}

/// The row the FP32 ceiling comes from (the fastest of the FMA forms) and its rate.
pub fn fma_ceiling_row(rows: &[Line<PeakTable>]) -> Option<(usize, f64)> {
    fastest(
        rows,
        |l| l.params.metric == "fma",
        PeakFigures::ceiling_gflops,
    )
}

/// The row the copy ceiling comes from (the fastest copy kernel, not the buffer-to-buffer
/// copy) and its rate.
pub fn copy_ceiling_row(rows: &[Line<PeakTable>]) -> Option<(usize, f64)> {
    let copy = |l: &Line<PeakTable>| {
        l.params.metric == "bandwidth" && l.params.variant.starts_with("copy")
    };
    fastest(rows, copy, PeakFigures::ceiling_gbps)
}

fn fastest(
    rows: &[Line<PeakTable>],
    keep: impl Fn(&Line<PeakTable>) -> bool,
    rate: fn(&PeakFigures) -> Option<f64>,
) -> Option<(usize, f64)> {
    rows.iter()
        .enumerate()
        .filter(|(_, l)| keep(l))
        .filter_map(|(i, l)| Some((i, rate(&l.figures)?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// The uniform of shaders/peak.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    count: u32,
    mul: f32,
    add: f32,
    threads: u32,
}

/// One measured row, written as it comes (`table` is `None` when the ceilings are measured
/// for another bench and not reported).
struct Rows<'a> {
    run_id: &'a str,
    table: Option<CsvSink<PeakTable>>,
    progress: &'a Progress,
}

impl Rows<'_> {
    fn write(
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
enum Rate {
    Flops,
    Bytes,
    None,
}

/// The samples to use: GPU timestamps when the adapter has them, else the host clock.
fn samples(t: &IterationTimes) -> (&[f64], &'static str) {
    match &t.gpu_us {
        Some(g) => (g, "gpu"),
        None => (&t.host_us, "host"),
    }
}

struct Kernel {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
}

fn kernel(
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

fn dispatch(pass: &mut wgpu::ComputePass<'_>, k: &Kernel, groups: u32) {
    pass.set_pipeline(&k.pipeline);
    pass.set_bind_group(0, &k.bind_group, &[]);
    pass.dispatch_workgroups(groups, 1, 1);
}

/// Host time of one dispatch of `groups` workgroups, submit to done.
fn once_us(gpu: &Gpu, k: &Kernel, groups: u32) -> Result<f64> {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    dispatch(&mut enc.begin_compute_pass(&Default::default()), k, groups);
    let t0 = Instant::now();
    let idx = gpu.queue.submit([enc.finish()]);
    gpu.wait(idx)?;
    Ok(t0.elapsed().as_secs_f64() * 1e6)
}

/// Measures every ceiling and writes peak.csv.
pub fn run(gpu: &Gpu, plan: &PeakPlan, dir: &RunDir, progress: &Progress) -> Result<Ceilings> {
    let mut rows = Rows {
        run_id: &dir.id,
        table: Some(dir.table()?),
        progress,
    };
    let fma_gflops = fma(gpu, plan, &mut rows)?;
    let copy_gbps = bandwidth(gpu, plan, &mut rows)?;
    dispatch_cost(gpu, plan, &mut rows)?;
    timestamp_tick(gpu, plan, &mut rows)?;
    Ok(Ceilings {
        fma_gflops,
        copy_gbps,
    })
}

/// The ceilings alone, briefly and unreported, for a bench run without `peak` (`kernels`).
pub fn quick_ceilings(gpu: &Gpu) -> Result<Ceilings> {
    let plan = PeakPlan {
        iters: 5,
        warmup: 1,
        bytes: 64 << 20,
        ..PeakPlan::default()
    };
    let hidden = Progress::new(0, true);
    let mut rows = Rows {
        run_id: "",
        table: None,
        progress: &hidden,
    };
    Ok(Ceilings {
        fma_gflops: fma(gpu, &plan, &mut rows)?,
        copy_gbps: bandwidth(gpu, &plan, &mut rows)?,
    })
}

/// FMA throughput, scalar and vec4; returns the best iteration of the better one in GFLOP/s.
fn fma(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<f64> {
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
struct FmaBuffers {
    uniform: wgpu::Buffer,
    out: wgpu::Buffer,
}

impl FmaBuffers {
    fn new(gpu: &Gpu) -> FmaBuffers {
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
fn fit_fma(gpu: &Gpu, k: &Kernel, bufs: &FmaBuffers) -> Result<(u32, u32)> {
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
fn fma_flops(groups: u32, trips: u32, lanes: u32) -> f64 {
    (groups * FMA_WG) as f64 * trips as f64 * FMAS_PER_TRIP as f64 * lanes as f64 * 2.0
}

/// With a multiplier of 1 and an addend of 0, every chain keeps its start value: the output is
/// known exactly, whatever the trip count.
fn verify_fma(gpu: &Gpu, k: &Kernel, out: &wgpu::Buffer, lanes: u32, groups: u32) -> Result<()> {
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
