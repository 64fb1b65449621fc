//! `morphbench pipeline`: a real multi-stage training pipeline on the testbed, measured against
//! the simulator's prediction. Each rank is one stage (`stage`) with its own GPU, holding one
//! model chunk or, interleaved, several (`chunk`); ranks whose chunks hand data to each other
//! (`wiring`: neighbours, and interleaving's wrap from the last rank to the first) exchange
//! activations and gradients over the project's transport (`comm`); each stage replays the
//! simulator's op order for the schedule (`exec`). A [`Ranked`] bench: rank 0
//! plans, collects every op's times, predicts each iteration from its measured op and link
//! times (`predict`), and writes pipeline.csv and pipeline_timeline.csv, a Perfetto trace and
//! a measured-against-predicted Gantt chart (`report`).

pub mod args;
mod chunk;
pub mod comm;
pub mod exec;
mod plan;
mod predict;
mod report;
pub mod shape;
pub mod stage;
pub mod table;
mod trace_csv;
mod validate;
mod views;
mod wiring;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use crate::cluster::clock;
use crate::cluster::world::World;
use crate::cluster::{run_ranked, Crew, Ranked};
use crate::gpu::Gpu;
use crate::noise::load::BusyWarning;
use crate::record::run_dir::RunDir;
use crate::sim::Layout;
use crate::stats::Summary;
use crate::transport::TransportKind;
pub use plan::{
    Calibration, Case, OpOrder, PipelineOptions, PipelinePlan, GRAD_TOLERANCE, MAX_LOCAL_STAGES,
    MAX_MICROBATCHES,
};

use exec::StageTimes;
use predict::{Measured, PlannedCase};
use stage::Stage;
use wiring::{connect, neighbours, Links};

/// Rank 0's orders, in the order a run sends them.
#[derive(Debug, Serialize, Deserialize)]
pub enum Order {
    /// Open the device and become a stage of this plan.
    Plan(PipelinePlan),
    /// Connect to the neighbours, then time each op alone.
    Connect,
    /// Run this case next: its index, each stage's op order, backward fused or split, and
    /// where the model's chunks live.
    Case {
        index: usize,
        orders: Vec<OpOrder>,
        fused: bool,
        layout: Layout,
    },
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
    links: Option<Links>,
    /// The case it runs: its index, this stage's order, backward fused, the layout.
    case: Option<(usize, OpOrder, bool, Layout)>,
}

impl Ranked for Pipeline {
    type Order = Order;
    type Reply = Reply;

    fn validate(&self, world: &World) -> Result<()> {
        self.opts.plan.validate(world.size())
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
                // Bounded here too before anything is allocated from it: sizes, counts, cases.
                plan.validate(world.size())
                    .map_err(|e| anyhow!("rank 0 sent a plan this stage refuses: {e}"))?;
                let gpu = open_device(&self.opts, plan.transport, world.local_rank())?;
                let layouts = plan.layouts(world.size())?;
                let stage = Stage::new(gpu, plan.shape, world.rank(), world.size(), &layouts)?;
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
                let layouts = f.plan.layouts(world.size())?;
                Ok(Reply::Calibrated(calibrate(&mut f.stage, layouts[0])?))
            }
            (
                Order::Case {
                    index,
                    orders,
                    fused,
                    layout,
                },
                Some(f),
            ) => {
                let mine = orders
                    .get(world.rank() as usize)
                    .cloned()
                    .ok_or_else(|| anyhow!("rank 0's plan has no order for this stage"))?;
                f.stage.use_layout(layout)?;
                f.case = Some((index, mine, fused, layout));
                Ok(Reply::Ready)
            }
            (Order::Iter(it), Some(f)) => {
                let (i, order, fused, layout) = f
                    .case
                    .as_ref()
                    .ok_or_else(|| anyhow!("an iteration before a case"))?;
                let links = f
                    .links
                    .as_ref()
                    .ok_or_else(|| anyhow!("an iteration before the links"))?;
                let c = &f.plan.cases[*i];
                let nb = neighbours(world, links, c, *layout);
                exec::run_iteration(&mut f.stage, &nb, order, *fused, c.comm, it).map(Reply::Iter)
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

/// Times each op of the stage alone, on the model of the plan's first layout: a model chunk's
/// op times the chunks it has, as the simulator counts a stage.
fn calibrate(stage: &mut Stage, layout: Layout) -> Result<Calibration> {
    stage.use_layout(layout)?;
    let chunks = layout.chunks() as f64;
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
    let x = Some(shape::input(&shape, 0));
    let dy = Some(shape::seeded(5, shape.elements(), 1.0));
    stage.forward(0, 0, x.clone())?;
    let f = time(&mut || stage.forward(0, 0, x.clone()))?;
    let b = time(&mut || stage.backward(0, 0, dy.clone(), false))?;
    let w = time(&mut || stage.weight(0, 0))?;
    let d2h = time(&mut || stage.read_out(0, 0, false).map(|_| ()))?;
    Ok(Calibration {
        f: f * chunks,
        b: b * chunks,
        w: w * chunks,
        d2h,
    })
}

/// The links and clocks of rank 0's side of the run.
struct Rig<'a> {
    stage: Stage,
    links: Links,
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
    let layouts = plan.layouts(crew.world().size())?;
    let stage = Stage::new(gpu, plan.shape, 0, crew.world().size(), &layouts)?;
    let long = Instant::now() + Duration::from_secs(600);
    crew.order_all(Order::Plan(plan.clone()))?;
    crew.hear_all(long)?;
    crew.order_all(Order::Connect)?;
    let links = connect(crew.world(), plan, &opts.rdma)?;
    let mut rig = Rig {
        stage,
        links,
        offsets: &[],
        timeout: Duration::from_secs(plan.timeout_s),
    };
    let mut cals = vec![calibrate(&mut rig.stage, layouts[0])?];
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
    crew.order_all(Order::Case {
        index: ci,
        orders: pc.orders.clone(),
        fused: !pc.split,
        layout: pc.layout,
    })?;
    crew.hear_all(long)?;
    crew.order_all(Order::Iter(iter_no))?;
    let nb = neighbours(crew.world(), &rig.links, case, pc.layout);
    let stage = &mut rig.stage;
    stage.use_layout(pc.layout)?;
    let wait = Instant::now() + rig.timeout * 4;
    let (mine, heard) = std::thread::scope(|sc| {
        let own = sc.spawn(|| {
            exec::run_iteration(stage, &nb, &pc.orders[0], !pc.split, case.comm, iter_no)
        });
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
                let ops = pc.orders.get(i + 1).map_or(0, |o| o.len());
                let links = crate::sim::links_of(crew.world().size() as usize);
                if let Some(why) = t.fault(ops, links) {
                    return Err(anyhow!(
                        "{} reported an iteration rank 0 refuses: {why}",
                        crew.world().describe(i as u32 + 1)
                    ));
                }
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

/// The `pipeline` bench, for the registry (a multi-rank command of its own).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: "pipeline",
    from_toml: None,
    command: args::command(|m, g| {
        let a: args::PipelineArgs = crate::bench::descriptor::parsed(m)?;
        let dir = run(&a.options(g)?)?;
        Ok(crate::bench::descriptor::Ran::wrote(
            dir,
            crate::bench::descriptor::After::Report,
        ))
    }),
    tables: || {
        vec![
            crate::record::TableSpec::of::<table::PipelineTable>()
                .headlines(views::headlines)
                .charts(crate::record::Charts::OfFirst(views::pipeline_charts)),
            crate::record::TableSpec::of::<table::TimelineTable>(),
        ]
    },
};
