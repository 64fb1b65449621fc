//! The what-ifs: the step replayed as recorded, without launch delays, and with every op at
//! its type's typical time ("no stragglers"); the slowdown split by op type, DP rank, stage and
//! worker, each by giving one group back its recorded times; M_S and M_W (how much of the
//! slowdown the last stage, or the top 3% of workers, explain). Definitions follow the OSDI '25
//! paper and its artifact; `docs/whatif.md` states each.

use anyhow::Result;
use serde::Serialize;

use super::job::Job;
use super::trace::OpType;
use crate::sim::replay::{Costs, Timeline};

/// Per step: recorded, replayed without launch delays, replayed without stragglers.
#[derive(Debug, Clone, Serialize)]
pub struct StepTimes {
    pub step: i64,
    pub base_s: f64,
    pub nodelay_s: f64,
    pub ideal_s: f64,
    pub slowdown: f64,
}

/// What removing (or adding back) one group's straggling explains.
#[derive(Debug, Clone, Serialize)]
pub struct Explained {
    pub trem: f64,
    pub tadd: f64,
    pub tori: f64,
    pub tideal: f64,
    /// (tori - trem) / (tori - tideal): the share of the slowdown its removal takes away.
    pub rem: f64,
    pub add: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Attribution {
    pub dimension: &'static str,
    pub key: String,
    pub slowdown: f64,
}

pub struct Answer {
    pub steps: Vec<StepTimes>,
    pub launch_slowdown: f64,
    pub blocking_slowdown: f64,
    pub attribution: Vec<Attribution>,
    pub m_s: Option<Explained>,
    pub m_w: Option<Explained>,
    /// The workers M_W gave back their times, as `DP:STAGE`.
    pub m_w_workers: Vec<String>,
    pub nodelay: Timeline,
    pub ideal: Timeline,
    /// The "no straggler" cost of every op.
    pub ideal_cost: Vec<f64>,
}

/// Which dimensions to split the slowdown by.
#[derive(Debug, Clone, Copy)]
pub struct Splits {
    pub optype: bool,
    pub dp_rank: bool,
    pub stage: bool,
    pub worker: bool,
}

/// The most op-lane updates one what-if may take: about ten minutes on one core here (a
/// replay updates about 1e8 a second), so a run's cost is bounded before it starts.
const MAX_WORK: f64 = 6e10;

/// A group given back its recorded times: its dimension, its key, and whether it holds an op
/// (by node and DP rank).
type Group<'a> = (&'static str, String, Holds<'a>);
/// Whether an op (by node and DP rank) is in the group.
type Holds<'a> = Box<dyn Fn(usize, usize) -> bool + Sync + 'a>;

impl Job {
    /// Refuses a what-if whose replays would take too long, naming what to drop.
    pub fn check_cost(&self, s: Splits, drains: bool) -> Result<()> {
        self.check_cost_within(s, drains, MAX_WORK)
    }

    pub(super) fn check_cost_within(&self, s: Splits, drains: bool, max: f64) -> Result<()> {
        let workers = self.dp * self.pp;
        let replays = 6
            + if s.optype { OpType::NAMES.len() } else { 0 }
            + if s.dp_rank { self.dp } else { 0 }
            + if s.stage { self.pp } else { 0 }
            + if s.worker { workers } else { 0 }
            + if drains { workers } else { 0 };
        let work = replays as f64 * self.cost.len() as f64;
        if work > max {
            anyhow::bail!(
                "this what-if would replay {} ops on {} lanes {replays} times ({work:.1e} \
                 updates, over the bound of {max:.0e}): give --split without worker, fewer \
                 --steps, or leave out --hosts",
                self.model.keys.len(),
                self.lanes
            );
        }
        Ok(())
    }

    pub(super) fn replay(&self, cost: &[f64], launch: &[f64]) -> Timeline {
        self.model
            .plan
            .replay(self.lanes, self.dp, &Costs { cost, launch })
    }

    /// Each op type's typical cost: compute's mean, communication's median, over every op of
    /// the type on every worker and step.
    pub fn ideal_costs(&self) -> Vec<f64> {
        let lanes = self.lanes;
        let mut typical = std::collections::HashMap::new();
        for (t, _) in OpType::NAMES {
            let mut v: Vec<f64> = (0..self.model.keys.len())
                .filter(|&n| self.node_type(n) == t)
                .flat_map(|n| self.cost[n * lanes..(n + 1) * lanes].iter().copied())
                .collect();
            if v.is_empty() {
                continue;
            }
            let value = if t.is_comm() {
                median(&mut v)
            } else {
                v.iter().sum::<f64>() / v.len() as f64
            };
            typical.insert(t, value);
        }
        let mut out = vec![0.0; self.cost.len()];
        for n in 0..self.model.keys.len() {
            out[n * lanes..(n + 1) * lanes].fill(typical[&self.node_type(n)]);
        }
        out
    }

    /// `base` with the ops `pick(node, dp_rank)` selects taking their cost from `from`.
    pub(super) fn mixed(
        &self,
        base: &[f64],
        from: &[f64],
        pick: &dyn Fn(usize, usize) -> bool,
    ) -> Vec<f64> {
        let mut out = base.to_vec();
        for n in 0..self.model.keys.len() {
            for d in 0..self.dp {
                if pick(n, d) {
                    for l in (d..self.lanes).step_by(self.dp) {
                        out[n * self.lanes + l] = from[n * self.lanes + l];
                    }
                }
            }
        }
        out
    }

    pub fn analyse(&self, splits: Splits) -> Result<Answer> {
        let zero = vec![0.0; self.cost.len()];
        let nodelay = self.replay(&self.cost, &zero);
        let ideal_cost = self.ideal_costs();
        let ideal = self.replay(&ideal_cost, &zero);
        let (dp, opt) = (self.dp, &self.model.optimizers);
        let (nd_span, nd_end) = (nodelay.spans(dp), nodelay.ends_of(opt, dp));
        let (id_span, id_end) = (ideal.spans(dp), ideal.ends_of(opt, dp));
        let steps = (0..self.steps.len())
            .map(|i| StepTimes {
                step: self.steps[i],
                base_s: self.base_span[i],
                nodelay_s: nd_span[i],
                ideal_s: id_span[i],
                slowdown: nd_span[i] / id_end[i],
            })
            .collect();
        let blocking = mean(&nd_span) / mean(&id_end);
        let mut attribution = vec![Attribution {
            dimension: "all",
            key: "all".into(),
            slowdown: blocking,
        }];
        let groups = self.groups(splits);
        let ratios = self.parallel(&groups, |(_, _, pick)| {
            let t = self.replay(&self.mixed(&ideal_cost, &self.cost, pick.as_ref()), &zero);
            mean(&t.ends_of(opt, dp)) / mean(&id_end)
        });
        for ((dimension, key, _), slowdown) in groups.iter().zip(ratios) {
            attribution.push(Attribution {
                dimension,
                key: key.clone(),
                slowdown,
            });
        }
        let explain = |pick: &dyn Fn(usize, usize) -> bool| -> Explained {
            let rem = self.replay(&self.mixed(&self.cost, &ideal_cost, pick), &zero);
            let add = self.replay(&self.mixed(&ideal_cost, &self.cost, pick), &zero);
            let (tori, tideal) = (mean(&nd_span), mean(&id_span));
            let (trem, tadd) = (mean(&rem.spans(dp)), mean(&add.spans(dp)));
            Explained {
                trem,
                tadd,
                tori,
                tideal,
                rem: (tori - trem) / (tori - tideal),
                add: (tadd - tideal) / (tori - tideal),
            }
        };
        let last = self.pp - 1;
        let m_s = Some(explain(&|n, _| self.node_stage(n) == last));
        let chosen = self.top_workers(&attribution);
        let m_w = (!chosen.is_empty())
            .then(|| explain(&|n, d| chosen.contains(&(d, self.node_stage(n)))));
        Ok(Answer {
            steps,
            launch_slowdown: mean(&self.base_span) / mean(&nd_end),
            blocking_slowdown: blocking,
            attribution,
            m_s,
            m_w,
            m_w_workers: chosen.iter().map(|(d, s)| format!("{d}:{s}")).collect(),
            nodelay,
            ideal,
            ideal_cost,
        })
    }

    /// The groups to give back their recorded times, one replay each.
    fn groups(&self, s: Splits) -> Vec<Group<'_>> {
        let mut out: Vec<Group<'_>> = Vec::new();
        if s.optype {
            // Every type the trace records, modelled or not (an unmodelled one, a DP collective
            // of a job with DP 1, changes nothing: 1.0, as the artifact reports it).
            let mut keys: Vec<&'static str> =
                self.types.iter().map(|t| t.attribution_key()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                out.push((
                    "optype",
                    k.into(),
                    Box::new(move |n, _| self.node_type(n).attribution_key() == k),
                ));
            }
        }
        if s.dp_rank {
            for d in 0..self.dp {
                out.push(("dp_rank", d.to_string(), Box::new(move |_, dd| dd == d)));
            }
        }
        if s.stage {
            for st in 0..self.pp {
                out.push((
                    "stage",
                    st.to_string(),
                    Box::new(move |n, _| self.node_stage(n) == st),
                ));
            }
        }
        if s.worker {
            for d in 0..self.dp {
                for st in 0..self.pp {
                    out.push((
                        "worker",
                        format!("{d}:{st}"),
                        Box::new(move |n, dd| dd == d && self.node_stage(n) == st),
                    ));
                }
            }
        }
        out
    }

    /// M_W's workers: the top 3% (at least one) by min(their DP rank's slowdown, their
    /// stage's), ties to the lower rank.
    fn top_workers(&self, attribution: &[Attribution]) -> Vec<(usize, usize)> {
        // Each DP rank's and stage's slowdown, looked up once (not per worker).
        let of = |dim: &str, n: usize| {
            let mut v = vec![None; n];
            for a in attribution.iter().filter(|a| a.dimension == dim) {
                if let Some(slot) = a.key.parse::<usize>().ok().and_then(|k| v.get_mut(k)) {
                    *slot = Some(a.slowdown);
                }
            }
            v
        };
        let (by_dp, by_stage) = (of("dp_rank", self.dp), of("stage", self.pp));
        let mut scored = Vec::new();
        for (d, a) in by_dp.iter().enumerate() {
            for (s, b) in by_stage.iter().enumerate() {
                if let (Some(a), Some(b)) = (*a, *b) {
                    scored.push((a.min(b), self.ranks[d * self.pp + s], (d, s)));
                }
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let n = (self.dp * self.pp * 3).div_ceil(100);
        scored.into_iter().take(n).map(|(_, _, w)| w).collect()
    }

    /// Runs `f` on each item on every core, results in order.
    pub fn parallel<T: Sync, R: Send + Default + Clone>(
        &self,
        items: &[T],
        f: impl Fn(&T) -> R + Sync,
    ) -> Vec<R> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(items.len().max(1));
        let mut out = vec![R::default(); items.len()];
        let chunk = items.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for (slot, part) in out.chunks_mut(chunk).zip(items.chunks(chunk)) {
                let f = &f;
                scope.spawn(move || {
                    for (o, it) in slot.iter_mut().zip(part) {
                        *o = f(it);
                    }
                });
            }
        });
        out
    }
}

pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    crate::stats::percentile_sorted(v, 0.5)
}
