//! The schedules: GPipe, 1F1B, ZB-fill and greedy as policies, the authors' hand schedules
//! (ZB-H1, ZB-H2, interleaved 1F1B) as fixed orders, `static:` replays of the policies'
//! delay-free orders, and the PipeMorph-style adaptive planner.

use std::fmt;
use std::str::FromStr;

use super::engine::{simulate, simulate_with, Policy, PriorityPolicy, Run, SimError};
use super::hand;
use super::model::{Layout, OpKind, Scenario};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    Gpipe,
    OneFOneB,
    /// Zero Bubble's ZB-H1 hand schedule (1F1B's memory).
    ZbH1,
    /// Zero Bubble's ZB-H2 hand schedule (twice the warm-up, about twice the memory).
    ZbH2,
    /// Zero Bubble's ZB-V: two chunks per rank in a V, planned by the authors' greedy search.
    ZbV,
    /// DeepSeek's DualPipeV: the V with overlapped forward-and-backward ops.
    DualPipeV,
    /// 1F1B's warm-up and cap with backward split and W filling idle time: a ZB-H1-like policy
    /// of our own (what `zb-h1` named before the authors' schedule).
    ZbFill,
    /// Megatron's interleaved 1F1B: model chunks per rank, and microbatches per group
    /// (`microbatch_group_size_per_vp_stage`; None for Megatron's default, the ranks).
    Interleaved {
        chunks: usize,
        group: Option<usize>,
    },
    /// The same order as Zero Bubble's bubble-rate script accounts it (see
    /// [`Layout::InterleavedAsPublished`]): for checking their published column, not for
    /// predicting a run.
    InterleavedAsPublished(usize),
    Greedy,
    Adaptive,
    /// A fixed order read from a file (`sim --schedule-file`, PyTorch's CSV), named by it.
    File {
        name: String,
        schedule: Box<super::torch_csv::TorchSchedule>,
    },
    /// The delay-free op order of the inner schedule, replayed under the real delays.
    Static(Box<Schedule>),
}

pub const DEFAULT_SCHEDULES: &str = "1f1b,static:1f1b,zb-h1,static:zb-fill,greedy,adaptive";

/// Every schedule name `--schedule` takes, for error messages.
const NAMES: &str =
    "gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipev, zb-fill, interleaved:V, greedy, adaptive or static:<one of these>";

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Schedule::Gpipe => f.write_str("gpipe"),
            Schedule::OneFOneB => f.write_str("1f1b"),
            Schedule::ZbH1 => f.write_str("zb-h1"),
            Schedule::ZbH2 => f.write_str("zb-h2"),
            Schedule::ZbV => f.write_str("zb-v"),
            Schedule::DualPipeV => f.write_str("dualpipev"),
            Schedule::ZbFill => f.write_str("zb-fill"),
            Schedule::Interleaved { chunks, group } => match group {
                None => write!(f, "interleaved:{chunks}"),
                Some(g) => write!(f, "interleaved:{chunks}:{g}"),
            },
            Schedule::InterleavedAsPublished(v) => write!(f, "interleaved-zb-paper:{v}"),
            Schedule::Greedy => f.write_str("greedy"),
            Schedule::Adaptive => f.write_str("adaptive"),
            Schedule::File { name, .. } => write!(f, "file:{name}"),
            Schedule::Static(inner) => write!(f, "static:{inner}"),
        }
    }
}

impl FromStr for Schedule {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Schedule> {
        let s = s.trim();
        if let Some(inner) = s.strip_prefix("static:") {
            let inner: Schedule = inner.parse()?;
            return match inner {
                Schedule::Adaptive | Schedule::Static(_) => Err(anyhow::anyhow!(
                    "'{s}': static: takes any schedule but adaptive (a plan per scenario) or \
                     another static:"
                )),
                other => Ok(Schedule::Static(Box::new(other))),
            };
        }
        if let Some(v) = s.strip_prefix("interleaved-zb-paper:") {
            return match v.parse::<usize>() {
                Ok(v) if (2..=64).contains(&v) => Ok(Schedule::InterleavedAsPublished(v)),
                _ => Err(anyhow::anyhow!(
                    "'{s}': interleaved-zb-paper:V takes 2 to 64 chunks per rank"
                )),
            };
        }
        if let Some(spec) = s.strip_prefix("interleaved:") {
            let bad = || {
                anyhow::anyhow!(
                    "'{s}': write interleaved:V (2 to 64 model chunks per rank) or \
                     interleaved:V:G (G microbatches per group, at least the ranks)"
                )
            };
            let (v, g) = match spec.split_once(':') {
                Some((v, g)) => (v, Some(g.parse::<usize>().map_err(|_| bad())?)),
                None => (spec, None),
            };
            return match v.parse::<usize>() {
                Ok(chunks) if (2..=64).contains(&chunks) => {
                    Ok(Schedule::Interleaved { chunks, group: g })
                }
                _ => Err(bad()),
            };
        }
        match s {
            "gpipe" => Ok(Schedule::Gpipe),
            "1f1b" => Ok(Schedule::OneFOneB),
            "zb-h1" | "zbh1" => Ok(Schedule::ZbH1),
            "zb-h2" | "zbh2" => Ok(Schedule::ZbH2),
            "zb-v" | "zbv" => Ok(Schedule::ZbV),
            "dualpipev" | "dualpipe-v" => Ok(Schedule::DualPipeV),
            "zb-fill" => Ok(Schedule::ZbFill),
            "interleaved" => Ok(Schedule::Interleaved {
                chunks: 2,
                group: None,
            }),
            "greedy" => Ok(Schedule::Greedy),
            "adaptive" => Ok(Schedule::Adaptive),
            _ => Err(anyhow::anyhow!("unknown schedule '{s}': choose {NAMES}")),
        }
    }
}

/// A schedule travels (a pipeline's plan to its ranks) and is stored as its name.
impl serde::Serialize for Schedule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Schedule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Schedule, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

impl Schedule {
    /// The model chunks each of `stages` ranks holds under this schedule.
    pub fn layout(&self, stages: usize) -> Layout {
        match self {
            Schedule::Interleaved { chunks, .. } => Layout::Interleaved(*chunks),
            // The script's groups are Megatron's default: the ranks.
            Schedule::InterleavedAsPublished(v) => Layout::InterleavedAsPublished(*v, stages),
            Schedule::ZbV | Schedule::DualPipeV => Layout::Vee,
            Schedule::File { schedule, .. } => schedule.layout,
            _ => Layout::Linear,
        }
    }

    /// Whether this is a fixed order its authors wrote (rather than rules or a plan).
    pub fn is_hand(&self) -> bool {
        matches!(
            self,
            Schedule::ZbH1
                | Schedule::ZbH2
                | Schedule::ZbV
                | Schedule::DualPipeV
                | Schedule::File { .. }
                | Schedule::Interleaved { .. }
                | Schedule::InterleavedAsPublished(_)
        )
    }

    /// Whether the iteration is measured as Zero Bubble's authors measure this schedule: from
    /// each rank's first forward (ZB-H2 and ZB-V, whose warm-ups overlap the previous
    /// iteration's tail) rather than from time 0.
    pub fn measured_from_first_forward(&self) -> bool {
        matches!(self, Schedule::ZbH2 | Schedule::ZbV)
    }
}

/// The fixed order of a hand schedule on `sc`, or why it cannot run there.
fn hand_policy(schedule: &Schedule, sc: &Scenario) -> Result<Policy, SimError> {
    let (p, n) = (sc.stages, sc.microbatches);
    let refused = |detail: String| SimError::Refused {
        schedule: schedule.to_string(),
        detail,
    };
    let (mut together, mut comms) = (Vec::new(), None);
    let (orders, split) = match schedule {
        Schedule::DualPipeV => {
            if let Some(why) = hand::dualpipe_v_refusal(p, n) {
                return Err(refused(why));
            }
            let orders;
            (orders, together) = hand::dualpipe_v(p, n);
            (orders, true)
        }
        Schedule::ZbH1 => (hand::zero_bubble(p, n, 1), true),
        Schedule::ZbH2 => (hand::zero_bubble(p, n, 2), true),
        Schedule::File { schedule: f, .. } => {
            if (f.ranks, f.microbatches) != (p, n) {
                return Err(refused(format!(
                    "the file schedules {} ranks and {} microbatches, the scenario {p} and {n}: \
                     give --stages {} --microbatches {}",
                    f.ranks, f.microbatches, f.ranks, f.microbatches
                )));
            }
            together = f.together.clone();
            comms = f.comms.clone();
            (f.orders.clone(), f.split)
        }
        Schedule::ZbV => {
            // Planned on the slowest stage's times, halved per chunk; memory as the authors'
            // default, 2p chunk-activations, with the W share of the model's shape if given.
            let most = |v: &[f64]| v.iter().copied().fold(0.0, f64::max) / 2.0;
            let costs = super::zbv::VCosts {
                f: most(&sc.tf),
                b: most(&sc.tb),
                w: most(&sc.tw),
                c: sc.link_ms,
                w_share: sc.activation.map_or(0.0, |a| a.weight_part / a.held),
                max_mem: 2.0 * p as f64,
            };
            let orders = super::zbv::zb_v(p, n, costs).map_err(|e| {
                refused(if n < p {
                    format!(
                        "Zero Bubble's V planner needs at least as many microbatches as ranks \
                     ({n} < {p}): give --microbatches {p} or more, or simulate PyTorch's \
                     ScheduleZBVZeroBubble order from its CSV with --schedule-file"
                    )
                } else {
                    format!("the V planner stopped: {e}")
                })
            })?;
            (orders, true)
        }
        Schedule::Interleaved { chunks, group } => {
            let g = group.unwrap_or(p);
            if let Some(why) = hand::interleaved_refusal(p, n, *chunks, g) {
                return Err(refused(why));
            }
            (hand::interleaved(p, n, *chunks, g), false)
        }
        Schedule::InterleavedAsPublished(v) => {
            if let Some(why) = hand::interleaved_refusal(p, n, *v, p) {
                return Err(refused(why));
            }
            (hand::interleaved(p, n, *v, p), false)
        }
        other => unreachable!("{other} is not a hand schedule"),
    };
    Ok(Policy::Fixed {
        orders,
        split,
        layout: schedule.layout(p),
        together,
        comms,
    })
}

fn one_f_one_b_warmup(sc: &Scenario) -> Vec<usize> {
    (0..sc.stages)
        .map(|i| (sc.stages - i - 1).min(sc.microbatches))
        .collect()
}

/// Forwards first, then backwards, then weight gradients.
const F_FIRST: [OpKind; 3] = [OpKind::F, OpKind::B, OpKind::W];
/// Backwards first, then forwards, then weight gradients.
const B_FIRST: [OpKind; 3] = [OpKind::B, OpKind::F, OpKind::W];

/// A priority policy that does not hold forwards after its warm-up.
fn rules(split: bool, warmup: Vec<usize>, cap: Vec<usize>, priority: [OpKind; 3]) -> Policy {
    Policy::Priority(PriorityPolicy {
        split,
        warmup,
        cap,
        priority,
        hold_after_warmup: false,
    })
}

/// The rule-based policy of a policy schedule (gpipe, 1f1b, zb-fill, greedy).
pub fn base_policy(schedule: &Schedule, sc: &Scenario) -> Policy {
    let s = sc.stages;
    let n = sc.microbatches;
    let w = one_f_one_b_warmup(sc);
    let w_cap: Vec<usize> = w.iter().map(|x| x + 1).collect();
    match schedule {
        // All forwards, then all backwards.
        Schedule::Gpipe => rules(false, vec![n; s], vec![usize::MAX; s], F_FIRST),
        // Megatron 1F1B: min(S-i-1, N) warm-up forwards, then one forward and one backward in
        // turn (at most warm-up + 1 in flight), then the cool-down backwards.
        Schedule::OneFOneB => rules(false, w, w_cap, F_FIRST),
        // 1F1B's warm-up and memory, backward split, W deferred to fill idle time.
        Schedule::ZbFill => rules(true, w, w_cap, F_FIRST),
        // Whatever is ready: B before F before W, lowest microbatch first, no memory cap.
        Schedule::Greedy => rules(true, vec![0; s], vec![usize::MAX; s], B_FIRST),
        _ => unreachable!("{schedule} has no rule-based policy"),
    }
}

/// The per-stage order `schedule` produces without straggler delay, as a fixed policy (a hand
/// schedule's order is that already).
pub fn static_policy(inner: &Schedule, sc: &Scenario) -> Result<Policy, SimError> {
    if inner.is_hand() {
        return hand_policy(inner, sc);
    }
    let calm = sc.with_delays(vec![0.0; sc.delay_ms.len()]);
    let policy = base_policy(inner, &calm);
    let run = simulate(&calm, &policy)?;
    Ok(Policy::Fixed {
        orders: run.orders(sc.stages),
        split: policy.split(),
        layout: Layout::Linear,
        together: Vec::new(),
        comms: None,
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
            let policy = rules(true, x.clone(), cap, B_FIRST);
            candidates.push((format!("pipemorph(k={k}{tag})"), policy));
        }
    }
    let capped = rules(true, vec![0; s], vec![mem_limit.max(1); s], B_FIRST);
    candidates.push(("greedy(capped)".into(), capped));
    candidates.push(("greedy".into(), base_policy(&Schedule::Greedy, sc)));
    for inner in [Schedule::ZbFill, Schedule::OneFOneB] {
        candidates.push((format!("static:{inner}"), static_policy(&inner, sc)?));
    }
    let mut best: Option<Plan> = None;
    let mut last_err = None;
    for (name, policy) in candidates {
        match simulate_with(sc, &policy, false) {
            Ok(run) => {
                let fits = run.peak_in_flight.iter().all(|&p| p <= mem_limit)
                    && sc
                        .activation_limit
                        .is_none_or(|limit| run.peak_activation_bytes.iter().all(|&b| b <= limit));
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
            detail: match sc.activation_limit {
                Some(bytes) => format!(
                    "no plan keeps its activations within {:.3} GiB a stage (--mem-limit less \
                     the parameters)",
                    bytes / (1u64 << 30) as f64
                ),
                None => format!("no plan fits --mem-limit {mem_limit}"),
            },
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
        other => Ok((other.to_string(), simulate(sc, &policy_of(other, sc)?)?)),
    }
}

/// The policy a non-adaptive, non-static schedule runs: its rules or its hand order.
pub fn policy_of(schedule: &Schedule, sc: &Scenario) -> Result<Policy, SimError> {
    match schedule {
        hand if hand.is_hand() => hand_policy(hand, sc),
        Schedule::Static(inner) => static_policy(inner, sc),
        Schedule::Adaptive => unreachable!("adaptive plans per scenario: use `adaptive`"),
        other => Ok(base_policy(other, sc)),
    }
}

/// Zero Bubble's bubble rate, (T - m(F + B + W)) / T, with m(F + B + W) the busiest rank's
/// compute and T the iteration: the makespan, or for a schedule measured from each rank's
/// first forward (ZB-H2, ZB-V), the longest such span. `run` must have recorded its ops.
pub fn bubble_rate(schedule: &Schedule, sc: &Scenario, run: &Run) -> f64 {
    let work = (0..sc.stages)
        .map(|r| sc.microbatches as f64 * (sc.tf[r] + sc.tb[r] + sc.tw[r]))
        .fold(0.0, f64::max);
    let t = if schedule.measured_from_first_forward() {
        let mut first = vec![f64::INFINITY; sc.stages];
        let mut last = vec![0.0f64; sc.stages];
        for e in &run.ops {
            let r = e.op.stage;
            if e.op.kind == OpKind::F {
                first[r] = first[r].min(e.start);
            }
            last[r] = last[r].max(e.end);
        }
        (0..sc.stages)
            .map(|r| last[r] - first[r])
            .fold(0.0, f64::max)
    } else {
        run.iteration_ms
    };
    if t > 0.0 {
        (t - work) / t
    } else {
        0.0
    }
}
