//! `morphbench pipeline`: a real multi-stage training pipeline on the testbed, measured against
//! the simulator's prediction (issue 15). Each rank is one stage (`stage`) with its own GPU;
//! neighbours exchange activations and gradients over TCP (`comm`); each stage replays the
//! simulator's op order for the schedule (`exec`); rank 0 plans, collects every op's times,
//! predicts the iteration from the measured op and link times, and writes pipeline.csv and
//! pipeline_timeline.csv, a Perfetto trace and a measured-against-predicted Gantt chart.
//! `--local S` starts S ranks of itself on this machine.

pub mod comm;
pub mod exec;
pub mod stage;
pub mod table;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::cluster::world::{self, World, WorldOptions};
use crate::export::csv::{round, CsvSink, Line};
use crate::export::meta::RunMeta;
use crate::export::run_dir::RunDir;
use crate::gpu::{BackendChoice, Gpu};
use crate::host::HostInfo;
use crate::sim::{
    evaluate, simulate, CommModel, Executed, Op, OpKind, Policy, Run, Scenario, Schedule,
};
use crate::stats::Summary;
use crate::transport::TransportKind;
use comm::{Link, ACT, GRAD};
use exec::{Comm, Neighbours, StageTimes};
use stage::{Shape, Stage};
use table::{PipelineFigures, PipelineParams, PipelineTable, TimelineRow, TimelineTable};

/// One configuration of the run (a row of pipeline.csv).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub schedule: String,
    pub comm: Comm,
    /// (link, delay ms) injected on every message of that link, both ways.
    pub slow: Option<(u32, f64)>,
}

/// What every rank follows (rank 0's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelinePlan {
    pub shape: Shape,
    pub cases: Vec<Case>,
    pub iters: u32,
    pub warmup: u32,
    pub timeout_s: u64,
    /// What carries activations and gradients between stages.
    pub transport: TransportKind,
}

/// The most work one run may take, checked before it starts: microbatches x stages, sizes.
const MAX_ELEMENTS: usize = 1 << 24;
const MAX_MICROBATCHES: u32 = 256;
const MAX_LAYERS: u32 = 64;
/// Relative error of the weight gradients against f64 that still verifies: per dot product
/// f32 rounding grows about sqrt(K) * 2^-24 (the GEMM check's bound is 1e-5 sqrt(K)), the
/// layernorm backward scales errors by 1/std (about 1 here), and L layers and N microbatches
/// add them up; measured errors are about 1e-6. A wrong index, a lost or repeated microbatch
/// gives errors of order 1, far above.
pub const GRAD_TOLERANCE: f64 = 1e-3;

impl PipelinePlan {
    pub fn validate(&self, stages: u32) -> Result<(), String> {
        let s = &self.shape;
        if s.layers == 0 || s.layers > MAX_LAYERS {
            return Err(format!("--layers {}: give 1 to {MAX_LAYERS}", s.layers));
        }
        if s.microbatches == 0 || s.microbatches > MAX_MICROBATCHES {
            return Err(format!(
                "--microbatches {}: give 1 to {MAX_MICROBATCHES}",
                s.microbatches
            ));
        }
        if s.hidden == 0 || s.tokens == 0 || s.elements() > MAX_ELEMENTS {
            return Err(format!(
                "--tokens {} x --hidden {}: each must be >= 1 and their product at most {MAX_ELEMENTS}",
                s.tokens, s.hidden
            ));
        }
        if self.iters == 0 || self.iters > 10_000 {
            return Err(format!("--iters {}: give 1 to 10000", self.iters));
        }
        for c in &self.cases {
            c.schedule.parse::<Schedule>()?;
            if let Some((link, ms)) = c.slow {
                if link + 1 >= stages {
                    return Err(format!(
                        "--slow {link}:{ms}: link {link} does not exist with {stages} stages (links 0..={})",
                        stages as i64 - 2
                    ));
                }
                if !(0.0..=60_000.0).contains(&ms) {
                    return Err(format!("--slow {link}:{ms}: give 0 to 60000 ms"));
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub world: WorldOptions,
    pub plan: PipelinePlan,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
    pub out: PathBuf,
    pub quiet: bool,
    /// This rank's RDMA device (with `--transport rdma`).
    pub rdma: crate::rdma::DeviceChoice,
}

/// A stage's op times measured alone, for planning (µs): F, B split, W, B fused, D2H.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Calibration {
    f: f64,
    b: f64,
    w: f64,
    d2h: f64,
}

#[derive(Debug, Serialize, Deserialize)]
enum ToRank {
    Plan(PipelinePlan),
    /// Case index, each stage's order ((kind, microbatch) pairs), backward fused or split.
    Case(usize, Vec<Vec<(char, u32)>>, bool),
    Iter(u32),
    Verify,
    /// Answer with this rank's clock at once (rank 0 estimates each rank's clock offset).
    Ping,
    Finish,
    Abort(String),
}

#[derive(Debug, Serialize, Deserialize)]
enum ToRoot {
    Calibrated(Calibration),
    Iter(StageTimes),
    Verified(f64),
    /// The clock (µs since the Unix epoch) when the ping arrived.
    Pong(f64),
    Ready,
    Failed(String),
}

/// Starts `stages` ranks of this program on this machine (`--local`), each with its share of
/// the cores for a CPU driver, and waits for them.
pub fn run_local(stages: u32, args: &[String]) -> Result<()> {
    if !(1..=16).contains(&stages) {
        bail!("--local {stages}: give 1 to 16 stages");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe().context("cannot find this program to start its ranks")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / stages as usize).max(1).to_string();
    let mut children = Vec::new();
    for r in 0..stages {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args(args)
            .args(["--rank", &r.to_string(), "--world", &stages.to_string()])
            .args(["--rendezvous", &format!("127.0.0.1:{port}")]);
        if std::env::var_os("LP_NUM_THREADS").is_none() {
            cmd.env("LP_NUM_THREADS", &threads);
        }
        if r > 0 {
            cmd.stdout(std::process::Stdio::null());
            if !args.iter().any(|a| a == "-q" || a == "--quiet") {
                cmd.arg("-q");
            }
        }
        children.push((r, cmd.spawn().context("cannot start a rank")?));
    }
    // The first rank to fail ends the others (they would wait for it until their limits).
    let mut failed = Vec::new();
    let mut running: Vec<(u32, std::process::Child)> = children;
    while !running.is_empty() {
        let mut still = Vec::new();
        for (r, mut c) in running {
            match c.try_wait()? {
                Some(status) if !status.success() => failed.push(r.to_string()),
                Some(_) => {}
                None => still.push((r, c)),
            }
        }
        if !failed.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
            for (_, c) in &mut still {
                let _ = c.kill();
                let _ = c.wait();
            }
            break;
        }
        running = still;
        std::thread::sleep(Duration::from_millis(20));
    }
    if !failed.is_empty() {
        bail!(
            "rank(s) {} failed (their errors are above)",
            failed.join(", ")
        );
    }
    Ok(())
}

/// Runs this rank's part; rank 0 returns its run folder.
pub fn run(opts: &PipelineOptions) -> Result<Option<PathBuf>> {
    let env = |k: &str| std::env::var(k).ok();
    let mut world = world::establish(&opts.world, &env).map_err(anyhow::Error::msg)?;
    opts.plan
        .validate(world.size())
        .map_err(anyhow::Error::msg)?;
    if world.rank() == 0 {
        root(&mut world, opts).map(Some)
    } else {
        leaf(&mut world, opts).map(|()| None)
    }
}

/// What every rank needs before it can be a stage: the transport and its GPU.
fn open_device(opts: &PipelineOptions, transport: TransportKind) -> Result<Gpu> {
    crate::transport::factory::check_available(transport, &opts.rdma)?;
    Ok(Gpu::open(opts.backend, opts.adapter.as_deref())?)
}

/// The link to one neighbour, if the stage has one there.
type Neighbour = Option<Arc<Link>>;
/// A stage's order: (kind, microbatch) pairs.
type Order = Vec<(char, u32)>;

/// Connects this stage to its neighbours, one connection each way per neighbour, over the
/// plan's transport.
fn connect(
    world: &World,
    plan: &PipelinePlan,
    rdma: &crate::rdma::DeviceChoice,
) -> Result<(Neighbour, Neighbour)> {
    let (me, n) = (world.rank(), world.size());
    let timeout = Duration::from_secs(plan.timeout_s);
    let wiring = comm::Wiring {
        transport: plan.transport,
        rdma: rdma.clone(),
        max_message: comm::max_message(plan.shape.elements()),
        timeout,
        idle: timeout.max(IDLE),
    };
    // The previous stage first, then the next: the order `link` takes them in below.
    let peers: Vec<comm::Peer> = [me.checked_sub(1), (me + 1 < n).then_some(me + 1)]
        .into_iter()
        .flatten()
        .map(|rank| comm::Peer {
            rank,
            address: world.data_address(rank),
        })
        .collect();
    let mut links = comm::connect(&world.data, me, &peers, &wiring)
        .map_err(anyhow::Error::msg)?
        .into_iter();
    let mut link = |rank: u32, incoming: u8| {
        let (tx, rx) = links.next().expect("one link per peer");
        Arc::new(Link::new(
            tx,
            rx,
            incoming,
            world.describe(rank),
            plan.shape.elements(),
            plan.shape.microbatches,
            timeout,
        ))
    };
    let prev = (me > 0).then(|| link(me - 1, ACT));
    let next = (me + 1 < n).then(|| link(me + 1, GRAD));
    Ok((prev, next))
}

fn calibrate(stage: &mut Stage) -> Result<Calibration> {
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        let mut v = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(Summary::of(&v).map_or(0.0, |s| s.p50))
    };
    let shape = stage.shape;
    let x = Some(stage::input(&shape, 0));
    let dy = Some(stage::seeded(5, shape.elements(), 1.0));
    stage.forward(0, x.clone())?;
    let f = time(&mut || stage.forward(0, x.clone()))?;
    let b = time(&mut || stage.backward(0, dy.clone(), false))?;
    let w = time(&mut || stage.weight(0))?;
    let d2h = time(&mut || stage.read_out(0, false).map(|_| ()))?;
    Ok(Calibration { f, b, w, d2h })
}

fn leaf(world: &mut World, opts: &PipelineOptions) -> Result<()> {
    let wait = Duration::from_secs(opts.world.timeout.as_secs().max(600));
    let plan: PipelinePlan = match world
        .hear_root(Instant::now() + wait)
        .map_err(anyhow::Error::msg)?
    {
        ToRank::Plan(p) => p,
        ToRank::Abort(why) => bail!("rank 0 ended the run: {why}"),
        _ => bail!("rank 0 sent something before the plan"),
    };
    // A rank that cannot be a stage says why, so rank 0 names it and stops the others.
    let setup = open_device(opts, plan.transport)
        .and_then(|gpu| Stage::new(gpu, plan.shape, world.rank(), world.size()));
    let mut stage = match setup {
        Ok(s) => s,
        Err(e) => {
            let _ = world.tell_root(&ToRoot::Failed(format!("{e:#}")));
            return Err(e);
        }
    };
    world
        .tell_root(&ToRoot::Ready)
        .map_err(anyhow::Error::msg)?;
    let (prev, next) = connect(world, &plan, &opts.rdma)?;
    let cal = calibrate(&mut stage)?;
    world
        .tell_root(&ToRoot::Calibrated(cal))
        .map_err(anyhow::Error::msg)?;
    // (case index, this stage's order, backward fused)
    let mut case: Option<(usize, Order, bool)> = None;
    loop {
        let m: ToRank = world
            .hear_root(Instant::now() + wait)
            .map_err(anyhow::Error::msg)?;
        let reply = match m {
            ToRank::Case(i, orders, fused) => {
                let mine = orders
                    .get(world.rank() as usize)
                    .cloned()
                    .ok_or_else(|| anyhow!("rank 0's plan has no order for this stage"))?;
                case = Some((i, mine, fused));
                Ok(ToRoot::Ready)
            }
            ToRank::Iter(it) => {
                let (i, order, fused) = case
                    .as_ref()
                    .ok_or_else(|| anyhow!("an iteration before a case"))?;
                let c = &plan.cases[*i];
                let nb = neighbours(world.rank(), &prev, &next, c);
                exec::run_iteration(&mut stage, &nb, order, *fused, c.comm, it).map(ToRoot::Iter)
            }
            ToRank::Verify => stage
                .verify()
                .map(ToRoot::Verified)
                .map_err(|e| format!("{e:#}")),
            ToRank::Ping => Ok(ToRoot::Pong(exec::now_us())),
            ToRank::Finish => return Ok(()),
            ToRank::Abort(why) => bail!("rank 0 ended the run: {why}"),
            ToRank::Plan(_) => Err("rank 0 sent a second plan".to_string()),
        };
        match reply {
            Ok(r) => world.tell_root(&r).map_err(anyhow::Error::msg)?,
            Err(e) => {
                let _ = world.tell_root(&ToRoot::Failed(e.clone()));
                bail!("{e}");
            }
        }
    }
}

fn neighbours(me: u32, prev: &Option<Arc<Link>>, next: &Option<Arc<Link>>, c: &Case) -> Neighbours {
    let delay = |link: u32| match c.slow {
        Some((l, ms)) if l == link => Duration::from_secs_f64(ms / 1e3),
        _ => Duration::ZERO,
    };
    Neighbours {
        prev: prev.clone().map(|l| (l, delay(me.wrapping_sub(1)))),
        next: next.clone().map(|l| (l, delay(me))),
    }
}

/// Rank 0: hears every other rank, failing on the first failure.
fn hear_all(world: &mut World, deadline: Instant) -> Result<Vec<ToRoot>> {
    let others: Vec<u32> = (1..world.size()).collect();
    let replies = world.gather(&others, deadline, |r: &Result<ToRoot, String>| {
        matches!(r, Err(_) | Ok(ToRoot::Failed(_)))
    });
    let dead = world.dead(&others, &replies);
    if !dead.is_empty() {
        bail!("{} died mid-run", dead.join(", "));
    }
    let mut out = Vec::new();
    for (rank, r) in others.iter().zip(replies) {
        match r {
            Some(Ok(ToRoot::Failed(e))) => bail!("{} failed: {e}", world.describe(*rank)),
            Some(Ok(m)) => out.push(m),
            Some(Err(e)) => bail!("{e}"),
            None => bail!("{} did not answer in time", world.describe(*rank)),
        }
    }
    Ok(out)
}

fn root(world: &mut World, opts: &PipelineOptions) -> Result<PathBuf> {
    let plan = opts.plan.clone();
    let gpu = match open_device(opts, plan.transport) {
        Ok(g) => g,
        Err(e) => {
            let _ = world.broadcast(&ToRank::Abort(format!("{e:#}")), true);
            return Err(e);
        }
    };
    let mut meta = RunMeta::new(HostInfo::probe());
    meta.adapter = serde_json::to_value(&gpu.report).ok();
    meta.config = Some(serde_json::json!({
        "pipeline": plan,
        "stages": world.size(),
        "launcher": world.launch.launcher.to_string(),
        "roster": world.roster,
    }));
    let mut dir = RunDir::create(&opts.out, meta, false)?;
    if !opts.quiet {
        println!(
            "pipeline: {} stages, run {} -> {}",
            world.size(),
            dir.id,
            dir.path.display()
        );
    }
    let result = drive(world, gpu, opts, &plan, &dir);
    if let Err(e) = &result {
        let _ = world.broadcast(&ToRank::Abort(format!("{e:#}")), true);
    }
    dir.finish(&result.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}")))?;
    result.map(|()| dir.path.clone())
}

/// The least time a link's reader waits for the next message: between cases rank 0 checks
/// gradients and predicts, which can take a while on big shapes.
const IDLE: Duration = Duration::from_secs(600);

/// Pings per rank for its clock offset.
const PINGS: usize = 8;

/// Each rank's clock offset from rank 0's, in µs (rank 0's is 0): from the ping with the
/// lowest round trip, offset = the rank's clock - the midpoint of the round trip, as NTP's
/// simplest estimate. Its error is at most half that round trip.
fn clock_offsets(world: &mut World) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut offsets = vec![0.0];
    let mut rtts = vec![0.0];
    for r in 1..world.size() {
        let mut best = (f64::INFINITY, 0.0);
        for _ in 0..PINGS {
            let t0 = exec::now_us();
            world
                .send_to(r, &ToRank::Ping)
                .map_err(anyhow::Error::msg)?;
            let reply = world
                .gather(&[r], Instant::now() + Duration::from_secs(10), |_| false)
                .pop()
                .flatten();
            let t1 = exec::now_us();
            match reply {
                Some(Ok(ToRoot::Pong(tr))) if t1 - t0 < best.0 => {
                    best = (t1 - t0, tr - (t0 + t1) / 2.0)
                }
                Some(Ok(ToRoot::Pong(_))) => {}
                _ => bail!("{} did not answer the clock ping", world.describe(r)),
            }
        }
        rtts.push(best.0);
        offsets.push(best.1);
    }
    Ok((offsets, rtts))
}

/// Puts a rank's op times on rank 0's clock.
fn shift(t: &mut StageTimes, offset_us: f64) {
    for o in &mut t.ops {
        o.start_us -= offset_us;
        o.end_us -= offset_us;
        o.queue_end_us -= offset_us;
    }
}

/// Iteration time, bubble per stage and the measured run as the simulator's `Run`, from every
/// stage's op times of one iteration (ms from the iteration's first start).
fn measured_run(times: &[StageTimes]) -> (f64, Vec<f64>, Run) {
    let t0 = times
        .iter()
        .flat_map(|t| t.ops.iter().map(|o| o.start_us))
        .fold(f64::INFINITY, f64::min);
    let t_end = times
        .iter()
        .flat_map(|t| t.ops.iter().map(|o| o.queue_end_us))
        .fold(f64::NEG_INFINITY, f64::max);
    let iteration = (t_end - t0) / 1e3;
    let mut ops = Vec::new();
    let mut busy = Vec::new();
    for (s, t) in times.iter().enumerate() {
        let mut b = 0.0;
        for o in &t.ops {
            let kind = match o.kind {
                'F' => OpKind::F,
                'B' => OpKind::B,
                _ => OpKind::W,
            };
            b += (o.end_us - o.start_us) / 1e3;
            ops.push(Executed {
                op: Op {
                    kind,
                    stage: s,
                    mb: o.mb as usize,
                },
                start: (o.start_us - t0) / 1e3,
                end: (o.end_us - t0) / 1e3,
                queue_end: (o.queue_end_us - t0) / 1e3,
                arrival: (o.queue_end_us - t0) / 1e3,
            });
        }
        busy.push(b);
    }
    let bubble = busy.iter().map(|b| 1.0 - b / iteration).collect();
    let run = Run {
        ops,
        iteration_ms: iteration,
        busy_ms: busy,
        peak_in_flight: Vec::new(),
    };
    (iteration, bubble, run)
}

/// The simulator's scenario from what was measured: per stage the mean F, B and W compute
/// times (the mean, not the median: an iteration is a sum of ops, and a sum follows the mean
/// of what it adds); per link the mean send (copy to host and write to acknowledgement,
/// injected delay included) under the comm model that matches the run.
fn measured_scenario(
    stages: usize,
    shape: &Shape,
    comm: Comm,
    iters: &[Vec<StageTimes>],
    fused: bool,
) -> Result<Scenario> {
    let average = |v: Vec<f64>| Summary::of(&v).map_or(1e-3, |s| s.mean.max(1e-3));
    let per = |s: usize, k: char| -> f64 {
        average(
            iters
                .iter()
                .flat_map(|it| {
                    it[s]
                        .ops
                        .iter()
                        .filter(|o| o.kind == k)
                        .map(|o| (o.end_us - o.start_us) / 1e3)
                })
                .collect(),
        )
    };
    let tf: Vec<f64> = (0..stages).map(|s| per(s, 'F')).collect();
    let tb: Vec<f64> = (0..stages).map(|s| per(s, 'B')).collect();
    let tw: Vec<f64> = (0..stages)
        .map(|s| if fused { 0.0 } else { per(s, 'W') })
        .collect();
    let sends: Vec<&exec::SendTime> = iters
        .iter()
        .flat_map(|it| it.iter().flat_map(|t| t.sends.iter()))
        .collect();
    let mean = |v: Vec<f64>| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let d2h_ms = mean(sends.iter().map(|s| s.d2h_us / 1e3).collect());
    let link = |l: usize| -> f64 {
        let on: Vec<&&exec::SendTime> = sends.iter().filter(|s| s.link as usize == l).collect();
        match comm {
            Comm::Inline => mean(on.iter().map(|s| (s.d2h_us + s.send_us) / 1e3).collect()),
            Comm::Offload => mean(on.iter().map(|s| s.send_us / 1e3).collect()),
        }
    };
    let slow: Vec<(usize, f64)> = (0..stages.saturating_sub(1))
        .map(|l| (l, link(l)))
        .collect();
    let model = match comm {
        Comm::Inline => CommModel::Queue,
        Comm::Offload => CommModel::Offload,
    };
    Scenario::new(
        stages,
        shape.microbatches as usize,
        &tf,
        &tb,
        &tw,
        0.0,
        &slow,
        model,
        d2h_ms,
    )
    .map_err(|e| anyhow!("the measured scenario: {e}"))
}

/// One case as planned: the simulator's plan, its op orders, and what each stage is sent.
struct PlannedCase {
    name: String,
    orders: Vec<Vec<Op>>,
    wire: Vec<Order>,
    split: bool,
}

/// What one case measured: each timed iteration's stage times, its iteration time and the
/// last one as a `Run`, and the gradients' error after the last.
#[derive(Default)]
struct Measured {
    timed: Vec<Vec<StageTimes>>,
    iteration_us: Vec<f64>,
    last: Option<(f64, Vec<f64>, Run)>,
    grad_err: f64,
}

/// Plans `case` with the calibrated op times and the injected delay.
fn plan_case(case: &Case, cals: &[Calibration], shape: &Shape) -> Result<PlannedCase> {
    let n = cals.len();
    let schedule: Schedule = case.schedule.parse().map_err(anyhow::Error::msg)?;
    let ms = |us: f64| (us / 1e3).max(1e-3);
    let model = match case.comm {
        Comm::Inline => CommModel::Queue,
        Comm::Offload => CommModel::Offload,
    };
    let slow: Vec<(usize, f64)> = case.slow.iter().map(|&(l, d)| (l as usize, d)).collect();
    let d2h = ms(cals.iter().map(|c| c.d2h).sum::<f64>() / n as f64);
    let planning = Scenario::new(
        n,
        shape.microbatches as usize,
        &cals.iter().map(|c| ms(c.f)).collect::<Vec<_>>(),
        &cals.iter().map(|c| ms(c.b)).collect::<Vec<_>>(),
        &cals.iter().map(|c| ms(c.w)).collect::<Vec<_>>(),
        d2h,
        &slow,
        model,
        d2h,
    )
    .map_err(|e| anyhow!("{e}"))?;
    let mem = crate::sim::default_mem_limit(&planning);
    let (name, planned) =
        evaluate(&schedule, &planning, mem).map_err(|e| anyhow!("{schedule}: {e}"))?;
    let split = planned.ops.iter().any(|e| e.op.kind == OpKind::W);
    let orders: Vec<Vec<Op>> = planned.orders(n);
    let wire = orders
        .iter()
        .map(|o| {
            o.iter()
                .map(|op| {
                    (
                        op.kind.to_string().chars().next().unwrap_or('F'),
                        op.mb as u32,
                    )
                })
                .collect()
        })
        .collect();
    Ok(PlannedCase {
        name,
        orders,
        wire,
        split,
    })
}

/// The links and clocks of rank 0's side of the run.
struct Rig<'a> {
    stage: Stage,
    prev: Neighbour,
    next: Neighbour,
    offsets: &'a [f64],
    timeout: Duration,
}

/// Runs iteration `iter_no` of `case` on every stage and returns every stage's times on rank
/// 0's clock. Rank 0's stage runs in a thread while rank 0 hears the others, so a rank that
/// fails or dies ends the run at once: the others are told to stop, their links close, and
/// this stage's waits on them end too.
fn run_case_iteration(
    world: &mut World,
    rig: &mut Rig,
    (ci, case, pc): (usize, &Case, &PlannedCase),
    iter_no: u32,
) -> Result<Vec<StageTimes>> {
    let long = Instant::now() + Duration::from_secs(600);
    world
        .broadcast(&ToRank::Case(ci, pc.wire.clone(), !pc.split), false)
        .map_err(anyhow::Error::msg)?;
    for r in hear_all(world, long)? {
        if !matches!(r, ToRoot::Ready) {
            bail!("a rank answered the case out of turn");
        }
    }
    world
        .broadcast(&ToRank::Iter(iter_no), false)
        .map_err(anyhow::Error::msg)?;
    let nb = neighbours(0, &rig.prev, &rig.next, case);
    let stage = &mut rig.stage;
    let (mine, heard) = std::thread::scope(|sc| {
        let own = sc
            .spawn(|| exec::run_iteration(stage, &nb, &pc.wire[0], !pc.split, case.comm, iter_no));
        let heard = hear_all(world, Instant::now() + rig.timeout * 4);
        if let Err(e) = &heard {
            let _ = world.broadcast(&ToRank::Abort(format!("{e:#}")), true);
        }
        (own.join(), heard)
    });
    let heard = heard?;
    let mine = mine
        .map_err(|_| anyhow!("rank 0's stage panicked"))?
        .map_err(|e| anyhow!("{e}"))?;
    let mut all = vec![mine];
    for (i, r) in heard.into_iter().enumerate() {
        match r {
            ToRoot::Iter(mut t) => {
                shift(&mut t, rig.offsets[i + 1]);
                all.push(t)
            }
            _ => bail!("a rank answered an iteration out of turn"),
        }
    }
    Ok(all)
}

/// Every stage's weight gradients of the last iteration against its f64 reference: the
/// largest relative error.
fn verify_all(world: &mut World, stage: &Stage) -> Result<f64> {
    world
        .broadcast(&ToRank::Verify, false)
        .map_err(anyhow::Error::msg)?;
    let mut worst = stage.verify()?;
    for r in hear_all(world, Instant::now() + Duration::from_secs(600))? {
        match r {
            ToRoot::Verified(e) => worst = worst.max(e),
            _ => bail!("a rank answered the check out of turn"),
        }
    }
    Ok(worst)
}

fn drive(
    world: &mut World,
    gpu: Gpu,
    opts: &PipelineOptions,
    plan: &PipelinePlan,
    dir: &RunDir,
) -> Result<()> {
    let n = world.size() as usize;
    let mut stage = Stage::new(gpu, plan.shape, 0, world.size())?;
    world
        .broadcast(&ToRank::Plan(plan.clone()), false)
        .map_err(anyhow::Error::msg)?;
    let long = Instant::now() + Duration::from_secs(600);
    for r in hear_all(world, long)? {
        if !matches!(r, ToRoot::Ready) {
            bail!("a rank answered the plan out of turn");
        }
    }
    let timeout = Duration::from_secs(plan.timeout_s);
    let (prev, next) = connect(world, plan, &opts.rdma)?;
    let mut cals = vec![calibrate(&mut stage)?];
    for r in hear_all(world, long)? {
        match r {
            ToRoot::Calibrated(c) => cals.push(c),
            _ => bail!("a rank answered the calibration out of turn"),
        }
    }
    // Ranks on other machines have other clocks: each rank's op times are moved onto rank 0's.
    let (offsets, rtts) = clock_offsets(world)?;
    if !opts.quiet && n > 1 {
        let list: Vec<String> = (1..n)
            .map(|r| format!("r{r} {:+.3} ms (±{:.3})", offsets[r] / 1e3, rtts[r] / 2e3))
            .collect();
        println!(
            "clock offsets from rank 0 (lowest-RTT ping of {PINGS}): {}",
            list.join(", ")
        );
    }
    let planned: Vec<PlannedCase> = plan
        .cases
        .iter()
        .map(|c| plan_case(c, &cals, &plan.shape))
        .collect::<Result<_>>()?;
    // The cases take turns, one iteration each per round, so every case sees the machine at
    // the same moments: a shared machine's speed drifts by tens of percent over a minute,
    // which would otherwise land in the comparison between cases.
    let mut rig = Rig {
        stage,
        prev,
        next,
        offsets: &offsets,
        timeout,
    };
    let mut measured: Vec<Measured> = plan.cases.iter().map(|_| Measured::default()).collect();
    let rounds = plan.warmup + plan.iters;
    let progress = !opts.quiet && std::io::IsTerminal::is_terminal(&std::io::stdout());
    for round in 0..rounds {
        if progress {
            print!(
                "\r{} round {}/{rounds} ({} case(s) each)",
                if round < plan.warmup {
                    "warm-up"
                } else {
                    "timed"
                },
                round + 1,
                plan.cases.len()
            );
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        for (ci, (case, pc)) in plan.cases.iter().zip(&planned).enumerate() {
            let iter_no = (ci as u32) * 100_000 + round;
            let all = run_case_iteration(world, &mut rig, (ci, case, pc), iter_no)?;
            let m = &mut measured[ci];
            if round >= plan.warmup {
                let run = measured_run(&all);
                m.iteration_us.push(run.0 * 1e3);
                m.last = Some(run);
                m.timed.push(all);
            }
            if round + 1 == rounds {
                m.grad_err = verify_all(world, &rig.stage)?;
            }
        }
    }
    if progress {
        println!();
    }
    world
        .broadcast(&ToRank::Finish, false)
        .map_err(anyhow::Error::msg)?;
    let mut out = Outputs {
        run_id: dir.id.clone(),
        table: dir.table()?,
        timeline: dir.table()?,
        traces: Vec::new(),
        unverified: Vec::new(),
    };
    for ((case, pc), m) in plan.cases.iter().zip(&planned).zip(measured) {
        write_case(&mut out, case, pc, m, plan, opts)?;
    }
    let refs: Vec<(String, &Run)> = out.traces.iter().map(|(n, r)| (n.clone(), r)).collect();
    let trace = crate::sim::render::trace_events(&refs);
    std::fs::write(
        dir.path.join("pipeline_trace.json"),
        serde_json::to_vec(&trace)?,
    )?;
    let unverified = out.unverified;
    if !unverified.is_empty() {
        bail!(
            "{}: the weight gradients are off beyond {GRAD_TOLERANCE:.0e} against the f64 reference (grad_rel_err in pipeline.csv)",
            unverified.join(", ")
        );
    }
    Ok(())
}

/// Where the cases' results go.
struct Outputs {
    run_id: String,
    table: CsvSink<PipelineTable>,
    timeline: CsvSink<TimelineTable>,
    /// Each case's measured and predicted runs, for the Perfetto trace.
    traces: Vec<(String, Run)>,
    /// The cases whose gradients did not verify.
    unverified: Vec<String>,
}

/// Predicts `case` from what it measured and writes its row, its timeline and its console
/// line.
fn write_case(
    out: &mut Outputs,
    case: &Case,
    pc: &PlannedCase,
    m: Measured,
    plan: &PipelinePlan,
    opts: &PipelineOptions,
) -> Result<()> {
    let n = pc.orders.len();
    let schedule = &case.schedule;
    let verified = m.grad_err <= GRAD_TOLERANCE;
    // Predicted: the same orders replayed on each timed iteration's own op and link times
    // (a shared machine changes speed from one iteration to the next, so each iteration is
    // set against its own prediction); the row holds the medians of both.
    let policy = Policy::Fixed {
        orders: pc.orders.clone(),
        split: pc.split,
    };
    let mut predictions = Vec::new();
    for it in &m.timed {
        let sc = measured_scenario(
            n,
            &plan.shape,
            case.comm,
            std::slice::from_ref(it),
            !pc.split,
        )?;
        predictions
            .push(simulate(&sc, &policy).map_err(|e| anyhow!("predicting {schedule}: {e}"))?);
    }
    let predicted_ms = Summary::of(
        &predictions
            .iter()
            .map(|r| r.iteration_ms)
            .collect::<Vec<_>>(),
    )
    .map_or(0.0, |s| s.p50);
    // The predicted lane of the timeline is the last iteration's, as the measured lane is.
    let predicted = predictions.pop().expect("at least one timed iteration");
    let s = Summary::of(&m.iteration_us).ok_or_else(|| anyhow!("no timed iterations"))?;
    let measured_ms = s.p50 / 1e3;
    let (_, bubbles, run) = m.last.expect("at least one timed iteration");
    let peak = peak_in_flight(&pc.orders);
    let params = PipelineParams {
        schedule: case.schedule.clone(),
        comm: case.comm.to_string(),
        transport: plan.transport.to_string(),
        slow: case.slow.map_or("none".into(), |(l, d)| format!("{l}:{d}")),
        stages: n as u32,
        microbatches: plan.shape.microbatches,
        layers: plan.shape.layers,
        tokens: plan.shape.tokens,
        hidden: plan.shape.hidden,
    };
    let figures = PipelineFigures {
        iteration_ms: round(measured_ms, 3),
        predicted_ms: round(predicted_ms, 3),
        error: round((measured_ms - predicted_ms) / measured_ms, 4),
        bubble: round(bubbles.iter().sum::<f64>() / n as f64, 4),
        peak_activations: peak.iter().copied().max().unwrap_or(0) as u32,
        grad_rel_err: crate::export::csv::sig(m.grad_err, 3),
        verified,
        plan: pc.name.clone(),
        op_clock: Some(op_clock(&m.timed).into()),
        stage_bubbles: Some(join(bubbles.iter().map(|b| round(*b, 4)))),
        stage_peak_activations: Some(join(peak.iter())),
    };
    // File-name safe: no ':' (static:1f1b, LINK:MS).
    let case_name = format!(
        "{}_{}_{}",
        case.schedule.replace(':', "-"),
        case.comm,
        case.slow
            .map_or("nodelay".into(), |(l, d)| format!("link{l}+{d}ms"))
    );
    if !opts.quiet {
        println!(
            "{case_name:<28} measured {:>9.2} ms  predicted {:>9.2} ms  error {:>+6.1}%  bubble {:.3}  grad err {:.1e}  ops timed by {}{}",
            figures.iteration_ms,
            figures.predicted_ms,
            figures.error * 100.0,
            figures.bubble,
            m.grad_err,
            op_clock(&m.timed),
            if verified { "" } else { "  NOT VERIFIED" }
        );
    }
    out.table.write(&Line::new(
        &out.run_id,
        case_name.clone(),
        params,
        Some(&s),
        figures,
    ))?;
    for (lane, r) in [("measured", &run), ("predicted", &predicted)] {
        for e in &r.ops {
            let row = TimelineRow {
                lane: lane.into(),
                stage: e.op.stage as u32,
                kind: e.op.kind.to_string(),
                microbatch: e.op.mb as u32,
                start_ms: round(e.start, 4),
                end_ms: round(e.end, 4),
                queue_end_ms: round(e.queue_end, 4),
            };
            out.timeline.write(&Line::new(
                &out.run_id,
                case_name.clone(),
                row,
                None,
                Default::default(),
            ))?;
        }
    }
    out.traces.push((format!("{case_name} measured"), run));
    out.traces
        .push((format!("{case_name} predicted"), predicted));
    if !verified {
        out.unverified.push(case_name);
    }
    Ok(())
}

/// Per-stage values in one CSV cell.
fn join<T: std::fmt::Display>(v: impl Iterator<Item = T>) -> String {
    v.map(|x| x.to_string()).collect::<Vec<_>>().join(";")
}

/// Whose clock timed the ops of these iterations (see `PipelineFigures::op_clock`).
fn op_clock(timed: &[Vec<StageTimes>]) -> &'static str {
    let all = timed.iter().flatten();
    let gpu = all.clone().filter(|t| t.gpu_clock.is_some()).count();
    match gpu {
        0 => "host",
        n if n == all.count() => "gpu",
        _ => "mixed",
    }
}

/// Activations in flight at most per stage (F done, its B not yet), from the orders.
fn peak_in_flight(orders: &[Vec<Op>]) -> Vec<usize> {
    orders
        .iter()
        .map(|o| {
            let (mut now, mut peak) = (0usize, 0usize);
            for op in o {
                match op.kind {
                    OpKind::F => now += 1,
                    OpKind::B => now = now.saturating_sub(1),
                    OpKind::W => {}
                }
                peak = peak.max(now);
            }
            peak
        })
        .collect()
}
