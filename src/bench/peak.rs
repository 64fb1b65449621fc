//! `morphbench peak`: the device's own ceilings, measured the way vkpeak and clpeak do, so the
//! kernels can be read as a share of them: FP32 FMA throughput (independent chains, scalar and
//! vec4), device memory bandwidth (read-only, write-only and copy kernels over buffers far
//! larger than caches, and the buffer-to-buffer copy), dispatch latency (an empty kernel,
//! submit to done), back-to-back dispatch rate within one pass, and the timestamp tick.
//! Every kernel's output is checked before its time counts.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::export::csv::{sig4, CsvSink, CsvTable, Line};
use crate::export::RunDir;
use crate::gpu::timing::{time_compute_passes, IterationTimes, PassTimer};
use crate::gpu::Gpu;
use crate::output::Progress;
use crate::stats::Summary;
use crate::units::human_bytes;

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

pub fn from_toml(v: toml::Value) -> Result<Box<dyn super::Bench>, String> {
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

impl super::Bench for PeakPlan {
    fn name(&self) -> &'static str {
        BENCH
    }
    fn points(&self) -> u64 {
        // fma x4, bandwidth x7 (x9 with 64-bit integers), dispatch x2, timestamp.
        16
    }
    fn run(&self, gpu: Option<&Gpu>, dir: &RunDir, progress: &Progress) -> Result<super::Notes> {
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
    let uniform = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("peak fma params"),
        size: std::mem::size_of::<Params>() as u64,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let set_trips = |trips: u32| {
        let p = Params {
            count: trips,
            mul: 1.0,
            add: 0.0,
            threads: 0,
        };
        gpu.queue.write_buffer(&uniform, 0, bytemuck::bytes_of(&p));
    };
    let out = gpu.storage_from(
        "peak fma out",
        &vec![0u8; (FMA_GROUPS * FMA_WG) as usize * 16],
    );
    let mut best: f64 = 0.0;
    let variants = [
        ("scalar", WGSL, "chains_scalar", 1u32),
        ("vec4", WGSL, "chains_vec4", 4),
        ("mad_scalar", MAD_WGSL, "chains_scalar", 1),
        ("mad_vec4", MAD_WGSL, "chains_vec4", 4),
    ];
    for (variant, wgsl, entry, lanes) in variants {
        let k = kernel(gpu, (wgsl, entry), &uniform, None, &out)?;
        set_trips(1);
        verify_fma(gpu, &k, &out, lanes, FMA_GROUPS)?;
        // Grow the grid, then the loop, until one dispatch takes TARGET_US, so launch cost is
        // a rounding error. Long loops first: a CPU driver runs invocations in turn and pays
        // for each one's start, a GPU needs the whole grid to fill its cores.
        let (mut groups, mut trips) = (1, 1024);
        set_trips(trips);
        while once_us(gpu, &k, groups)? < TARGET_US {
            if groups < FMA_GROUPS {
                groups *= 2;
            } else if trips < MAX_TRIPS {
                trips *= 2;
                set_trips(trips);
            } else {
                break;
            }
        }
        let t = time_compute_passes(gpu, plan.warmup, plan.iters, None, |p| {
            dispatch(p, &k, groups)
        })?;
        let flops =
            (groups * FMA_WG) as f64 * trips as f64 * FMAS_PER_TRIP as f64 * lanes as f64 * 2.0;
        let (s, timer) = samples(&t);
        let sum = rows.write("fma", variant, flops, s, timer, Rate::Flops)?;
        best = best.max(flops / sum.min / 1e3);
        verify_fma(gpu, &k, &out, lanes, groups)?;
    }
    Ok(best)
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

/// Device memory bandwidth; returns the copy kernel's GB/s.
fn bandwidth(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<f64> {
    let limits = gpu.device.limits();
    let bytes = plan
        .bytes
        .min(limits.max_storage_buffer_binding_size)
        .min(limits.max_buffer_size)
        / 32
        * 32;
    ensure!(
        bytes >= 1 << 20,
        "the device binds at most {} per storage buffer: too small for a bandwidth test",
        human_bytes(bytes)
    );
    let n = (bytes / 16) as u32;
    // Small integers keep the read kernels' sums exact.
    let src_data: Vec<f32> = (0..n as usize * 4).map(|i| (i % 4) as f32).collect();
    let src = gpu.storage_from("peak src", &src_data);
    let dst = gpu.storage_from("peak dst", &vec![0u8; bytes as usize]);
    // `per_invocation` of `count` elements per invocation, within one dimension of groups.
    let grid = |count: u32, per_invocation: u32| {
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
    };
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

/// A bandwidth kernel ready to dispatch, and the buffer it writes.
struct Timed<'a> {
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
enum Layout {
    Strided,
    Chunked,
}

/// Elements per chunk in the `_chunk` kernels (CHUNK in shaders/peak_grid.wgsl).
const CHUNK: u32 = 8;

fn verify_bandwidth(
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

fn time_buffer_copy(
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

/// An empty kernel: one dispatch submitted and waited for (latency), and `dispatches` of them
/// in one pass between timestamps (the back-to-back rate).
fn dispatch_cost(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<()> {
    let pipeline = gpu.compute_pipeline("peak empty", WGSL, "empty", true, &[])?;
    let record = |pass: &mut wgpu::ComputePass<'_>, count: u32| {
        pass.set_pipeline(&pipeline);
        for _ in 0..count {
            pass.dispatch_workgroups(1, 1, 1);
        }
    };
    let mut latency = Vec::new();
    for rep in 0..plan.warmup + plan.iters.max(20) {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        record(&mut enc.begin_compute_pass(&Default::default()), 1);
        let cmd = enc.finish();
        let t0 = Instant::now();
        let idx = gpu.queue.submit([cmd]);
        gpu.wait(idx)?;
        if rep >= plan.warmup {
            latency.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    rows.write("dispatch", "latency", 0.0, &latency, "host", Rate::None)?;
    let t = time_compute_passes(gpu, plan.warmup, plan.iters, None, |p| {
        record(p, plan.dispatches)
    })?;
    let (s, timer) = samples(&t);
    let per: Vec<f64> = s.iter().map(|x| x / plan.dispatches as f64).collect();
    rows.write("dispatch", "back_to_back", 0.0, &per, timer, Rate::None)?;
    Ok(())
}

/// The smallest step the GPU clock shows: two timestamps written back to back, many times.
fn timestamp_tick(gpu: &Gpu, plan: &PeakPlan, rows: &mut Rows) -> Result<()> {
    let period_us = gpu.queue.get_timestamp_period() as f64 / 1e3;
    if !gpu.has_encoder_timestamps() {
        rows.progress.inc();
        return Ok(());
    }
    let timer = PassTimer::new(gpu, 1);
    let mut gaps = Vec::new();
    for _ in 0..plan.iters.max(20) {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        timer.encoder_write(&mut enc, 0, false);
        timer.encoder_write(&mut enc, 0, true);
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx)?;
        // A gap of zero ticks still tells the resolution: one tick is the floor.
        gaps.push(timer.read(gpu, 1)?[0].max(period_us));
    }
    rows.write("timestamp", "tick", 0.0, &gaps, "gpu", Rate::None)?;
    Ok(())
}
