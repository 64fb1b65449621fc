//! What keeping a failed node would cost a training pipeline placed on this fleet, which no
//! bring-up gate says: the simulator's iteration time of an S-stage pipeline (one stage per
//! rank, up to [`MAX_STAGES`], the simulator's default stage times; or `--profile FILE`'s
//! stages and op times) with the node as its middle stage, against the same pipeline of
//! healthy nodes, under the runtime presets of `sim --validate`: 1F1B (Megatron's) and
//! adaptive (PipeMorph's: offloaded and re-planned once a delay is seen). Each
//! failed figure slows what it stands for in the model: a slow GEMM or ceiling (FMA, memory
//! bandwidth) the stage's compute (F, B and W), a slow copy (memcpy, D2H, H2D) the host staging of the stage's sends (the offload
//! path's device-to-host copy, as extra time on its links). A confirmed slow link between two
//! healthy nodes is the pipeline's middle link, each send over it late by what the link took
//! beyond a healthy one at the links' largest size (an activation of that size).

use serde::{Deserialize, Serialize};

use super::rank::{Row, FAIL};
use crate::record::csv::{round, CsvTable};
use crate::sim::runtime::{predict, Job, Machine, Mechanisms, System};

/// The longest pipeline the estimate models (the fleet may be larger).
pub const MAX_STAGES: usize = 8;
/// The simulator's default stage times (ms) and its offload copy.
const STAGE_MS: f64 = 10.0;
const D2H_MS: f64 = 0.5;
/// The size of a send whose time the links' GB/s gives (the gate's links' largest size).
const LINK_BYTES: f64 = super::checks::LINK_BANDWIDTH_BYTES as f64;
/// Microbatches per stage, as a pipeline is usually fed.
const MICROBATCHES_PER_STAGE: usize = 2;

pub struct KeepCostTable;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepCostParams {
    /// The node's rank (a link's lower end).
    pub rank: u32,
    /// The node's host, or a link's two hosts (`a-b`).
    pub host: String,
    /// `node` or `link`.
    pub kind: String,
    /// Stages of the modelled pipeline, and the node's (from 0).
    pub stages: usize,
    pub stage: usize,
    pub schedule: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeepCostFigures {
    /// How much slower the node's compute and its host staging were than expected (1 for a
    /// link).
    pub compute_slowdown: f64,
    pub staging_slowdown: f64,
    /// What each send over the slow link (a node's: over its links) pays on top, in ms.
    pub link_extra_ms: f64,
    pub healthy_ms: f64,
    pub kept_ms: f64,
    /// The throughput change from keeping it, in percent (negative: slower).
    pub throughput_pct: f64,
    /// A lossy node's or link's sends: the share that stall and each stall's ms, drawn per
    /// send over [`LOSSY_ITERATIONS`] iterations (`kept_ms` their mean); empty otherwise.
    pub stall_share: Option<f64>,
    pub stall_ms: Option<f64>,
}

impl CsvTable for KeepCostTable {
    const NAME: &'static str = "keep_cost";
    const WITH_STATS: bool = false;
    type Params = KeepCostParams;
    type Figures = KeepCostFigures;
    const SIGNED: &'static [&'static str] = &["throughput_pct"];
    const ADDED: &'static [&'static str] = &["stall_share", "stall_ms"];
}

/// One failed node's estimate, a row per schedule.
pub type KeepCost = Vec<(KeepCostParams, KeepCostFigures)>;

/// How much slower than expected a failed node's compute, staging and links were, from its
/// rows: the worst FAIL of each kind (expected over measured; for links, the extra time of a
/// [`LINK_BYTES`] send at the measured rate); None when no figure of it failed with a value (a
/// node that did not answer has no estimate).
fn slowdowns(rows: &[Row], rank: u32) -> Option<Kept> {
    let (mut compute, mut staging, mut sends, mut any) = (1.0f64, 1.0f64, 0.0f64, false);
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
            // The ceilings bound the stage's kernels: GEMMs (FMA) and layernorms (memory).
            "gemm" | "fma" | "bandwidth" => compute = compute.max(e / v),
            "memcpy" | "d2h" | "h2d" => staging = staging.max(e / v),
            // GB/s is bytes per ns: ms = bytes / (GB/s) / 1e6.
            "links" => sends = sends.max((LINK_BYTES / v - LINK_BYTES / e) / 1e6),
            _ => continue,
        }
        any = true;
    }
    any.then_some(Kept {
        compute,
        staging,
        sends_extra_ms: sends,
        link_extra_ms: 0.0,
    })
}

/// What is slow in a kept pipeline: its node at `stage` (compute and staging slowdowns) and
/// the link after `stage` (extra ms a send).
#[derive(Debug, Clone, Copy)]
struct Kept {
    compute: f64,
    staging: f64,
    /// Extra ms on each of the node's sends (its links blamed on it).
    sends_extra_ms: f64,
    /// Extra ms on each send over the link after `stage`.
    link_extra_ms: f64,
}

const HEALTHY: Kept = Kept {
    compute: 1.0,
    staging: 1.0,
    sends_extra_ms: 0.0,
    link_extra_ms: 0.0,
};

/// The modelled pipeline: op times per stage (default: the simulator's 10 ms stages, twice
/// as many microbatches as stages), from `fleet --profile FILE` when given.
#[derive(Debug, Clone)]
pub struct Profile {
    pub stages: usize,
    pub microbatches: usize,
    pub tf: Vec<f64>,
    pub tb: Vec<f64>,
    pub tw: Vec<f64>,
    pub activation_bytes: f64,
    pub channels: usize,
}

impl Profile {
    fn default_for(world: usize) -> Profile {
        let stages = world.clamp(2, MAX_STAGES);
        Profile {
            stages,
            microbatches: MICROBATCHES_PER_STAGE * stages,
            tf: vec![STAGE_MS; stages],
            tb: vec![STAGE_MS; stages],
            tw: vec![STAGE_MS; stages],
            activation_bytes: LINK_BYTES,
            channels: 3,
        }
    }

    /// The first row of a `sim --validate` file (its stages, microbatches, op times,
    /// activation bytes and offload channels).
    pub fn load(path: &std::path::Path) -> anyhow::Result<Profile> {
        let input = crate::bench::sim::validate::read(path)?;
        let c = &input.cases[0];
        Ok(Profile {
            stages: c.stages,
            microbatches: c.microbatches,
            tf: c.tf.clone(),
            tb: c.tb.clone(),
            tw: c.tw.clone(),
            activation_bytes: c.activation_bytes,
            channels: c.channels,
        })
    }
}

/// The pipeline with the node at `stage` slowed by `compute` and `staging`, and the link
/// after it by `link_extra_ms`: op times and per-link delays of one iteration.
fn slowed(profile: &Profile, stage: usize, kept: Kept) -> (Profile, Vec<f64>) {
    let mut p = profile.clone();
    for t in [&mut p.tf, &mut p.tb, &mut p.tw] {
        t[stage] *= kept.compute;
    }
    let stages = p.stages;
    let mut delay = vec![0.0; stages - 1];
    // Its sends (to either neighbour) pay the slower copy, and its slow links.
    let d2h_ms = p.activation_bytes / (Machine::ARTIFACT.pcie_gbps * 1e6);
    let extra = (kept.staging - 1.0) * d2h_ms.max(D2H_MS) + kept.sends_extra_ms;
    for l in [stage.checked_sub(1), (stage + 1 < stages).then_some(stage)]
        .into_iter()
        .flatten()
    {
        delay[l] += extra;
    }
    if kept.link_extra_ms > 0.0 && stage + 1 < stages {
        delay[stage] += kept.link_extra_ms;
    }
    (p, delay)
}

/// The iteration time of `system` (the runtime presets of `sim --validate`) under `delay`;
/// with nothing delayed, the faster of its two paths (PipeMorph's re-planned offload can beat
/// ZB's plan on the device), so that keeping a slow node never reads as a gain.
fn iteration_ms(system: System, p: &Profile, delay: &[f64]) -> Result<f64, String> {
    let job = Job {
        stages: p.stages,
        microbatches: p.microbatches,
        tf: &p.tf,
        tb: &p.tb,
        tw: &p.tw,
        delay,
        activation_bytes: p.activation_bytes,
        channels: p.channels,
        fused_backward: false,
        measured: None,
    };
    let pred =
        predict(system, &job, &Machine::ARTIFACT, &Mechanisms::ALL).map_err(|e| e.to_string())?;
    Ok(if delay.iter().any(|&d| d > 0.0) {
        pred.slow_ms
    } else {
        pred.healthy_ms.min(pred.slow_ms)
    })
}

/// Estimates made, and for each the model could not make, what it was and why (said, never
/// dropped).
pub type Estimates = (Vec<KeepCost>, Vec<(String, String)>);

fn gather(results: Vec<(String, Result<KeepCost, String>)>) -> Estimates {
    let mut out: Estimates = (Vec::new(), Vec::new());
    for (what, r) in results {
        match r {
            Ok(c) => out.0.push(c),
            Err(e) => out.1.push((what, e)),
        }
    }
    out
}

/// The estimate for every failed node with a measured slowdown, in rank order (a node with
/// none, one that did not answer, has nothing to estimate).
pub fn estimate(
    rows: &[Row],
    failed: &[(u32, String)],
    world: usize,
    profile: Option<&Profile>,
) -> Estimates {
    let profile = profile
        .cloned()
        .unwrap_or_else(|| Profile::default_for(world));
    gather(
        failed
            .iter()
            .filter_map(|(rank, host)| {
                let kept = slowdowns(rows, *rank)?;
                Some((host.clone(), cost_of((*rank, host, "node"), kept, &profile)))
            })
            .collect(),
    )
}

/// The estimate for each confirmed slow link no node explains (`links`: lower rank, both
/// hosts, extra µs a send).
pub fn estimate_links(
    links: &[(u32, String, f64)],
    world: usize,
    profile: Option<&Profile>,
) -> Estimates {
    let profile = profile
        .cloned()
        .unwrap_or_else(|| Profile::default_for(world));
    gather(
        links
            .iter()
            .map(|(rank, hosts, extra_us)| {
                let kept = Kept {
                    link_extra_ms: extra_us / 1e3,
                    ..HEALTHY
                };
                let what = format!("the link {hosts}");
                (what, cost_of((*rank, hosts, "link"), kept, &profile))
            })
            .collect(),
    )
}

/// One kept node's or link's rows: 1F1B (Megatron's runtime) and adaptive (PipeMorph's),
/// kept against healthy; a runtime the model cannot predict is an error naming it.
fn cost_of(
    (rank, host, kind): (u32, &str, &str),
    kept: Kept,
    profile: &Profile,
) -> Result<KeepCost, String> {
    let stages = profile.stages;
    // The node in the middle; a link between the two middle stages.
    let stage = match kind {
        "link" => (stages - 1) / 2,
        _ => stages / 2,
    };
    let (healthy, calm) = slowed(profile, stage, HEALTHY);
    let (kept_profile, delay) = slowed(profile, stage, kept);
    let mut cost = Vec::new();
    for (schedule, system) in [("1f1b", System::OneFOneB), ("adaptive", System::Pipemorph)] {
        let model = |r: Result<f64, String>| r.map_err(|e| format!("{schedule}: {e}"));
        let h = model(iteration_ms(system, &healthy, &calm))?;
        let k = model(iteration_ms(system, &kept_profile, &delay))?;
        cost.push((
            KeepCostParams {
                rank,
                host: host.to_string(),
                kind: kind.to_string(),
                stages,
                stage,
                schedule: schedule.to_string(),
            },
            KeepCostFigures {
                compute_slowdown: round(kept.compute, 3),
                staging_slowdown: round(kept.staging, 3),
                link_extra_ms: round(kept.link_extra_ms + kept.sends_extra_ms, 3),
                healthy_ms: round(h, 3),
                kept_ms: round(k, 3),
                throughput_pct: round(100.0 * (h / k - 1.0), 1),
                stall_share: None,
                stall_ms: None,
            },
        ));
    }
    Ok(cost)
}

/// Iterations a lossy node's or link's keep cost draws (a fixed seed: the same run, the same
/// estimate).
pub const LOSSY_ITERATIONS: u32 = 1000;

/// What keeping a lossy node (`kind` "node": its sends to either neighbour stall) or a lossy
/// link ("link": the middle link's) would cost: each send stalls with the measured share by
/// the measured length, drawn per send (`sim --stall`'s model) over [`LOSSY_ITERATIONS`]
/// iterations of the profile's pipeline under 1F1B and adaptive, each planned without the
/// stalls; the throughput change is the healthy iteration's over the stalled iterations' mean.
/// A model failure is said, never dropped (Err with its cause).
pub fn estimate_lossy(
    (rank, host, kind): (u32, &str, &str),
    (share, ms): (f64, f64),
    world: usize,
    profile: Option<&Profile>,
) -> Result<KeepCost, String> {
    let p = profile
        .cloned()
        .unwrap_or_else(|| Profile::default_for(world));
    let stages = p.stages;
    let stage = match kind {
        "link" => (stages - 1) / 2,
        _ => stages / 2,
    };
    let links: Vec<usize> = match kind {
        "link" => vec![stage],
        _ => [stage.checked_sub(1), (stage + 1 < stages).then_some(stage)]
            .into_iter()
            .flatten()
            .collect(),
    };
    let sc = crate::sim::Scenario::new(
        stages,
        p.microbatches,
        &p.tf,
        &p.tb,
        &p.tw,
        0.0,
        &[],
        crate::sim::CommModel::Latency,
        0.0,
    )
    .map_err(|e| format!("the modelled pipeline: {e}"))?;
    let stalls: Vec<crate::bench::sim::tail::Stall> = links
        .iter()
        .map(|&link| crate::bench::sim::tail::Stall {
            link,
            prob: share.clamp(0.0, 1.0),
            ms,
        })
        .collect();
    let schedules: Vec<crate::sim::Schedule> = ["1f1b", "adaptive"]
        .iter()
        .map(|s| s.parse().expect("built-in schedules"))
        .collect();
    let mem = crate::sim::default_mem_limit(&sc);
    let rows = crate::bench::sim::tail::run(&sc, &schedules, mem, &stalls, LOSSY_ITERATIONS, 0)
        .map_err(|e| format!("the simulator: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| {
            (
                KeepCostParams {
                    rank,
                    host: host.to_string(),
                    kind: kind.to_string(),
                    stages,
                    stage,
                    schedule: r.schedule.clone(),
                },
                KeepCostFigures {
                    compute_slowdown: 1.0,
                    staging_slowdown: 1.0,
                    link_extra_ms: round(share * ms, 3),
                    healthy_ms: round(r.healthy_ms, 3),
                    kept_ms: round(r.mean_ms, 3),
                    throughput_pct: round(100.0 * (r.healthy_ms / r.mean_ms - 1.0), 1),
                    stall_share: Some(round(share, 5)),
                    stall_ms: Some(round(ms, 3)),
                },
            )
        })
        .collect())
}

/// "keeping node07: -38% throughput with 1f1b, -11% with adaptive".
pub fn line(cost: &KeepCost) -> String {
    let host = match cost.first() {
        Some((p, _)) if p.kind == "link" => format!("the link {}", p.host),
        Some((p, _)) => p.host.clone(),
        None => String::new(),
    };
    let parts: Vec<String> = cost
        .iter()
        .map(|(p, f)| format!("{:+.0}% throughput with {}", f.throughput_pct, p.schedule))
        .collect();
    let lossy = match cost.first() {
        Some((_, f)) => f.stall_share.zip(f.stall_ms),
        None => None,
    };
    match lossy {
        Some((share, ms)) => format!(
            "keeping {host}: {} (lossy: {:.2}% of its sends stall {ms:.0} ms, drawn per send over \
             {LOSSY_ITERATIONS} iterations, their mean; the simulator's 1f1b and adaptive, not \
             the runtime presets)",
            parts.join(", "),
            100.0 * share
        ),
        None => format!("keeping {host}: {}", parts.join(", ")),
    }
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
                verdict: FAIL,
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_lossy_node_is_priced_by_its_drawn_stalls_and_says_so() {
        let c = estimate_lossy((2, "n2", "node"), (0.02, 200.0), 4, None).unwrap();
        assert_eq!(c.len(), 2);
        for (p, f) in &c {
            assert_eq!((p.kind.as_str(), p.stage), ("node", 2));
            assert!(f.kept_ms > f.healthy_ms && f.throughput_pct < 0.0, "{f:?}");
            assert_eq!((f.stall_share, f.stall_ms), (Some(0.02), Some(200.0)));
        }
        assert!(
            line(&c).contains("lossy: 2.00% of its sends stall 200 ms"),
            "{}",
            line(&c)
        );
        // The same inputs, the same estimate (a fixed seed).
        assert_eq!(
            c,
            estimate_lossy((2, "n2", "node"), (0.02, 200.0), 4, None).unwrap()
        );
        // A link between two healthy nodes: its one middle link.
        let l = estimate_lossy((1, "n1-n2", "link"), (0.01, 100.0), 4, None).unwrap();
        assert!(l.iter().all(|(_, f)| f.throughput_pct <= 0.0));
    }

    #[test]
    fn a_slower_node_costs_more_and_a_silent_one_has_no_estimate() {
        let rows = vec![
            failed_row(1, "gemm", 50.0, 100.0),
            failed_row(2, "gemm", 80.0, 100.0),
            failed_row(3, "d2h", 1.0, 2.0),
        ];
        let failed: Vec<(u32, String)> = (1..=4).map(|r| (r, format!("n{r}"))).collect();
        let (costs, unmade) = estimate(&rows, &failed, 4, None);
        // Rank 4 failed without a figure (it did not answer): nothing to estimate.
        assert_eq!((costs.len(), unmade.len()), (3, 0));
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
        // Keeping a failed node never reads as a gain, under either runtime.
        for c in [half, slight, copy] {
            assert!(c.iter().all(|(_, f)| f.throughput_pct <= 0.0), "{c:?}");
        }
        assert!(line(half).starts_with("keeping n1: -"), "{}", line(half));
        assert!(line(half).contains("throughput with adaptive"));
    }

    #[test]
    fn a_slow_link_costs_1f1b_more_than_adaptive_and_more_when_slower() {
        let (costs, _) = estimate_links(
            &[(0, "a-b".into(), 20_000.0), (2, "c-d".into(), 2_000.0)],
            4,
            None,
        );
        assert_eq!(costs.len(), 2);
        let pct = |c: &KeepCost, s: &str| {
            c.iter()
                .find(|(p, _)| p.schedule == s)
                .map(|(_, f)| f.throughput_pct)
                .unwrap()
        };
        let (bad, mild) = (&costs[0], &costs[1]);
        assert_eq!(bad[0].0.kind, "link");
        assert_eq!(bad[0].1.link_extra_ms, 20.0);
        assert!(pct(bad, "1f1b") < pct(mild, "1f1b"), "{bad:?} {mild:?}");
        assert!(pct(bad, "1f1b") < -10.0, "{bad:?}");
        // PipeMorph's point: the adaptive schedule absorbs part of a slow link.
        assert!(pct(bad, "adaptive") > pct(bad, "1f1b"), "{bad:?}");
    }

    #[test]
    fn a_node_the_links_blame_pays_for_its_sends() {
        // 12.5 MB/s against the fleet's 1 GB/s: a 1 MiB send is about 83 ms late.
        let rows = vec![failed_row(5, "links", 0.0125, 1.0)];
        let (costs, _) = estimate(&rows, &[(5, "n5".into())], 4, None);
        assert_eq!(costs.len(), 1);
        let (p, f) = &costs[0][0];
        assert_eq!(p.kind, "node");
        assert!((82.0..84.0).contains(&f.link_extra_ms), "{f:?}");
        assert!(f.throughput_pct < -10.0, "{f:?}");
    }

    #[test]
    fn a_profile_sets_the_modelled_pipeline() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/pipemorph-7b-single.csv");
        let profile = Profile::load(&path).unwrap();
        assert_eq!((profile.stages, profile.microbatches), (4, 12));
        let rows = vec![failed_row(1, "gemm", 50.0, 100.0)];
        let failed = [(1, "n1".to_string())];
        let (with, _) = estimate(&rows, &failed, 16, Some(&profile));
        let (without, _) = estimate(&rows, &failed, 16, None);
        assert_eq!(with[0][0].0.stages, 4);
        assert_eq!(without[0][0].0.stages, MAX_STAGES);
        // The profile's 8-10 ms forwards, 12 microbatches: a healthy 1F1B iteration of about
        // (12 + 3) x 25 ms, not the default's 8 stages of 30 ms.
        let h = with[0][0].1.healthy_ms;
        assert!((300.0..450.0).contains(&h), "{h}");
    }
}
