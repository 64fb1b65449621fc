//! One measured run to predict, the rows of a validation file, and the errors a prediction
//! makes on them.

use crate::sim::runtime::program::Orders;
use crate::sim::runtime::{predict, Job, Machine, Mechanisms, Prediction, Replay, System};

pub const BENCH: &str = "validate";

/// One measured run to predict.
#[derive(Debug, Clone)]
pub struct Case {
    pub system: System,
    pub stages: usize,
    pub microbatches: usize,
    pub tf: Vec<f64>,
    pub tb: Vec<f64>,
    pub tw: Vec<f64>,
    pub delay: Vec<f64>,
    pub activation_bytes: f64,
    pub channels: usize,
    pub healthy_ms: Option<f64>,
    pub slow_ms: Option<f64>,
    /// How the healthy run's iterations moved before the fault, where the file says.
    pub trend: Option<Trend>,
    /// From a pipeline run: each stage's measured op order, and how long its sends held it.
    pub orders: Option<Orders>,
    pub send_ms: Vec<f64>,
    /// Where the op times were measured.
    pub profile_from: ProfileFrom,
}

/// Where a row's op times were measured. A prediction is made from what is known before the
/// fault: a profile taken inside the very run a row predicts is marked, and the error figures
/// are given without such rows too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileFrom {
    /// A healthy run: a `pipeline` run's healthy twin, or a profile taken at delay 0.
    Healthy,
    /// The run this row predicts (the same system, slow links and delay).
    ThisRun,
    /// Another delayed run (another system or another fault).
    OtherRun,
    /// The file gives op times without saying where they were measured.
    Given,
}

impl ProfileFrom {
    pub const ALL: [ProfileFrom; 4] = [
        ProfileFrom::Healthy,
        ProfileFrom::ThisRun,
        ProfileFrom::OtherRun,
        ProfileFrom::Given,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProfileFrom::Healthy => "healthy",
            ProfileFrom::ThisRun => "this_run",
            ProfileFrom::OtherRun => "other_run",
            ProfileFrom::Given => "given",
        }
    }
}

/// The healthy run's trend over its iterations before the fault: fitted (Theil-Sen) and
/// tested (Mann-Kendall). A run still speeding up or slowing down when the fault came is not
/// at its healthy median by the slow window, and the measured added time holds that drift
/// too (the artifact's 30B and 60B runs grow by 20-80 ms an iteration before their fault).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Trend {
    /// How much an iteration grew, each iteration, in ms.
    pub ms_per_iteration: f64,
    /// Mann-Kendall's two-sided p: how likely iterations this ordered are from a run with no
    /// trend at all.
    pub p: f64,
}

impl Trend {
    /// The level at which a healthy run counts as moving. With five iterations the exact test
    /// has 120 orders: 0.10 takes a run that rises (or falls) in all but one pair of its
    /// iterations; 0.05 would ask for every pair.
    pub const ALPHA: f64 = 0.10;

    pub fn of(iterations_ms: &[f64]) -> Option<Trend> {
        Some(Trend {
            ms_per_iteration: crate::stats::trend::theil_sen(iterations_ms)?,
            p: crate::stats::trend::mann_kendall_p(iterations_ms)?,
        })
    }

    pub fn moving(&self) -> bool {
        self.p < Self::ALPHA
    }
}

impl Case {
    fn replay(&self) -> Option<Replay<'_>> {
        self.orders.as_ref().map(|orders| Replay {
            orders,
            send_ms: &self.send_ms,
        })
    }

    pub fn job(&self) -> Job<'_> {
        Job {
            stages: self.stages,
            microbatches: self.microbatches,
            tf: &self.tf,
            tb: &self.tb,
            tw: &self.tw,
            delay: &self.delay,
            activation_bytes: self.activation_bytes,
            channels: self.channels,
            fused_backward: false,
            measured: self.replay(),
        }
    }

    pub fn predict(&self, mech: &Mechanisms) -> anyhow::Result<Prediction> {
        self.predict_on(&Machine::ARTIFACT, mech)
    }

    pub fn predict_on(&self, machine: &Machine, mech: &Mechanisms) -> anyhow::Result<Prediction> {
        predict(self.system, &self.job(), machine, mech)
    }
}

/// The errors of one prediction against what was measured, where it was.
pub fn errors(case: &Case, p: &Prediction) -> (Option<f64>, Option<f64>) {
    match (case.healthy_ms, case.slow_ms) {
        (Some(h), Some(s)) => (
            Some((h + (p.slow_ms - p.healthy_ms) - s).abs() / s),
            Some((p.slow_ms - s).abs() / s),
        ),
        (_, Some(s)) => (None, Some((p.slow_ms - s).abs() / s)),
        _ => (None, None),
    }
}

/// The error of a prediction on the time the fault added, |predicted extra - measured extra| /
/// measured extra, or why a row is left out: no measured pair, or a fault that added under a
/// tenth of the healthy iteration (a small extra makes any miss a large share of it).
pub fn error_added(case: &Case, p: &Prediction) -> Result<f64, &'static str> {
    let (Some(h), Some(s)) = (case.healthy_ms, case.slow_ms) else {
        return Err("no measured healthy and slow iteration");
    };
    let measured = s - h;
    if measured < 0.1 * h {
        return Err("the fault added under a tenth of the healthy iteration");
    }
    Ok(((p.slow_ms - p.healthy_ms) - measured).abs() / measured)
}

/// The rows of a validation file, with its header and raw records for carrying through.
pub struct Input {
    pub header: Vec<String>,
    pub records: Vec<Vec<String>>,
    pub cases: Vec<Case>,
}

/// Median, p90 (nearest rank) and max of some errors.
pub fn spread(errs: &[f64]) -> Option<(f64, f64, f64)> {
    if errs.is_empty() {
        return None;
    }
    let mut e = errs.to_vec();
    e.sort_by(f64::total_cmp);
    let n = e.len();
    let p90 = e[((0.9 * n as f64).ceil() as usize).clamp(1, n) - 1];
    Some((median(e.clone()), p90, e[n - 1]))
}

/// The median of some values (0 for none).
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
