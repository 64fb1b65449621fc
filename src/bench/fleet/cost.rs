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
    /// The modelled iteration, healthy and kept; empty when the model failed (`error`).
    pub healthy_ms: Option<f64>,
    pub kept_ms: Option<f64>,
    /// The throughput change from keeping it, in percent (negative: slower).
    pub throughput_pct: Option<f64>,
    /// A lossy node's or link's sends: the share that stall and each stall's ms, drawn per
    /// send over [`LOSSY_ITERATIONS`] iterations (`kept_ms` their mean); empty otherwise.
    pub stall_share: Option<f64>,
    pub stall_ms: Option<f64>,
    /// Why the model gave no estimate for this schedule (a deadlock, a schedule that cannot
    /// place, a pipeline it refuses); empty when it gave one.
    pub error: Option<String>,
}

impl KeepCostFigures {
    /// A row whose estimate the model could not make, with its cause.
    fn failed(known: KeepCostFigures, error: String) -> KeepCostFigures {
        KeepCostFigures {
            healthy_ms: None,
            kept_ms: None,
            throughput_pct: None,
            error: Some(error),
            ..known
        }
    }

    /// The healthy and kept iterations, and the throughput change between them.
    fn modelled(known: KeepCostFigures, healthy_ms: f64, kept_ms: f64) -> KeepCostFigures {
        KeepCostFigures {
            healthy_ms: Some(round(healthy_ms, 3)),
            kept_ms: Some(round(kept_ms, 3)),
            throughput_pct: Some(round(100.0 * (healthy_ms / kept_ms - 1.0), 1)),
            error: None,
            ..known
        }
    }
}

impl CsvTable for KeepCostTable {
    const NAME: &'static str = "keep_cost";
    const WITH_STATS: bool = false;
    type Params = KeepCostParams;
    type Figures = KeepCostFigures;
    const SIGNED: &'static [&'static str] = &["throughput_pct"];
    const ADDED: &'static [&'static str] = &["stall_share", "stall_ms", "error"];
}

/// One failed node's estimate, a row per schedule (a schedule the model could not estimate is
/// a row with its `error`, never dropped).
pub type KeepCost = Vec<(KeepCostParams, KeepCostFigures)>;

/// Each schedule of `cost` the model could not estimate, with why.
pub fn failures(cost: &KeepCost) -> impl Iterator<Item = (&str, &str)> {
    cost.iter()
        .filter_map(|(p, f)| Some((p.schedule.as_str(), f.error.as_deref()?)))
}

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
    /// The user's profile, else [`Profile::default_for`] the world.
    fn given_or_default(profile: Option<&Profile>, world: usize) -> Profile {
        profile
            .cloned()
            .unwrap_or_else(|| Profile::default_for(world))
    }

    /// Where a kept `kind` sits: a node in the middle stage; a link between the two middle
    /// stages (its lower one).
    fn kept_stage(&self, kind: &str) -> usize {
        match kind {
            "link" => (self.stages - 1) / 2,
            _ => self.stages / 2,
        }
    }

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
fn iteration_ms(system: System, p: &Profile, delay: &[f64]) -> anyhow::Result<f64> {
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
    let pred = predict(system, &job, &Machine::ARTIFACT, &Mechanisms::ALL)?;
    finite(if delay.iter().any(|&d| d > 0.0) {
        pred.slow_ms
    } else {
        pred.healthy_ms.min(pred.slow_ms)
    })
}

/// The estimate for every failed node with a measured slowdown, in rank order (a node with
/// none, one that did not answer, has nothing to estimate).
pub fn estimate(
    rows: &[Row],
    failed: &[(u32, String)],
    world: usize,
    profile: Option<&Profile>,
) -> Vec<KeepCost> {
    let profile = Profile::given_or_default(profile, world);
    failed
        .iter()
        .filter_map(|(rank, host)| {
            let kept = slowdowns(rows, *rank)?;
            Some(cost_of((*rank, host, "node"), kept, &profile))
        })
        .collect()
}

/// The estimate for each confirmed slow link no node explains (`links`: lower rank, both
/// hosts, extra µs a send).
pub fn estimate_links(
    links: &[(u32, String, f64)],
    world: usize,
    profile: Option<&Profile>,
) -> Vec<KeepCost> {
    let profile = Profile::given_or_default(profile, world);
    links
        .iter()
        .map(|(rank, hosts, extra_us)| {
            let kept = Kept {
                link_extra_ms: extra_us / 1e3,
                ..HEALTHY
            };
            cost_of((*rank, hosts, "link"), kept, &profile)
        })
        .collect()
}

/// One kept node's or link's rows: 1F1B (Megatron's runtime) and adaptive (PipeMorph's),
/// kept against healthy; a runtime the model cannot predict is a row with its error.
fn cost_of((rank, host, kind): (u32, &str, &str), kept: Kept, profile: &Profile) -> KeepCost {
    let stage = profile.kept_stage(kind);
    let (healthy, calm) = slowed(profile, stage, HEALTHY);
    let (kept_profile, delay) = slowed(profile, stage, kept);
    let known = KeepCostFigures {
        compute_slowdown: round(kept.compute, 3),
        staging_slowdown: round(kept.staging, 3),
        link_extra_ms: round(kept.link_extra_ms + kept.sends_extra_ms, 3),
        ..Default::default()
    };
    [("1f1b", System::OneFOneB), ("adaptive", System::Pipemorph)]
        .into_iter()
        .map(|(schedule, system)| {
            let params = KeepCostParams {
                rank,
                host: host.to_string(),
                kind: kind.to_string(),
                stages: profile.stages,
                stage,
                schedule: schedule.to_string(),
            };
            let h = iteration_ms(system, &healthy, &calm);
            let figures =
                match h.and_then(|h| Ok((h, iteration_ms(system, &kept_profile, &delay)?))) {
                    Ok((h, k)) => KeepCostFigures::modelled(known.clone(), h, k),
                    Err(e) => KeepCostFigures::failed(known.clone(), format!("{e:#}")),
                };
            (params, figures)
        })
        .collect()
}

/// Iterations a lossy node's or link's keep cost draws (a fixed seed: the same run, the same
/// estimate).
pub const LOSSY_ITERATIONS: u32 = 1000;

/// The schedules a keep cost models: Megatron's 1F1B and PipeMorph's adaptive.
const SCHEDULES: [&str; 2] = ["1f1b", "adaptive"];

/// What keeping a lossy node (`kind` "node": its sends to either neighbour stall) or a lossy
/// link ("link": the middle link's) would cost: each send stalls with the measured share by
/// the measured length, drawn per send (`sim --stall`'s model) over [`LOSSY_ITERATIONS`]
/// iterations of the profile's pipeline under 1F1B and adaptive, each planned without the
/// stalls; the throughput change is the healthy iteration's over the stalled iterations' mean.
/// A model failure is said, never dropped (each schedule's row carries its cause).
pub fn estimate_lossy(
    (rank, host, kind): (u32, &str, &str),
    (share, ms): (f64, f64),
    world: usize,
    profile: Option<&Profile>,
) -> KeepCost {
    let p = Profile::given_or_default(profile, world);
    let stages = p.stages;
    let stage = p.kept_stage(kind);
    let links: Vec<usize> = match kind {
        "link" => vec![stage],
        _ => [stage.checked_sub(1), (stage + 1 < stages).then_some(stage)]
            .into_iter()
            .flatten()
            .collect(),
    };
    let known = KeepCostFigures {
        compute_slowdown: 1.0,
        staging_slowdown: 1.0,
        link_extra_ms: round(share * ms, 3),
        stall_share: Some(round(share, 5)),
        stall_ms: Some(round(ms, 3)),
        ..Default::default()
    };
    let params = |schedule: &str| KeepCostParams {
        rank,
        host: host.to_string(),
        kind: kind.to_string(),
        stages,
        stage,
        schedule: schedule.to_string(),
    };
    match stalled_iterations(&p, &links, (share, ms)) {
        Ok(rows) => rows
            .into_iter()
            .map(|(schedule, h, mean)| {
                let f = KeepCostFigures::modelled(known.clone(), h, mean);
                (params(&schedule), f)
            })
            .collect(),
        Err(e) => SCHEDULES
            .iter()
            .map(|s| {
                (
                    params(s),
                    KeepCostFigures::failed(known.clone(), format!("{e:#}")),
                )
            })
            .collect(),
    }
}

/// Each schedule's healthy iteration and its mean over [`LOSSY_ITERATIONS`] iterations with
/// the sends over `links` stalling.
fn stalled_iterations(
    p: &Profile,
    links: &[usize],
    (share, ms): (f64, f64),
) -> anyhow::Result<Vec<(String, f64, f64)>> {
    use crate::bench::sim::tail;
    let sc = crate::sim::Scenario::builder(p.stages, p.microbatches)
        .times(&p.tf, &p.tb, &p.tw)
        .build()
        .map_err(|e| anyhow::anyhow!("the modelled pipeline: {e}"))?;
    let stalls: Vec<tail::Stall> = links
        .iter()
        .map(|&link| tail::Stall {
            link,
            prob: share.clamp(0.0, 1.0),
            ms,
        })
        .collect();
    let schedules: Vec<crate::sim::Schedule> = SCHEDULES
        .iter()
        .map(|s| s.parse().expect("built-in schedules"))
        .collect();
    let mem = crate::sim::default_mem_limit(&sc);
    let rows = tail::run(&sc, &schedules, mem, (&stalls, &[]), LOSSY_ITERATIONS, 0)
        .map_err(|e| anyhow::anyhow!("the simulator: {e}"))?;
    rows.into_iter()
        .map(|r| finite(r.healthy_ms.min(r.mean_ms)).map(|_| (r.schedule, r.healthy_ms, r.mean_ms)))
        .collect()
}

/// A modelled time that is a number (the model gave NaN or infinity: an error, never a row).
fn finite(ms: f64) -> anyhow::Result<f64> {
    if ms.is_finite() && ms > 0.0 {
        Ok(ms)
    } else {
        Err(anyhow::anyhow!("the model gave an iteration of {ms} ms"))
    }
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
        .map(|(p, f)| match (f.throughput_pct, &f.error) {
            (Some(pct), _) => format!("{pct:+.0}% throughput with {}", p.schedule),
            (None, e) => format!(
                "no estimate with {} (the model failed: {})",
                p.schedule,
                e.as_deref().unwrap_or("no figure")
            ),
        })
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
#[path = "cost_tests.rs"]
mod tests;
