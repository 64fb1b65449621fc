//! A rank's outcome as rank 0 saw it (its inventory, its batches of results, its retests, why
//! it stopped), and a fleet.csv row of it, before any verdict.

use super::checks::{Batch, Inventory, Measured};
use super::table::{FleetFigures, FleetParams};
use crate::noise::explained_by_load;

/// A rank's whole outcome as rank 0 saw it.
#[derive(Debug, Clone)]
pub struct RankOutcome {
    pub rank: u32,
    pub host: String,
    pub inventory: Option<Inventory>,
    pub batches: Vec<Batch>,
    /// The tests measured again because they failed: [`suspects`].
    pub retests: Vec<Batch>,
    /// Why the rank has no (or no more) results: it died, went silent, did not answer.
    pub failure: Option<String>,
}

impl RankOutcome {
    pub fn new(rank: u32, host: &str) -> RankOutcome {
        RankOutcome {
            rank,
            host: host.into(),
            inventory: None,
            batches: Vec::new(),
            retests: Vec::new(),
            failure: None,
        }
    }

    /// The rank as its retests saw it (their results and load), when it has any.
    pub(super) fn as_retested(&self) -> Option<RankOutcome> {
        (!self.retests.is_empty()).then(|| RankOutcome {
            batches: self.retests.clone(),
            retests: Vec::new(),
            ..self.clone()
        })
    }

    pub(super) fn results(&self) -> impl Iterator<Item = &Measured> {
        self.batches.iter().flat_map(|b| b.results.iter())
    }
    pub(super) fn others_cores(&self) -> Option<f64> {
        self.batches
            .iter()
            .filter_map(|b| b.others_cores)
            .reduce(f64::max)
    }
    pub(super) fn steal_pct(&self) -> Option<f64> {
        self.batches
            .iter()
            .filter_map(|b| b.steal_pct)
            .reduce(f64::max)
    }
    pub fn busy(&self) -> bool {
        self.batches.iter().any(|b| b.busy)
    }
    /// How much slower its load can make it ([`explained_by_load`]).
    pub(super) fn explained_by_load(&self) -> f64 {
        let steal = self.steal_pct().unwrap_or(0.0) / 100.0;
        explained_by_load(self.others_cores().unwrap_or(0.0), steal)
    }
    pub(super) fn cores(&self) -> usize {
        self.batches.iter().map(|b| b.cores).max().unwrap_or(0)
    }
    pub fn adapter(&self) -> String {
        self.inventory
            .as_ref()
            .and_then(|i| i.adapter.clone())
            .unwrap_or_default()
    }
    pub(super) fn driver(&self) -> String {
        self.inventory
            .as_ref()
            .and_then(|i| i.driver.clone())
            .unwrap_or_default()
    }
    /// The busy warning, as the single-node benches word it.
    pub fn busy_reason(&self) -> String {
        let steal = self.steal_pct().unwrap_or(0.0);
        format!(
            "busy: other processes used {:.1} of {} cores{}",
            self.others_cores().unwrap_or(0.0),
            self.cores(),
            if steal >= 100.0 * crate::noise::BUSY_STEAL {
                format!(", the hypervisor stole {steal:.1}%")
            } else {
                String::new()
            }
        )
    }
}

use crate::verdict::Verdict;
/// The verdicts by their short names, as the judges below write them.
pub const PASS: Verdict = Verdict::Pass;
pub const WARN: Verdict = Verdict::Warn;
pub const FAIL: Verdict = Verdict::Fail;
pub const SKIP: Verdict = Verdict::Skip;

/// One judged row.
pub type Row = (FleetParams, FleetFigures);

pub fn row(o: &RankOutcome, test: &str, figure: &str) -> Row {
    let inv = o.inventory.as_ref();
    (
        FleetParams {
            rank: o.rank,
            host: o.host.clone(),
            local_rank: inv.map(|i| i.local_rank),
            adapter: o.adapter(),
            driver: o.driver(),
            test: test.into(),
            figure: figure.into(),
        },
        FleetFigures {
            others_cores: o.others_cores(),
            steal_pct: o.steal_pct(),
            busy: o.busy(),
            ..Default::default()
        },
    )
}

/// A row with its verdict and the reason for it.
pub fn judged(o: &RankOutcome, test: &str, figure: &str, verdict: Verdict, reason: String) -> Row {
    let (p, mut f) = row(o, test, figure);
    (f.verdict, f.reason) = (verdict, reason);
    (p, f)
}
