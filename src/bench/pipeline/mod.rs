//! `morphbench pipeline`: a real multi-stage training pipeline on the testbed, measured against
//! the simulator's prediction. Each rank is one stage (`stage`) with its own GPU; neighbours
//! exchange activations and gradients over the project's transport (`comm`); each stage
//! replays the simulator's op order for the schedule (`exec`). A [`Ranked`] bench: rank 0
//! plans, collects every op's times, predicts each iteration from its measured op and link
//! times (`predict`), and writes pipeline.csv and pipeline_timeline.csv, a Perfetto trace and
//! a measured-against-predicted Gantt chart (`report`).

pub mod comm;
pub mod exec;
mod predict;
mod report;
pub mod stage;
pub mod table;
mod validate;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use crate::cluster::clock;
use crate::cluster::world::{World, WorldOptions};
use crate::cluster::{run_ranked, Crew, Ranked, SessionOptions};
use crate::gpu::{BackendChoice, Gpu};
use crate::noise::load::BusyWarning;
use crate::record::run_dir::RunDir;
use crate::sim::{OpKind, Schedule};
use crate::stats::Summary;
use crate::transport::TransportKind;
use comm::{Link, ACT, GRAD};
use exec::{Comm, Neighbours, StageTimes};
use predict::{Measured, PlannedCase};
use stage::{Shape, Stage};

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
pub const MAX_MICROBATCHES: u32 = 256;
const MAX_LAYERS: u32 = 64;
const MAX_WARMUP: u32 = 1000;
/// The most cases one run may hold (schedules x comm modes x delays).
const MAX_CASES: usize = 64;
/// The most memory one stage's buffers may take (checked before any rank starts).
const MAX_STAGE_BYTES: u64 = 2 << 30;
/// Relative error of the weight gradients against f64 that still verifies: per dot product
/// f32 rounding grows about sqrt(K) * 2^-24 (the GEMM check's bound is 1e-5 sqrt(K)), the
/// layernorm backward scales errors by 1/std (about 1 here), and L layers and N microbatches
/// add them up; measured errors are about 1e-6. A wrong index, a lost or repeated microbatch
/// gives errors of order 1, far above.
pub const GRAD_TOLERANCE: f64 = 1e-3;

#[derive(Debug, Clone)]
pub struct PipelineOptions {
    pub session: SessionOptions,
    pub plan: PipelinePlan,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
    /// This rank's RDMA device (with `--transport rdma`).
    pub rdma: crate::transport::rdma::DeviceChoice,
    /// Rank 0 starts no more rounds this many seconds into the rounds (the fleet gate's
    /// allowance), once one timed round is in; its gradients are checked all the same.
    pub deadline_s: Option<f64>,
}

impl PipelineOptions {
    pub fn world(&self) -> &WorldOptions {
        &self.session.world
    }
}

/// A stage's op times measured alone, for planning (µs): F, B split, W, B fused, D2H.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Calibration {
    f: f64,
    b: f64,
    w: f64,
    d2h: f64,
}

/// Rank 0's orders, in the order a run sends them.
#[derive(Debug, Serialize, Deserialize)]
pub enum Order {
    /// Open the device and become a stage of this plan.
    Plan(PipelinePlan),
    /// Connect to the neighbours, then time each op alone.
    Connect,
    /// Case index, each stage's op order, backward fused or split.
    Case(usize, Vec<OpOrder>, bool),
    Iter(u32),
    Verify,
}

/// The others' replies.
#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    Ready,
    Calibrated(Calibration),
    Iter(StageTimes),
    Verified(f64),
}

/// The most stages `--local` starts.
pub const MAX_LOCAL_STAGES: u32 = 16;

/// Runs this rank's part; rank 0 returns its run folder.
pub fn run(opts: &PipelineOptions) -> Result<Option<PathBuf>> {
    run_ranked(&mut Pipeline::new(opts.clone()), &opts.session)
}

pub use report::CaseRow;

/// The timed rounds run and planned, when a deadline cut them.
pub type Cut = Option<(u32, u32)>;

/// The pipeline on one rank: rank 0's GPU until it becomes a stage, a follower's stage.
/// Another bench may lead it inside its own session (the fleet gate, through
/// [`Crew::nested`]: `validate`, `prepare`, then `lead`) and read its rows from
/// [`Pipeline::rows`].
pub struct Pipeline {
    opts: PipelineOptions,
    gpu: Option<Gpu>,
    follower: Option<Follower>,
    /// Rank 0: a warning per busy stage, for meta.json.
    busy: Vec<BusyWarning>,
    /// Rank 0, once it has led: each case's row of pipeline.csv.
    rows: Vec<CaseRow>,
    /// Rank 0: the timed rounds run and planned, when the deadline cut them.
    cut: Cut,
}

impl Pipeline {
    pub fn new(opts: PipelineOptions) -> Pipeline {
        Pipeline {
            opts,
            gpu: None,
            follower: None,
            busy: Vec::new(),
            rows: Vec::new(),
            cut: None,
        }
    }

    /// The timed rounds run and planned, when the deadline cut them.
    pub fn cut(&self) -> Cut {
        self.cut
    }

    pub fn rows(&self) -> &[CaseRow] {
        &self.rows
    }

    pub fn busy(&self) -> &[BusyWarning] {
        &self.busy
    }
}

/// A follower's stage, its links once connected, and the case it runs.
struct Follower {
    plan: PipelinePlan,
    stage: Stage,
    links: Option<(Neighbour, Neighbour)>,
    /// (case index, this stage's order, backward fused)
    case: Option<(usize, OpOrder, bool)>,
}

impl Ranked for Pipeline {
    type Order = Order;
    type Reply = Reply;

    fn validate(&self, world: &World) -> Result<()> {
        self.opts
            .plan
            .validate(world.size())
            .map_err(anyhow::Error::msg)
    }

    fn prepare(&mut self, world: &World) -> Result<Option<serde_json::Value>> {
        let gpu = open_device(&self.opts, self.opts.plan.transport, world.local_rank())?;
        let report = serde_json::to_value(&gpu.report).ok();
        self.gpu = Some(gpu);
        Ok(report)
    }

    fn config(&self, world: &World) -> serde_json::Value {
        serde_json::json!({
            "pipeline": self.opts.plan,
            "stages": world.size(),
            "launcher": world.launch.launcher.to_string(),
            "roster": world.roster,
        })
    }

    fn banner(&self, world: &World) -> String {
        format!("pipeline: {} stages", world.size())
    }

    fn lead(&mut self, crew: &mut Crew<Order, Reply>, dir: &RunDir) -> Result<()> {
        let gpu = self
            .gpu
            .take()
            .ok_or_else(|| anyhow!("rank 0 has no GPU"))?;
        (self.rows, self.cut) = lead(crew, gpu, &self.opts, dir, &mut self.busy)?;
        Ok(())
    }

    fn notes(&self) -> serde_json::Map<String, serde_json::Value> {
        crate::noise::load::busy_notes(&self.busy)
    }

    fn follow(&mut self, world: &World, order: Order) -> Result<Reply> {
        match (order, self.follower.as_mut()) {
            (Order::Plan(plan), None) => {
                let gpu = open_device(&self.opts, plan.transport, world.local_rank())?;
                let stage = Stage::new(gpu, plan.shape, world.rank(), world.size())?;
                self.follower = Some(Follower {
                    plan,
                    stage,
                    links: None,
                    case: None,
                });
                Ok(Reply::Ready)
            }
            (Order::Connect, Some(f)) => {
                f.links = Some(connect(world, &f.plan, &self.opts.rdma)?);
                Ok(Reply::Calibrated(calibrate(&mut f.stage)?))
            }
            (Order::Case(i, orders, fused), Some(f)) => {
                let mine = orders
                    .get(world.rank() as usize)
                    .cloned()
                    .ok_or_else(|| anyhow!("rank 0's plan has no order for this stage"))?;
                f.case = Some((i, mine, fused));
                Ok(Reply::Ready)
            }
            (Order::Iter(it), Some(f)) => {
                let (i, order, fused) = f
                    .case
                    .as_ref()
                    .ok_or_else(|| anyhow!("an iteration before a case"))?;
                let (prev, next) = f
                    .links
                    .as_ref()
                    .ok_or_else(|| anyhow!("an iteration before the links"))?;
                let c = &f.plan.cases[*i];
                let nb = neighbours(world.rank(), prev, next, c);
                exec::run_iteration(&mut f.stage, &nb, order, *fused, c.comm, it)
                    .map(Reply::Iter)
                    .map_err(anyhow::Error::msg)
            }
            (Order::Verify, Some(f)) => f.stage.verify().map(Reply::Verified),
            (order, _) => bail!("rank 0 sent {order:?} out of turn"),
        }
    }

    fn patience(&self, _world: &World) -> Duration {
        Duration::from_secs(self.opts.world().timeout.as_secs().max(600))
    }
}

/// What every rank needs before it can be a stage: the transport and its GPU (its own, by its
/// local rank, unless --adapter names one).
fn open_device(opts: &PipelineOptions, transport: TransportKind, local_rank: u32) -> Result<Gpu> {
    crate::transport::factory::check_available(transport, &opts.rdma)?;
    let gpu = Gpu::open_local(opts.backend, opts.adapter.as_deref(), local_rank)?;
    Ok(gpu)
}

/// The link to one neighbour, if the stage has one there.
type Neighbour = Option<Arc<Link>>;
/// A stage's order: (kind, microbatch) pairs.
pub type OpOrder = Vec<(OpKind, u32)>;

/// Connects this stage to its neighbours, one connection each way per neighbour, over the
/// plan's transport.
fn connect(
    world: &World,
    plan: &PipelinePlan,
    rdma: &crate::transport::rdma::DeviceChoice,
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

/// The least time a link's reader waits for the next message: between cases rank 0 checks
/// gradients and predicts, which can take a while on big shapes.
const IDLE: Duration = Duration::from_secs(600);

/// The links and clocks of rank 0's side of the run.
struct Rig<'a> {
    stage: Stage,
    prev: Neighbour,
    next: Neighbour,
    offsets: &'a [f64],
    timeout: Duration,
}

/// Rank 0: plans, brings every stage up, runs the cases in turns and writes what they measured.
fn lead(
    crew: &mut Crew<Order, Reply>,
    gpu: Gpu,
    opts: &PipelineOptions,
    dir: &RunDir,
    busy: &mut Vec<BusyWarning>,
) -> Result<(Vec<CaseRow>, Cut)> {
    let plan = &opts.plan;
    let stage = Stage::new(gpu, plan.shape, 0, crew.world().size())?;
    let long = Instant::now() + Duration::from_secs(600);
    crew.order_all(Order::Plan(plan.clone()))?;
    crew.hear_all(long)?;
    crew.order_all(Order::Connect)?;
    let (prev, next) = connect(crew.world(), plan, &opts.rdma)?;
    let mut rig = Rig {
        stage,
        prev,
        next,
        offsets: &[],
        timeout: Duration::from_secs(plan.timeout_s),
    };
    let mut cals = vec![calibrate(&mut rig.stage)?];
    for (i, r) in crew.hear_all(long)?.into_iter().enumerate() {
        match r {
            Reply::Calibrated(c) => cals.push(c),
            _ => return Err(crew.out_of_turn(i as u32 + 1, "the calibration").into()),
        }
    }
    // Ranks on other machines have other clocks: each rank's op times are moved onto rank 0's.
    let clocks = clock::offsets(crew)?;
    if !opts.session.quiet && clocks.offset_us.len() > 1 {
        let list: Vec<String> = (1..clocks.offset_us.len())
            .map(|r| {
                format!(
                    "r{r} {:+.3} ms (±{:.3})",
                    clocks.offset_us[r] / 1e3,
                    clocks.rtt_us[r] / 2e3
                )
            })
            .collect();
        println!(
            "clock offsets from rank 0 (lowest-RTT ping of {}): {}",
            clock::PINGS,
            list.join(", ")
        );
    }
    rig.offsets = &clocks.offset_us;
    let planned: Vec<PlannedCase> = plan
        .cases
        .iter()
        .map(|c| predict::plan_case(c, &cals, &plan.shape))
        .collect::<Result<_>>()?;
    let deadline = opts
        .deadline_s
        .map(|s| Instant::now() + Duration::from_secs_f64(s));
    let (measured, cut) = run_rounds(
        crew,
        &mut rig,
        (plan, &planned),
        deadline,
        opts.session.quiet,
    )?;
    let quiet = opts.session.quiet;
    let rows = report::write_all(dir, crew.world(), (plan, &planned, measured), quiet, busy)?;
    Ok((rows, cut))
}

/// The cases take turns, one iteration each per round, so every case sees the machine at the
/// same moments: a shared machine's speed drifts by tens of percent over a minute, which would
/// otherwise land in the comparison between cases. Past `deadline`, the round under way (once
/// a timed one) is the last. Returns the measurements and, when cut, the timed rounds run and
/// planned.
fn run_rounds(
    crew: &mut Crew<Order, Reply>,
    rig: &mut Rig,
    (plan, planned): (&PipelinePlan, &[PlannedCase]),
    deadline: Option<Instant>,
    quiet: bool,
) -> Result<(Vec<Measured>, Cut)> {
    let mut measured: Vec<Measured> = plan.cases.iter().map(|_| Measured::default()).collect();
    let rounds = plan.warmup.saturating_add(plan.iters);
    let progress = !quiet && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut cut = None;
    for round in 0..rounds {
        let late = round >= plan.warmup && deadline.is_some_and(|d| Instant::now() >= d);
        let last = round + 1 == rounds || late;
        if late && round + 1 < rounds {
            cut = Some((round + 1 - plan.warmup, plan.iters));
        }
        if progress {
            let phase = if round < plan.warmup {
                "warm-up"
            } else {
                "timed"
            };
            print!(
                "\r{phase} round {}/{rounds} ({} case(s) each)",
                round + 1,
                plan.cases.len()
            );
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        for (ci, (case, pc)) in plan.cases.iter().zip(planned).enumerate() {
            let iter_no = (ci as u32).wrapping_mul(100_000).wrapping_add(round);
            let all = run_case_iteration(crew, rig, (ci, case, pc), iter_no)?;
            let m = &mut measured[ci];
            if round >= plan.warmup {
                let run = predict::measured_run(&all);
                m.iteration_us.push(run.0 * 1e3);
                m.last = Some(run);
                m.timed.push(all);
            }
            if last {
                m.grad_err = verify_all(crew, &rig.stage)?;
            }
        }
        if last {
            break;
        }
    }
    if progress {
        println!();
    }
    Ok((measured, cut))
}

/// Runs iteration `iter_no` of `case` on every stage and returns every stage's times on rank
/// 0's clock. Rank 0's stage runs in a thread while rank 0 hears the others, so a rank that
/// fails or dies ends the run at once: the others are told to stop, their links close, and
/// this stage's waits on them end too.
fn run_case_iteration(
    crew: &mut Crew<Order, Reply>,
    rig: &mut Rig,
    (ci, case, pc): (usize, &Case, &PlannedCase),
    iter_no: u32,
) -> Result<Vec<StageTimes>> {
    let long = Instant::now() + Duration::from_secs(600);
    crew.order_all(Order::Case(ci, pc.wire.clone(), !pc.split))?;
    crew.hear_all(long)?;
    crew.order_all(Order::Iter(iter_no))?;
    let nb = neighbours(0, &rig.prev, &rig.next, case);
    let stage = &mut rig.stage;
    let wait = Instant::now() + rig.timeout * 4;
    let (mine, heard) = std::thread::scope(|sc| {
        let own = sc
            .spawn(|| exec::run_iteration(stage, &nb, &pc.wire[0], !pc.split, case.comm, iter_no));
        let heard = crew.hear_all(wait);
        if let Err(e) = &heard {
            crew.abort(&e.to_string());
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
            Reply::Iter(mut t) => {
                predict::shift(&mut t, rig.offsets[i + 1]);
                all.push(t)
            }
            _ => return Err(crew.out_of_turn(i as u32 + 1, "an iteration").into()),
        }
    }
    Ok(all)
}

/// Every stage's weight gradients of the last iteration against its f64 reference: the
/// largest relative error.
fn verify_all(crew: &mut Crew<Order, Reply>, stage: &Stage) -> Result<f64> {
    crew.order_all(Order::Verify)?;
    let mut worst = stage.verify()?;
    for (i, r) in crew
        .hear_all(Instant::now() + Duration::from_secs(600))?
        .into_iter()
        .enumerate()
    {
        match r {
            Reply::Verified(e) => worst = worst.max(e),
            _ => return Err(crew.out_of_turn(i as u32 + 1, "the check").into()),
        }
    }
    Ok(worst)
}
