//! What a links run found, in the shape a bench that leads it needs (the fleet gate turns it
//! into each rank's verdict and the cost of keeping a slow link): the judged links, the nodes
//! they blame, the slow links no node explains, and each rank's links.

use std::collections::BTreeMap;

use super::blame::{self, LinkVerdicts, SlowNode};
use super::tables::{self, LinksTable};
use crate::record::csv::Line;
use crate::stats::robust::median;

/// A confirmed slow link between two nodes the links do not blame.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowLink {
    pub a: u32,
    pub b: u32,
    /// Its worst slowdown against the links of its group.
    pub slowdown: f64,
    /// How much longer than a healthy link it took at the plan's largest size (µs): what a
    /// pipeline's send over it pays on top.
    pub extra_us: Option<f64>,
    pub bytes: u64,
    /// Its stalls and retransmissions in words, when it was flagged on them.
    pub tail: Option<String>,
    /// What a send over it pays in stalls: (share of sends, ms each), when it stalled.
    pub stall: Option<(f64, f64)>,
}

/// One rank's links.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankLinks {
    /// Links measured (each pair once, whatever its sizes).
    pub measured: usize,
    /// Its confirmed slow links.
    pub slow: usize,
    /// The median GB/s of its streams at the largest size, when the plan streams.
    pub gbps: Option<f64>,
    /// Every row of it was measured while a machine was busy.
    pub busy: bool,
    /// The share of its ping-pongs' round trips that stalled (None without tails).
    pub stall_ratio: Option<f64>,
    /// TCP segments retransmitted over its tests, both ends (None where unread).
    pub retransmits: Option<u64>,
    /// Its links flagged on their tails or retransmissions.
    pub lossy: usize,
}

#[derive(Debug, Clone, Default)]
pub struct LinksOutcome {
    /// `quick`, `all-pairs`, `rounds:K` (as planned; a small world is all-pairs).
    pub pattern: String,
    pub rounds: usize,
    /// Rounds the deadline left out (their pairs were not measured).
    pub rounds_cut: usize,
    pub links: LinkVerdicts,
    pub slow_nodes: Vec<SlowNode>,
    /// Each blamed node's stalls and retransmissions in words, when it was flagged on them.
    pub node_tails: BTreeMap<u32, String>,
    /// What a send over a blamed lossy node's links pays in stalls: (share, ms each).
    pub node_stalls: BTreeMap<u32, (f64, f64)>,
    pub slow_links: Vec<SlowLink>,
    pub per_rank: BTreeMap<u32, RankLinks>,
}

impl LinksOutcome {
    /// From the judged rows (retests in, confirmed).
    pub fn of(lines: &[Line<LinksTable>], pattern: String, rounds: usize, cut: usize) -> Self {
        let links = tables::link_verdicts(lines);
        let slow_nodes = blame::slow_nodes(&links);
        let matrix = tables::matrix_rows(lines);
        let largest = matrix.iter().map(|l| l.params.bytes).max().unwrap_or(0);
        let slow_links = unexplained_slow_links(&links, &slow_nodes, &matrix, largest);
        let per_rank = rank_links(&links, &matrix, largest);
        let (node_tails, node_stalls) = blamed_node_tails(&slow_nodes, &matrix);
        LinksOutcome {
            node_tails,
            node_stalls,
            pattern,
            rounds,
            rounds_cut: cut,
            links,
            slow_nodes,
            slow_links,
            per_rank,
        }
    }
}

/// The confirmed slow links between nodes the links do not blame, with what each costs at
/// the `largest` size.
fn unexplained_slow_links(
    links: &LinkVerdicts,
    slow_nodes: &[SlowNode],
    matrix: &[Line<LinksTable>],
    largest: u64,
) -> Vec<SlowLink> {
    let blamed = |r: u32| slow_nodes.iter().any(|n| n.rank == r);
    let at_largest = |a: u32, b: u32| {
        matrix
            .iter()
            .filter(move |l| tables::pair(l) == (a, b) && l.params.bytes == largest)
    };
    links
        .iter()
        .filter(|((a, b), v)| v.is_some() && !blamed(*a) && !blamed(*b))
        .map(|(&(a, b), v)| {
            let slowdown = v.unwrap_or(1.0);
            let times: Vec<f64> = at_largest(a, b)
                .filter_map(|l| l.stats.as_ref().map(|s| s.p50_us))
                .collect();
            let extra_us = (!times.is_empty() && slowdown > 1.0)
                .then(|| median(&times) * (1.0 - 1.0 / slowdown));
            SlowLink {
                a,
                b,
                slowdown,
                extra_us,
                bytes: largest,
                tail: super::words::tail_words(matrix, |l| tables::pair(l) == (a, b)),
                stall: super::words::stall_cost(matrix, |l| {
                    tables::pair(l) == (a, b) && super::words::lossy(l)
                }),
            }
        })
        .collect()
}

/// Each rank's links: counted from the verdicts, their speed and busy flag from the matrix
/// rows, then their tails.
fn rank_links(
    links: &LinkVerdicts,
    matrix: &[Line<LinksTable>],
    largest: u64,
) -> BTreeMap<u32, RankLinks> {
    let mut per_rank: BTreeMap<u32, RankLinks> = BTreeMap::new();
    let mut gbps: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    let mut quiet: BTreeMap<u32, bool> = BTreeMap::new();
    for (&(a, b), v) in links {
        for r in [a, b] {
            let e = per_rank.entry(r).or_default();
            e.measured += 1;
            e.slow += usize::from(v.is_some());
        }
    }
    for l in matrix {
        for r in [l.params.src_rank, l.params.dst_rank] {
            *quiet.entry(r).or_insert(false) |= l.figures.busy != Some(true);
            if let (Some(g), true) = (l.figures.gbps, l.params.bytes == largest) {
                gbps.entry(r).or_default().push(g);
            }
        }
    }
    for (r, e) in per_rank.iter_mut() {
        e.gbps = gbps.get(r).map(|g| median(g));
        e.busy = !quiet.get(r).copied().unwrap_or(true);
        add_tail_figures(e, *r, matrix);
    }
    per_rank
}

/// Rank `r`'s stall ratio, retransmissions and lossy links, from the matrix rows it is in.
fn add_tail_figures(e: &mut RankLinks, r: u32, matrix: &[Line<LinksTable>]) {
    let mine: Vec<&Line<LinksTable>> = matrix
        .iter()
        .filter(|l| l.params.src_rank == r || l.params.dst_rank == r)
        .collect();
    let pings: Vec<(u32, usize)> = mine
        .iter()
        .filter(|l| l.params.direction == "pingpong")
        .filter_map(|l| Some((l.figures.stalls?, l.stats().n)))
        .collect();
    let trials: usize = pings.iter().map(|p| p.1).sum();
    e.stall_ratio =
        (trials > 0).then(|| pings.iter().map(|p| p.0 as f64).sum::<f64>() / trials as f64);
    let counts: Vec<u64> = mine.iter().filter_map(|l| l.figures.retransmits).collect();
    e.retransmits = (!counts.is_empty()).then(|| counts.iter().sum());
    let lossy: std::collections::BTreeSet<(u32, u32)> = mine
        .iter()
        .filter(|l| super::words::lossy(l))
        .map(|l| tables::pair(l))
        .collect();
    e.lossy = lossy.len();
}

/// Each blamed node's stalls and retransmissions in words, and what a send over its lossy
/// links pays in stalls (only for nodes with words).
fn blamed_node_tails(
    slow_nodes: &[SlowNode],
    matrix: &[Line<LinksTable>],
) -> (BTreeMap<u32, String>, BTreeMap<u32, (f64, f64)>) {
    let node_tails: BTreeMap<u32, String> = slow_nodes
        .iter()
        .filter_map(|n| {
            let on =
                |l: &Line<LinksTable>| n.rank == l.params.src_rank || n.rank == l.params.dst_rank;
            super::words::tail_words(matrix, on).map(|w| (n.rank, w))
        })
        .collect();
    let node_stalls = node_tails
        .keys()
        .filter_map(|&r| {
            let on = |l: &Line<LinksTable>| {
                (l.params.src_rank == r || l.params.dst_rank == r) && super::words::lossy(l)
            };
            super::words::stall_cost(matrix, on).map(|c| (r, c))
        })
        .collect();
    (node_tails, node_stalls)
}
