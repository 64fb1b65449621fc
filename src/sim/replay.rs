//! The engine's replay of a recorded training step: a fixed dependency graph of ops, some
//! of them collectives that end together, run for many lanes at once.
//!
//! A real job's step is the same graph on every data-parallel rank and every step, so one
//! graph (built from one model-parallel group) is replayed for all of them together: each op
//! holds one value per lane, a lane being one (step, DP rank). An op starts when its
//! dependencies have ended, plus its launch delay. A collective's members end together: at
//! the latest start among them (and, for a DP collective, among the step's DP ranks too),
//! plus each member's own transfer time. The order is fixed by the graph, so the times do not
//! depend on the order in which ready ops are taken; `docs/whatif.md` derives it.

use thiserror::Error;

/// One op of the graph (the same op on every lane).
#[derive(Debug, Clone, Default)]
pub struct Node {
    /// Ops that must end before this one starts.
    pub deps: Vec<usize>,
}

/// A collective: ops (on one or several stages) that end together.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub members: Vec<usize>,
    /// Also across the data-parallel ranks of a step (DP gradients, parameters, optimizer).
    pub dp_sync: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub groups: Vec<Group>,
    /// Node names, for messages only.
    pub names: Vec<String>,
}

impl Graph {
    /// When op `v` can start on every lane: the latest end among its dependencies, or 0 (its
    /// step's start) when it has none. `end` and `out` are `[node * lanes + lane]` and `[lane]`.
    pub fn ready(&self, v: usize, end: &[f64], lanes: usize, out: &mut [f64]) {
        let deps = &self.nodes[v].deps;
        out.fill(if deps.is_empty() {
            0.0
        } else {
            f64::NEG_INFINITY
        });
        for &u in deps {
            for (o, e) in out.iter_mut().zip(&end[u * lanes..(u + 1) * lanes]) {
                *o = o.max(*e);
            }
        }
    }

    /// The latest start among a collective's members on every lane (across each step's `dp`
    /// lanes too, for a DP collective): when all of them have started.
    pub fn together(&self, g: &Group, start: &[f64], lanes: usize, dp: usize, out: &mut [f64]) {
        out.fill(f64::NEG_INFINITY);
        for &m in &g.members {
            for (o, s) in out.iter_mut().zip(&start[m * lanes..(m + 1) * lanes]) {
                *o = o.max(*s);
            }
        }
        if g.dp_sync && dp > 1 {
            for step in out.chunks_mut(dp) {
                let latest = step.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                step.fill(latest);
            }
        }
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum ReplayError {
    #[error(
        "the dependency model has a cycle through {0}: the trace's op order contradicts itself"
    )]
    Cycle(String),
    #[error("op {0} is in a collective twice, or in two collectives")]
    TwoGroups(String),
}

/// What one replay costs each op, `[node * lanes + lane]`: an op's own time (a collective
/// member's transfer time once all members have started) and its launch delay.
pub struct Costs<'a> {
    pub cost: &'a [f64],
    pub launch: &'a [f64],
}

/// Start and end of every op on every lane, `[node * lanes + lane]`, in seconds from the
/// step's start.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub lanes: usize,
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// A graph checked once (no cycle, each op in one collective at most), its order fixed, ready
/// to replay for any costs.
#[derive(Debug, Clone)]
pub struct Plan {
    graph: Graph,
    /// The collective each op takes part in, if any.
    group_of: Vec<Option<usize>>,
    /// Units in dependency order: a collective's members together, or one lone op.
    order: Vec<Vec<usize>>,
}

impl Plan {
    pub fn new(graph: Graph) -> Result<Plan, ReplayError> {
        let n = graph.nodes.len();
        // Each unit is a collective or a lone op; the order is a topological sort of units.
        let mut unit_of = vec![usize::MAX; n];
        let mut units: Vec<Vec<usize>> = Vec::new();
        let mut group_of = vec![None; n];
        for (gi, g) in graph.groups.iter().enumerate() {
            if g.members.is_empty() {
                continue;
            }
            for &m in &g.members {
                if unit_of[m] != usize::MAX {
                    return Err(ReplayError::TwoGroups(graph.names[m].clone()));
                }
                unit_of[m] = units.len();
                group_of[m] = Some(gi);
            }
            units.push(g.members.clone());
        }
        for (i, u) in unit_of.iter_mut().enumerate() {
            if *u == usize::MAX {
                *u = units.len();
                units.push(vec![i]);
            }
        }
        let mut indegree = vec![0usize; units.len()];
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); units.len()];
        for (v, node) in graph.nodes.iter().enumerate() {
            for &u in &node.deps {
                next[unit_of[u]].push(unit_of[v]);
                indegree[unit_of[v]] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..units.len()).filter(|&u| indegree[u] == 0).collect();
        let mut order = Vec::with_capacity(units.len());
        while let Some(u) = ready.pop() {
            order.push(u);
            for &w in &next[u] {
                indegree[w] -= 1;
                if indegree[w] == 0 {
                    ready.push(w);
                }
            }
        }
        if order.len() < units.len() {
            let stuck = (0..units.len()).find(|&u| indegree[u] > 0).unwrap_or(0);
            return Err(ReplayError::Cycle(graph.names[units[stuck][0]].clone()));
        }
        let order = order
            .into_iter()
            .map(|u| std::mem::take(&mut units[u]))
            .collect();
        Ok(Plan {
            graph,
            group_of,
            order,
        })
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Replays every lane; `dp` lanes in a row are one step's DP ranks.
    pub fn replay(&self, lanes: usize, dp: usize, costs: &Costs) -> Timeline {
        let n = self.graph.nodes.len();
        let mut start = vec![0.0f64; n * lanes];
        let mut end = vec![0.0f64; n * lanes];
        let mut together = vec![0.0f64; lanes];
        for unit in &self.order {
            for &v in unit {
                let at = v * lanes;
                let here = &mut start[at..at + lanes];
                self.graph.ready(v, &end, lanes, here);
                for (h, d) in here.iter_mut().zip(&costs.launch[at..at + lanes]) {
                    *h += d;
                }
            }
            let group = self.group_of[unit[0]].map(|g| &self.graph.groups[g]);
            match group {
                None => {
                    let at = unit[0] * lanes;
                    for l in 0..lanes {
                        end[at + l] = start[at + l] + costs.cost[at + l];
                    }
                }
                Some(g) => {
                    self.graph.together(g, &start, lanes, dp, &mut together);
                    for &v in unit {
                        let at = v * lanes;
                        for l in 0..lanes {
                            end[at + l] = together[l] + costs.cost[at + l];
                        }
                    }
                }
            }
        }
        Timeline { lanes, start, end }
    }
}

impl Timeline {
    /// Per step (`dp` lanes each): the latest end among `last` ops (the step's end as the
    /// optimizer sees it).
    pub fn ends_of(&self, last: &[usize], dp: usize) -> Vec<f64> {
        let steps = self.lanes / dp;
        (0..steps)
            .map(|s| {
                last.iter()
                    .flat_map(|&v| {
                        &self.end[v * self.lanes + s * dp..v * self.lanes + (s + 1) * dp]
                    })
                    .copied()
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect()
    }

    /// Per step: latest end minus earliest start over every op (the step as a trace shows it).
    pub fn spans(&self, dp: usize) -> Vec<f64> {
        let steps = self.lanes / dp;
        let nodes = self.start.len() / self.lanes.max(1);
        (0..steps)
            .map(|s| {
                let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
                for v in 0..nodes {
                    let r = v * self.lanes + s * dp..v * self.lanes + (s + 1) * dp;
                    lo = self.start[r.clone()].iter().copied().fold(lo, f64::min);
                    hi = self.end[r].iter().copied().fold(hi, f64::max);
                }
                hi - lo
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(deps: &[usize]) -> Node {
        Node {
            deps: deps.to_vec(),
        }
    }

    #[test]
    fn a_collective_ends_at_its_last_start_plus_each_transfer() {
        // 0 -> 2, 1 -> 3; 2 and 3 are one collective; 4 after 2.
        let graph = Graph {
            nodes: vec![node(&[]), node(&[]), node(&[0]), node(&[1]), node(&[2])],
            groups: vec![Group {
                members: vec![2, 3],
                dp_sync: false,
            }],
            names: (0..5).map(|i| i.to_string()).collect(),
        };
        let plan = Plan::new(graph).unwrap();
        let cost = [1.0, 3.0, 0.5, 0.25, 2.0];
        let launch = [0.0, 0.0, 0.0, 0.1, 0.0];
        let t = plan.replay(
            1,
            1,
            &Costs {
                cost: &cost,
                launch: &launch,
            },
        );
        assert_eq!(t.start[2], 1.0);
        assert!((t.start[3] - 3.1).abs() < 1e-12);
        assert!((t.end[2] - 3.6).abs() < 1e-12);
        assert!((t.end[3] - 3.35).abs() < 1e-12);
        assert!((t.end[4] - 5.6).abs() < 1e-12);
        assert!((t.ends_of(&[4], 1)[0] - 5.6).abs() < 1e-12);
        assert!((t.spans(1)[0] - 5.6).abs() < 1e-12);
    }

    #[test]
    fn a_dp_collective_waits_for_the_steps_slowest_rank() {
        // Two lanes (one step, DP 2): op 0 then a DP collective of one op.
        let graph = Graph {
            nodes: vec![node(&[]), node(&[0])],
            groups: vec![Group {
                members: vec![1],
                dp_sync: true,
            }],
            names: vec!["a".into(), "b".into()],
        };
        let plan = Plan::new(graph).unwrap();
        let cost = [1.0, 2.0, 0.5, 0.5];
        let t = plan.replay(
            2,
            2,
            &Costs {
                cost: &cost,
                launch: &[0.0; 4],
            },
        );
        assert_eq!(&t.end[2..4], &[2.5, 2.5]);
    }

    #[test]
    fn a_cycle_is_named() {
        let graph = Graph {
            nodes: vec![node(&[1]), node(&[0])],
            groups: vec![],
            names: vec!["fwd_0".into(), "fwd_1".into()],
        };
        assert!(matches!(Plan::new(graph), Err(ReplayError::Cycle(_))));
    }
}
