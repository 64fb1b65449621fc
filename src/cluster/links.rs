//! `morphbench links`: every pair of ranks measured (latency and bandwidth, TCP and RDMA),
//! pairs in the rounds of a round-robin tournament so no rank is in two pairs at once; each
//! node fingerprinted; slow links and nodes flagged. Rank 0 drives the run over the control
//! channel and writes links.csv and nodes.csv; the other ranks measure and report to it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use super::nodes::{self, NodeSample};
use super::pair::{self, Measured, PairPlan};
use super::tables::{
    self, LinkFigures, LinkParams, LinksTable, NodeFigures, NodeParams, NodesTable,
};
use super::world::{self, World, WorldOptions};
use crate::export::csv::{sig4, CsvSink, Line};
use crate::export::meta::RunMeta;
use crate::export::run_dir::RunDir;
use crate::gpu::{BackendChoice, Gpu};
use crate::host::HostInfo;
use crate::rdma::DeviceChoice;
use crate::units::human_bytes;

/// Everything one rank needs to take part.
#[derive(Debug, Clone)]
pub struct LinksOptions {
    pub world: WorldOptions,
    pub plan: PairPlan,
    /// This rank's RDMA device (each host names its own).
    pub choice: DeviceChoice,
    /// Sample each node's GPU (a verified GEMM, a D2H copy).
    pub fingerprint: bool,
    /// The most pairs measured at once within a round (None: all of the round's).
    pub concurrent: Option<usize>,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
    pub out: PathBuf,
    pub quiet: bool,
}

/// Rank 0 to the others.
#[derive(Debug, Serialize, Deserialize)]
enum ToRank {
    /// The plan every rank follows (rank 0's), and whether nodes are fingerprinted.
    Plan(PairPlan),
    Fingerprint,
    /// Play round r's pairs listed (all of the round's, or a wave of them).
    Round(u32, Vec<(u32, u32)>),
    Finish,
    Abort(String),
}

/// The others to rank 0.
#[derive(Debug, Serialize, Deserialize)]
enum ToRoot {
    Node(Box<NodeSample>),
    Round(Vec<Measured>),
    Failed(String),
}

/// The rounds of a round-robin tournament (the circle method): every pair of `n` ranks meets
/// exactly once, and no rank plays twice in a round. Odd `n` gives each rank one bye.
pub fn rounds(n: u32) -> Vec<Vec<(u32, u32)>> {
    if n < 2 {
        return Vec::new();
    }
    let m = n + n % 2;
    (0..m - 1)
        .map(|r| {
            let mut pairs = vec![(r, m - 1)];
            for k in 1..m / 2 {
                pairs.push(((r + k) % (m - 1), (r + m - 1 - k) % (m - 1)));
            }
            pairs
                .into_iter()
                .filter(|&(a, b)| a < n && b < n)
                .map(|(a, b)| (a.min(b), a.max(b)))
                .collect()
        })
        .collect()
}

fn partner(round: &[(u32, u32)], me: u32) -> Option<u32> {
    round.iter().find_map(|&(a, b)| match me {
        _ if me == a => Some(b),
        _ if me == b => Some(a),
        _ => None,
    })
}

/// Ranks grouped in turns: the i-th rank of every host in turn i, so ranks sharing a host
/// (and its device) never sample at once.
fn fingerprint_turns(world: &World) -> Vec<Vec<u32>> {
    let mut per_host: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for r in &world.roster {
        per_host.entry(&r.hostname).or_default().push(r.rank);
    }
    let most = per_host.values().map(Vec::len).max().unwrap_or(0);
    (0..most)
        .map(|i| {
            per_host
                .values()
                .filter_map(|v| v.get(i).copied())
                .collect()
        })
        .collect()
}

/// How long any rank waits for one fingerprint.
const FINGERPRINT_WAIT: Duration = Duration::from_secs(120);

/// Runs this rank's part. Rank 0 returns its run folder; the others return None.
pub fn run(opts: &LinksOptions) -> Result<Option<PathBuf>> {
    opts.plan.validate().map_err(anyhow::Error::msg)?;
    if opts
        .plan
        .transports
        .contains(&crate::transport::TransportKind::Rdma)
    {
        opts.choice.check().map_err(|e| {
            anyhow!(
                "{e}: --transport rdma needs a verbs device on every rank (see `morphbench info`)"
            )
        })?;
    }
    let env = |k: &str| std::env::var(k).ok();
    let mut world = world::establish(&opts.world, &env).map_err(anyhow::Error::msg)?;
    if world.rank() == 0 {
        root(&mut world, opts).map(Some)
    } else {
        leaf(&mut world, opts).map(|()| None)
    }
}

fn open_gpu(opts: &LinksOptions) -> (Option<Gpu>, Option<String>) {
    match Gpu::open(opts.backend, opts.adapter.as_deref()) {
        Ok(g) => (Some(g), None),
        Err(e) => (None, Some(e.to_string())),
    }
}

fn sample_node(world: &World, opts: &LinksOptions) -> Result<NodeSample, String> {
    let (gpu, why) = open_gpu(opts);
    let mut s = nodes::fingerprint(world.rank(), gpu.as_ref())?;
    if let Some(why) = why {
        s.note = Some(why);
    }
    Ok(s)
}

/// What a rank needs to play its pairs, owned, so rank 0 can play in a thread while it
/// listens to the others (and stops as soon as one fails).
struct PairContext {
    listener: std::net::TcpListener,
    addresses: Vec<String>,
    names: Vec<String>,
    me: u32,
    choice: DeviceChoice,
}

impl PairContext {
    fn of(world: &World, opts: &LinksOptions) -> Result<PairContext, String> {
        Ok(PairContext {
            listener: world
                .data
                .try_clone()
                .map_err(|e| format!("the data listener: {e}"))?,
            addresses: (0..world.size()).map(|r| world.data_address(r)).collect(),
            names: (0..world.size()).map(|r| world.describe(r)).collect(),
            me: world.rank(),
            choice: opts.choice.clone(),
        })
    }

    /// This rank's pair in `round` (if it has one): the lower rank serves, the higher drives.
    fn play(
        &self,
        plan: &PairPlan,
        round: u32,
        active: &[(u32, u32)],
    ) -> Result<Vec<Measured>, String> {
        let me = self.me;
        let Some(peer) = partner(active, me) else {
            return Ok(Vec::new());
        };
        let p = peer as usize;
        let result = if me < peer {
            pair::serve(&self.listener, plan, me, peer, round, &self.choice)
        } else {
            pair::drive(&self.addresses[p], plan, me, peer, round, &self.choice)
        };
        result.map_err(|e| {
            format!(
                "the link between {} and {}: {e}",
                self.names[me as usize], self.names[p]
            )
        })
    }
}

/// Rank 0's reading of the others' replies: the dead are named first, then a rank's reported
/// failure, then any other fault.
fn settle(
    world: &World,
    ranks: &[u32],
    replies: Vec<Option<Result<ToRoot, String>>>,
) -> Result<Vec<(u32, ToRoot)>> {
    let dead = world.dead(ranks, &replies);
    let reported = ranks.iter().zip(&replies).find_map(|(&rank, r)| match r {
        Some(Ok(ToRoot::Failed(e))) => Some(format!("{} reported: {e}", world.describe(rank))),
        _ => None,
    });
    if !dead.is_empty() {
        return Err(anyhow!(
            "{} died mid-run{}",
            dead.join(", "),
            reported.map_or(String::new(), |r| format!("; {r}"))
        ));
    }
    if let Some(r) = reported {
        return Err(anyhow!("{r}"));
    }
    ranks
        .iter()
        .zip(replies)
        .map(|(&rank, r)| match r {
            Some(r) => r.map(|m| (rank, m)).map_err(|e| anyhow!("{e}")),
            None => Err(anyhow!("{} did not answer in time", world.describe(rank))),
        })
        .collect()
}

/// A reply that ends the run.
fn is_failure(r: &Result<ToRoot, String>) -> bool {
    matches!(r, Err(_) | Ok(ToRoot::Failed(_)))
}

fn leaf(world: &mut World, opts: &LinksOptions) -> Result<()> {
    let mut plan: Option<PairPlan> = None;
    loop {
        let wait = plan.as_ref().map_or(Duration::from_secs(60), |p| {
            p.pair_bound() * 2 + FINGERPRINT_WAIT * world.size()
        });
        let m: ToRank = world
            .hear_root(Instant::now() + wait)
            .map_err(anyhow::Error::msg)?;
        let outcome = match m {
            ToRank::Plan(p) => {
                if !opts.quiet && p != opts.plan {
                    eprintln!(
                        "note: following rank 0's plan, which differs from this rank's flags"
                    );
                }
                plan = Some(p);
                continue;
            }
            ToRank::Fingerprint => sample_node(world, opts).map(|s| ToRoot::Node(Box::new(s))),
            ToRank::Round(r, active) => {
                let p = plan
                    .as_ref()
                    .ok_or_else(|| anyhow!("rank 0 sent a round before the plan"))?;
                let schedule = rounds(world.size());
                let known = schedule.get(r as usize);
                if !known.is_some_and(|pairs| active.iter().all(|a| pairs.contains(a))) {
                    return Err(anyhow!(
                        "rank 0 sent round {r} with pairs not in it: {active:?}"
                    ));
                }
                PairContext::of(world, opts)
                    .and_then(|c| c.play(p, r, &active))
                    .map(ToRoot::Round)
            }
            ToRank::Finish => return Ok(()),
            ToRank::Abort(why) => return Err(anyhow!("rank 0 ended the run: {why}")),
        };
        match outcome {
            Ok(reply) => world.tell_root(&reply).map_err(anyhow::Error::msg)?,
            Err(e) => {
                let _ = world.tell_root(&ToRoot::Failed(e.clone()));
                return Err(anyhow!("{e}"));
            }
        }
    }
}

fn root(world: &mut World, opts: &LinksOptions) -> Result<PathBuf> {
    let mut meta = RunMeta::new(HostInfo::probe());
    meta.config = Some(serde_json::json!({
        "links": opts.plan,
        "launcher": world.launch.launcher.to_string(),
        "rendezvous_from": world.rendezvous_from,
        "roster": world.roster,
        "fingerprint": opts.fingerprint,
    }));
    let mut dir = match RunDir::create(&opts.out, meta, false) {
        Ok(d) => d,
        Err(e) => {
            let _ = world.broadcast(
                &ToRank::Abort(format!("rank 0 cannot write its results: {e:#}")),
                true,
            );
            return Err(e);
        }
    };
    if !opts.quiet {
        println!(
            "links: {} ranks on {} hosts ({}), run {} -> {}",
            world.size(),
            fingerprint_turns(world).first().map_or(0, Vec::len),
            world.launch.launcher,
            dir.id,
            dir.path.display()
        );
    }
    let result = drive_run(world, opts, &dir);
    if let Err(e) = &result {
        let _ = world.broadcast(&ToRank::Abort(format!("{e:#}")), true);
    }
    dir.finish(&result.as_ref().map(|_| ()).map_err(|e| anyhow!("{e:#}")))?;
    result.map(|()| dir.path.clone())
}

fn drive_run(world: &mut World, opts: &LinksOptions, dir: &RunDir) -> Result<()> {
    let plan = opts.plan.clone();
    world
        .broadcast(&ToRank::Plan(plan.clone()), false)
        .map_err(anyhow::Error::msg)?;
    if opts.fingerprint {
        fingerprint_all(world, opts, dir)?;
    }
    let schedule = rounds(world.size());
    let mut sink: CsvSink<LinksTable> = dir.table()?;
    let mut lines: Vec<Line<LinksTable>> = Vec::new();
    let started = Instant::now();
    let waves = |pairs: &[(u32, u32)]| -> Vec<Vec<(u32, u32)>> {
        pairs
            .chunks(opts.concurrent.unwrap_or(usize::MAX).max(1))
            .map(<[_]>::to_vec)
            .collect()
    };
    for (r, round) in schedule.iter().enumerate() {
        let waves = waves(round);
        if !opts.quiet {
            let list: Vec<String> = waves
                .iter()
                .map(|w| {
                    w.iter()
                        .map(|(a, b)| format!("{a}-{b}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            println!("round {}/{}: {}", r + 1, schedule.len(), list.join(" | "));
        }
        for active in waves {
            world
                .broadcast(&ToRank::Round(r as u32, active.clone()), false)
                .map_err(anyhow::Error::msg)?;
            // Rank 0 plays its own pair in a thread while it listens to the others, so a rank that
            // dies anywhere ends the run at once (the thread is left to fail on its own).
            let ctx = PairContext::of(world, opts).map_err(anyhow::Error::msg)?;
            let round_plan = plan.clone();
            let mine = std::thread::spawn(move || ctx.play(&round_plan, r as u32, &active));
            let others: Vec<u32> = (1..world.size()).collect();
            let replies = world.gather(&others, Instant::now() + plan.pair_bound(), is_failure);
            let replies = settle(world, &others, replies)?;
            let mut measured = mine
                .join()
                .map_err(|_| anyhow!("rank 0's pair panicked"))?
                .map_err(|e| anyhow!("{e}"))?;
            for (rank, reply) in replies {
                match reply {
                    ToRoot::Round(m) => measured.extend(m),
                    _ => {
                        return Err(anyhow!(
                            "{} answered a round out of turn",
                            world.describe(rank)
                        ))
                    }
                }
            }
            for m in measured {
                let line = link_line(world, &dir.id, &m);
                sink.write(&line)?;
                lines.push(line);
            }
        }
    }
    world
        .broadcast(&ToRank::Finish, false)
        .map_err(anyhow::Error::msg)?;
    let flagged = tables::judge_links(&mut lines);
    rewrite(&dir.path, &lines)?;
    if !opts.quiet {
        print_matrices(world, &lines);
        print_flagged(&lines, flagged);
        println!(
            "links: {} rows in {:.1} s -> {}",
            lines.len(),
            started.elapsed().as_secs_f64(),
            dir.path.join("links.csv").display()
        );
    }
    Ok(())
}

fn link_line(world: &World, run_id: &str, m: &Measured) -> Line<LinksTable> {
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
    };
    Line::new(
        run_id,
        tables::link_case(&params),
        params,
        Some(&m.summary),
        figures,
    )
}

/// Replaces links.csv with the judged rows, atomically (a crash leaves the unjudged file).
fn rewrite(dir: &Path, lines: &[Line<LinksTable>]) -> Result<()> {
    let tmp = dir.join(".links.csv.tmp");
    {
        let mut sink = CsvSink::<LinksTable>::create(&tmp)?;
        for l in lines {
            sink.write(l)?;
        }
    }
    std::fs::rename(&tmp, dir.join("links.csv"))?;
    Ok(())
}

fn fingerprint_all(world: &mut World, opts: &LinksOptions, dir: &RunDir) -> Result<()> {
    let mut samples: Vec<NodeSample> = Vec::new();
    for turn in fingerprint_turns(world) {
        let others: Vec<u32> = turn.iter().copied().filter(|&r| r != 0).collect();
        for &r in &others {
            world
                .send_to(r, &ToRank::Fingerprint)
                .map_err(anyhow::Error::msg)?;
        }
        if turn.contains(&0) {
            samples.push(sample_node(world, opts).map_err(|e| anyhow!("rank 0: {e}"))?);
        }
        let replies = world.gather(&others, Instant::now() + FINGERPRINT_WAIT, is_failure);
        for (rank, reply) in settle(world, &others, replies)? {
            match reply {
                ToRoot::Node(s) if s.rank == rank => samples.push(*s),
                _ => return Err(anyhow!("{} answered out of turn", world.describe(rank))),
            }
        }
    }
    samples.sort_by_key(|s| s.rank);
    let mut lines = node_lines(&dir.id, &samples);
    let flagged = tables::judge_nodes(&mut lines);
    let mut sink: CsvSink<NodesTable> = dir.table()?;
    for l in &lines {
        sink.write(l)?;
    }
    if !opts.quiet {
        for s in &samples {
            let gemm = s
                .gemm
                .as_ref()
                .map_or("-".into(), |g| format!("{:.0} µs", g.p50));
            let d2h = s
                .d2h
                .as_ref()
                .map_or("-".into(), |d| format!("{:.0} µs", d.p50));
            println!(
                "node rank {} {}: {} | GEMM {} p50 {gemm} | D2H {} p50 {d2h}{}",
                s.rank,
                s.host.hostname,
                s.adapter.as_deref().unwrap_or("no adapter"),
                nodes::GEMM,
                human_bytes(nodes::D2H_BYTES),
                s.note.as_ref().map_or(String::new(), |n| format!(" ({n})"))
            );
        }
        for l in lines.iter().filter(|l| l.figures.flagged == Some(true)) {
            println!(
                "FLAGGED node rank {} {}: {} {} is {:.2}x the nodes' baseline",
                l.params.rank,
                l.params.host,
                l.params.metric,
                l.params.size,
                l.figures.slowdown.unwrap_or(0.0)
            );
        }
        if flagged == 0 && samples.len() >= super::flag::MIN_GROUP {
            println!("nodes: none flagged");
        }
    }
    Ok(())
}

fn node_lines(run_id: &str, samples: &[NodeSample]) -> Vec<Line<NodesTable>> {
    let mut lines = Vec::new();
    for s in samples {
        let params = |metric: &str, size: String| NodeParams {
            rank: s.rank,
            host: s.host.hostname.clone(),
            adapter: s.adapter.clone().unwrap_or_default(),
            metric: metric.into(),
            size,
            cpu_model: s.host.cpu_model.clone(),
            logical_cores: s.host.logical_cores,
            memory_gib: s
                .host
                .memory_bytes
                .map(|b| crate::export::csv::round(b as f64 / (1u64 << 30) as f64, 2)),
            kernel: s.host.kernel.clone(),
        };
        if let Some(g) = &s.gemm {
            let p = params("gemm", nodes::GEMM.to_string());
            let figures = NodeFigures {
                gflops: Some(sig4(nodes::GEMM.flops() / g.p50 / 1e3)),
                verified: true,
                ..Default::default()
            };
            lines.push(Line::new(
                run_id,
                format!("r{}_gemm", s.rank),
                p,
                Some(g),
                figures,
            ));
        }
        if let Some(d) = &s.d2h {
            let p = params("d2h", nodes::D2H_BYTES.to_string());
            let figures = NodeFigures {
                gbps: Some(sig4(nodes::D2H_BYTES as f64 / d.p50 / 1e3)),
                verified: true,
                ..Default::default()
            };
            lines.push(Line::new(
                run_id,
                format!("r{}_d2h", s.rank),
                p,
                Some(d),
                figures,
            ));
        }
    }
    lines
}

/// The rank-by-rank matrices on the console: p50 latency at the smallest size, one-way GB/s
/// at the largest, per transport (row: source, column: destination).
fn print_matrices(world: &World, lines: &[Line<LinksTable>]) {
    let n = world.size() as usize;
    let mut transports: Vec<&str> = lines.iter().map(|l| l.params.transport.as_str()).collect();
    transports.dedup();
    for t in transports {
        let of = |dir: &str| -> Vec<&Line<LinksTable>> {
            lines
                .iter()
                .filter(|l| l.params.transport == t && l.params.direction == dir)
                .collect()
        };
        let lat = of("pingpong");
        let bw = of("oneway");
        if let Some(small) = lat.iter().map(|l| l.params.bytes).min() {
            println!(
                "{t} latency, p50 µs at {} (round trip / 2):",
                human_bytes(small)
            );
            print_grid(n, |a, b| {
                lat.iter()
                    .find(|l| l.params.bytes == small && matches(l, a, b, true))
                    .map(|l| {
                        (
                            format!("{:.1}", l.stats().p50_us),
                            l.figures.flagged == Some(true),
                        )
                    })
            });
        }
        if let Some(big) = bw.iter().map(|l| l.params.bytes).max() {
            println!(
                "{t} bandwidth, GB/s at {} (row sends to column):",
                human_bytes(big)
            );
            print_grid(n, |a, b| {
                bw.iter()
                    .find(|l| l.params.bytes == big && matches(l, a, b, false))
                    .map(|l| {
                        (
                            format!("{:.3}", l.figures.gbps.unwrap_or(0.0)),
                            l.figures.flagged == Some(true),
                        )
                    })
            });
        }
    }
}

fn matches(l: &Line<LinksTable>, a: u32, b: u32, either_way: bool) -> bool {
    let (s, d) = (l.params.src_rank, l.params.dst_rank);
    (s, d) == (a, b) || (either_way && (s, d) == (b, a))
}

fn print_grid(n: usize, cell: impl Fn(u32, u32) -> Option<(String, bool)>) {
    let mut head = format!("{:>6}", "");
    for b in 0..n {
        head.push_str(&format!("{:>11}", format!("r{b}")));
    }
    println!("{head}");
    for a in 0..n {
        let mut row = format!("{:>6}", format!("r{a}"));
        for b in 0..n {
            let text = match cell(a as u32, b as u32) {
                _ if a == b => "-".to_string(),
                Some((v, true)) => format!("*{v}"),
                Some((v, false)) => v,
                None => "?".to_string(),
            };
            row.push_str(&format!("{text:>11}"));
        }
        println!("{row}");
    }
    println!("       (* flagged)");
}

/// The flagged links, one line per pair with its worst slowdown.
fn print_flagged(lines: &[Line<LinksTable>], flagged: usize) {
    let worst = tables::worst_flagged(lines);
    if worst.is_empty() {
        println!("links: none flagged");
        return;
    }
    println!("FLAGGED links ({} rows):", flagged);
    for ((a, b), i) in worst {
        let l = &lines[i];
        println!(
            "  r{a}-r{b} ({} -> {}): {:.2}x the baseline ({} {} {}, p50 {:.1} µs)",
            l.params.src_host,
            l.params.dst_host,
            l.figures.slowdown.unwrap_or(0.0),
            l.params.transport,
            human_bytes(l.params.bytes),
            l.params.direction,
            l.stats().p50_us
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tournament_meets_every_pair_once_and_no_rank_twice_a_round() {
        for n in 1..=9u32 {
            let rs = rounds(n);
            let mut seen = std::collections::BTreeSet::new();
            for round in &rs {
                let mut busy = std::collections::BTreeSet::new();
                for &(a, b) in round {
                    assert!(a < b && b < n);
                    assert!(busy.insert(a) && busy.insert(b), "n={n} {round:?}");
                    assert!(seen.insert((a, b)), "n={n}: {a}-{b} twice");
                }
            }
            assert_eq!(seen.len() as u32, n * n.saturating_sub(1) / 2, "n={n}");
            assert_eq!(rs.len() as u32, if n < 2 { 0 } else { n - 1 + n % 2 });
        }
    }
}
