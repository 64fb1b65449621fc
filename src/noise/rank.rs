//! Busy is not slow: each rank of a multi-rank bench samples its machine around what it is
//! ordered to measure (a wave of `links`, a case of `pipeline`), and rank 0 puts on each row
//! the load of the ranks it involves. What "other processes" used excludes this run's own ranks
//! on the same machine (the partner of a pair on a shared machine is the measurement, not a
//! neighbour).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::noise::load::{self, Load};

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
    /// A test's stand-in for the machine's other processes (see [`super::injected_other_cores`]).
    pub injected: Option<f64>,
    /// Its own lost time (ms): ready to run and not running, and the part its cgroup's CPU
    /// quota held it ([`crate::host::thread_run_delay_ns`]).
    #[serde(default)]
    pub paused_ms: Option<f64>,
    #[serde(default)]
    pub throttled_ms: Option<f64>,
}

impl RankLoad {
    /// Two looks at one rank's machine as one: their rates weighted by how long each was
    /// (the iterations of a case, each too short alone for /proc/stat's ticks).
    pub fn merge(&self, other: &RankLoad) -> RankLoad {
        let (a, b) = (self.seconds, other.seconds);
        let w = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => Some((x * a + y * b) / (a + b).max(1e-12)),
            (x, y) => x.or(y),
        };
        let sum = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => Some(x + y),
            (x, y) => x.or(y),
        };
        RankLoad {
            rank: self.rank,
            machine: self.machine.clone(),
            seconds: a + b,
            machine_cores: w(self.machine_cores, other.machine_cores),
            own_cores: w(self.own_cores, other.own_cores),
            steal_pct: w(self.steal_pct, other.steal_pct),
            cores: self.cores.max(other.cores),
            injected: self.injected.or(other.injected),
            paused_ms: sum(self.paused_ms, other.paused_ms),
            throttled_ms: sum(self.throttled_ms, other.throttled_ms),
        }
    }

    pub fn between(rank: u32, machine: &str, a: &load::Sample, b: &load::Sample) -> RankLoad {
        let l = Load::between(a, b);
        RankLoad {
            rank,
            machine: machine.to_string(),
            seconds: l.seconds,
            machine_cores: l.machine_cores,
            own_cores: l.own_cores,
            steal_pct: l.steal_fraction.map(|s| 100.0 * s),
            cores: l.cores,
            injected: super::injected_other_cores(),
            paused_ms: l.paused_s.map(|s| 1e3 * s),
            throttled_ms: l.throttled_s.map(|s| 1e3 * s),
        }
    }
}

/// The load a set of rows carries: the worst of the ranks', busy if any was.
pub fn worst(by_rank: &BTreeMap<u32, Busy>) -> Busy {
    by_rank
        .values()
        .fold(Busy::default(), |a, b| combine(&a, b))
}

fn combine(x: &Busy, y: &Busy) -> Busy {
    let max = |p: Option<f64>, q: Option<f64>| match (p, q) {
        (Some(p), Some(q)) => Some(p.max(q)),
        (p, q) => p.or(q),
    };
    Busy {
        others_cores: max(x.others_cores, y.others_cores),
        steal_pct: max(x.steal_pct, y.steal_pct),
        cores: x.cores.max(y.cores),
        busy: x.busy || y.busy,
        paused_ms: max(x.paused_ms, y.paused_ms),
        throttled_ms: max(x.throttled_ms, y.throttled_ms),
        wave_ms: max(x.wave_ms, y.wave_ms),
    }
}

/// A rank's load over a wave, as rows carry it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Busy {
    pub others_cores: Option<f64>,
    pub steal_pct: Option<f64>,
    pub cores: usize,
    pub busy: bool,
    /// Its own lost time (ms) and the part its CPU quota held it (see [`RankLoad`]), and how
    /// long the wave was (ms): lost time is judged as a share of it.
    pub paused_ms: Option<f64>,
    pub throttled_ms: Option<f64>,
    pub wave_ms: Option<f64>,
}

impl Busy {
    /// The warning for a busy rank (`who`, as the world describes it), ending with what its
    /// figures were (`while`) and what that means for them (`so`).
    pub fn line(&self, who: &str, while_: &str, so: &str) -> String {
        format!(
            "busy: {who}: other processes used {:.1} of {} cores (steal {:.1}%) while {while_}; {so}",
            self.others_cores.unwrap_or(0.0),
            self.cores,
            self.steal_pct.unwrap_or(0.0)
        )
    }
}

/// Each rank's other processes over one wave: its machine's CPU less what every rank of this
/// run on that machine used (clamped at 0), plus an injected load; busy as the single-node
/// warning judges it (over a quarter core, or 5% steal, over a second or more).
pub fn others_by_rank(loads: &[RankLoad]) -> BTreeMap<u32, Busy> {
    // CPU seconds, not rates: a rank that sits a wave out looks for a millisecond, and its
    // rate over that moment says nothing of the wave (measured: two idle ranks' rates summed
    // to two cores and hid a CPU hog from the pair that played).
    let mut ours: BTreeMap<&str, f64> = BTreeMap::new();
    for l in loads {
        *ours.entry(&l.machine).or_default() += l.own_cores.unwrap_or(0.0) * l.seconds;
    }
    loads
        .iter()
        .map(|l| {
            let ours_cores = ours[l.machine.as_str()] / l.seconds.max(1e-9);
            let measured = l.machine_cores.map(|m| (m - ours_cores).max(0.0));
            let others = match l.injected {
                Some(i) => Some(measured.unwrap_or(0.0) + i),
                None => measured,
            };
            // An injected load stands for a whole window's.
            let seconds = match l.injected {
                Some(_) => l.seconds.max(super::MIN_BUSY_WINDOW_S),
                None => l.seconds,
            };
            let busy = super::is_busy(seconds, others, l.steal_pct.map(|s| s / 100.0));
            let round = |x: f64| crate::record::csv::round(x, 2);
            let b = Busy {
                others_cores: others.map(round),
                steal_pct: l.steal_pct.map(round),
                cores: l.cores,
                busy,
                paused_ms: l.paused_ms.map(round),
                throttled_ms: l.throttled_ms.map(round),
                wave_ms: Some(round(1e3 * l.seconds)),
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
    combine(&x, &y)
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
            paused_ms: None,
            throttled_ms: None,
        }
    }

    #[test]
    fn short_looks_merge_weighted_by_their_length() {
        let mut a = load(0, "m", 2.0, 1.0, None);
        a.seconds = 0.6;
        let mut b = load(0, "m", 1.0, 1.0, None);
        b.seconds = 0.2;
        let m = a.merge(&b);
        assert!((m.seconds - 0.8).abs() < 1e-12);
        assert!((m.machine_cores.unwrap() - 1.75).abs() < 1e-12, "{m:?}");
        // Under a second together: too short to call busy.
        assert!(!others_by_rank(std::slice::from_ref(&m))[&0].busy);
        let long = m.merge(&m);
        assert!(others_by_rank(&[long])[&0].busy);
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
        // A rank that sat the wave out looked for a moment: its busy moment is not the pair's.
        let mut idle = load(4, "n", 2.0, 1.0, None);
        idle.seconds = 0.002;
        let with_idle = others_by_rank(&[load(2, "n", 1.3, 0.1, None), idle]);
        assert_eq!(with_idle[&2].others_cores, Some(1.2), "{with_idle:?}");
        // An injected neighbour makes that rank alone busy.
        assert!(by_rank[&3].busy && by_rank[&3].others_cores == Some(1.55));
        let row = of_pair(&by_rank, 0, 2);
        assert!(row.busy && row.others_cores == Some(1.2));
        assert!(!of_pair(&by_rank, 0, 1).busy);
    }
}
