//! The one shape of a multi-rank run. A bench implements [`Ranked`] (its orders, its replies,
//! what rank 0 leads and what every other rank does on an order); [`run_ranked`] does the rest
//! for every such bench: joins the world, creates the run folder at rank 0, relays orders and
//! replies, names a rank that dies or goes silent, tells the others to stop, and finishes the
//! folder as complete or failed with the rows written so far.

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::error::{ClusterError, Who};
use super::world::{self, Ticker, World, WorldOptions, HOLE, SILENCE};
use crate::host::HostInfo;
use crate::record::meta::RunMeta;
use crate::record::run_dir::RunDir;

/// Rank 0 to any other rank.
#[derive(Debug, Serialize, Deserialize)]
pub enum Down<O> {
    /// The bench's own order.
    Order(O),
    /// Answer at once with this rank's clock (its offset is worked out in clock.rs).
    Ping,
    /// The run is over: leave.
    Finish,
    /// The run failed: stop, with why.
    Abort(String),
    /// Rank 0 is still there (every [`super::world::HEARTBEAT`], whatever it is doing).
    Alive,
}

/// Any other rank to rank 0.
#[derive(Debug, Serialize, Deserialize)]
pub enum Up<R> {
    /// The answer to an order.
    Reply(R),
    /// The clock (µs since the Unix epoch) when the ping arrived.
    Pong(f64),
    /// This rank cannot go on, with why.
    Failed(String),
    /// Still at work on the order (every [`super::world::HEARTBEAT`]).
    Alive,
}

fn is_heartbeat<R>(m: &Up<R>) -> bool {
    matches!(m, Up::Alive)
}

/// Sends [`Up::Alive`] to rank 0 every heartbeat until dropped, so a rank that is stopped or
/// hung while it works is told apart from one that is slow.
fn heartbeat<R: Serialize>(world: &World) -> Option<Ticker> {
    world
        .root_stream()
        .map(|s| Ticker::start(move || super::frame::send(&s, &Up::<R>::Alive).is_ok()))
}

/// A follower's ear on rank 0 for the whole run: a thread reads everything rank 0 sends (its
/// heartbeats among them) and passes on the rest. Rank 0 gone (its connection reset or closed,
/// or [`SILENCE`] without a word: stopped, hung, its host down) or rank 0 ending the run is
/// passed on too; and if the follower has not taken the news within [`TAKE_NEWS`] (it is deep
/// in a test with another rank, which may go on for many seconds), the process gives up at
/// once ([`crate::interrupt::give_up`]) naming rank 0, rather than hold its GPU and its
/// allocation until the test ends. Dropping the watch disarms it.
struct RootWatch<O> {
    inbox: Receiver<Result<Down<O>, ClusterError>>,
    armed: Arc<Mutex<bool>>,
}

/// How long a follower's main thread has to take the news that rank 0 is gone before the
/// watch ends the process.
const TAKE_NEWS: Duration = Duration::from_millis(300);

/// How long a follower whose test failed waits to hear whether rank 0 is gone: rank 0's
/// heartbeats stop for every follower at once, so the others' silences end within a few
/// milliseconds of each other (and a killed rank 0's connections all close at once).
const NEWS_OF_ROOT: Duration = Duration::from_millis(500);

impl<O: DeserializeOwned + Send + 'static> RootWatch<O> {
    fn start(world: &World) -> Result<RootWatch<O>, ClusterError> {
        let who = world.who(0);
        let stream = world
            .root_stream()
            .ok_or_else(|| ClusterError::Io("no connection to rank 0 to watch".into()))?;
        let (tx, inbox) = std::sync::mpsc::channel();
        let armed = Arc::new(Mutex::new(true));
        let still_armed = Arc::clone(&armed);
        std::thread::spawn(move || loop {
            let by = Instant::now() + HOLE;
            let heard = super::frame::receive_live::<Down<O>>(&stream, SILENCE, by);
            let fatal = match heard {
                Ok(Down::Alive) => continue,
                Ok(Down::Abort(why)) => ClusterError::Aborted(why),
                Ok(m) => {
                    let last = matches!(m, Down::Finish);
                    if tx.send(Ok(m)).is_err() || last {
                        return;
                    }
                    continue;
                }
                Err(e) => ClusterError::from_wire(who.clone(), e, "its connection closed"),
            };
            let _ = tx.send(Err(fatal.clone()));
            std::thread::sleep(TAKE_NEWS);
            let armed = still_armed.lock().unwrap_or_else(|e| e.into_inner());
            if *armed {
                crate::interrupt::give_up(&format!("{fatal}; this rank stopped its test"));
            }
            return;
        });
        Ok(RootWatch { inbox, armed })
    }

    /// Rank 0's failure, if the watch hears of it within `wait`: for a follower whose test
    /// failed, because a failure of rank 0 ends the other followers too, and the link to
    /// one of them may close first.
    fn lost_within(&self, wait: Duration) -> Option<ClusterError> {
        match self.inbox.recv_timeout(wait) {
            Ok(Err(lost)) => Some(lost),
            _ => None,
        }
    }

    /// The next order (or ping, or the end), or rank 0's failure; an order not come within
    /// `wait` takes rank 0 for hung.
    fn next(&self, wait: Duration, who: Who) -> Result<Down<O>, ClusterError> {
        match self.inbox.recv_timeout(wait) {
            Ok(m) => m,
            Err(_) => Err(ClusterError::Silent { who }),
        }
    }
}

impl<O> Drop for RootWatch<O> {
    fn drop(&mut self) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

/// Where and how a multi-rank run happens, whatever it measures.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub world: WorldOptions,
    /// The folder that receives rank 0's run folder.
    pub out: PathBuf,
    pub quiet: bool,
}

/// A bench that runs on many ranks. Rank 0 leads (it sends orders and gathers replies through a
/// [`Crew`]); every other rank follows, one order at a time.
pub trait Ranked {
    type Order: Serialize + DeserializeOwned + Send + 'static;
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Every rank, once the world is known: the checks that need its size.
    fn validate(&self, _world: &World) -> Result<()> {
        Ok(())
    }
    /// Rank 0, before its run folder exists: what may fail without leaving a folder behind
    /// (a GPU that does not open). Returns meta.json's `adapter`, when the bench has one.
    fn prepare(&mut self, _world: &World) -> Result<Option<serde_json::Value>> {
        Ok(None)
    }
    /// meta.json's `config`.
    fn config(&self, world: &World) -> serde_json::Value;
    /// The first line rank 0 prints ("links: 4 ranks on 4 hosts (Slurm)").
    fn banner(&self, world: &World) -> String;
    /// Rank 0: leads the run, writing rows into `dir` as they come.
    fn lead(&mut self, crew: &mut Crew<Self::Order, Self::Reply>, dir: &RunDir) -> Result<()>;
    /// Any other rank: carries out one order.
    fn follow(&mut self, world: &World, order: Self::Order) -> Result<Self::Reply>;
    /// How long a follower waits for its next order before it takes rank 0 for hung.
    fn patience(&self, world: &World) -> Duration;
    /// Rank 0, once it has led (or failed): notes for meta.json, such as the busy ranks'
    /// warnings ([`crate::noise::load::busy_notes`]), which the report and summary.json show.
    fn notes(&self) -> serde_json::Map<String, serde_json::Value> {
        Default::default()
    }
}

/// Runs `bench` on this rank. Rank 0 returns its run folder; the others return None.
pub fn run_ranked<B: Ranked>(bench: &mut B, opts: &SessionOptions) -> Result<Option<PathBuf>> {
    let env = |k: &str| std::env::var(k).ok();
    let mut world = world::establish(&opts.world, &env)?;
    if let Err(e) = bench.validate(&world) {
        if world.rank() == 0 {
            abort_all(&mut world, &format!("{e:#}"));
        }
        return Err(e);
    }
    if world.rank() == 0 {
        let _beating = world.heartbeats(Down::<()>::Alive);
        lead(bench, &mut world, opts).map(Some)
    } else {
        follow(bench, &mut world).map(|()| None)
    }
}

fn abort_all(world: &mut World, why: &str) {
    let _ = world.broadcast(&Down::<()>::Abort(why.to_string()), true);
}

fn lead<B: Ranked>(bench: &mut B, world: &mut World, opts: &SessionOptions) -> Result<PathBuf> {
    let adapter = match bench.prepare(world) {
        Ok(a) => a,
        Err(e) => {
            abort_all(world, &format!("{e:#}"));
            return Err(e);
        }
    };
    let mut meta = RunMeta::new(HostInfo::probe());
    meta.adapter = adapter;
    meta.config = Some(bench.config(world));
    // Whether every rank proved the job's secret, or the run was --insecure.
    meta.notes
        .insert("auth".into(), world.trust.describe().into());
    if world.trust.is_insecure() && world.size() > 1 {
        eprintln!(
            "warning: --insecure: this run's ranks proved no secret, so any process that \
             reached rank 0's port could have joined it (said in meta.json's notes.auth)"
        );
    }
    let mut dir = match RunDir::create(&opts.out, meta, false) {
        Ok(d) => d,
        Err(e) => {
            abort_all(world, &format!("rank 0 cannot write its results: {e:#}"));
            return Err(e);
        }
    };
    if !opts.quiet {
        println!(
            "{}, run {} -> {}",
            bench.banner(world),
            dir.id,
            dir.path.display()
        );
    }
    let mut crew = Crew {
        world,
        _messages: PhantomData,
    };
    let result = crate::suite::catching(|| bench.lead(&mut crew, &dir));
    match &result {
        Ok(()) => {
            let _ = crew.world.broadcast(&Down::<B::Order>::Finish, true);
        }
        Err(e) => abort_all(crew.world, &format!("{e:#}")),
    }
    dir.meta.notes.extend(bench.notes());
    // What leading cost rank 0 (its peak memory and CPU, the run's setup included): the
    // figures that show whether a larger world will fit.
    dir.meta.notes.insert(
        "rank0_usage".into(),
        serde_json::json!({
            "world": crew.world.size(),
            "peak_rss_mib": crate::host::peak_rss_bytes().map(|b| b as f64 / (1u64 << 20) as f64),
            "cpu_s": crate::host::process_cpu_us().map(|us| us / 1e6),
        }),
    );
    dir.finish(&result.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}")))?;
    result.map(|()| dir.path.clone())
}

fn follow<B: Ranked>(bench: &mut B, world: &mut World) -> Result<()> {
    let watch = RootWatch::<B::Order>::start(world)?;
    loop {
        let order = watch.next(bench.patience(world), world.who(0))?;
        let reply = match order {
            Down::Order(o) => {
                let _alive = heartbeat::<B::Reply>(world);
                crate::suite::catching(|| bench.follow(world, o))
            }
            Down::Ping => {
                world.tell_root(&Up::<B::Reply>::Pong(crate::host::now_us()))?;
                continue;
            }
            Down::Finish => return Ok(()),
            Down::Abort(why) => return Err(ClusterError::Aborted(why).into()),
            Down::Alive => continue,
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                if let Some(lost) = watch.lost_within(NEWS_OF_ROOT) {
                    return Err(anyhow!("{lost}; this rank stopped its test ({e:#})"));
                }
                let _ = world.tell_root(&Up::<B::Reply>::Failed(format!("{e:#}")));
                return Err(e);
            }
        };
        world.tell_root(&Up::Reply(reply))?;
    }
}

/// Rank 0's handle on the others: orders out, replies in, every failure named.
pub struct Crew<'w, O, R> {
    world: &'w mut World,
    _messages: PhantomData<(O, R)>,
}

impl<O, R> Crew<'_, O, R>
where
    O: Serialize,
    R: DeserializeOwned + Send + 'static,
{
    pub fn world(&self) -> &World {
        self.world
    }

    /// Every rank but 0.
    pub fn others(&self) -> Vec<u32> {
        (1..self.world.size()).collect()
    }

    /// Sends `order` to every other rank.
    pub fn order_all(&mut self, order: O) -> Result<(), ClusterError> {
        self.world.broadcast(&Down::Order(order), false)
    }

    /// Sends `order` to one rank.
    pub fn order(&mut self, rank: u32, order: O) -> Result<(), ClusterError> {
        self.world.send_to(rank, &Down::Order(order))
    }

    /// Tells every other rank to stop (best effort): for a lead that fails while its own
    /// part still runs, so the others' links close and that part ends too.
    pub fn abort(&mut self, why: &str) {
        abort_all(self.world, why);
    }

    /// One reply from each of `ranks` by `deadline`, in their order. A failure ends the
    /// gather: the dead are named first (with a peer's report of it), then a rank's own
    /// report, then silence or garbage.
    pub fn hear(
        &mut self,
        ranks: &[u32],
        deadline: Instant,
    ) -> Result<Vec<(u32, R)>, ClusterError> {
        let replies = self.world.gather(
            ranks,
            deadline,
            is_heartbeat::<R>,
            |r: &Result<Up<R>, ClusterError>| matches!(r, Err(_) | Ok(Up::Failed(_))),
        );
        settle(self.world, ranks, replies)
    }

    /// One reply from each of `ranks` by `deadline`, each rank on its own: one that dies,
    /// stops, fails or does not answer is that rank's error, and the others' replies still
    /// count (a gate that must judge every node). A rank that failed must not be heard again:
    /// its reader may still take its next message.
    pub fn hear_each(
        &mut self,
        ranks: &[u32],
        deadline: Instant,
    ) -> Vec<(u32, Result<R, ClusterError>)> {
        let replies = self.world.gather(
            ranks,
            deadline,
            is_heartbeat::<R>,
            |_: &Result<Up<R>, _>| false,
        );
        ranks
            .iter()
            .zip(replies)
            .map(|(&rank, r)| {
                let who = self.world.who(rank);
                let heard = match r {
                    Some(Ok(Up::Reply(m))) => Ok(m),
                    Some(Ok(Up::Failed(message))) => Err(ClusterError::Reported { who, message }),
                    Some(Ok(_)) => Err(ClusterError::Protocol(format!(
                        "{who} answered out of turn"
                    ))),
                    Some(Err(e)) => Err(e),
                    None => Err(ClusterError::NoAnswer { who }),
                };
                (rank, heard)
            })
            .collect()
    }

    /// One reply from every other rank by `deadline`, in rank order.
    pub fn hear_all(&mut self, deadline: Instant) -> Result<Vec<R>, ClusterError> {
        let others = self.others();
        Ok(self
            .hear(&others, deadline)?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }

    /// Sends a clock ping to `rank` and waits for its clock, as (sent, its clock, received),
    /// all µs since the Unix epoch.
    pub fn ping(&mut self, rank: u32, wait: Duration) -> Result<(f64, f64, f64), ClusterError> {
        let t0 = crate::host::now_us();
        self.world.send_to(rank, &Down::<O>::Ping)?;
        let reply = self
            .world
            .gather(
                &[rank],
                Instant::now() + wait,
                is_heartbeat::<R>,
                |_: &Result<Up<R>, _>| false,
            )
            .pop()
            .flatten();
        let t1 = crate::host::now_us();
        match reply {
            Some(Ok(Up::Pong(t))) => Ok((t0, t, t1)),
            Some(Err(e)) => Err(e),
            _ => Err(ClusterError::Protocol(format!(
                "{} did not answer the clock ping",
                self.world.describe(rank)
            ))),
        }
    }

    /// A crew for a bench led inside this one (the fleet gate leads `links`): its orders and
    /// replies go over the same links. This bench's `Order` and `Reply` must hold the inner
    /// bench's as `#[serde(untagged)]` variants, with variant names of their own, so what the
    /// inner crew sends is what a follower of this bench reads, and the other way round.
    pub fn nested<O2, R2>(&mut self) -> Crew<'_, O2, R2> {
        Crew {
            world: self.world,
            _messages: PhantomData,
        }
    }

    /// A reply that is not the one the lead waits for.
    pub fn out_of_turn(&self, rank: u32, what: &str) -> ClusterError {
        ClusterError::Protocol(format!(
            "{} answered {what} out of turn",
            self.world.describe(rank)
        ))
    }
}

/// Rank 0's reading of the replies of a gather (see [`Crew::hear`]).
fn settle<R>(
    world: &World,
    ranks: &[u32],
    replies: Vec<Option<Result<Up<R>, ClusterError>>>,
) -> Result<Vec<(u32, R)>, ClusterError> {
    let dead: Vec<Who> = replies
        .iter()
        .filter_map(|r| match r {
            Some(Err(e @ ClusterError::Died { .. })) => e.dead_ranks().first().copied(),
            _ => None,
        })
        .map(|rank| world.who(rank))
        .collect();
    let reported = ranks.iter().zip(&replies).find_map(|(&rank, r)| match r {
        Some(Ok(Up::Failed(e))) => Some(ClusterError::Reported {
            who: world.who(rank),
            message: e.clone(),
        }),
        _ => None,
    });
    if !dead.is_empty() {
        return Err(ClusterError::Dead {
            whos: dead,
            news: reported.map(|r| r.to_string()),
        });
    }
    // A stopped rank next: its peers' reports are only the news of it.
    if let Some(Some(Err(e))) = replies
        .iter()
        .find(|r| matches!(r, Some(Err(ClusterError::Silent { .. }))))
    {
        return Err(e.clone());
    }
    if let Some(r) = reported {
        return Err(r);
    }
    // What a rank did wrong (garbage, an answer out of turn) before the ranks the grace cut
    // short: those were still at work, through no fault of theirs.
    if let Some(Some(Err(e))) = replies.iter().find(|r| matches!(r, Some(Err(_)))) {
        return Err(e.clone());
    }
    let out_of_turn = |r: &Option<Result<Up<R>, ClusterError>>| matches!(r, Some(Ok(m)) if !matches!(m, Up::Reply(_)));
    if let Some(rank) = ranks.iter().zip(&replies).find(|(_, r)| out_of_turn(r)) {
        return Err(ClusterError::Protocol(format!(
            "{} answered out of turn",
            world.describe(*rank.0)
        )));
    }
    ranks
        .iter()
        .zip(replies)
        .map(|(&rank, r)| match r {
            Some(Ok(Up::Reply(m))) => Ok((rank, m)),
            Some(Ok(_)) => Err(ClusterError::Protocol(format!(
                "{} answered out of turn",
                world.describe(rank)
            ))),
            Some(Err(e)) => Err(e),
            None => Err(ClusterError::NoAnswer {
                who: world.who(rank),
            }),
        })
        .collect()
}
