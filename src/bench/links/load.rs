//! Busy is not slow: each rank samples its machine around every wave it is ordered, and rank 0
//! puts on each row the load of its two ends. What "other processes" used excludes this run's
//! own ranks on the same machine (the partner of a pair on a shared machine is the
//! measurement, not a neighbour).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::host_load::{self, Load};

/// One rank's look at its machine over one wave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankLoad {
    pub rank: u32,
    /// /etc/machine-id (the hostname where there is none).
    pub machine: String,
    pub seconds: f64,
    /// Cores' worth of CPU every process on the machine used.
    pub machine_cores: Option<f64>,
    /// This rank's own.
    pub own_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    pub cores: usize,
    /// A test's stand-in for the machine's other processes (see [`host_load::INJECT_LOAD`]).
    pub injected: Option<f64>,
}

impl RankLoad {
    pub fn between(
        rank: u32,
        machine: &str,
        a: &host_load::Sample,
        b: &host_load::Sample,
    ) -> RankLoad {
        let l = Load::between(a, b);
        RankLoad {
            rank,
            machine: machine.to_string(),
            seconds: l.seconds,
            machine_cores: l.machine_cores,
            own_cores: l.own_cores,
            steal_pct: l.steal_fraction.map(|s| 100.0 * s),
            cores: l.cores,
            injected: host_load::injected(),
        }
    }
}

/// A rank's load over a wave, as rows carry it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Busy {
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    pub cores: usize,
    pub busy: bool,
}

/// Each rank's other processes over one wave: its machine's CPU less what every rank of this
/// run on that machine used (clamped at 0), plus an injected load; busy as the single-node
/// warning judges it (over a quarter core, or 5% steal, over a second or more).
pub fn others_by_rank(loads: &[RankLoad]) -> BTreeMap<u32, Busy> {
    let mut ours: BTreeMap<&str, f64> = BTreeMap::new();
    for l in loads {
        *ours.entry(&l.machine).or_default() += l.own_cores.unwrap_or(0.0);
    }
    loads
        .iter()
        .map(|l| {
            let measured = l
                .machine_cores
                .map(|m| (m - ours[l.machine.as_str()]).max(0.0));
            let others = match l.injected {
                Some(i) => Some(measured.unwrap_or(0.0) + i),
                None => measured,
            };
            let long_enough = l.seconds >= 1.0 || l.injected.is_some();
            let busy = long_enough
                && (others.is_some_and(|c| c > host_load::BUSY_OTHER_CORES)
                    || l.steal_pct
                        .is_some_and(|s| s > 100.0 * host_load::BUSY_STEAL));
            let round = |x: f64| crate::export::csv::round(x, 2);
            let b = Busy {
                others_cores: others.map(round),
                steal_pct: l.steal_pct.map(round),
                cores: l.cores,
                busy,
            };
            (l.rank, b)
        })
        .collect()
}

/// Each rank's busiest wave of the run (the busy ones only), for the summary's lines.
#[derive(Debug, Default)]
pub struct Busiest(pub BTreeMap<u32, Busy>);

impl Busiest {
    pub fn note(&mut self, wave: &BTreeMap<u32, Busy>) {
        for (&r, b) in wave.iter().filter(|(_, b)| b.busy) {
            let e = self.0.entry(r).or_insert(*b);
            if b.others_cores > e.others_cores {
                *e = *b;
            }
        }
    }

    pub fn merge(&mut self, other: Busiest) {
        self.note(&other.0);
    }
}

/// The load a row carries: the worse of its two ends.
pub fn of_pair(by_rank: &BTreeMap<u32, Busy>, a: u32, b: u32) -> Busy {
    let (x, y) = (
        by_rank.get(&a).copied().unwrap_or_default(),
        by_rank.get(&b).copied().unwrap_or_default(),
    );
    let max = |p: Option<f64>, q: Option<f64>| match (p, q) {
        (Some(p), Some(q)) => Some(p.max(q)),
        (p, q) => p.or(q),
    };
    Busy {
        others_cores: max(x.others_cores, y.others_cores),
        steal_pct: max(x.steal_pct, y.steal_pct),
        cores: x.cores.max(y.cores),
        busy: x.busy || y.busy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(rank: u32, machine: &str, all: f64, own: f64, injected: Option<f64>) -> RankLoad {
        RankLoad {
            rank,
            machine: machine.into(),
            seconds: 2.0,
            machine_cores: Some(all),
            own_cores: Some(own),
            steal_pct: Some(0.0),
            cores: 2,
            injected,
        }
    }

    #[test]
    fn a_pairs_partner_on_the_same_machine_is_not_a_neighbour() {
        // Ranks 0 and 1 ping-pong on one machine, each using most of a core: the machine's
        // 1.9 cores are theirs. Rank 2 on another machine shares it with 1.2 cores of others.
        let by_rank = others_by_rank(&[
            load(0, "m", 1.9, 0.95, None),
            load(1, "m", 1.9, 0.9, None),
            load(2, "n", 1.3, 0.1, None),
            load(3, "m", 1.9, 0.0, Some(1.5)),
        ]);
        assert!(
            !by_rank[&0].busy && by_rank[&0].others_cores == Some(0.05),
            "{by_rank:?}"
        );
        assert!(by_rank[&2].busy && by_rank[&2].others_cores == Some(1.2));
        // An injected neighbour makes that rank alone busy.
        assert!(by_rank[&3].busy && by_rank[&3].others_cores == Some(1.55));
        let row = of_pair(&by_rank, 0, 2);
        assert!(row.busy && row.others_cores == Some(1.2));
        assert!(!of_pair(&by_rank, 0, 1).busy);
    }
}
