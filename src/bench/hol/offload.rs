//! One repetition of the `hol` stream, with its transfers done the plan's way. In `offload`
//! mode three parties overlap: this thread submits ops and staging copies; a poller thread
//! waits for each copy and maps it into a host buffer; a sender thread sends the bytes through
//! the Transport after the injected delay. Staging slots always come back, so the stream never
//! waits on a failed sender.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure, Context, Result};

use super::plan::{HolPlan, Mode};
use super::stream::Stream;
use crate::gpu::standin::{SpinPass, StandIn};
use crate::gpu::timing::PassTimer;
use crate::gpu::transfer::{touched, MapTiming, StagingPool};
use crate::gpu::{Gpu, WAIT_LIMIT};
use crate::transport::factory;
use crate::transport::sink::{spawn_loopback, SinkStats};
use crate::transport::tcp::Timeouts;
use crate::transport::wire::MAX_PAYLOAD;
use crate::transport::{Transport, TransportError};

/// One offloaded transfer as it went.
#[derive(Debug, Clone, Copy, Default)]
pub struct OffloadSample {
    pub map: MapTiming,
    pub delay_us: f64,
    pub send_us: f64,
    pub receive_us: f64,
    pub end_to_end_us: f64,
}

/// One repetition of the stream.
pub struct Rep {
    /// (start, end) of each compute op, µs on the GPU clock.
    pub ops: Vec<(f64, f64)>,
    /// (start, end) of each transfer's queue work (stand-in or copy).
    pub transfers: Vec<(f64, f64)>,
    pub offload: Vec<OffloadSample>,
    /// The final activation, to check that modes compute the same thing.
    pub output: Vec<u8>,
    pub sink: Option<SinkStats>,
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
    // A receiver waits out each injected delay before the frame comes: its timeout must follow
    // the largest delay the run asks for.
    let mut timeouts = Timeouts::default();
    timeouts.io += Duration::from_secs_f64(plan.max_delay_ms() / 1e3);
    let max = bytes.clamp(4, MAX_PAYLOAD);
    let (addr, sink) = match &plan.peer {
        Some(addr) => (addr.clone(), None),
        None => {
            let (addr, sink) = spawn_loopback(plan.transport, plan.rdma.clone(), max, timeouts.io)?;
            (addr.to_string(), Some(sink))
        }
    };
    let transport = factory::connect(plan.transport, &plan.rdma, &addr, max, timeouts)?;
    Ok((transport, sink))
}

/// What every repetition shares.
pub struct Ctx<'a> {
    pub gpu: &'a Gpu,
    pub plan: &'a HolPlan,
    pub stream: &'a Stream,
    pub standin: Option<&'a StandIn>,
}

/// The inline mode's stand-in transfers, one per transfer slot: each spins for the wire time
/// of `bytes` plus that transfer's delay. None in the other modes.
fn standins(
    ctx: &Ctx<'_>,
    mode: Mode,
    every: u32,
    bytes: u64,
    delays_ms: &[f64],
) -> Result<Vec<SpinPass>> {
    let Ctx {
        gpu, plan, stream, ..
    } = *ctx;
    let transfers = plan.transfers(every);
    Ok(match mode {
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
    })
}

/// Runs the stream once in `mode`, with a transfer of `bytes` after every `every` ops and
/// `delays_ms[t]` injected into transfer t.
pub fn run_rep(
    ctx: &Ctx<'_>,
    mode: Mode,
    every: u32,
    bytes: u64,
    delays_ms: &[f64],
) -> Result<Rep> {
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
    let standins = standins(ctx, mode, every, bytes, delays_ms)?;
    let offload = mode == Mode::Offload;
    let slots = if offload {
        staging_slots(transfers, bytes)
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
    let (send_tx, send_rx) = channel::<Mapped>();
    let returner = pool.returner();
    let submit = Submit {
        ctx,
        mode,
        every,
        transfers,
        bytes,
        delays_ms,
        timer: &timer,
        standins: &standins,
        pool: &pool,
    };

    let (samples, last) = std::thread::scope(
        |scope| -> Result<(Vec<OffloadSample>, Option<wgpu::SubmissionIndex>)> {
            let poller = offload.then(|| {
                let staging = &pool.buffers;
                let hosts = &hosts;
                scope.spawn(move || poll_loop(gpu, staging, hosts, job_rx, send_tx))
            });
            let sender = transport.as_mut().map(|t| {
                let (hosts, returner) = (&hosts, returner);
                scope.spawn(move || send_loop(t.as_mut(), hosts, send_rx, returner, transfers))
            });
            // Submitting ends by dropping the job channel, which lets the poller finish.
            let last = submit_stream(&submit, job_tx)?;
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

/// How many staging buffers offload cycles through: one per transfer, at most 512 MiB in
/// all, and at least two so a copy can overlap a send.
fn staging_slots(transfers: u32, bytes: u64) -> usize {
    (transfers as u64).min((512 << 20) / bytes.max(1)).max(2) as usize
}

/// What the submitting thread needs to put one repetition's ops and transfers on the queue.
struct Submit<'a> {
    ctx: &'a Ctx<'a>,
    mode: Mode,
    every: u32,
    transfers: u32,
    bytes: u64,
    delays_ms: &'a [f64],
    timer: &'a PassTimer,
    standins: &'a [SpinPass],
    pool: &'a StagingPool,
}

/// Submits every op, each `every`-th followed by its transfer, and returns the last
/// submission; the job channel closes when it returns.
fn submit_stream(s: &Submit<'_>, jobs: Sender<Job>) -> Result<Option<wgpu::SubmissionIndex>> {
    let Ctx {
        gpu, plan, stream, ..
    } = *s.ctx;
    let ops = plan.ops;
    let mut last = None;
    let mut t = 0u32;
    for op in 0..ops {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        let op_pass = stream.pass(op);
        s.timer
            .record_pass(&mut enc, op, op_pass.upload.as_ref(), |pass| {
                op_pass.encode(pass)
            });
        last = Some(gpu.queue.submit([enc.finish()]));
        if (op + 1) % s.every != 0 || t >= s.transfers {
            continue;
        }
        let slot_ts = ops + t;
        match s.mode {
            Mode::None => {}
            Mode::Inline => {
                last = Some(submit_standin(
                    gpu,
                    s.timer,
                    slot_ts,
                    &s.standins[t as usize],
                ));
            }
            Mode::Offload => last = Some(submit_offload(s, op, t, &jobs)?),
        }
        t += 1;
    }
    Ok(last)
}

/// Copies op `op`'s output into a free staging buffer as transfer `t` and hands the copy to
/// the poller; fails when no buffer comes back in time rather than hang the stream.
fn submit_offload(
    s: &Submit<'_>,
    op: u32,
    t: u32,
    jobs: &Sender<Job>,
) -> Result<wgpu::SubmissionIndex> {
    let Ctx { gpu, stream, .. } = *s.ctx;
    let slot = s
        .pool
        .take(WAIT_LIMIT)
        .context("offload pipeline stalled: no staging buffer came back")?;
    let (src, dst) = (stream.output_of(op), &s.pool.buffers[slot]);
    let idx = submit_copy(gpu, s.timer, s.ctx.plan.ops + t, src, dst, s.bytes);
    jobs.send(Job {
        index: t as usize,
        slot,
        submission: idx.clone(),
        submitted: Instant::now(),
        delay: Duration::from_secs_f64(s.delays_ms[t as usize] / 1e3),
    })
    .map_err(|_| anyhow!("the offload poller stopped early"))?;
    Ok(idx)
}

/// A copy that reached host memory, with when it got there.
type Mapped = (Job, MapTiming, Instant);

/// The poller thread: waits for each staging copy and maps it into its host buffer.
fn poll_loop(
    gpu: &Gpu,
    staging: &[wgpu::Buffer],
    hosts: &[Mutex<Vec<u8>>],
    jobs: Receiver<Job>,
    mapped: Sender<Mapped>,
) -> Result<()> {
    for job in jobs {
        let mut host = hosts[job.slot].lock().unwrap();
        let m = gpu.map_read_into(&staging[job.slot], &mut host, Some(job.submission.clone()))?;
        let at = Instant::now();
        drop(host);
        if mapped.send((job, m, at)).is_err() {
            break;
        }
    }
    Ok(())
}

/// The sender thread: sends each mapped buffer after its injected delay, and hands its
/// staging slot back whatever happens, so the stream never waits on a dead sender.
fn send_loop(
    transport: &mut dyn Transport,
    hosts: &[Mutex<Vec<u8>>],
    mapped: Receiver<Mapped>,
    returner: Sender<usize>,
    transfers: u32,
) -> Result<Vec<OffloadSample>> {
    let mut out = vec![OffloadSample::default(); transfers as usize];
    let mut failed: Option<anyhow::Error> = None;
    for (job, map, ready) in mapped {
        if failed.is_none() {
            // The delay runs from when the bytes are ready, like link latency.
            let due = ready + job.delay;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let start = Instant::now();
            let host = hosts[job.slot].lock().unwrap();
            match transport.send(&host) {
                Ok(timing) => {
                    out[job.index] = OffloadSample {
                        map,
                        delay_us: (start - ready).as_secs_f64() * 1e6,
                        send_us: timing.send_us,
                        receive_us: timing.receive_us,
                        end_to_end_us: job.submitted.elapsed().as_secs_f64() * 1e6,
                    };
                }
                Err(e) => failed = Some(anyhow!(e).context("offload send failed")),
            }
        }
        let _ = returner.send(job.slot);
    }
    match failed {
        Some(e) => Err(e),
        None => {
            transport.close()?;
            Ok(out)
        }
    }
}

/// Submits one stand-in transfer: a busy-wait kernel on the queue, timed in slot `slot_ts`.
fn submit_standin(
    gpu: &Gpu,
    timer: &PassTimer,
    slot_ts: u32,
    standin: &SpinPass,
) -> wgpu::SubmissionIndex {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("stand-in"),
            timestamp_writes: Some(timer.writes(slot_ts)),
        });
        standin.encode(&mut pass);
    }
    gpu.queue.submit([enc.finish()])
}

/// Submits the copy of an activation into a staging buffer, timed in slot `slot_ts` where the
/// adapter has timestamps inside encoders.
fn submit_copy(
    gpu: &Gpu,
    timer: &PassTimer,
    slot_ts: u32,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    bytes: u64,
) -> wgpu::SubmissionIndex {
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    let ts = gpu.has_encoder_timestamps();
    if ts {
        timer.encoder_write(&mut enc, slot_ts, false);
    }
    enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes);
    if ts {
        timer.encoder_write(&mut enc, slot_ts, true);
    }
    gpu.queue.submit([enc.finish()])
}
