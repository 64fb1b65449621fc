//! Judging one figure: the verdict ladder, the tests behind it (Welch's t or Mann-Whitney U,
//! ratio intervals), what the other figures of the same two runs say (their scatter), and the
//! guards that keep an unsteady row from failing; and a check's report, over all its figures.

use super::figures::{Better, Figure, Key};
use super::policy::Thresholds;
use super::stats::{mann_whitney_p, ratio_ci_bootstrap, ratio_ci_from_moments, welch_p};
use crate::verdict::Verdict;

/// One figure's verdict.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// The run judged.
    pub run_id: String,
    pub bench: String,
    pub case: String,
    pub figure: String,
    pub unit: String,
    pub better: Better,
    /// The baseline's figure, or the fleet's median.
    pub base: Option<f64>,
    pub value: Option<f64>,
    pub ratio: Option<f64>,
    pub ci_lo: Option<f64>,
    pub ci_hi: Option<f64>,
    pub p: Option<f64>,
    pub verdict: Verdict,
    pub reason: String,
}

impl Outcome {
    pub(crate) fn blank(run_id: &str, key: &Key, fig: &Figure) -> Outcome {
        Outcome {
            run_id: run_id.to_string(),
            bench: key.bench.clone(),
            case: key.case.clone(),
            figure: fig.column.to_string(),
            unit: fig.unit.to_string(),
            better: fig.better,
            base: None,
            value: None,
            ratio: None,
            ci_lo: None,
            ci_hi: None,
            p: None,
            verdict: Verdict::Pass,
            reason: String::new(),
        }
    }

    /// A WARN for a figure that cannot be compared (measured on one side only).
    pub(crate) fn missing(run_id: &str, key: &Key, fig: &Figure, reason: String) -> Outcome {
        Outcome {
            verdict: Verdict::Warn,
            reason,
            ..Outcome::blank(run_id, key, fig)
        }
    }

    /// Names a change of variant between the baseline and this run, if there is one.
    pub(crate) fn note_variant(&mut self, base: &Figure, fig: &Figure) {
        if base.detail != fig.detail {
            self.reason = join(
                &self.reason,
                &format!(
                    "variant {} in the baseline, {} here",
                    base.detail, fig.detail
                ),
            );
        }
    }

    /// Turns a FAIL into a WARN, saying why the numbers cannot fail this figure.
    pub(crate) fn at_most_warn(&mut self, why: &str) {
        if self.verdict == Verdict::Fail {
            self.verdict = Verdict::Warn;
            self.reason = format!("{why}; would FAIL: {}", self.reason);
        }
    }

    /// Makes the verdict a WARN whatever the numbers say (runs that are not comparable).
    pub(super) fn warn(&mut self, why: &str) {
        if self.verdict == Verdict::Fail {
            self.at_most_warn(why);
        } else {
            self.verdict = Verdict::Warn;
            self.reason = join(why, &self.reason);
        }
    }
}

pub(crate) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}; {b}"),
    }
}

pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A seed per figure, so intervals are the same from run to run of `check`.
fn seed_of(key: &Key) -> u64 {
    // FNV-1a: stable across Rust versions, unlike the standard hasher.
    key.to_string()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
}

/// Judges one figure against its baseline.
/// The verdict on a figure worse by `worse` (a fraction; negative when better), with the
/// test's outcome: the ladder every baseline comparison climbs.
pub(crate) fn grade(
    worse: f64,
    significant: bool,
    t: &Thresholds,
    p_text: &str,
) -> (Verdict, String) {
    let (fail, warn) = (t.fail_pct / 100.0, t.warn_pct / 100.0);
    if worse >= fail && significant {
        (Verdict::Fail, format!("{} worse ({p_text})", pct(worse)))
    } else if worse >= warn && significant {
        (Verdict::Warn, format!("{} worse ({p_text})", pct(worse)))
    } else if worse >= fail {
        (
            Verdict::Warn,
            format!("{} worse but not significant ({p_text})", pct(worse)),
        )
    } else if -worse >= warn && significant {
        (Verdict::Pass, format!("{} better ({p_text})", pct(-worse)))
    } else {
        (Verdict::Pass, String::new())
    }
}

/// The two-sided p-value that `base` and `fig` come from one distribution, from the timings
/// both figures come from: Mann-Whitney U where both runs kept their samples, else Welch's t
/// from the rows' n, mean and standard deviation.
pub fn p_value(base: &Figure, fig: &Figure) -> (Option<f64>, &'static str) {
    match (&base.samples, &fig.samples) {
        (Some(a), Some(b)) => (mann_whitney_p(a, b), "Mann-Whitney"),
        _ => (welch_p(base.time, fig.time), "Welch"),
    }
}

/// What the other figures of the same two runs tell about one figure's comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct Family {
    /// The figure's p-value adjusted for the other figures compared with it
    /// (Benjamini-Hochberg); `None` judges it alone.
    pub q: Option<f64>,
    /// How far figures move between these two runs by the machine's state alone: the robust
    /// spread (1.4826 MAD) of every figure's log ratio. `None` with too few figures.
    pub scatter: Option<f64>,
}

/// The fewest figures from which a pair's scatter is estimated.
pub const MIN_SCATTER_FIGURES: usize = 8;

/// The robust spread (1.4826 MAD, a standard deviation for normal data) of the log ratios by
/// which each figure got worse: Efron's empirical null for many tests at once. Within-run
/// tests cannot see run-to-run drift (this machine's host memcpy went from 8.4 to 13.1 GB/s
/// across ten runs, each with a small cv); this spread can.
pub fn scatter(log_worse: &[f64]) -> Option<f64> {
    if log_worse.len() < MIN_SCATTER_FIGURES {
        return None;
    }
    use crate::stats::robust::{mad, median, MAD_TO_SIGMA};
    Some(MAD_TO_SIGMA * mad(log_worse, median(log_worse), median))
}

/// Judges one figure against its baseline, in the `family` of the other figures of the same
/// two runs.
pub fn judge(
    key: &Key,
    base: &Figure,
    fig: &Figure,
    t: &Thresholds,
    run_id: &str,
    family: Family,
) -> Outcome {
    let mut o = Outcome::blank(run_id, key, fig);
    o.base = Some(base.value);
    o.value = Some(fig.value);
    if base.column != fig.column {
        o.verdict = Verdict::Warn;
        o.reason = format!("the baseline reports {} here: not compared", base.column);
        return o;
    }
    if base.value <= 0.0 || fig.value <= 0.0 || base.time_p50 <= 0.0 || fig.time_p50 <= 0.0 {
        o.verdict = Verdict::Warn;
        o.reason = "a zero figure: nothing to compare".into();
        return o;
    }
    o.ratio = Some(fig.value / base.value);
    // The tests run on the timings both figures come from; a throughput's interval is the
    // inverse of its time's.
    let (p, test) = p_value(base, fig);
    let time_ci = match (&base.samples, &fig.samples) {
        (Some(a), Some(b)) => ratio_ci_bootstrap(a, b, t.alpha, seed_of(key)),
        _ => ratio_ci_from_moments(base.time, base.time_p50, fig.time, fig.time_p50, t.alpha),
    };
    if let Some((lo, hi)) = time_ci {
        let (lo, hi) = match fig.better {
            Better::Lower => (lo, hi),
            Better::Higher => (1.0 / hi, 1.0 / lo),
        };
        (o.ci_lo, o.ci_hi) = (Some(lo), Some(hi));
    }
    o.p = p;
    let worse = fig.better.worse_by(base.value, fig.value);
    let q = family.q.or(p);
    let significant = q.is_some_and(|q| q < t.alpha);
    let p_text = match (p, q) {
        (Some(p), Some(q)) if q != p => {
            format!(
                "{test} p={}, q={} over the run's figures",
                format_p(p),
                format_p(q)
            )
        }
        (Some(p), _) => format!("{test} p={}", format_p(p)),
        _ => "no test: too few samples".to_string(),
    };
    (o.verdict, o.reason) = grade(worse, significant, t, &p_text);
    cap_unsteady(&mut o, &[base, fig], t);
    // A FAIL must also stand out from how far all figures moved between the two runs: its log
    // ratio's modified z-score against that scatter (centred on no change, so a node that is
    // slower across the board still fails) must pass the policy's z.
    if let (Verdict::Fail, Some(sigma)) = (o.verdict, family.scatter) {
        let log_worse = fig.better.log_worse(base.value, fig.value);
        let needed =
            t.z / crate::stats::robust::Z_SCALE * sigma / crate::stats::robust::MAD_TO_SIGMA;
        if log_worse < needed {
            o.at_most_warn(&format!(
                "within the run-to-run scatter of these two runs (figures move by {} typically; \
                 a FAIL needs over {})",
                pct(sigma.exp() - 1.0),
                pct(needed.exp() - 1.0)
            ));
        }
    }
    o.note_variant(base, fig);
    o
}

/// A figure with a caveat (launch-bound), from rows of fewer than `min_n` samples, or from
/// rows more variable than `max_cv` can WARN but not FAIL: its median moves by the threshold
/// from run to run on its own.
pub(super) fn cap_unsteady(o: &mut Outcome, figs: &[&Figure], t: &Thresholds) {
    if let Some(c) = figs.iter().find_map(|f| f.caveat.as_ref()) {
        o.at_most_warn(c);
    } else if let Some(n) = figs.iter().map(|f| f.time.n).find(|&n| n < t.min_n) {
        o.at_most_warn(&format!(
            "too few samples to fail (n={n} < min_n {}): give more iterations",
            t.min_n
        ));
    } else if let Some(cv) = figs.iter().map(|f| f.cv).find(|&cv| cv > t.max_cv) {
        o.at_most_warn(&format!(
            "unsteady row (cv {cv:.2} > max_cv {:.2}): rerun with more iterations on a quiet \
             machine",
            t.max_cv
        ));
    }
}

/// The caveat alone (a launch-bound kernel): with several baseline runs the test already
/// holds the run-to-run spread that the other guards stand in for.
pub(crate) fn cap_unsteady_caveat_only(o: &mut Outcome, fig: &Figure) {
    if let Some(c) = &fig.caveat {
        o.at_most_warn(c);
    }
}

pub(crate) fn format_p(p: f64) -> String {
    if p < 1e-16 {
        // Below what the t and normal tails are computed to.
        "<1e-16".into()
    } else if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// What a check found, over all its figures.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub outcomes: Vec<Outcome>,
    /// Figures left out by the policy.
    pub ignored: usize,
    /// Lines to print before the table (environment differences, unmatched policy sections).
    pub notes: Vec<String>,
    /// The significance level at the top of the policy (intervals are at 1 - alpha).
    pub alpha: f64,
    /// --fleet: each run with outlying figures, and those figures.
    pub outliers: Vec<(String, Vec<String>)>,
}

impl Report {
    pub fn count(&self, v: Verdict) -> usize {
        self.outcomes.iter().filter(|o| o.verdict == v).count()
    }

    pub fn worst(&self) -> Verdict {
        self.outcomes
            .iter()
            .map(|o| o.verdict)
            .min()
            .unwrap_or(Verdict::Pass)
    }
}

pub(crate) const IN_BASELINE_ONLY: &str = "in the baseline only: not measured in this run";
