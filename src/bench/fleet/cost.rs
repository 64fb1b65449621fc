//! What keeping a failed node would cost a training pipeline placed on this fleet, which no
//! bring-up gate says: the simulator's iteration time of an S-stage pipeline (one stage per
//! rank, up to [`MAX_STAGES`]; the simulator's default stage times) with the node as its
//! middle stage, against the same pipeline of healthy nodes, under 1F1B and adaptive. Each
//! failed figure slows what it stands for in the model: a slow GEMM the stage's compute (F, B
//! and W), a slow copy (memcpy, D2H, H2D) the host staging of the stage's sends (the offload
//! path's device-to-host copy, as extra time on its links).

use serde::{Deserialize, Serialize};

use super::verdict::{Row, FAIL};
use crate::export::csv::{round, CsvTable};
use crate::sim::{default_mem_limit, evaluate, CommModel, Scenario, Schedule};

/// The longest pipeline the estimate models (the fleet may be larger).
pub const MAX_STAGES: usize = 8;
/// The simulator's default stage times (ms) and its offload copy.
const STAGE_MS: f64 = 10.0;
const D2H_MS: f64 = 0.5;
/// Microbatches per stage, as a pipeline is usually fed.
const MICROBATCHES_PER_STAGE: usize = 2;

pub struct KeepCostTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepCostParams {
    pub rank: u32,
    pub host: String,
    /// Stages of the modelled pipeline, and the node's (from 0).
    pub stages: usize,
    pub stage: usize,
    pub schedule: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepCostFigures {
    /// How much slower the node's compute and its host staging were than expected.
    pub compute_slowdown: f64,
    pub staging_slowdown: f64,
    pub healthy_ms: f64,
    pub kept_ms: f64,
    /// The throughput change from keeping it, in percent (negative: slower).
    pub throughput_pct: f64,
}

impl CsvTable for KeepCostTable {
    const NAME: &'static str = "keep_cost";
    const WITH_STATS: bool = false;
    type Params = KeepCostParams;
    type Figures = KeepCostFigures;
    const SIGNED: &'static [&'static str] = &["throughput_pct"];
}

/// One failed node's estimate, a row per schedule.
pub type KeepCost = Vec<(KeepCostParams, KeepCostFigures)>;

/// How much slower than expected a failed node's compute and staging were, from its rows:
/// the worst FAIL of each kind (expected over measured); None when no figure of it failed
/// with a value (a node that did not answer has no estimate).
fn slowdowns(rows: &[Row], rank: u32) -> Option<(f64, f64)> {
    let (mut compute, mut staging, mut any) = (1.0f64, 1.0f64, false);
    for (p, f) in rows
        .iter()
        .filter(|(p, f)| p.rank == rank && f.verdict == FAIL)
    {
        let (Some(v), Some(e)) = (f.value, f.expected) else {
            continue;
        };
        if v <= 0.0 || e <= v {
            continue;
        }
        match p.test.as_str() {
            "gemm" => compute = compute.max(e / v),
            "memcpy" | "d2h" | "h2d" => staging = staging.max(e / v),
            _ => continue,
        }
        any = true;
    }
    any.then_some((compute, staging))
}

/// The pipeline with the node at `stage` slowed by `compute` and `staging`.
fn scenario(stages: usize, stage: usize, compute: f64, staging: f64) -> Option<Scenario> {
    let mut times = vec![STAGE_MS; stages];
    times[stage] *= compute;
    // Its sends (to either neighbour) pay the slower copy.
    let extra = (staging - 1.0) * D2H_MS;
    let slow: Vec<(usize, f64)> = [stage.checked_sub(1), (stage + 1 < stages).then_some(stage)]
        .into_iter()
        .flatten()
        .map(|l| (l, extra))
        .collect();
    Scenario::new(
        stages,
        MICROBATCHES_PER_STAGE * stages,
        &times,
        &times,
        &times,
        0.0,
        &slow,
        CommModel::Offload,
        D2H_MS,
    )
    .ok()
}

/// The estimate for every failed node with a measured slowdown, in rank order.
pub fn estimate(rows: &[Row], failed: &[(u32, String)], world: usize) -> Vec<KeepCost> {
    let stages = world.clamp(2, MAX_STAGES);
    let stage = stages / 2;
    let mut out = Vec::new();
    for (rank, host) in failed {
        let Some((compute, staging)) = slowdowns(rows, *rank) else {
            continue;
        };
        let (Some(healthy), Some(kept)) = (
            scenario(stages, stage, 1.0, 1.0),
            scenario(stages, stage, compute, staging),
        ) else {
            continue;
        };
        let mut cost = Vec::new();
        for schedule in [Schedule::OneFOneB, Schedule::Adaptive] {
            let time = |sc: &Scenario| {
                evaluate(&schedule, sc, default_mem_limit(sc))
                    .ok()
                    .map(|(_, run)| run.iteration_ms)
            };
            let (Some(h), Some(k)) = (time(&healthy), time(&kept)) else {
                continue;
            };
            cost.push((
                KeepCostParams {
                    rank: *rank,
                    host: host.clone(),
                    stages,
                    stage,
                    schedule: schedule.to_string(),
                },
                KeepCostFigures {
                    compute_slowdown: round(compute, 3),
                    staging_slowdown: round(staging, 3),
                    healthy_ms: round(h, 3),
                    kept_ms: round(k, 3),
                    throughput_pct: round(100.0 * (h / k - 1.0), 1),
                },
            ));
        }
        if !cost.is_empty() {
            out.push(cost);
        }
    }
    out
}

/// "keeping node07: -38% throughput with 1f1b, -11% with adaptive".
pub fn line(cost: &KeepCost) -> String {
    let host = cost.first().map_or("", |(p, _)| p.host.as_str());
    let parts: Vec<String> = cost
        .iter()
        .map(|(p, f)| format!("{:+.0}% throughput with {}", f.throughput_pct, p.schedule))
        .collect();
    format!("keeping {host}: {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fleet::table::{FleetFigures, FleetParams};

    fn failed_row(rank: u32, test: &str, value: f64, expected: f64) -> Row {
        (
            FleetParams {
                rank,
                host: format!("n{rank}"),
                test: test.into(),
                figure: "x".into(),
                ..Default::default()
            },
            FleetFigures {
                value: Some(value),
                expected: Some(expected),
                verdict: FAIL.into(),
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_slower_node_costs_more_and_a_silent_one_has_no_estimate() {
        let rows = vec![
            failed_row(1, "gemm", 50.0, 100.0),
            failed_row(2, "gemm", 80.0, 100.0),
            failed_row(3, "d2h", 1.0, 2.0),
        ];
        let failed: Vec<(u32, String)> = (1..=4).map(|r| (r, format!("n{r}"))).collect();
        let costs = estimate(&rows, &failed, 4);
        // Rank 4 failed without a figure (it did not answer): no estimate.
        assert_eq!(costs.len(), 3);
        let pct = |c: &KeepCost, s: &str| {
            c.iter()
                .find(|(p, _)| p.schedule == s)
                .map(|(_, f)| f.throughput_pct)
                .unwrap()
        };
        let (half, slight, copy) = (&costs[0], &costs[1], &costs[2]);
        assert_eq!(half[0].0.stages, 4);
        // A stage of half the speed: 1F1B's steady state runs at the slowest stage's pace.
        assert!(pct(half, "1f1b") < -30.0, "{half:?}");
        assert!(
            pct(half, "1f1b") < pct(slight, "1f1b"),
            "{half:?} {slight:?}"
        );
        assert!(pct(slight, "1f1b") < 0.0);
        // A copy at half speed costs a compute-bound pipeline little.
        assert!(pct(copy, "1f1b") > pct(slight, "1f1b"), "{copy:?}");
        assert!(pct(copy, "1f1b") <= 0.0);
        assert!(line(half).starts_with("keeping n1: -"), "{}", line(half));
        assert!(line(half).contains("throughput with adaptive"));
    }
}
