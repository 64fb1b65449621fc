//! The nodes' part of `links`: each rank's fingerprint, taken in turns by the ranks of one
//! host, judged and written to nodes.csv, and each node's verdict once the links are judged.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::blame::SlowNode;
use super::console;
use super::nodes::{self, NodeSample};
use super::options::{LinksOptions, Order, Reply, FINGERPRINT_WAIT};
use super::tables::{self, NodeFigures, NodeParams, NodesTable};
use crate::cluster::world::World;
use crate::cluster::Crew;
use crate::gpu::Gpu;
use crate::record::csv::{sig4, CsvSink, Line};
use crate::record::run_dir::RunDir;

/// Ranks grouped in turns: the i-th rank of every host in turn i, so ranks sharing a host
/// (and its device) never sample at once.
pub(super) fn fingerprint_turns(world: &World) -> Vec<Vec<u32>> {
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

fn open_gpu(opts: &LinksOptions, local_rank: u32) -> (Option<Gpu>, Option<String>) {
    match Gpu::open_local(opts.backend, opts.adapter.as_deref(), local_rank) {
        Ok(g) => (Some(g), None),
        Err(e) => (None, Some(e.to_string())),
    }
}

pub(super) fn sample_node(world: &World, opts: &LinksOptions) -> anyhow::Result<NodeSample> {
    let local_rank = world.local_rank();
    let (gpu, why) = open_gpu(opts, local_rank);
    let mut s = nodes::fingerprint(world.rank(), local_rank, gpu.as_ref())?;
    if let Some(why) = why {
        s.note = Some(why);
    }
    Ok(s)
}

/// Each node's verdict on its rows of nodes.csv: `slow` when its confirmed links blame it,
/// else `ok`. A fingerprint sample's own flag stays in `flagged`: it is one short sample,
/// never retested, and ranks that share a machine's cores sample it side by side.
pub(super) fn with_verdicts(
    mut nodes: Vec<Line<NodesTable>>,
    blamed: &[SlowNode],
) -> Vec<Line<NodesTable>> {
    for l in &mut nodes {
        let slow = blamed.iter().any(|b| b.rank == l.params.rank);
        l.figures.verdict = Some(if slow { "slow" } else { "ok" }.to_string());
    }
    nodes
}

/// Rank 0: every node's fingerprint, ranks of one host in turns, judged and written to
/// nodes.csv (and returned, for the verdicts at the end).
pub(super) fn fingerprint_all(
    crew: &mut Crew<Order, Reply>,
    opts: &LinksOptions,
    dir: &RunDir,
) -> Result<Vec<Line<NodesTable>>> {
    let mut samples: Vec<NodeSample> = Vec::new();
    for turn in fingerprint_turns(crew.world()) {
        let others: Vec<u32> = turn.iter().copied().filter(|&r| r != 0).collect();
        for &r in &others {
            crew.order(r, Order::Fingerprint)?;
        }
        if turn.contains(&0) {
            samples.push(sample_node(crew.world(), opts).map_err(|e| anyhow!("rank 0: {e}"))?);
        }
        for (rank, reply) in crew.hear(&others, Instant::now() + FINGERPRINT_WAIT)? {
            match reply {
                Reply::Node(s) if s.rank == rank => samples.push(*s),
                _ => return Err(crew.out_of_turn(rank, "a fingerprint").into()),
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
    if !opts.session.quiet {
        console::print_nodes(&samples, &lines, flagged);
    }
    Ok(lines)
}

fn node_lines(run_id: &str, samples: &[NodeSample]) -> Vec<Line<NodesTable>> {
    let mut lines = Vec::new();
    for s in samples {
        let params = |metric: &str, size: String| NodeParams {
            rank: s.rank,
            host: s.host.hostname.clone(),
            adapter: s.adapter.clone().unwrap_or_default(),
            local_rank: Some(s.local_rank),
            adapter_index: s.adapter_index,
            metric: metric.into(),
            size,
            cpu_model: s.host.cpu_model.clone(),
            logical_cores: s.host.logical_cores,
            memory_gib: s
                .host
                .memory_bytes
                .map(|b| crate::record::csv::round(b as f64 / (1u64 << 30) as f64, 2)),
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
