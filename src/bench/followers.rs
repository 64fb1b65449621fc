//! Simulated followers (test builds only, feature `test-hooks`): many ranks of a `links` or
//! `fleet` run in one process, a thread each, speaking the real wire protocol to a real rank 0
//! (the product's own code path, unchanged): the rendezvous, heartbeats, orders, pings,
//! replies, the end. Their measurements are canned: a pair of two followers reports healthy
//! rows of the plan's shape at once, a pair with rank 0 is measured for real (rank 0 serves
//! it), and a gate's inventory and tests are one healthy simulated node's. Faults on request: a
//! follower that dies, stops answering, sends garbage, or is slow to join. Each follower logs
//! when it joined and ended, and why, so a test can time the rendezvous and the spread of an
//! abort.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fleet::checks::{Batch, Inventory, TestSpec};
use super::fleet::{GateOrder, GateReply, Order as FleetOrder, Reply as FleetReply};
use super::links::pair::{self, Measured, PairPlan};
use super::links::tail::Tail;
use super::links::{Order, Reply};
use crate::cluster::auth::Trust;
use crate::cluster::frame::{self, Channel};
use crate::cluster::rendezvous::{self, Registration};
use crate::cluster::session::{Down, Up};
use crate::host::HostInfo;
use crate::noise::rank::RankLoad;
use crate::stats::Summary;
use crate::transport::TransportKind;

/// A fault one follower plays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Closes its connection when round `round`'s order comes (the process died).
    Dies { rank: u32, round: u32 },
    /// Stops reading and answering at round `round`, its connection left open (SIGSTOP, a
    /// hung host), for `for_s` seconds, then leaves.
    Stops { rank: u32, round: u32, for_s: f64 },
    /// Answers round `round` with bytes that are not a message.
    Garbage { rank: u32, round: u32 },
    /// Joins `after_s` seconds late.
    Late { rank: u32, after_s: f64 },
    /// Takes `for_s` seconds over round `round`, its heartbeats going (a slow test): rank 0
    /// waits, heartbeating, which times what its heartbeats cost.
    Slow { rank: u32, round: u32, for_s: f64 },
}

impl Fault {
    fn rank(&self) -> u32 {
        match *self {
            Fault::Dies { rank, .. }
            | Fault::Stops { rank, .. }
            | Fault::Garbage { rank, .. }
            | Fault::Late { rank, .. }
            | Fault::Slow { rank, .. } => rank,
        }
    }
}

/// What the followers are and do.
#[derive(Debug, Clone)]
pub struct Followers {
    /// Rank 0's rendezvous address.
    pub rendezvous: String,
    pub world: u32,
    /// The ranks this process plays (1..world for all of them).
    pub ranks: Range<u32>,
    pub fault: Option<Fault>,
    /// How long a follower waits to join, and for any word of rank 0 before it gives up.
    pub patience: Duration,
    /// The canned one-way latency (µs) and bandwidth of a pair of followers.
    pub latency_us: f64,
    pub gbps: f64,
    /// The job's secret the followers prove.
    pub trust: Trust,
}

impl Followers {
    /// Followers proving `token`, the job's secret rank 0 was given.
    pub fn new(rendezvous: &str, world: u32, token: &str) -> Followers {
        let secret = crate::cluster::auth::Secret::from_token(token).expect("a test's token");
        Followers {
            trust: Trust::Secret(std::sync::Arc::new(secret)),
            rendezvous: rendezvous.to_string(),
            world,
            ranks: 1..world,
            fault: None,
            patience: Duration::from_secs(120),
            latency_us: 12.0,
            gbps: 10.0,
        }
    }
}

/// How a follower's run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Rank 0 said the run is over.
    Finished,
    /// Rank 0 aborted the run, with why.
    Aborted(String),
    /// Rank 0 went away or broke the protocol (what it did).
    Lost(String),
    /// This follower played its fault.
    Faulted,
}

/// One follower's log, its times from [`run`]'s start.
#[derive(Debug, Clone)]
pub struct Log {
    pub rank: u32,
    /// When the roster came (the rendezvous done), if it came.
    pub joined: Option<Duration>,
    /// When it played its fault, if it has one.
    pub faulted: Option<Duration>,
    pub ended: Duration,
    pub ending: Ending,
    /// Orders carried out (plan, rounds, retests).
    pub orders: u32,
    /// When each order came, and when its reply went.
    pub ordered_at: Vec<Duration>,
    pub replied_at: Vec<Duration>,
}

/// Plays every follower of `f` at once, a thread each, until each has ended. Returns their
/// logs in rank order.
pub fn run(f: &Followers) -> Vec<Log> {
    let start = Instant::now();
    let threads: Vec<_> = f
        .ranks
        .clone()
        .map(|rank| {
            let f = f.clone();
            std::thread::Builder::new()
                .name(format!("follower {rank}"))
                .stack_size(256 << 10)
                .spawn(move || follow(&f, rank, start))
                .expect("a follower thread")
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a follower panicked"))
        .collect()
}

fn follow(f: &Followers, rank: u32, start: Instant) -> Log {
    let mut log = Log {
        rank,
        joined: None,
        faulted: None,
        ended: Duration::ZERO,
        ending: Ending::Finished,
        orders: 0,
        ordered_at: Vec::new(),
        replied_at: Vec::new(),
    };
    let fault = f.fault.filter(|x| x.rank() == rank);
    let ending = match join(f, rank, fault, start, &mut log) {
        Ok((stream, root)) => obey(f, rank, fault, &Arc::new(stream), &root, start, &mut log),
        Err(e) => Ending::Lost(format!("{e:#}")),
    };
    log.ended = start.elapsed();
    log.ending = ending;
    log
}

fn join(
    f: &Followers,
    rank: u32,
    fault: Option<Fault>,
    start: Instant,
    log: &mut Log,
) -> anyhow::Result<(Channel, String)> {
    if let Some(Fault::Late { after_s, .. }) = fault {
        std::thread::sleep(Duration::from_secs_f64(after_s));
    }
    let stream = rendezvous::connect(&f.rendezvous, f.patience)?;
    let me = Registration {
        version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: format!("sim{rank:05}"),
        rank,
        world: f.world,
        address: "127.0.0.1".into(),
        // Followers serve no pair (rank 0 is the lower rank of each it plays): no listener.
        port: 0,
        adapter: None,
        rdma_devices: Vec::new(),
    };
    let (roster, stream, _) = rendezvous::register(stream, me, &f.trust, f.patience)?;
    log.joined = Some(start.elapsed());
    // Only rank 0's data address is kept: thousands of followers in one process.
    let root = format!("{}:{}", roster[0].address, roster[0].port);
    Ok((stream, root))
}

/// The follower's loop: every order of rank 0 until the run ends. A gate's orders and the
/// links it leads arrive as [`FleetOrder`] (untagged, so a `links` rank 0's orders read as
/// its `Links` variant, and the replies go back as links' own).
fn obey(
    f: &Followers,
    rank: u32,
    fault: Option<Fault>,
    stream: &Arc<Channel>,
    root: &str,
    start: Instant,
    log: &mut Log,
) -> Ending {
    let mut plan: Option<PairPlan> = None;
    loop {
        let heard = frame::receive::<Down<FleetOrder>>(stream, Instant::now() + f.patience);
        let order = match heard {
            Ok(Down::Alive) => continue,
            Ok(Down::Finish) => return Ending::Finished,
            Ok(Down::Abort(why)) => return Ending::Aborted(why),
            Ok(Down::Ping) => {
                let pong = Up::<FleetReply>::Pong(crate::host::now_us());
                let _ = frame::send(stream, &pong);
                continue;
            }
            Ok(Down::Order(o)) => o,
            Err(e) => return Ending::Lost(format!("rank 0 {e}")),
        };
        log.orders += 1;
        log.ordered_at.push(start.elapsed());
        let reply = match order {
            FleetOrder::Gate(g) => gate(rank, g),
            FleetOrder::Pipeline(_) => {
                Up::Failed("simulated followers run no pipeline: give a level without one".into())
            }
            FleetOrder::Links(o) => {
                if let Some(Fault::Slow { round, for_s, .. }) = fault {
                    if matches!(o, Order::Round(r, _) if r == round) {
                        slow_down(stream, for_s);
                    }
                }
                let reply = match o {
                    Order::Plan(p) => {
                        plan = Some(p);
                        Up::Reply(Reply::Ready)
                    }
                    Order::Fingerprint => Up::Failed(
                        "simulated followers take no fingerprint: run rank 0 with \
                         --no-fingerprint"
                            .into(),
                    ),
                    Order::Round(r, _) | Order::Retest(r, _, _) if played_fault(fault, r) => {
                        log.faulted = Some(start.elapsed());
                        play(fault.expect("a fault"), stream);
                        return Ending::Faulted;
                    }
                    Order::Round(r, active) => match &plan {
                        Some(p) => rows(f, rank, p, r, &active, stream, root),
                        None => Up::Failed("a round before the plan".into()),
                    },
                    Order::Retest(r, pair, part) => rows(f, rank, &part, r, &[pair], stream, root),
                };
                match reply {
                    Up::Reply(r) => Up::Reply(FleetReply::Links(r)),
                    Up::Failed(why) => Up::Failed(why),
                    _ => Up::Failed("a follower's reply out of turn".into()),
                }
            }
        };
        if let Err(e) = frame::send(stream, &reply) {
            return Ending::Lost(format!("cannot reach rank 0: {e}"));
        }
        log.replied_at.push(start.elapsed());
    }
}

/// A gate's order: the inventory of one healthy simulated node, its tests' canned figures.
fn gate(rank: u32, order: GateOrder) -> Up<FleetReply> {
    let reply = match order {
        GateOrder::Inventory => GateReply::Inventory(Box::new(inventory(rank))),
        GateOrder::Run(tests) => GateReply::Batch(Box::new(batch(&tests))),
        GateOrder::Textfile(_) => GateReply::Written(crate::reported::Reported::failed(
            "a simulated follower writes no textfile",
        )),
    };
    Up::Reply(FleetReply::Gate(reply))
}

fn inventory(rank: u32) -> Inventory {
    Inventory {
        rank,
        local_rank: 0,
        host: HostInfo {
            hostname: format!("sim{rank:05}"),
            cpu_model: "Simulated CPU".into(),
            logical_cores: 64,
            memory_bytes: Some(512 << 30),
            os: "Linux".into(),
            kernel: "6.1".into(),
        },
        machine_id: format!("sim{rank:05}"),
        adapter: Some("Simulated GPU".into()),
        adapter_index: Some(0),
        driver: Some("sim 1.0".into()),
        backend: Some("Vulkan".into()),
        device_type: Some("DiscreteGpu".into()),
        pci_bus_id: None,
        adapters: 1,
        rdma_devices: Vec::new(),
        gpu_error: None,
    }
}

/// Every test at the same healthy figure, on every simulated node.
fn batch(tests: &[TestSpec]) -> Batch {
    let results = tests
        .iter()
        .map(|t| super::fleet::checks::Measured {
            value: Some(100.0),
            p50_us: Some(1000.0),
            p99_us: Some(1010.0),
            n: t.iters,
            pcie: Some(crate::reported::Reported::failed(
                "not exposed (a simulated node)",
            )),
            ..super::fleet::checks::Measured::of(t.kind)
        })
        .collect();
    Batch {
        results,
        others_cores: Some(0.0),
        steal_pct: Some(0.0),
        cores: 1,
        ..Default::default()
    }
}

/// `for_s` seconds of a slow test, telling rank 0 this rank is alive as a real one does.
fn slow_down(stream: &Arc<Channel>, for_s: f64) {
    let beat = Arc::clone(stream);
    let _alive = crate::cluster::world::Ticker::start(move || {
        frame::send(&beat, &Up::<Reply>::Alive).is_ok()
    });
    std::thread::sleep(Duration::from_secs_f64(for_s));
}

fn played_fault(fault: Option<Fault>, round: u32) -> bool {
    match fault {
        Some(Fault::Dies { round: r, .. })
        | Some(Fault::Stops { round: r, .. })
        | Some(Fault::Garbage { round: r, .. }) => r == round,
        _ => false,
    }
}

fn play(fault: Fault, stream: &Channel) {
    match fault {
        Fault::Dies { .. } => {
            let _ = stream.stream().shutdown(std::net::Shutdown::Both);
        }
        Fault::Stops { for_s, .. } => std::thread::sleep(Duration::from_secs_f64(for_s)),
        Fault::Garbage { .. } => {
            use std::io::Write;
            let _ = (&mut stream.stream()).write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            std::thread::sleep(Duration::from_secs(1));
        }
        Fault::Late { .. } | Fault::Slow { .. } => {}
    }
}

/// This follower's rows of one wave: none when it sits out or serves, canned ones when it
/// drives a pair with another follower, measured ones when its partner is rank 0.
fn rows(
    f: &Followers,
    rank: u32,
    plan: &PairPlan,
    round: u32,
    active: &[(u32, u32)],
    stream: &Arc<Channel>,
    root: &str,
) -> Up<Reply> {
    let partner = active.iter().find_map(|&(a, b)| match rank {
        _ if rank == a => Some(b),
        _ if rank == b => Some(a),
        _ => None,
    });
    let measured = match partner {
        None => Ok(Vec::new()),
        Some(0) => drive_rank_0(plan, rank, round, stream, root, &f.trust),
        Some(p) if p > rank => Ok(Vec::new()),
        Some(p) => Ok(canned(f, plan, p, rank)),
    };
    match measured {
        Ok(m) => Up::Reply(Reply::Round(m, quiet_load(rank))),
        Err(e) => Up::Failed(format!("{e:#}")),
    }
}

/// A real pair test with rank 0 (which serves it), heartbeats going meanwhile.
fn drive_rank_0(
    plan: &PairPlan,
    rank: u32,
    round: u32,
    stream: &Arc<Channel>,
    root: &str,
    trust: &Trust,
) -> anyhow::Result<Vec<Measured>> {
    let beat = Arc::clone(stream);
    let _alive = crate::cluster::world::Ticker::start(move || {
        frame::send(&beat, &Up::<Reply>::Alive).is_ok()
    });
    let choice = crate::transport::rdma::DeviceChoice::default();
    pair::drive(root, plan, rank, 0, round, &choice, trust).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Healthy rows of `plan`'s shape for the pair `server`-`me` (the driver reports them all).
fn canned(f: &Followers, plan: &PairPlan, server: u32, me: u32) -> Vec<Measured> {
    let samples = |typical: f64| -> Vec<f64> {
        (0..50)
            .map(|i| typical * (1.0 + 0.01 * (i % 7) as f64))
            .collect()
    };
    let row = |transport, src, dst, bytes, direction: &str, typical: f64, gbps| {
        let s = samples(typical);
        Measured {
            transport,
            src,
            dst,
            bytes,
            direction: direction.into(),
            summary: Summary::of(&s).expect("50 samples"),
            gbps,
            tail: Tail::of(&s, 0),
            retransmits: Some(0),
            hist: crate::stats::hist::LogHist::of(&s),
        }
    };
    let mut out = Vec::new();
    for &t in &plan.transports {
        for &bytes in &plan.sizes {
            let per_message = f.latency_us + bytes as f64 * 8.0 / (f.gbps * 1e3);
            out.push(row(t, server, me, bytes, "pingpong", per_message, None));
            for (src, dst, direction) in pair::tcp_streams(plan, server, me) {
                let direction = match t {
                    TransportKind::Rdma if direction == "bidir" => continue,
                    _ => direction,
                };
                out.push(row(
                    t,
                    src,
                    dst,
                    bytes,
                    direction,
                    per_message,
                    Some(f.gbps),
                ));
            }
        }
    }
    out
}

fn quiet_load(rank: u32) -> RankLoad {
    RankLoad {
        rank,
        machine: format!("sim{rank:05}"),
        seconds: 0.001,
        machine_cores: None,
        own_cores: None,
        steal_pct: None,
        cores: 1,
        injected: None,
        paused_ms: None,
        throttled_ms: None,
    }
}

/// What rank 0 used: its peak resident memory and its CPU time.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub max_rss_mib: f64,
    pub cpu_s: f64,
}
