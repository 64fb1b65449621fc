//! `morphbench check`: is this node normal? Every figure of a run against the same figure of a
//! baseline run (a statistical test and the ratio of medians with an interval), or against a
//! fleet of runs (robust z-scores); a verdict per figure, check.csv, a console table with the
//! FAILs first, and an exit code a health check can act on.

pub mod figures;
pub mod policy;
mod repeated;
pub mod stats;
mod table;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

pub use self::figures::{collect, Better, Figure, Key, RunFigures};
pub use self::policy::{Policy, Thresholds};
use self::stats::{
    benjamini_hochberg, mann_whitney_p, ratio_ci_bootstrap, ratio_ci_from_moments, robust_z,
    welch_p,
};
pub use self::table::CheckTable;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Fail,
    Warn,
    Pass,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fail => "FAIL",
            Verdict::Warn => "WARN",
            Verdict::Pass => "PASS",
        }
    }
}

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
    fn warn(&mut self, why: &str) {
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
    let mut sorted = log_worse.to_vec();
    sorted.sort_by(f64::total_cmp);
    let med = crate::stats::percentile_sorted(&sorted, 0.5);
    let mut dev: Vec<f64> = log_worse.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    Some(1.4826 * crate::stats::percentile_sorted(&dev, 0.5))
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
        let needed = t.z / 0.6745 * sigma / 1.4826;
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
fn cap_unsteady(o: &mut Outcome, figs: &[&Figure], t: &Thresholds) {
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

/// Why two runs' figures are not comparable as a regression, if they are not.
fn environment_differs(base: &RunFigures, run: &RunFigures) -> Option<String> {
    let (a, b) = (&base.label, &run.label);
    if a.adapter != b.adapter {
        return Some(format!(
            "different adapters ({} in the baseline, {} here)",
            a.adapter_name(),
            b.adapter_name()
        ));
    }
    if a.driver != b.driver {
        return Some(format!(
            "different drivers ({} in the baseline, {} here)",
            a.driver.as_deref().unwrap_or("?"),
            b.driver.as_deref().unwrap_or("?")
        ));
    }
    None
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

/// Every figure of `run` against the same figure of `base`.
pub fn against_baseline(base: &RunFigures, run: &RunFigures, policy: &Policy) -> Report {
    let mut report = Report {
        alpha: policy.top_level().alpha,
        ..Report::default()
    };
    let env = environment_differs(base, run);
    if let Some(why) = &env {
        report.notes.push(format!(
            "{why}: differences are reported as WARN, never FAIL"
        ));
    }
    for (side, r) in [("the baseline", base), ("this run", run)] {
        if let Some(w) = r.label.incomplete() {
            report.notes.push(format!("{side} ({}): {w}", r.run_id));
        }
    }
    let keys: BTreeSet<&Key> = base.figures.keys().chain(run.figures.keys()).collect();
    // Hundreds of figures are tested at once: their p-values are adjusted to control the false
    // discovery rate, so chance alone rarely makes one significant.
    let tested: Vec<(&Key, f64)> = keys
        .iter()
        .filter(|k| !policy.for_figure(k).ignore)
        .filter_map(|k| match (base.figures.get(*k), run.figures.get(*k)) {
            (Some(b), Some(f)) => p_value(b, f).0.map(|p| (*k, p)),
            _ => None,
        })
        .collect();
    let q_values = benjamini_hochberg(&tested.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    let q_of: std::collections::BTreeMap<&Key, f64> =
        tested.iter().map(|(k, _)| *k).zip(q_values).collect();
    let log_worse: Vec<f64> = keys
        .iter()
        .filter(|k| !policy.for_figure(k).ignore)
        .filter_map(|k| match (base.figures.get(*k), run.figures.get(*k)) {
            (Some(b), Some(f)) if b.value > 0.0 && f.value > 0.0 && b.column == f.column => {
                Some(f.better.log_worse(b.value, f.value))
            }
            _ => None,
        })
        .collect();
    let pair_scatter = scatter(&log_worse);
    if let Some(sigma) = pair_scatter {
        report.notes.push(format!(
            "figures moved by {} typically between these runs (robust spread of {} log ratios); \
             a FAIL must stand out from that",
            pct(sigma.exp() - 1.0),
            log_worse.len()
        ));
    }
    for key in keys {
        let t = policy.for_figure(key);
        if t.ignore {
            report.ignored += 1;
            continue;
        }
        let mut o = match (base.figures.get(key), run.figures.get(key)) {
            (Some(b), Some(f)) => {
                let family = Family {
                    q: q_of.get(key).copied(),
                    scatter: pair_scatter,
                };
                judge(key, b, f, &t, &run.run_id, family)
            }
            (Some(b), None) => Outcome {
                base: Some(b.value),
                ..Outcome::missing(&run.run_id, key, b, IN_BASELINE_ONLY.into())
            },
            (None, Some(f)) => Outcome {
                value: Some(f.value),
                ..Outcome::missing(
                    &run.run_id,
                    key,
                    f,
                    "in this run only: not in the baseline".into(),
                )
            },
            (None, None) => unreachable!("the key came from one of the runs"),
        };
        if let Some(why) = &env {
            o.warn(why);
        }
        if let Some(side) = busy_side(base, run, &key.bench) {
            o.at_most_warn(&format!(
                "the machine was busy during {} in {side} (meta.json host_load)",
                key.bench
            ));
        }
        report.outcomes.push(o);
    }
    add_policy_notes(&mut report, policy);
    report.outcomes.sort_by_key(|o| o.verdict);
    report
}

pub(crate) const IN_BASELINE_ONLY: &str = "in the baseline only: not measured in this run";

/// Which run, if any, recorded a busy machine during `bench`.
fn busy_side(base: &RunFigures, run: &RunFigures, bench: &str) -> Option<&'static str> {
    let busy = |r: &RunFigures| r.label.busy.iter().any(|(b, _)| b == bench);
    match (busy(base), busy(run)) {
        (true, true) => Some("both runs"),
        (true, false) => Some("the baseline"),
        (false, true) => Some("this run"),
        (false, false) => None,
    }
}

fn add_policy_notes(report: &mut Report, policy: &Policy) {
    let names: Vec<String> = report
        .outcomes
        .iter()
        .map(|o| format!("{}: {}", o.bench, o.case))
        .collect();
    for name in policy.unmatched(&names) {
        report.notes.push(format!(
            "policy section [figure.\"{name}\"] names no figure of these runs (check.csv's \
             bench and case columns, as \"BENCH: CASE\")"
        ));
    }
}

/// The fewest runs a fleet check accepts: a median and a MAD need a majority to stand on.
pub const MIN_FLEET: usize = 3;

/// Every figure of every run against the fleet's median of that figure.
pub fn against_fleet(runs: &[RunFigures], policy: &Policy) -> Result<Report> {
    if runs.len() < MIN_FLEET {
        anyhow::bail!(
            "--fleet needs at least {MIN_FLEET} runs (one per node) to find outliers; got {}: \
             give more run folders, or compare two with --baseline",
            runs.len()
        );
    }
    let mut report = Report {
        alpha: policy.top_level().alpha,
        ..Report::default()
    };
    let adapters: BTreeSet<&str> = runs.iter().map(|r| r.label.adapter_name()).collect();
    let mixed = (adapters.len() > 1).then(|| {
        format!(
            "the fleet mixes adapters ({})",
            adapters.into_iter().collect::<Vec<_>>().join(", ")
        )
    });
    if let Some(why) = &mixed {
        report
            .notes
            .push(format!("{why}: outliers are reported as WARN, never FAIL"));
    }
    for r in runs {
        if let Some(w) = r.label.incomplete() {
            report.notes.push(format!("{}: {w}", r.run_id));
        }
    }
    let keys: BTreeSet<&Key> = runs.iter().flat_map(|r| r.figures.keys()).collect();
    for key in keys {
        let t = policy.for_figure(key);
        if t.ignore {
            report.ignored += 1;
            continue;
        }
        let have: Vec<(&RunFigures, &Figure)> = runs
            .iter()
            .filter_map(|r| r.figures.get(key).map(|f| (r, f)))
            .collect();
        let values: Vec<f64> = have.iter().map(|(_, f)| f.value).collect();
        let (median, z) = robust_z(&values);
        for run in runs.iter().filter(|r| !r.figures.contains_key(key)) {
            let why = format!(
                "not measured on this node ({} of {} runs have it)",
                have.len(),
                runs.len()
            );
            report.outcomes.push(Outcome {
                base: Some(median),
                ..Outcome::missing(&run.run_id, key, have[0].1, why)
            });
        }
        for ((run, fig), z) in have.iter().zip(z) {
            let mut o = Outcome::blank(&run.run_id, key, fig);
            (o.base, o.value) = (Some(median), Some(fig.value));
            o.ratio = (median > 0.0).then(|| fig.value / median);
            o.verdict = Verdict::Pass;
            if have.len() < MIN_FLEET {
                o.verdict = Verdict::Warn;
                o.reason = format!(
                    "only {} runs have this figure: no fleet to judge by",
                    have.len()
                );
                report.outcomes.push(o);
                continue;
            }
            let worse = if median > 0.0 {
                fig.better.worse_by(median, fig.value)
            } else {
                0.0
            };
            let z_text = if z.is_finite() {
                format!("z={z:.1}")
            } else {
                "z=inf (the others agree exactly)".into()
            };
            // An outlier is far from the fleet by the MAD and by enough to matter.
            let outlier = z.abs() > t.z && worse.abs() * 100.0 >= t.warn_pct;
            if outlier {
                let worse_pct = worse * 100.0;
                (o.verdict, o.reason) = if worse_pct >= t.fail_pct {
                    (
                        Verdict::Fail,
                        format!("{} worse than the fleet median ({z_text})", pct(worse)),
                    )
                } else if worse > 0.0 {
                    (
                        Verdict::Warn,
                        format!("{} worse than the fleet median ({z_text})", pct(worse)),
                    )
                } else {
                    (
                        Verdict::Warn,
                        format!(
                            "{} better than the fleet median ({z_text}): check the setup",
                            pct(-worse)
                        ),
                    )
                };
            }
            cap_unsteady(&mut o, &[fig], &t);
            if let Some(why) = &mixed {
                o.warn(why);
            }
            report.outcomes.push(o);
        }
    }
    for run in runs {
        let mut mine: Vec<&Outcome> = report
            .outcomes
            .iter()
            .filter(|o| o.run_id == run.run_id && o.verdict != Verdict::Pass && o.ratio.is_some())
            .collect();
        mine.sort_by_key(|o| o.verdict);
        let figs: Vec<String> = mine
            .into_iter()
            .map(|o| {
                format!(
                    "{} {}: {} {} ({:.2}x the median)",
                    o.verdict.as_str(),
                    o.bench,
                    o.case,
                    o.figure,
                    o.ratio.unwrap_or(f64::NAN)
                )
            })
            .collect();
        if !figs.is_empty() {
            report
                .outliers
                .push((format!("{} ({})", run.label.host_name(), run.run_id), figs));
        }
    }
    add_policy_notes(&mut report, policy);
    report.outcomes.sort_by_key(|o| o.verdict);
    Ok(report)
}

/// How `morphbench check` was asked to run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub runs: Vec<PathBuf>,
    /// Known-good runs: one, or several of the same node (their spread is then measured).
    pub baseline: Vec<PathBuf>,
    pub fleet: bool,
    pub policy: Option<PathBuf>,
    /// Where check.csv goes (default: the judged run's folder; with --fleet, each run's).
    pub out: Option<PathBuf>,
    pub warn_exit: bool,
    /// Print every PASS too.
    pub all: bool,
    pub quiet: bool,
    pub json: bool,
}

/// Runs the check; returns whether it passed (no FAIL, and no WARN with `warn_exit`) and the
/// folders whose check.csv was written (their reports are refreshed by the caller).
pub fn run(opts: &CheckOptions) -> Result<(bool, Vec<PathBuf>)> {
    let policy = match &opts.policy {
        Some(p) => Policy::load(p)?,
        None => Policy::default(),
    };
    match (opts.baseline.first(), opts.fleet) {
        (Some(_), true) => anyhow::bail!("give either --baseline or --fleet, not both"),
        (None, false) => anyhow::bail!(
            "say what to compare with: --baseline BASE_RUN_DIR (a known-good run), or --fleet \
             with several run folders (one per node)"
        ),
        (Some(_), false) if opts.runs.len() != 1 => anyhow::bail!(
            "--baseline judges one run; got {} run folders (use --fleet for many)",
            opts.runs.len()
        ),
        (None, true) if opts.runs.len() < MIN_FLEET => anyhow::bail!(
            "--fleet needs at least {MIN_FLEET} runs (one per node) to find outliers; got {}: \
             give more run folders, or compare two with --baseline",
            opts.runs.len()
        ),
        _ => {}
    }
    let runs: Vec<RunFigures> = opts
        .runs
        .iter()
        .map(|d| collect(d))
        .collect::<Result<_>>()?;
    let (report, title) = match opts.baseline.as_slice() {
        [] => {
            let title = format!("check a fleet of {} runs", runs.len());
            (against_fleet(&runs, &policy)?, title)
        }
        [b] => {
            let base = collect(b)?;
            let title = format!(
                "check {} ({}) against baseline {} ({})",
                runs[0].run_id,
                runs[0].label.short(),
                base.run_id,
                base.label.short()
            );
            (against_baseline(&base, &runs[0], &policy), title)
        }
        many => {
            let bases: Vec<RunFigures> = many.iter().map(|d| collect(d)).collect::<Result<_>>()?;
            let title = format!(
                "check {} ({}) against {} baseline runs ({})",
                runs[0].run_id,
                runs[0].label.short(),
                bases.len(),
                bases
                    .iter()
                    .map(|b| b.run_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            (
                repeated::against_baselines(&bases, &runs[0], &policy),
                title,
            )
        }
    };
    let mut written = Vec::new();
    match &opts.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            table::write(&dir.join("check.csv"), &report.outcomes)?;
        }
        None => {
            for run in &runs {
                let mine: Vec<Outcome> = report
                    .outcomes
                    .iter()
                    .filter(|o| o.run_id == run.run_id)
                    .cloned()
                    .collect();
                table::write(&run.dir.join("check.csv"), &mine)?;
                written.push(run.dir.clone());
            }
        }
    }
    let worst = report.worst();
    let passed = match worst {
        Verdict::Fail => false,
        Verdict::Warn => !opts.warn_exit,
        Verdict::Pass => true,
    };
    if opts.json {
        let doc = serde_json::json!({
            "verdict": worst.as_str(),
            "exit_code": if passed { 0 } else { 1 },
            "fail": report.count(Verdict::Fail),
            "warn": report.count(Verdict::Warn),
            "pass": report.count(Verdict::Pass),
            "ignored": report.ignored,
            "notes": report.notes,
            "outliers": report.outliers,
            "figures": report.outcomes,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else if !opts.quiet {
        print!("{}", console(&title, &report, opts.all, runs.len() > 1));
    }
    Ok((passed, written))
}

/// The figures printed per outlier node without `--all`.
const OUTLIERS_SHOWN: usize = 10;
/// The PASS rows printed without `--all`.
const PASS_ROWS_SHOWN: usize = 20;

/// The console table: FAILs first, then WARNs, then (some) PASSes; then the outliers and the
/// verdict.
pub fn console(title: &str, report: &Report, all: bool, show_run: bool) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{title}");
    for n in &report.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let num = |x: Option<f64>| {
        x.map_or("-".to_string(), |x| {
            format!("{}", crate::export::csv::sig(x, 4))
        })
    };
    let _ = writeln!(
        s,
        "{:<8}{}{:<44} {:<24} {:>11} {:>11} {:>7} {:>16}  reason",
        "verdict",
        if show_run {
            format!("{:<22}", "run")
        } else {
            String::new()
        },
        "figure",
        "column",
        "base",
        "value",
        "ratio",
        format!("{:.0}% interval", 100.0 * (1.0 - report.alpha))
    );
    let mut passes = 0;
    for o in &report.outcomes {
        if o.verdict == Verdict::Pass {
            passes += 1;
            if !all && passes > PASS_ROWS_SHOWN {
                continue;
            }
        }
        let name: String = format!("{}: {}", o.bench, o.case)
            .chars()
            .take(44)
            .collect();
        let interval = match (o.ci_lo, o.ci_hi) {
            (Some(lo), Some(hi)) => format!("[{lo:.3}, {hi:.3}]"),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "{:<8}{}{:<44} {:<24} {:>11} {:>11} {:>7} {:>16}  {}",
            o.verdict.as_str(),
            if show_run {
                format!("{:<22}", o.run_id.chars().take(21).collect::<String>())
            } else {
                String::new()
            },
            name,
            format!("{} ({})", o.figure, o.better.as_str()),
            num(o.base),
            num(o.value),
            o.ratio.map_or("-".into(), |r| format!("{r:.3}")),
            interval,
            o.reason
        );
    }
    if !all && passes > PASS_ROWS_SHOWN {
        let _ = writeln!(
            s,
            "... and {} more PASS (all in check.csv; --all prints them)",
            passes - PASS_ROWS_SHOWN
        );
    }
    for (node, figs) in &report.outliers {
        let _ = writeln!(s, "outlier node {node}: {} figure(s)", figs.len());
        for f in figs
            .iter()
            .take(if all { usize::MAX } else { OUTLIERS_SHOWN })
        {
            let _ = writeln!(s, "  {f}");
        }
        if !all && figs.len() > OUTLIERS_SHOWN {
            let _ = writeln!(s, "  ... and {} more (--all)", figs.len() - OUTLIERS_SHOWN);
        }
    }
    let _ = writeln!(
        s,
        "verdict: {} ({} FAIL, {} WARN, {} PASS{})",
        report.worst().as_str(),
        report.count(Verdict::Fail),
        report.count(Verdict::Warn),
        report.count(Verdict::Pass),
        if report.ignored > 0 {
            format!(", {} ignored by the policy", report.ignored)
        } else {
            String::new()
        }
    );
    s
}

/// The run folder's check.csv, if it has one.
pub fn read(
    dir: &Path,
) -> Result<Option<Vec<crate::export::Line<CheckTable>>>, crate::export::DataError> {
    crate::export::read_optional::<CheckTable>(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::export::csv::Stats;

    fn stats(samples: &[f64]) -> Stats {
        Stats::from(&crate::stats::Summary::of(samples).unwrap())
    }

    fn fig(samples: &[f64], better: Better) -> Figure {
        let s = stats(samples);
        let (column, unit, value) = match better {
            Better::Lower => ("p50_us", "us", s.p50_us),
            Better::Higher => ("gbps", "GB/s", 1000.0 / s.p50_us),
        };
        Figure {
            column,
            unit,
            better,
            value,
            time: stats::Moments {
                n: s.n,
                mean: s.mean_us,
                stddev: s.stddev_us,
            },
            time_p50: s.p50_us,
            samples: None,
            cv: s.cv,
            detail: String::new(),
            caveat: None,
        }
    }

    /// 20 samples around `center` with a 2% spread.
    fn steady(center: f64) -> Vec<f64> {
        (0..20)
            .map(|i| center * (1.0 + 0.02 * ((i % 5) as f64 - 2.0) / 2.0))
            .collect()
    }

    fn key(case: &str) -> Key {
        Key {
            bench: "d2h".into(),
            case: case.into(),
        }
    }

    fn run(id: &str, figures: Vec<(&str, Figure)>) -> RunFigures {
        RunFigures {
            dir: PathBuf::from(id),
            run_id: id.into(),
            label: crate::export::plot::data::RunLabel::of(Path::new("/nonexistent")),
            figures: figures
                .into_iter()
                .map(|(c, f)| (key(c), f))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn a_twenty_percent_regression_fails_and_the_same_figure_passes() {
        let t = Thresholds::default();
        let base = fig(&steady(100.0), Better::Higher);
        let slow = fig(&steady(120.0), Better::Higher);
        let o = judge(&key("a"), &base, &slow, &t, "r", Family::default());
        assert_eq!(o.verdict, Verdict::Fail, "{o:?}");
        assert!((o.ratio.unwrap() - 1.0 / 1.2).abs() < 1e-9);
        let (lo, hi) = (o.ci_lo.unwrap(), o.ci_hi.unwrap());
        assert!(lo < 1.0 / 1.2 && 1.0 / 1.2 < hi, "{lo} {hi}");
        assert!(o.reason.contains("16.7% worse"), "{}", o.reason);
        // The same figure, and a 20% improvement, pass.
        assert_eq!(
            judge(&key("a"), &base, &base, &t, "r", Family::default()).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(&key("a"), &slow, &base, &t, "r", Family::default()).verdict,
            Verdict::Pass
        );
        // 7% worse and significant: a WARN.
        let o = judge(
            &key("a"),
            &fig(&steady(100.0), Better::Lower),
            &fig(&steady(107.0), Better::Lower),
            &t,
            "r",
            Family::default(),
        );
        assert_eq!(o.verdict, Verdict::Warn, "{o:?}");
    }

    #[test]
    fn unsteady_rows_and_caveats_warn_but_never_fail() {
        let t = Thresholds::default();
        let noisy = |c: f64| -> Vec<f64> {
            (0..40)
                .map(|i| c * if i % 2 == 0 { 0.7 } else { 1.3 })
                .collect()
        };
        let (a, mut b) = (
            fig(&noisy(100.0), Better::Lower),
            fig(&noisy(150.0), Better::Lower),
        );
        let o = judge(&key("a"), &a, &b, &t, "r", Family::default());
        assert_eq!(o.verdict, Verdict::Warn);
        assert!(
            o.reason.contains("unsteady") && o.reason.contains("would FAIL"),
            "{}",
            o.reason
        );
        b = fig(&steady(150.0), Better::Lower);
        let mut a = fig(&steady(100.0), Better::Lower);
        a.caveat = Some("launch-bound".into());
        let o = judge(&key("a"), &a, &b, &t, "r", Family::default());
        assert_eq!(o.verdict, Verdict::Warn);
        assert!(o.reason.starts_with("launch-bound"), "{}", o.reason);
    }

    #[test]
    fn a_fail_must_stand_out_from_the_pairs_scatter() {
        let t = Thresholds::default();
        let (a, b) = (
            fig(&steady(100.0), Better::Lower),
            fig(&steady(125.0), Better::Lower),
        );
        // Figures that moved by 20% typically: a 25% change does not stand out.
        let noisy = Family {
            q: None,
            scatter: Some(0.2),
        };
        let o = judge(&key("a"), &a, &b, &t, "r", noisy);
        assert_eq!(o.verdict, Verdict::Warn);
        assert!(o.reason.contains("scatter"), "{}", o.reason);
        // Figures that moved by 2%: it does.
        let quiet = Family {
            q: None,
            scatter: Some(0.02),
        };
        assert_eq!(
            judge(&key("a"), &a, &b, &t, "r", quiet).verdict,
            Verdict::Fail
        );
        // A node 25% slower on every figure fails on every figure: the scatter is small.
        let figs: Vec<(String, Figure)> = (0..10)
            .map(|i| {
                (
                    format!("f{i}"),
                    fig(&steady(100.0 + i as f64), Better::Lower),
                )
            })
            .collect();
        let base = run(
            "b",
            figs.iter().map(|(c, f)| (c.as_str(), f.clone())).collect(),
        );
        let slow = run(
            "s",
            figs.iter()
                .map(|(c, f)| {
                    (
                        c.as_str(),
                        f.with_samples(
                            f.samples
                                .clone()
                                .unwrap_or_else(|| steady(f.value))
                                .iter()
                                .map(|x| x * 1.25)
                                .collect(),
                        ),
                    )
                })
                .collect(),
        );
        assert_eq!(
            against_baseline(&base, &slow, &Policy::default()).count(Verdict::Fail),
            10
        );
        // Too few samples: a WARN.
        let (a, b) = (
            fig(&steady(100.0)[..5], Better::Lower),
            fig(&steady(125.0)[..5], Better::Lower),
        );
        let o = judge(&key("a"), &a, &b, &t, "r", Family::default());
        assert!(
            o.verdict == Verdict::Warn && o.reason.contains("min_n"),
            "{o:?}"
        );
    }

    #[test]
    fn figures_in_one_run_only_warn_and_policy_can_ignore() {
        let base = run(
            "b",
            vec![
                ("x", fig(&steady(100.0), Better::Lower)),
                ("y", fig(&steady(1.0), Better::Lower)),
            ],
        );
        let now = run(
            "n",
            vec![
                ("x", fig(&steady(130.0), Better::Lower)),
                ("z", fig(&steady(1.0), Better::Lower)),
            ],
        );
        let r = against_baseline(&base, &now, &Policy::default());
        let v: Vec<(&str, Verdict)> = r
            .outcomes
            .iter()
            .map(|o| (o.case.as_str(), o.verdict))
            .collect();
        assert_eq!(
            v,
            vec![
                ("x", Verdict::Fail),
                ("y", Verdict::Warn),
                ("z", Verdict::Warn)
            ]
        );
        let p = Policy::parse("[figure.\"d2h: x\"]\nignore = true\n").unwrap();
        let r = against_baseline(&base, &now, &p);
        assert_eq!((r.worst(), r.ignored), (Verdict::Warn, 1));
        let p = Policy::parse("[bench.d2h]\nfail_pct = 40\n").unwrap();
        assert_eq!(against_baseline(&base, &now, &p).count(Verdict::Fail), 0);
    }

    #[test]
    fn a_fleet_names_its_outlier_node() {
        let nodes: Vec<RunFigures> = [100.0, 101.0, 99.0, 100.5, 140.0]
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                run(
                    &format!("node{i}"),
                    vec![
                        ("x", fig(&steady(c), Better::Lower)),
                        ("y", fig(&steady(5.0), Better::Lower)),
                    ],
                )
            })
            .collect();
        let r = against_fleet(&nodes, &Policy::default()).unwrap();
        let fails: Vec<&str> = r
            .outcomes
            .iter()
            .filter(|o| o.verdict == Verdict::Fail)
            .map(|o| o.run_id.as_str())
            .collect();
        assert_eq!(fails, vec!["node4"]);
        assert_eq!(r.outliers.len(), 1);
        assert!(
            r.outliers[0].0.contains("node4") && r.outliers[0].1[0].contains("d2h: x"),
            "{:?}",
            r.outliers
        );
        assert!(against_fleet(&nodes[..2], &Policy::default()).is_err());
    }
}
