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
    pub slow_links: Vec<SlowLink>,
    pub per_rank: BTreeMap<u32, RankLinks>,
}

impl LinksOutcome {
    /// From the judged rows (retests in, confirmed).
    pub fn of(lines: &[Line<LinksTable>], pattern: String, rounds: usize, cut: usize) -> Self {
        let links = tables::link_verdicts(lines);
        let slow_nodes = blame::slow_nodes(&links);
        let blamed = |r: u32| slow_nodes.iter().any(|n| n.rank == r);
        let matrix = tables::matrix_rows(lines);
        let largest = matrix.iter().map(|l| l.params.bytes).max().unwrap_or(0);
        let at_largest = |a: u32, b: u32| {
            matrix.iter().filter(move |l| {
                let (s, d) = (l.params.src_rank, l.params.dst_rank);
                (s.min(d), s.max(d)) == (a, b) && l.params.bytes == largest
            })
        };
        let slow_links = links
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
                }
            })
            .collect();
        let mut per_rank: BTreeMap<u32, RankLinks> = BTreeMap::new();
        let mut gbps: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        let mut quiet: BTreeMap<u32, bool> = BTreeMap::new();
        for (&(a, b), v) in &links {
            for r in [a, b] {
                let e = per_rank.entry(r).or_default();
                e.measured += 1;
                e.slow += usize::from(v.is_some());
            }
        }
        for l in &matrix {
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
        }
        LinksOutcome {
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
