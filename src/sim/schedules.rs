//! The schedules: GPipe, 1F1B, ZB-H1 and greedy as policies, `static:` replays of their
//! delay-free orders, and the PipeMorph-style adaptive planner.

use std::fmt;
use std::str::FromStr;

use super::engine::{simulate, simulate_with, Policy, PriorityPolicy, Run, SimError};
use super::model::{OpKind, Scenario};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Gpipe,
    OneFOneB,
    ZbH1,
    Greedy,
    Adaptive,
    /// The delay-free op order of the inner schedule, replayed under the real delays.
    Static(Box<Schedule>),
}

pub const DEFAULT_SCHEDULES: &str = "1f1b,static:1f1b,zb-h1,static:zb-h1,greedy,adaptive";

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Gpipe => f.write_str("gpipe"),
            Schedule::OneFOneB => f.write_str("1f1b"),
            Schedule::ZbH1 => f.write_str("zb-h1"),
            Schedule::Greedy => f.write_str("greedy"),
            Schedule::Adaptive => f.write_str("adaptive"),
            Schedule::Static(inner) => write!(f, "static:{inner}"),
        }
    }
}

impl FromStr for Schedule {
    type Err = String;
    fn from_str(s: &str) -> Result<Schedule, String> {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix("static:") {
            let inner: Schedule = inner.parse()?;
            return match inner {
                Schedule::Adaptive | Schedule::Static(_) => {
                    Err(format!("'{s}': static: takes gpipe, 1f1b, zb-h1 or greedy"))
                }
                other => Ok(Schedule::Static(Box::new(other))),
            };
        }
        match s {
            "gpipe" => Ok(Schedule::Gpipe),
            "1f1b" => Ok(Schedule::OneFOneB),
            "zb-h1" | "zbh1" => Ok(Schedule::ZbH1),
            "greedy" => Ok(Schedule::Greedy),
            "adaptive" => Ok(Schedule::Adaptive),
            _ => Err(format!(
                "unknown schedule '{s}': choose gpipe, 1f1b, zb-h1, greedy, adaptive or static:<one of the first four>"
            )),
        }
    }
}

fn one_f_one_b_warmup(sc: &Scenario) -> Vec<usize> {
    (0..sc.stages)
        .map(|i| (sc.stages - i - 1).min(sc.microbatches))
        .collect()
}

/// The rule-based policy of a named schedule (not `Adaptive` or `Static`).
pub fn base_policy(schedule: &Schedule, sc: &Scenario) -> Policy {
    let s = sc.stages;
    let n = sc.microbatches;
    let w = one_f_one_b_warmup(sc);
    let policy = match schedule {
        // All forwards, then all backwards.
        Schedule::Gpipe => PriorityPolicy {
            split: false,
            warmup: vec![n; s],
            cap: vec![usize::MAX; s],
            priority: [OpKind::F, OpKind::B, OpKind::W],
            hold_after_warmup: false,
        },
        // Megatron 1F1B: min(S-i-1, N) warm-up forwards, then one forward and one backward in
        // turn (at most warm-up + 1 in flight), then the cool-down backwards.
        Schedule::OneFOneB => PriorityPolicy {
            split: false,
            cap: w.iter().map(|x| x + 1).collect(),
            warmup: w,
            priority: [OpKind::F, OpKind::B, OpKind::W],
            hold_after_warmup: false,
        },
        // ZB-H1: 1F1B's warm-up and memory, backward split, W deferred to fill idle time.
        Schedule::ZbH1 => PriorityPolicy {
            split: true,
            cap: w.iter().map(|x| x + 1).collect(),
            warmup: w,
            priority: [OpKind::F, OpKind::B, OpKind::W],
            hold_after_warmup: false,
        },
        // Whatever is ready: B before F before W, lowest microbatch first, no memory cap.
        Schedule::Greedy => PriorityPolicy {
            split: true,
            warmup: vec![0; s],
            cap: vec![usize::MAX; s],
            priority: [OpKind::B, OpKind::F, OpKind::W],
            hold_after_warmup: false,
        },
        Schedule::Adaptive | Schedule::Static(_) => {
            unreachable!("{schedule} has no rule-based policy")
        }
    };
    Policy::Priority(policy)
}

/// The per-stage order `schedule` produces without straggler delay, as a fixed policy.
pub fn static_policy(inner: &Schedule, sc: &Scenario) -> Result<Policy, SimError> {
    let calm = sc.with_delays(vec![0.0; sc.delay_ms.len()]);
    let policy = base_policy(inner, &calm);
    let run = simulate(&calm, &policy)?;
    Ok(Policy::Fixed {
        orders: run.orders(sc.stages),
        split: policy.split(),
    })
}

/// PipeMorph's warm-up forwards: x(S-1) = 1, x(i) = min(N, x(i+1) + ceil(c(i) / tF(i)) + k),
/// also capped by the memory limit.
pub fn pipemorph_warmup(sc: &Scenario, k: usize, mem_limit: usize) -> Vec<usize> {
    let cap = sc.microbatches.min(mem_limit.max(1));
    let mut x = vec![1usize.min(cap); sc.stages];
    for i in (0..sc.stages.saturating_sub(1)).rev() {
        let hops = (sc.link(i) / sc.tf[i]).ceil() as usize;
        x[i] = (x[i + 1] + hops + k).min(cap);
    }
    x
}

/// Default activation memory limit: twice what 1F1B's first stage holds.
pub fn default_mem_limit(sc: &Scenario) -> usize {
    2 * sc.stages.min(sc.microbatches)
}

/// The plan `adaptive` chose and how it ran.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub policy: Policy,
    pub run: Run,
}

/// PipeMorph's plan (k = 2), then nearby plans (other k, a tighter cap, greedy, the static
/// replays of 1F1B and ZB-H1), each simulated under the known delays; the fastest whose peak
/// in-flight activations stay within `mem_limit` wins (ties go to the earlier candidate).
pub fn adaptive(sc: &Scenario, mem_limit: usize) -> Result<Plan, SimError> {
    let s = sc.stages;
    let mut candidates: Vec<(String, Policy)> = Vec::new();
    for k in [2usize, 0, 1, 3, 4, 6, 8] {
        let x = pipemorph_warmup(sc, k, mem_limit);
        for (tag, cap) in [
            ("", vec![mem_limit.max(1); s]),
            (",cap=x+1", x.iter().map(|v| v + 1).collect()),
        ] {
            candidates.push((
                format!("pipemorph(k={k}{tag})"),
                Policy::Priority(PriorityPolicy {
                    split: true,
                    warmup: x.clone(),
                    cap,
                    priority: [OpKind::B, OpKind::F, OpKind::W],
                    hold_after_warmup: false,
                }),
            ));
        }
    }
    candidates.push((
        "greedy(capped)".into(),
        Policy::Priority(PriorityPolicy {
            split: true,
            warmup: vec![0; s],
            cap: vec![mem_limit.max(1); s],
            priority: [OpKind::B, OpKind::F, OpKind::W],
            hold_after_warmup: false,
        }),
    ));
    candidates.push(("greedy".into(), base_policy(&Schedule::Greedy, sc)));
    for inner in [Schedule::ZbH1, Schedule::OneFOneB] {
        candidates.push((format!("static:{inner}"), static_policy(&inner, sc)?));
    }
    let mut best: Option<Plan> = None;
    let mut last_err = None;
    for (name, policy) in candidates {
        match simulate_with(sc, &policy, false) {
            Ok(run) => {
                let fits = run.peak_in_flight.iter().all(|&p| p <= mem_limit);
                let better = best
                    .as_ref()
                    .is_none_or(|b| run.iteration_ms < b.run.iteration_ms - 1e-9);
                if fits && better {
                    best = Some(Plan { name, policy, run });
                }
            }
            Err(e) => last_err = Some(e),
        }
    }
    match (best, last_err) {
        // Run the winner once more, recording its ops for timelines and traces.
        (Some(plan), _) => Ok(Plan {
            run: simulate(sc, &plan.policy)?,
            ..plan
        }),
        (None, Some(e)) => Err(e),
        (None, None) => Err(SimError::Deadlock {
            done: 0,
            total: 0,
            detail: format!("no plan fits --mem-limit {mem_limit}"),
        }),
    }
}

/// Runs one schedule; returns the plan name (for adaptive) and the run.
pub fn evaluate(
    schedule: &Schedule,
    sc: &Scenario,
    mem_limit: usize,
) -> Result<(String, Run), SimError> {
    match schedule {
        Schedule::Adaptive => {
            let plan = adaptive(sc, mem_limit)?;
            Ok((plan.name, plan.run))
        }
        Schedule::Static(inner) => {
            let policy = static_policy(inner, sc)?;
            Ok((schedule.to_string(), simulate(sc, &policy)?))
        }
        other => Ok((other.to_string(), simulate(sc, &base_policy(other, sc))?)),
    }
}
