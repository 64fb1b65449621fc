//! The `hol` bench: head-of-line blocking on the GPU's one queue.
//!
//! A pipeline-stage-like stream runs on the queue: a transformer layer's GEMM (tokens x hidden
//! by hidden x hidden) and layernorm in turn, each op reading the previous op's output, with a
//! transfer of the fresh activation after every `every` ops. Three ways to do the transfer:
//! - `none`: no transfer, the baseline;
//! - `inline`: a calibrated busy-wait kernel occupies the queue for bytes / link + delay, as a
//!   communication kernel stalled on a slow link does;
//! - `offload`: a fast copy into a staging buffer in its own submission; a poller thread waits
//!   for it and maps it, a sender thread sends the bytes through a Transport after the delay,
//!   and the queue goes on computing.
//!
//! Every op and transfer is timed with GPU timestamps; the HoL stall of an op is its start
//! minus the end of the compute op before it.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::export::csv::Schema;
use crate::export::{Record, RunDir};
use crate::gpu::kernels::gemm::gemm_pass;
use crate::gpu::kernels::layernorm::layernorm_pass;
use crate::gpu::kernels::select::select;
use crate::gpu::kernels::{
    find_variant, random_vec, DispatchPass, GemmKernel, GemmSize, GpuKernel, LayernormKernel,
    LayernormSize, Variant, GEMM_VARIANTS, LAYERNORM_VARIANTS,
};
use crate::gpu::standin::{CalibrationPoint, SpinPass, StandIn};
use crate::gpu::timing::PassTimer;
use crate::gpu::transfer::{touched, MapTiming, StagingPool};
use crate::gpu::{Gpu, WAIT_LIMIT};
use crate::output::Progress;
use crate::rdma::transport::RdmaTransport;
use crate::rdma::DeviceChoice;
use crate::stats::Summary;
use crate::transport::sink::{spawn_loopback, SinkStats};
use crate::transport::tcp::{TcpTransport, Timeouts};
use crate::transport::wire::{checksum, MAX_PAYLOAD};
use crate::transport::{Transport, TransportError, TransportKind};

pub const BENCH: &str = "hol";

/// The longest straggler delay accepted (one minute).
pub const MAX_DELAY_MS: f64 = 60_000.0;

pub const SCHEMA: Schema = Schema {
    params: &[
        "mode",
        "delay_ms",
        "bytes",
        "every",
        "ops",
        "tokens",
        "hidden",
        "transport",
    ],
    // The statistics block summarises the makespan over repetitions.
    with_stats: true,
    tail: &[
        "makespan_us",
        "busy_fraction",
        "stall_mean_us",
        "stall_p50_us",
        "stall_p99_us",
        "stall_max_us",
        "stall_removed",
        "busy_vs_none",
        "overhead_vs_none",
        "standin_asked_us",
        "standin_achieved_us",
        "d2h_copy_us",
        "map_us",
        "copy_out_us",
        "delay_us",
        "send_us",
        "receive_us",
        "transfer_e2e_us",
        "transfer_e2e_p99_us",
        "transfers",
        "timer",
        "verified",
    ],
};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    None,
    Inline,
    Offload,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::None => "none",
            Mode::Inline => "inline",
            Mode::Offload => "offload",
        })
    }
}

/// Straggler delays: a list to sweep (every transfer gets the same), or a trace giving the
/// delay of each transfer index in the stream (`iteration;delay_ms` lines).
#[derive(Debug, Clone, serde::Serialize)]
pub enum Delays {
    Sweep(Vec<f64>),
    Trace(Vec<(u64, f64)>),
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct HolPlan {
    pub tokens: u32,
    pub hidden: u32,
    pub ops: u32,
    pub every: Vec<u32>,
    /// Bytes per transfer; `None` sends the whole activation.
    pub bytes: Vec<Option<u64>>,
    pub delays: Delays,
    pub modes: Vec<Mode>,
    pub reps: u32,
    pub link_gbps: f64,
    /// A remote `morphbench sink`; `None` runs one in-process on loopback.
    pub peer: Option<String>,
    pub transport: TransportKind,
    /// The RDMA device, port and GID when `transport` is RDMA.
    pub rdma: DeviceChoice,
    pub gemm_variant: Option<String>,
    pub layernorm_variant: Option<String>,
}

/// Parses `iteration;delay_ms` lines (`#` comments).
pub fn parse_delay_trace(text: &str) -> Result<Vec<(u64, f64)>, String> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |what: &str| format!("line {}: '{line}': {what}", no + 1);
        let (it, ms) = line
            .split_once(';')
            .ok_or_else(|| at("expected iteration;delay_ms"))?;
        let it: u64 = it
            .trim()
            .parse()
            .map_err(|_| at("iteration is not a whole number"))?;
        let ms: f64 = ms
            .trim()
            .parse()
            .map_err(|_| at("delay_ms is not a number"))?;
        check_delay(ms).map_err(|e| at(&e))?;
        out.push((it, ms));
    }
    if out.is_empty() {
        return Err("the trace has no iteration;delay_ms lines".into());
    }
    Ok(out)
}

pub fn check_delay(ms: f64) -> Result<(), String> {
    if !ms.is_finite() || !(0.0..=MAX_DELAY_MS).contains(&ms) {
        return Err(format!(
            "delay {ms} ms is out of range: give 0 to {MAX_DELAY_MS} ms"
        ));
    }
    Ok(())
}

impl HolPlan {
    pub fn validate(&self) -> Result<(), String> {
        if self.tokens == 0 || self.hidden == 0 || !self.hidden.is_multiple_of(4) {
            return Err(format!(
                "tokens {} x hidden {}: both must be >= 1 and hidden a multiple of 4",
                self.tokens, self.hidden
            ));
        }
        if self.ops < 2 {
            return Err("ops must be at least 2".into());
        }
        if self.every.iter().any(|&e| e == 0 || e > self.ops) {
            return Err(format!("every must be between 1 and ops ({})", self.ops));
        }
        if self.reps == 0 {
            return Err("reps must be at least 1".into());
        }
        if !(self.link_gbps.is_finite() && self.link_gbps > 0.0) {
            return Err("link-gbps must be a positive number".into());
        }
        let act = self.activation_bytes();
        for b in self.bytes.iter().flatten() {
            if *b == 0 || b % 4 != 0 || *b > act {
                return Err(format!(
                    "bytes {b}: a transfer sends part of the activation, so give a multiple of 4 \
                     from 4 to {act} (tokens x hidden x 4)"
                ));
            }
        }
        match &self.delays {
            Delays::Sweep(d) if d.is_empty() => return Err("no delay to run".into()),
            Delays::Sweep(d) => d.iter().try_for_each(|&ms| check_delay(ms))?,
            Delays::Trace(t) => t.iter().try_for_each(|&(_, ms)| check_delay(ms))?,
        }
        if self.modes.is_empty() {
            return Err("no mode to run".into());
        }
        Ok(())
    }

    pub fn activation_bytes(&self) -> u64 {
        self.tokens as u64 * self.hidden as u64 * 4
    }

    fn transfers(&self, every: u32) -> u32 {
        self.ops / every
    }

    pub fn points(&self) -> u64 {
        let delays = match &self.delays {
            Delays::Sweep(d) => d.len(),
            Delays::Trace(_) => 1,
        };
        (self.every.len() * self.bytes.len() * delays * self.modes.len()) as u64
    }
}

/// The GEMM -> layernorm -> GEMM ... chain on two activation buffers.
struct Stream {
    gemm: DispatchPass,
    layernorm: DispatchPass,
    /// GEMM input and layernorm output.
    act_a: wgpu::Buffer,
    /// GEMM output and layernorm input.
    act_c: wgpu::Buffer,
    input: wgpu::Buffer,
}

impl Stream {
    fn output_of(&self, op: u32) -> &wgpu::Buffer {
        if op.is_multiple_of(2) {
            &self.act_c
        } else {
            &self.act_a
        }
    }

    /// Op `op`'s pass: GEMM on even ops, layernorm on odd ones.
    fn pass(&self, op: u32) -> &DispatchPass {
        if op.is_multiple_of(2) {
            &self.gemm
        } else {
            &self.layernorm
        }
    }

    fn reset(&self, gpu: &Gpu) -> Result<()> {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&self.input, 0, &self.act_a, 0, self.input.size());
        let idx = gpu.queue.submit([enc.finish()]);
        gpu.wait(idx)?;
        Ok(())
    }
}

fn choose_variant<'g, K: GpuKernel + 'g>(
    gpu: &'g Gpu,
    kernel: &str,
    list: &'static [Variant],
    forced: Option<&str>,
    probe: impl FnMut(&'static Variant) -> Result<K, crate::gpu::kernels::KernelError>,
    probe_name: String,
) -> Result<&'static Variant> {
    match forced {
        Some(name) if name != "auto" => {
            find_variant(list, name).with_context(|| format!("unknown {kernel} variant '{name}'"))
        }
        _ => Ok(select(gpu, kernel, list, &probe_name, false, probe)?.0),
    }
}

fn build_stream(gpu: &Gpu, plan: &HolPlan) -> Result<Stream> {
    let (m, h) = (plan.tokens, plan.hidden);
    let gsize = GemmSize { m, n: h, k: h };
    let lsize = LayernormSize { rows: m, hidden: h };
    let gv = choose_variant(
        gpu,
        "gemm",
        GEMM_VARIANTS,
        plan.gemm_variant.as_deref(),
        |v| GemmKernel::new(gpu, v, gsize),
        gsize.to_string(),
    )?;
    let lv = choose_variant(
        gpu,
        "layernorm",
        LAYERNORM_VARIANTS,
        plan.layernorm_variant.as_deref(),
        |v| LayernormKernel::new(gpu, v, lsize),
        lsize.to_string(),
    )?;
    // Each kernel is verified at this size against the f64 reference before any timing.
    GemmKernel::new(gpu, gv, gsize)?.verify()?;
    LayernormKernel::new(gpu, lv, lsize)?.verify()?;
    let elems = m as usize * h as usize;
    let input_data = random_vec(elems);
    let input = gpu.storage_from("hol input", &input_data);
    let act_a = gpu.storage_from("hol act a", &input_data);
    let act_c = gpu.storage_from("hol act c", &vec![0.0f32; elems]);
    // Weights scaled by 1/sqrt(hidden) keep activations of order 1 through the chain.
    let scale = 1.0 / (h as f32).sqrt();
    let weight: Vec<f32> = random_vec(h as usize * h as usize)
        .iter()
        .map(|w| w * scale)
        .collect();
    let weight = gpu.storage_from("hol weight", &weight);
    let gamma = gpu.storage_from("hol gamma", &random_vec(h as usize));
    let beta = gpu.storage_from("hol beta", &random_vec(h as usize));
    Ok(Stream {
        gemm: gemm_pass(gpu, gv, gsize, &act_a, &weight, &act_c)?,
        layernorm: layernorm_pass(gpu, lv, lsize, &act_c, &gamma, &beta, &act_a)?,
        act_a,
        act_c,
        input,
    })
}

/// One offloaded transfer as it went.
#[derive(Debug, Clone, Copy, Default)]
struct OffloadSample {
    map: MapTiming,
    delay_us: f64,
    send_us: f64,
    receive_us: f64,
    end_to_end_us: f64,
}

/// One repetition of the stream.
struct Rep {
    /// (start, end) of each compute op, µs on the GPU clock.
    ops: Vec<(f64, f64)>,
    /// (start, end) of each transfer's queue work (stand-in or copy).
    transfers: Vec<(f64, f64)>,
    offload: Vec<OffloadSample>,
    output: Vec<u8>,
    sink: Option<SinkStats>,
}

struct Job {
    index: usize,
    slot: usize,
    submission: wgpu::SubmissionIndex,
    submitted: Instant,
    delay: Duration,
}

/// The in-process sink's thread, when there is one.
type SinkThread = std::thread::JoinHandle<Result<SinkStats, TransportError>>;

/// Where offloaded bytes go: a fresh connection per repetition.
fn connect(plan: &HolPlan, bytes: u64) -> Result<(Box<dyn Transport>, Option<SinkThread>)> {
    let timeouts = Timeouts::default();
    let max = bytes.clamp(4, MAX_PAYLOAD);
    let (addr, sink) = match &plan.peer {
        Some(addr) => (addr.clone(), None),
        None => {
            let (addr, sink) = spawn_loopback(plan.transport, plan.rdma.clone(), max, timeouts.io)?;
            (addr.to_string(), Some(sink))
        }
    };
    let transport: Box<dyn Transport> = match plan.transport {
        TransportKind::Tcp => Box::new(TcpTransport::connect(&addr, max, timeouts)?),
        TransportKind::Rdma => {
            Box::new(RdmaTransport::connect(&addr, &plan.rdma, max, timeouts.io)?)
        }
    };
    Ok((transport, sink))
}

struct Ctx<'a> {
    gpu: &'a Gpu,
    plan: &'a HolPlan,
    stream: &'a Stream,
    standin: Option<&'a StandIn>,
}

fn run_rep(ctx: &Ctx<'_>, mode: Mode, every: u32, bytes: u64, delays_ms: &[f64]) -> Result<Rep> {
    let Ctx {
        gpu, plan, stream, ..
    } = *ctx;
    let ops = plan.ops;
    let transfers = plan.transfers(every);
    stream.reset(gpu)?;
    let timer = PassTimer::new(gpu, ops + transfers);
    ensure!(
        timer.capacity() >= ops + transfers,
        "at most 2048 ops and transfers per stream"
    );
    // Everything a transfer needs is made before the stream starts.
    let standins: Vec<SpinPass> = match mode {
        Mode::Inline => {
            let s = ctx.standin.context("stand-in not calibrated")?;
            let wire_us = bytes as f64 / (plan.link_gbps * 1e3);
            (0..transfers)
                .map(|t| {
                    let op = (t + 1) * every - 1;
                    s.pass(
                        gpu,
                        stream.output_of(op),
                        wire_us + delays_ms[t as usize] * 1e3,
                    )
                })
                .collect::<Result<_, _>>()?
        }
        _ => Vec::new(),
    };
    let offload = mode == Mode::Offload;
    let slots = if offload {
        (transfers as u64).min((512 << 20) / bytes.max(1)).max(2) as usize
    } else {
        0
    };
    let pool = StagingPool::new(gpu, slots, bytes);
    let hosts: Vec<Mutex<Vec<u8>>> = (0..slots)
        .map(|_| Mutex::new(touched(bytes as usize)))
        .collect();
    let (mut transport, sink) = if offload {
        let (t, s) = connect(plan, bytes)?;
        (Some(t), s)
    } else {
        (None, None)
    };
    let (job_tx, job_rx): (Sender<Job>, Receiver<Job>) = channel();
    let (send_tx, send_rx) = channel::<(Job, MapTiming, Instant)>();
    let returner = pool.returner();

    let (samples, last) = std::thread::scope(
        |scope| -> Result<(Vec<OffloadSample>, Option<wgpu::SubmissionIndex>)> {
            let poller = offload.then(|| {
                let (staging, hosts) = (&pool.buffers, &hosts);
                scope.spawn(move || -> Result<()> {
                    for job in job_rx {
                        let mut host = hosts[job.slot].lock().unwrap();
                        let m = gpu.map_read_into(
                            &staging[job.slot],
                            &mut host,
                            Some(job.submission.clone()),
                        )?;
                        let mapped = Instant::now();
                        drop(host);
                        if send_tx.send((job, m, mapped)).is_err() {
                            break;
                        }
                    }
                    Ok(())
                })
            });
            let sender = transport.as_mut().map(|t| {
                let hosts = &hosts;
                scope.spawn(move || -> Result<Vec<OffloadSample>> {
                    let mut out = vec![OffloadSample::default(); transfers as usize];
                    let mut failed: Option<anyhow::Error> = None;
                    for (job, map, mapped) in send_rx {
                        if failed.is_none() {
                            // The delay runs from when the bytes are ready, like link latency.
                            let due = mapped + job.delay;
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            let start = Instant::now();
                            let host = hosts[job.slot].lock().unwrap();
                            match t.send(&host) {
                                Ok(timing) => {
                                    out[job.index] = OffloadSample {
                                        map,
                                        delay_us: (start - mapped).as_secs_f64() * 1e6,
                                        send_us: timing.send_us,
                                        receive_us: timing.receive_us,
                                        end_to_end_us: job.submitted.elapsed().as_secs_f64() * 1e6,
                                    };
                                }
                                Err(e) => failed = Some(anyhow!(e).context("offload send failed")),
                            }
                        }
                        // Slots always come back, so the stream never waits on a dead sender.
                        let _ = returner.send(job.slot);
                    }
                    match failed {
                        Some(e) => Err(e),
                        None => {
                            t.close()?;
                            Ok(out)
                        }
                    }
                })
            });

            let mut last = None;
            let mut t = 0u32;
            for op in 0..ops {
                let mut enc = gpu.device.create_command_encoder(&Default::default());
                let op_pass = stream.pass(op);
                timer.record_pass(&mut enc, op, op_pass.upload.as_ref(), |pass| {
                    op_pass.encode(pass)
                });
                last = Some(gpu.queue.submit([enc.finish()]));
                if (op + 1) % every != 0 || t >= transfers {
                    continue;
                }
                let slot_ts = ops + t;
                match mode {
                    Mode::None => {}
                    Mode::Inline => {
                        let mut enc = gpu.device.create_command_encoder(&Default::default());
                        {
                            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                                label: Some("stand-in"),
                                timestamp_writes: Some(timer.writes(slot_ts)),
                            });
                            standins[t as usize].encode(&mut pass);
                        }
                        last = Some(gpu.queue.submit([enc.finish()]));
                    }
                    Mode::Offload => {
                        let slot = pool
                            .take(WAIT_LIMIT)
                            .context("offload pipeline stalled: no staging buffer came back")?;
                        let mut enc = gpu.device.create_command_encoder(&Default::default());
                        let ts = gpu.has_encoder_timestamps();
                        if ts {
                            timer.encoder_write(&mut enc, slot_ts, false);
                        }
                        enc.copy_buffer_to_buffer(
                            stream.output_of(op),
                            0,
                            &pool.buffers[slot],
                            0,
                            bytes,
                        );
                        if ts {
                            timer.encoder_write(&mut enc, slot_ts, true);
                        }
                        let idx = gpu.queue.submit([enc.finish()]);
                        last = Some(idx.clone());
                        job_tx
                            .send(Job {
                                index: t as usize,
                                slot,
                                submission: idx,
                                submitted: Instant::now(),
                                delay: Duration::from_secs_f64(delays_ms[t as usize] / 1e3),
                            })
                            .map_err(|_| anyhow!("the offload poller stopped early"))?;
                    }
                }
                t += 1;
            }
            drop(job_tx);
            if let Some(p) = poller {
                p.join().map_err(|_| anyhow!("poller thread panicked"))??;
            }
            let samples = match sender {
                Some(s) => s.join().map_err(|_| anyhow!("sender thread panicked"))??,
                None => Vec::new(),
            };
            Ok((samples, last))
        },
    )?;
    if let Some(idx) = last {
        gpu.wait(idx)?;
    }
    let spans = timer.read_spans(gpu, ops + if mode == Mode::None { 0 } else { transfers })?;
    let output = gpu.read_back(stream.output_of(ops - 1))?;
    let sink = match sink {
        Some(h) => Some(h.join().map_err(|_| anyhow!("sink thread panicked"))??),
        None => None,
    };
    Ok(Rep {
        ops: spans[..ops as usize].to_vec(),
        transfers: spans[ops as usize..].to_vec(),
        offload: samples,
        output,
        sink,
    })
}

/// Aggregates of one (mode, delay, bytes, every) point.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PointSummary {
    pub mode: Mode,
    pub delay: String,
    pub bytes: u64,
    pub every: u32,
    pub makespan_us: f64,
    pub busy_fraction: f64,
    pub stall_mean_us: f64,
    pub stall_p99_us: f64,
    pub stall_removed: Option<f64>,
    pub busy_vs_none: Option<f64>,
    pub overhead_vs_none: Option<f64>,
    pub transfer_e2e_us: Option<f64>,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Runs the plan, writing `hol.csv` row by row; returns the summaries and the calibration.
pub fn run(
    gpu: &Gpu,
    plan: &HolPlan,
    dir: &RunDir,
    progress: &Progress,
) -> Result<(Vec<PointSummary>, Vec<CalibrationPoint>)> {
    plan.validate().map_err(|e| anyhow!("hol: {e}"))?;
    if plan.transport == TransportKind::Rdma && plan.modes.contains(&Mode::Offload) {
        plan.rdma.check().context("hol --transport rdma")?;
    }
    if !gpu.has_timestamps() {
        bail!(
            "hol times every op on the GPU clock, and adapter '{}' has no timestamp queries \
             inside passes: choose another --adapter or --backend",
            gpu.report.name
        );
    }
    let act = plan.activation_bytes();
    gpu.check_binding("hol activation", act)?;
    let stream = build_stream(gpu, plan)?;
    let standin = if plan.modes.contains(&Mode::Inline) {
        Some(StandIn::calibrate(gpu, &stream.act_c)?)
    } else {
        None
    };
    let calibration = match &standin {
        Some(s) => {
            let points = s.check(gpu, &stream.act_c, &[2.0, 10.0, 50.0])?;
            for p in &points {
                progress.println(format!(
                    "stand-in calibration: asked {:>8.0} µs, achieved {:>8.0} µs ({:+.1}%)",
                    p.asked_us,
                    p.achieved_us,
                    (p.achieved_us / p.asked_us - 1.0) * 100.0
                ));
            }
            points
        }
        None => Vec::new(),
    };
    let ctx = Ctx {
        gpu,
        plan,
        stream: &stream,
        standin: standin.as_ref(),
    };
    // One untimed pass of the stream: CPU drivers compile a pipeline at its first dispatch.
    let warm_every = plan.every[0];
    run_rep(
        &ctx,
        Mode::None,
        warm_every,
        act,
        &vec![0.0; plan.transfers(warm_every) as usize],
    )?;
    let mut table = dir.table(BENCH, &SCHEMA)?;
    let mut summaries = Vec::new();
    let transport = match (plan.transport, plan.peer.is_some()) {
        (TransportKind::Tcp, true) => "tcp-peer",
        (TransportKind::Tcp, false) => "tcp-loopback",
        (TransportKind::Rdma, true) => "rdma-peer",
        (TransportKind::Rdma, false) => "rdma-loopback",
    };
    for &every in &plan.every {
        let transfers = plan.transfers(every) as usize;
        for bytes_opt in &plan.bytes {
            let bytes = bytes_opt.unwrap_or(act);
            let cases: Vec<(String, Vec<f64>)> = match &plan.delays {
                Delays::Sweep(list) => list
                    .iter()
                    .map(|&d| (format!("{d}"), vec![d; transfers]))
                    .collect(),
                Delays::Trace(trace) => {
                    let mut v = vec![0.0; transfers];
                    for &(i, d) in trace {
                        if let Some(slot) = v.get_mut(i as usize) {
                            *slot = d;
                        }
                    }
                    vec![("trace".into(), v)]
                }
            };
            let mut none: Option<(f64, f64, Vec<u8>)> = None;
            let mut reference_output: Option<Vec<u8>> = None;
            for (delay_label, delays) in &cases {
                let mut inline_stall: Option<f64> = None;
                for &mode in &plan.modes {
                    if mode == Mode::None && none.is_some() {
                        continue;
                    }
                    progress
                        .set_message(format!("hol {mode} delay {delay_label} ms every {every}"));
                    let label = if mode == Mode::None {
                        "0".to_string()
                    } else {
                        delay_label.clone()
                    };
                    let mut makespans = Vec::new();
                    let mut busy = Vec::new();
                    let mut stalls = Vec::new();
                    let mut asked = Vec::new();
                    let mut achieved = Vec::new();
                    let mut parts: Vec<OffloadSample> = Vec::new();
                    let mut copies = Vec::new();
                    let mut verified = true;
                    for _ in 0..plan.reps {
                        let rep = run_rep(&ctx, mode, every, bytes, delays)?;
                        let first = rep.ops[0].0;
                        let last = rep.ops.last().unwrap().1;
                        let makespan = last - first;
                        makespans.push(makespan);
                        busy.push(rep.ops.iter().map(|(s, e)| e - s).sum::<f64>() / makespan);
                        stalls.extend(rep.ops.windows(2).map(|w| (w[1].0 - w[0].1).max(0.0)));
                        match mode {
                            Mode::Inline => {
                                let wire_us = bytes as f64 / (plan.link_gbps * 1e3);
                                asked.extend(delays.iter().map(|d| wire_us + d * 1e3));
                                achieved.extend(rep.transfers.iter().map(|(s, e)| e - s));
                            }
                            Mode::Offload => {
                                copies.extend(rep.transfers.iter().map(|(s, e)| e - s));
                                parts.extend(rep.offload.iter().copied());
                                if let Some(sink) = rep.sink {
                                    verified &= sink.payloads == transfers as u64;
                                    // With a transfer after the last op, the last payload is
                                    // the final activation: compare it byte for byte (by checksum).
                                    if plan.ops.is_multiple_of(every) {
                                        verified &= sink.last_checksum
                                            == checksum(&rep.output[..bytes as usize]);
                                    }
                                }
                            }
                            Mode::None => {}
                        }
                        match &reference_output {
                            None => reference_output = Some(rep.output.clone()),
                            Some(r) => ensure!(
                                r == &rep.output,
                                "hol: mode {mode} computed a different final activation than the first run \
                                 (the GPU results must not depend on how transfers are done)"
                            ),
                        }
                    }
                    if !verified {
                        bail!("hol: offloaded payloads did not all arrive intact at the sink");
                    }
                    let ms = Summary::of(&makespans).context("no makespan")?;
                    let st = Summary::of(&stalls).context("no stalls")?;
                    // Medians over repetitions: one disturbed repetition on a shared machine
                    // does not move the figure.
                    let busy_fraction = Summary::of(&busy).context("no busy fraction")?.p50;
                    if mode == Mode::None {
                        none = Some((ms.p50, busy_fraction, Vec::new()));
                    }
                    if mode == Mode::Inline {
                        inline_stall = Some(st.mean);
                    }
                    let stall_removed = (mode == Mode::Offload)
                        .then_some(inline_stall)
                        .flatten()
                        .filter(|&s| s > 0.0)
                        .map(|s| 1.0 - st.mean / s);
                    let (busy_vs_none, overhead_vs_none) = match (&none, mode) {
                        (Some((n_ms, n_busy, _)), Mode::Inline | Mode::Offload) => {
                            (Some(busy_fraction / n_busy), Some(ms.p50 / n_ms - 1.0))
                        }
                        _ => (None, None),
                    };
                    let e2e: Vec<f64> = parts.iter().map(|p| p.end_to_end_us).collect();
                    let e2e_s = Summary::of(&e2e);
                    let opt = |v: f64, on: bool| on.then(|| format!("{v:.2}"));
                    let is_off = mode == Mode::Offload;
                    let is_in = mode == Mode::Inline;
                    table.write(
                        Record::new(
                            &dir.id,
                            BENCH,
                            &format!("{mode} delay {label} ms every {every} bytes {bytes}"),
                        )
                        .push(mode)
                        .push(&label)
                        .push(bytes)
                        .push(every)
                        .push(plan.ops)
                        .push(plan.tokens)
                        .push(plan.hidden)
                        .push(if is_off { transport } else { "" })
                        .stats(&ms)
                        .push(format!("{:.2}", ms.p50))
                        .push(format!("{busy_fraction:.4}"))
                        .push(format!("{:.2}", st.mean))
                        .push(format!("{:.2}", st.p50))
                        .push(format!("{:.2}", st.p99))
                        .push(format!("{:.2}", st.max))
                        .push_opt(stall_removed.map(|x| format!("{x:.4}")))
                        .push_opt(busy_vs_none.map(|x| format!("{x:.4}")))
                        .push_opt(overhead_vs_none.map(|x| format!("{x:.4}")))
                        .push_opt(opt(mean(&asked), is_in))
                        .push_opt(opt(mean(&achieved), is_in))
                        .push_opt(opt(mean(&copies), is_off))
                        .push_opt(opt(
                            mean(&parts.iter().map(|p| p.map.map_us).collect::<Vec<_>>()),
                            is_off,
                        ))
                        .push_opt(opt(
                            mean(&parts.iter().map(|p| p.map.copy_us).collect::<Vec<_>>()),
                            is_off,
                        ))
                        .push_opt(opt(
                            mean(&parts.iter().map(|p| p.delay_us).collect::<Vec<_>>()),
                            is_off,
                        ))
                        .push_opt(opt(
                            mean(&parts.iter().map(|p| p.send_us).collect::<Vec<_>>()),
                            is_off,
                        ))
                        .push_opt(opt(
                            mean(&parts.iter().map(|p| p.receive_us).collect::<Vec<_>>()),
                            is_off,
                        ))
                        .push_opt(e2e_s.as_ref().map(|s| format!("{:.2}", s.mean)))
                        .push_opt(e2e_s.as_ref().map(|s| format!("{:.2}", s.p99)))
                        .push(if mode == Mode::None {
                            0
                        } else {
                            transfers * plan.reps as usize
                        })
                        .push("gpu")
                        .push(true),
                    )?;
                    progress.println(format!(
                        "{mode:<8} delay {label:>6} ms every {every} {:>9} B: makespan {:>10.0} µs  busy {:.3}  stall mean {:>9.0} µs p99 {:>9.0} µs{}",
                        bytes,
                        ms.p50,
                        busy_fraction,
                        st.mean,
                        st.p99,
                        stall_removed.map(|r| format!("  removed {:.1}%", r * 100.0)).unwrap_or_default()
                    ));
                    summaries.push(PointSummary {
                        mode,
                        delay: label,
                        bytes,
                        every,
                        makespan_us: ms.p50,
                        busy_fraction,
                        stall_mean_us: st.mean,
                        stall_p99_us: st.p99,
                        stall_removed,
                        busy_vs_none,
                        overhead_vs_none,
                        transfer_e2e_us: e2e_s.map(|s| s.mean),
                    });
                    progress.inc();
                }
            }
        }
    }
    Ok((summaries, calibration))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_traces_parse_and_bad_delays_are_named() {
        assert_eq!(
            parse_delay_trace("# it;ms\n0;20\n3; 5.5\n").unwrap(),
            vec![(0, 20.0), (3, 5.5)]
        );
        assert!(parse_delay_trace("0,20\n").unwrap_err().contains("line 1"));
        assert!(parse_delay_trace("0;-1\n")
            .unwrap_err()
            .contains("out of range"));
        assert!(parse_delay_trace("0;1e9\n")
            .unwrap_err()
            .contains("out of range"));
        assert!(parse_delay_trace("x;1\n")
            .unwrap_err()
            .contains("iteration"));
        assert!(parse_delay_trace("").is_err());
    }
}
