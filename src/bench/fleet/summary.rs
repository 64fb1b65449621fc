//! `fleet.json`, typed: the gate's verdict and what it rests on, as `--json` prints it and
//! `health` reads it. Written through `serde_json::Value`, so its keys come out sorted, as they
//! always have.

use std::path::PathBuf;

use serde::Serialize;

use super::cost::KeepCost;
use super::network::LinksResult;
use super::pipeline::PipelineResult;
use super::rank::{RankOutcome, Row, FAIL, WARN};
use super::verdict::{self, Verdict};

#[derive(Debug, Serialize)]
pub struct FleetSummary {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub level: String,
    pub ranks: usize,
    /// Nodes that failed, and that warned.
    pub failed: usize,
    pub warned: usize,
    /// Hosts that were busy during their tests.
    pub busy: Vec<String>,
    /// The failed hosts as a Slurm hostlist (drain.txt), and the line that drains them.
    pub drain: String,
    pub scontrol: Option<String>,
    pub nodes: Vec<NodeSummary>,
    pub keep_cost: Vec<KeepCostEntry>,
    pub links: Option<Part<LinksSummary>>,
    pub pipeline: Option<Part<Vec<PipelineCase>>>,
    pub wall_s: f64,
    pub exit_code: u8,
    /// fleet.csv's rows, for `health` alone (handed over in memory on rank 0's `--json` pipe,
    /// never read back from the run folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<Row>>,
}

/// One node: its verdict (the worst of its rows) and what it is.
#[derive(Debug, Clone, Serialize)]
pub struct NodeSummary {
    pub rank: u32,
    pub host: String,
    pub local_rank: Option<u32>,
    pub adapter: String,
    /// The adapter's PCI bus id, where known (the textfile's `pci_bus_id`).
    pub pci_bus_id: Option<String>,
    pub verdict: Verdict,
    pub busy: bool,
    pub reasons: Vec<String>,
}

/// A part of the gate that may not have run.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Part<T> {
    Skipped { skipped: String },
    Failed { failed: String },
    Done(T),
}

/// What keeping a failed node or a slow link would cost, per schedule (keep_cost.csv's rows).
#[derive(Debug, Serialize)]
pub struct KeepCostEntry {
    pub rank: u32,
    pub host: String,
    pub kind: String,
    pub stages: usize,
    pub schedule: String,
    pub throughput_pct: Option<f64>,
    pub error: Option<String>,
}

/// The nested links run: its pattern, its rounds, what was slow.
#[derive(Debug, Serialize)]
pub struct LinksSummary {
    pub pattern: String,
    pub rounds: usize,
    pub rounds_cut: usize,
    pub links: usize,
    pub slow_nodes: Vec<String>,
    pub slow_links: Vec<SlowLinkSummary>,
}

#[derive(Debug, Serialize)]
pub struct SlowLinkSummary {
    pub a: String,
    pub b: String,
    pub slowdown: f64,
}

/// One case of the nested pipeline: measured against predicted, and its check.
#[derive(Debug, Serialize)]
pub struct PipelineCase {
    pub schedule: String,
    pub comm: String,
    pub stages: u32,
    pub iteration_ms: f64,
    pub predicted_ms: f64,
    pub verified: bool,
}

/// Each rank's verdict (the worst of its rows) and what it is.
pub fn nodes(ranks: &[RankOutcome], rows: &[Row]) -> Vec<NodeSummary> {
    let per_rank = verdict::per_rank(rows);
    ranks
        .iter()
        .map(|o| {
            let (v, reasons) = per_rank.get(&o.rank).cloned().unwrap_or((FAIL, vec![]));
            NodeSummary {
                rank: o.rank,
                host: o.host.clone(),
                local_rank: o.inventory.as_ref().map(|i| i.local_rank),
                adapter: o.adapter(),
                pci_bus_id: o.inventory.as_ref().and_then(|i| i.pci_bus_id.clone()),
                verdict: v,
                busy: o.busy(),
                reasons,
            }
        })
        .collect()
}

/// The nodes' counts and busy hosts: (failed, warned, busy).
pub fn counts(nodes: &[NodeSummary]) -> (usize, usize, Vec<String>) {
    let failed = nodes.iter().filter(|n| n.verdict == FAIL).count();
    let warned = nodes.iter().filter(|n| n.verdict == WARN).count();
    let busy = nodes
        .iter()
        .filter(|n| n.busy)
        .map(|n| n.host.clone())
        .collect();
    (failed, warned, busy)
}

pub fn keep_costs(costs: &[KeepCost]) -> Vec<KeepCostEntry> {
    costs
        .iter()
        .flatten()
        .map(|(p, f)| KeepCostEntry {
            rank: p.rank,
            host: p.host.clone(),
            kind: p.kind.clone(),
            stages: p.stages,
            schedule: p.schedule.clone(),
            throughput_pct: f.throughput_pct,
            error: f.error.clone(),
        })
        .collect()
}

/// The nested links run, each rank named by its host.
pub fn links(ranks: &[RankOutcome], links: &LinksResult) -> Option<Part<LinksSummary>> {
    let host = |r: u32| {
        ranks
            .get(r as usize)
            .map_or("?", |o| o.host.as_str())
            .to_string()
    };
    Some(match links {
        LinksResult::None => return None,
        LinksResult::Skipped(why) => Part::Skipped {
            skipped: why.clone(),
        },
        LinksResult::Failed(why) => Part::Failed {
            failed: why.clone(),
        },
        LinksResult::Done(out) => Part::Done(LinksSummary {
            pattern: out.pattern.clone(),
            rounds: out.rounds,
            rounds_cut: out.rounds_cut,
            links: out.links.len(),
            slow_nodes: out.slow_nodes.iter().map(|n| host(n.rank)).collect(),
            slow_links: out
                .slow_links
                .iter()
                .map(|l| SlowLinkSummary {
                    a: host(l.a),
                    b: host(l.b),
                    slowdown: crate::record::csv::round(l.slowdown, 2),
                })
                .collect(),
        }),
    })
}

/// The nested pipeline: each case's measured and predicted iteration, and the check.
pub fn pipeline(pipe: &PipelineResult) -> Option<Part<Vec<PipelineCase>>> {
    Some(match pipe {
        PipelineResult::None => return None,
        PipelineResult::Skipped(why) => Part::Skipped {
            skipped: why.clone(),
        },
        PipelineResult::Failed(why) => Part::Failed {
            failed: why.clone(),
        },
        PipelineResult::Done(cases, _) => Part::Done(
            cases
                .iter()
                .map(|(p, f)| PipelineCase {
                    schedule: p.schedule.clone(),
                    comm: p.comm.clone(),
                    stages: p.stages,
                    iteration_ms: f.iteration_ms,
                    predicted_ms: f.predicted_ms,
                    verified: f.verified,
                })
                .collect(),
        ),
    })
}
