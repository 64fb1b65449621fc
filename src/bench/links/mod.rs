//! `morphbench links`: every pair of ranks measured (latency and bandwidth, TCP and RDMA),
//! pairs in the rounds of a round-robin tournament so no rank is in two pairs at once; each
//! node fingerprinted; slow links and nodes flagged. A [`Ranked`] bench: rank 0 leads the
//! rounds and writes links.csv and nodes.csv; the other ranks measure and report to it.

pub mod args;
pub mod blame;
mod charts;
mod console;
mod context;
mod fingerprint;
pub mod flag;
pub mod hist;
pub mod nodes;
pub mod options;
pub mod outcome;
pub mod pair;
pub mod pattern;
pub mod tables;
pub mod tail;
mod views;
pub mod words;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use crate::cluster::topology::Topology;
use crate::cluster::world::World;
use crate::cluster::{run_ranked, Crew, Ranked};
use crate::noise::load::BusyWarning;
use crate::noise::rank as load;
use crate::record::csv::{sig4, CsvSink, Line};
use crate::record::run_dir::RunDir;
use crate::transport::TransportKind;
pub use options::{LinksOptions, Order, Reply};

use context::PairContext;
use options::FINGERPRINT_WAIT;
use outcome::LinksOutcome;
use pair::{Measured, PairPlan};
use tables::{LinkFigures, LinkParams, LinksTable};

/// Runs this rank's part. Rank 0 returns its run folder; the others return None.
pub fn run(opts: &LinksOptions) -> Result<Option<PathBuf>> {
    opts.plan.validate()?;
    if opts.plan.transports.contains(&TransportKind::Rdma) {
        opts.choice.check().map_err(|e| {
            anyhow!(
                "{e}: --transport rdma needs a verbs device on every rank (see `morphbench info`)"
            )
        })?;
    }
    run_ranked(&mut Links::new(opts.clone()), &opts.session)
}

/// The links bench on one rank: its options and, on a follower, rank 0's plan once heard.
/// Another bench may lead it inside its own session (the fleet gate, through
/// [`Crew::nested`]) and read what it found from [`Links::outcome`].
pub struct Links {
    opts: LinksOptions,
    plan: Option<PairPlan>,
    /// Rank 0's `--topology`, read when the world is checked.
    topology: std::cell::OnceCell<Topology>,
    /// Rank 0: a warning per busy rank, for meta.json.
    busy: Vec<BusyWarning>,
    outcome: Option<LinksOutcome>,
}

impl Links {
    pub fn new(opts: LinksOptions) -> Links {
        Links {
            opts,
            plan: None,
            topology: std::cell::OnceCell::new(),
            busy: Vec::new(),
            outcome: None,
        }
    }

    /// Rank 0, once it has led: what the links found (None before).
    pub fn outcome(&self) -> Option<&LinksOutcome> {
        self.outcome.as_ref()
    }

    /// Rank 0: the busy ranks' warnings.
    pub fn busy(&self) -> &[BusyWarning] {
        &self.busy
    }

    /// Rank 0's rounds and about how long they take.
    pub fn plan_rounds(&self, world: &World) -> (Vec<Vec<(u32, u32)>>, Duration) {
        let schedule = pattern::schedule(self.opts.pattern, world.size(), self.opts.seed);
        let machines = self.machines(world);
        let took = pattern::estimate(
            &self.opts.plan,
            &schedule,
            self.concurrency(),
            machines.as_deref(),
        );
        (schedule, took)
    }

    /// Each rank's machine, which a wave holds once ([`pattern::machines`]).
    fn machines(&self, world: &World) -> Option<Vec<String>> {
        let rdma = self.opts.plan.transports.contains(&TransportKind::Rdma);
        let hosts: Vec<&str> = world.roster.iter().map(|r| r.hostname.as_str()).collect();
        pattern::machines(self.opts.machines.as_deref(), rdma, &hosts)
    }

    fn concurrency(&self) -> usize {
        self.opts.concurrent.unwrap_or(usize::MAX).max(1)
    }

    /// Rank 0: reads `--topology` and says which hosts of the world it does not list (their
    /// links are judged as `unlisted`).
    fn read_topology(&self, world: &World) -> Result<()> {
        let Some(path) = &self.opts.topology else {
            return Ok(());
        };
        let t = Topology::load(path).map_err(|e| {
            anyhow!("{e}: give --topology a Slurm topology.conf (SwitchName=... Nodes=...)")
        })?;
        let missing: Vec<String> = (0..world.size())
            .map(|r| world.roster[r as usize].hostname.clone())
            .filter(|h| !t.knows(h))
            .collect();
        if !missing.is_empty() {
            eprintln!(
                "warning: {} does not list {}: their links are judged apart, as `unlisted`",
                path.display(),
                crate::cluster::hostlist::compress(&missing)
            );
        }
        let _ = self.topology.set(t);
        Ok(())
    }
}

impl Ranked for Links {
    type Order = Order;
    type Reply = Reply;

    fn validate(&self, world: &World) -> Result<()> {
        if world.size() < 2 {
            anyhow::bail!(
                "links measures pairs of ranks, and a world of {} rank has none: launch 2 or \
                 more (srun -n N, mpirun -np N, --local N)",
                world.size()
            );
        }
        if world.rank() == 0 {
            self.read_topology(world)?;
            let (schedule, took) = self.plan_rounds(world);
            let limit = Duration::from_secs(self.opts.budget_s);
            if took > limit {
                let pairs: usize = schedule.iter().map(Vec::len).sum();
                let cheaper = match self.opts.pattern {
                    pattern::Pattern::Quick => "fewer --sizes or a smaller --budget-ms".into(),
                    _ => {
                        let q = pattern::schedule(pattern::Pattern::Quick, world.size(), 0);
                        let m = self.opts.machines.as_deref();
                        let t = pattern::estimate(&self.opts.plan, &q, self.concurrency(), m);
                        format!("--pattern quick (about {:.0} s)", t.as_secs_f64())
                    }
                };
                anyhow::bail!(
                    "links: {} on {} ranks is {pairs} pairs in {} rounds, about {:.0} s, over \
                     --budget-s {}: use {cheaper}, or raise --budget-s",
                    self.opts.pattern,
                    world.size(),
                    schedule.len(),
                    took.as_secs_f64(),
                    self.opts.budget_s
                );
            }
        }
        Ok(())
    }

    fn config(&self, world: &World) -> serde_json::Value {
        serde_json::json!({
            "links": self.opts.plan,
            "launcher": world.launch.launcher.to_string(),
            "rendezvous_from": world.rendezvous_from,
            "roster": world.roster,
            "fingerprint": self.opts.fingerprint,
            "pattern": self.opts.pattern.to_string(),
            "seed": self.opts.seed,
            "budget_s": self.opts.budget_s,
            "topology": self.opts.topology,
        })
    }

    fn banner(&self, world: &World) -> String {
        let hosts = fingerprint::fingerprint_turns(world)
            .first()
            .map_or(0, Vec::len);
        format!(
            "links: {} ranks on {hosts} host{} ({})",
            world.size(),
            if hosts == 1 { "" } else { "s" },
            world.launch.launcher
        )
    }

    fn lead(&mut self, crew: &mut Crew<Order, Reply>, dir: &RunDir) -> Result<()> {
        let plan = self.opts.plan.clone();
        crew.order_all(Order::Plan(plan.clone()))?;
        crew.hear_all(Instant::now() + Duration::from_secs(60))?;
        let nodes = if self.opts.fingerprint {
            fingerprint::fingerprint_all(crew, &self.opts, dir)?
        } else {
            Vec::new()
        };
        self.opts.machines = self.machines(crew.world());
        let (schedule, took) = self.plan_rounds(crew.world());
        if !self.opts.session.quiet {
            let pairs: usize = schedule.iter().map(Vec::len).sum();
            println!(
                "plan: {} (seed {}): {pairs} pairs in {} rounds, about {:.0} s before retests \
                 (--budget-s {})",
                self.opts.pattern,
                self.opts.seed,
                schedule.len(),
                took.as_secs_f64(),
                self.opts.budget_s
            );
        }
        let (outcome, busy) = play_rounds(crew, &self.opts, self.topology.get(), dir, &schedule)?;
        self.busy = busy;
        if !nodes.is_empty() {
            CsvSink::rewrite(
                &dir.path,
                &fingerprint::with_verdicts(nodes, &outcome.slow_nodes),
            )?;
        }
        self.outcome = Some(outcome);
        Ok(())
    }

    fn follow(&mut self, world: &World, order: Order) -> Result<Reply> {
        match order {
            Order::Plan(p) => {
                // Bounded here too: a plan is allocated and run from.
                p.validate()
                    .map_err(|e| anyhow!("rank 0 sent a plan this rank refuses: {e}"))?;
                if !self.opts.session.quiet && p != self.opts.plan {
                    eprintln!(
                        "note: following rank 0's plan, which differs from this rank's flags"
                    );
                }
                self.plan = Some(p);
                Ok(Reply::Ready)
            }
            Order::Fingerprint => {
                fingerprint::sample_node(world, &self.opts).map(|s| Reply::Node(Box::new(s)))
            }
            Order::Round(r, active) => {
                let p = self
                    .plan
                    .as_ref()
                    .ok_or_else(|| anyhow!("rank 0 sent a round before the plan"))?;
                if !pattern::is_round(&active, world.size()) {
                    return Err(anyhow!(
                        "rank 0 sent round {r} with pairs that are not a round: {active:?}"
                    ));
                }
                PairContext::of(world, &self.opts)
                    .and_then(|c| c.play_loaded(p, r, &active))
                    .map(|(m, l)| Reply::Round(m, l))
            }
            Order::Retest(r, (a, b), part) => {
                let p = self
                    .plan
                    .as_ref()
                    .ok_or_else(|| anyhow!("rank 0 sent a retest before the plan"))?;
                if !(a < b && b < world.size()) {
                    return Err(anyhow!("rank 0 sent a retest of no pair: {a}-{b}"));
                }
                if !part.is_part_of(p) {
                    return Err(anyhow!(
                        "rank 0 sent a retest of {a}-{b} outside the plan: {part:?}"
                    ));
                }
                PairContext::of(world, &self.opts)
                    .and_then(|c| c.play_loaded(&part, r, &[(a, b)]))
                    .map(|(m, l)| Reply::Round(m, l))
            }
        }
    }

    fn notes(&self) -> serde_json::Map<String, serde_json::Value> {
        crate::noise::load::busy_notes(&self.busy)
    }

    fn patience(&self, world: &World) -> Duration {
        self.plan.as_ref().map_or(Duration::from_secs(60), |p| {
            p.pair_bound() * 2 + FINGERPRINT_WAIT * world.size()
        })
    }
}

/// Rank 0: every round (in waves of `--concurrent` pairs), the rows written as they come; then
/// every suspect link (flagged by the rounds) measured again on its own, and kept flagged only
/// if that confirms it; then the judged rows written again. Rounds stop at the deadline, when
/// there is one. Returns what the links found (the nodes the confirmed links blame), and a
/// warning per busy rank (named `links rN`).
fn play_rounds(
    crew: &mut Crew<Order, Reply>,
    opts: &LinksOptions,
    hops: Option<&Topology>,
    dir: &RunDir,
    schedule: &[Vec<(u32, u32)>],
) -> Result<(LinksOutcome, Vec<BusyWarning>)> {
    let mut sink: CsvSink<LinksTable> = dir.table()?;
    let mut lines: Vec<Line<LinksTable>> = Vec::new();
    let started = Instant::now();
    let quiet = opts.session.quiet;
    let mut busiest = load::Busiest::default();
    let deadline = opts
        .deadline_s
        .map(|s| started + Duration::from_secs_f64(s));
    let mut played = 0;
    for (r, round) in schedule.iter().enumerate() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if !quiet {
                println!(
                    "links: deadline reached after {r} of {} rounds; the rest are cut",
                    schedule.len()
                );
            }
            break;
        }
        played += 1;
        let concurrent = opts.concurrent.unwrap_or(usize::MAX);
        let waves = pattern::waves(round, concurrent, opts.machines.as_deref());
        if !quiet {
            println!(
                "round {}/{}: {}",
                r + 1,
                schedule.len(),
                console::waves(&waves)
            );
        }
        for active in waves {
            let order = Order::Round(r as u32, active.clone());
            let (measured, loads) = play_wave(crew, opts, &opts.plan, order, r as u32, &active)?;
            busiest.note(&loads);
            for m in measured {
                let busy = load::of_pair(&loads, m.src, m.dst);
                let line = link_line(crew.world(), hops, &dir.id, &m, &(r + 1).to_string(), busy);
                sink.write(&line)?;
                lines.push(line);
            }
        }
    }
    tables::judge_links(&mut lines);
    let (noisy, retest_load) = retest_suspects(
        crew,
        opts,
        hops,
        dir,
        &mut sink,
        &mut lines,
        schedule.len() as u32,
    )?;
    CsvSink::rewrite(&dir.path, &lines)?;
    hist::write(&dir.path, &dir.id, &lines)?;
    busiest.merge(retest_load);
    let busy = console::busy_warnings(crew.world(), &busiest, quiet);
    let outcome = LinksOutcome::of(
        &lines,
        opts.pattern.to_string(),
        schedule.len(),
        schedule.len() - played,
    );
    let blamed = &outcome.slow_nodes;
    if !quiet {
        let matrix = tables::matrix_rows(&lines);
        console::print_matrices(crew.world(), &matrix);
        console::print_slow_nodes(crew.world(), &outcome);
        console::print_flagged(&lines, blamed);
        if noisy > 0 {
            console::print_noisy(&lines);
        }
        console::print_busy(crew.world(), &busiest);
        println!(
            "links: {} rows in {:.1} s -> {}",
            lines.len(),
            started.elapsed().as_secs_f64(),
            dir.path.join("links.csv").display()
        );
    }
    Ok((outcome, busy))
}

/// Rank 0: every suspect row (flagged by the rounds) measured again with its pair alone, at
/// the suspect sizes only, pass after pass: a row is cleared by one retest that does not
/// confirm it, and stays flagged only if [`crate::noise::RETEST_PASSES`] retests confirm it (one, when it
/// is clearly slow). Noise only slows a link down; a healthy link measured well once is
/// healthy. Returns how many suspect rows were cleared.
fn retest_suspects(
    crew: &mut Crew<Order, Reply>,
    opts: &LinksOptions,
    hops: Option<&Topology>,
    dir: &RunDir,
    sink: &mut CsvSink<LinksTable>,
    lines: &mut Vec<Line<LinksTable>>,
    mut next_round: u32,
) -> Result<(usize, load::Busiest)> {
    let mut noisy = 0;
    let mut busiest = load::Busiest::default();
    for pass in 0..crate::noise::RETEST_PASSES {
        let suspects = tables::suspects(
            lines,
            pass > 0,
            crate::noise::CLEARLY_SLOW,
            crate::noise::CLEARLY_SLOWER_US,
        );
        let mut retests = Vec::new();
        for (k, (&pair, rows)) in suspects.iter().enumerate() {
            if !opts.session.quiet {
                let sizes = opts.plan.part(rows).sizes;
                println!(
                    "{}",
                    console::retest_line(k, suspects.len(), pass, pair, &sizes)
                );
            }
            // One wave a suspect test (transport and size), so each retest row carries the
            // load over its own measurement: a steal burst during the 1 MiB test, averaged
            // with a quiet 8 B test of the same wave, would look half as heavy as it was.
            for test in rows {
                let one = opts.plan.part(std::slice::from_ref(test));
                // Round numbers past the schedule's tell a retest's connection apart.
                let r = next_round;
                next_round += 1;
                let order = Order::Retest(r, pair, one.clone());
                let (measured, loads) = play_wave(crew, opts, &one, order, r, &[pair])?;
                busiest.note(&loads);
                for m in measured {
                    let busy = load::of_pair(&loads, m.src, m.dst);
                    let line = link_line(crew.world(), hops, &dir.id, &m, tables::RETEST, busy);
                    sink.write(&line)?;
                    retests.push(line);
                }
            }
        }
        noisy += tables::confirm(lines, retests).1;
    }
    Ok((noisy, busiest))
}

/// Rank 0: one wave of pairs (`order` sent to every rank), its own pair played in a thread
/// while it hears the others, so a rank that dies anywhere ends the run at once. Returns the
/// rows and each rank's load over the wave.
fn play_wave(
    crew: &mut Crew<Order, Reply>,
    opts: &LinksOptions,
    plan: &PairPlan,
    order: Order,
    round: u32,
    active: &[(u32, u32)],
) -> Result<(Vec<Measured>, BTreeMap<u32, load::Busy>)> {
    crew.order_all(order)?;
    let ctx = PairContext::of(crew.world(), opts)?;
    let (plan, active) = (plan.clone(), active.to_vec());
    let (plan_of, active_of) = (plan.clone(), active.clone());
    let bound = plan.pair_bound();
    let mine = std::thread::spawn(move || ctx.play_loaded(&plan, round, &active));
    let others = crew.others();
    let replies = crew.hear(&others, Instant::now() + bound)?;
    let (mut measured, own) = mine
        .join()
        .map_err(|_| anyhow!("rank 0's pair panicked"))?
        .map_err(|e| anyhow!("{e}"))?;
    let mut loads = vec![own];
    for (rank, reply) in replies {
        match reply {
            Reply::Round(m, mut l) => {
                measured.extend(believed(crew.world(), rank, &plan_of, &active_of, m));
                l.rank = rank;
                loads.push(l);
            }
            _ => return Err(anyhow!("a rank answered a round out of turn")),
        }
    }
    Ok((measured, load::others_by_rank(&loads)))
}

/// The rows of `rank`'s reply that rank 0 believes: those of the pair it played, within the
/// plan (see [`Measured::fault`]); the others are refused, each said once.
fn believed(
    world: &World,
    rank: u32,
    plan: &PairPlan,
    active: &[(u32, u32)],
    rows: Vec<Measured>,
) -> Vec<Measured> {
    let pair = active
        .iter()
        .copied()
        .find(|&(a, b)| a == rank || b == rank);
    rows.into_iter()
        .filter(|m| {
            let why = match pair {
                Some(p) => m.fault(plan, p),
                None => Some("rows, though it played no pair".into()),
            };
            if let Some(why) = &why {
                eprintln!(
                    "links: refused a row from {}: {why}",
                    crate::sanitize::console(&world.describe(rank), 80)
                );
            }
            why.is_none()
        })
        .collect()
}

fn link_line(
    world: &World,
    hops: Option<&Topology>,
    run_id: &str,
    m: &Measured,
    round: &str,
    busy: load::Busy,
) -> Line<LinksTable> {
    let host = |r: u32| world.roster[r as usize].hostname.clone();
    let params = LinkParams {
        src_rank: m.src,
        dst_rank: m.dst,
        src_host: host(m.src),
        dst_host: host(m.dst),
        transport: m.transport.to_string(),
        bytes: m.bytes,
        direction: m.direction.clone(),
    };
    let figures = LinkFigures {
        gbps: m.gbps.map(sig4),
        slowdown: None,
        flagged: None,
        intra_node: params.src_host == params.dst_host,
        verified: true,
        round: Some(round.to_string()),
        confirmed: None,
        hop_class: hops.map(|t| t.hop_class(&params.src_host, &params.dst_host)),
        others_cores: busy.others_cores,
        steal_pct: busy.steal_pct,
        busy: Some(busy.busy),
        paused_ms: busy.paused_ms,
        throttled_ms: busy.throttled_ms,
        wave_ms: busy.wave_ms,
        retransmits: m.retransmits,
        tail: Some(m.tail.clone()),
        hist: Some(m.hist.clone()),
        ..Default::default()
    };
    let case = match round {
        tables::RETEST => format!("{}_{}", tables::link_case(&params), tables::RETEST),
        _ => tables::link_case(&params),
    };
    Line::new(run_id, case, params, Some(&m.summary), figures)
}

/// The `links` bench, for the registry (a multi-rank command of its own).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: "links",
    from_toml: None,
    command: args::command(|m, g| {
        let a: args::LinksArgs = crate::bench::descriptor::parsed(m)?;
        let dir = run(&a.options(g))?;
        Ok(crate::bench::descriptor::Ran::wrote(
            dir,
            crate::bench::descriptor::After::Report,
        ))
    }),
    tables: || {
        vec![
            crate::record::TableSpec::compared::<tables::LinksTable>()
                .headlines(views::headlines)
                .charts(crate::record::Charts::OfFirst(charts::links_charts)),
            crate::record::TableSpec::compared::<tables::NodesTable>(),
            crate::record::TableSpec::of::<hist::LinksHistTable>(),
        ]
    },
};
