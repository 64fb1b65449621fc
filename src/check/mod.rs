//! `morphbench check`: is this node normal? Every figure of a run against the same figure of a
//! baseline run (a statistical test and the ratio of medians with an interval), or against a
//! fleet of runs (robust z-scores); a verdict per figure, check.csv, a console table with the
//! FAILs first, and an exit code a health check can act on.

pub mod figures;
mod metrics;
pub mod policy;
mod repeated;
pub mod stats;
mod table;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

mod baseline;
mod fleet;
mod judge;
mod print;

pub use self::baseline::against_baseline;
pub use self::figures::{collect, Better, Figure, Key, RunFigures};
pub use self::fleet::{against_fleet, MIN_FLEET};
pub use self::judge::{judge, p_value, scatter, Family, Outcome, Report, MIN_SCATTER_FIGURES};
pub use self::policy::{Policy, Thresholds};
pub use self::print::console;
pub use self::table::CheckTable;
pub use crate::verdict::Verdict;

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
    /// Also write the judged figures as metrics into this folder (node_exporter's textfile).
    pub textfile: Option<PathBuf>,
}

/// Refuses a check that would compare nothing: a run against itself or a copy of itself, a
/// fleet with a member twice (by run id or by content), or runs that share no figure.
fn refuse_empty_comparisons(runs: &[RunFigures], bases: &[RunFigures]) -> Result<()> {
    let same = |a: &RunFigures, b: &RunFigures| a.run_id == b.run_id || a.figures == b.figures;
    let all: Vec<&RunFigures> = runs.iter().chain(bases).collect();
    for (i, a) in all.iter().enumerate() {
        if let Some(b) = all[i + 1..].iter().find(|b| same(a, b)) {
            anyhow::bail!(
                "{} and {} are the same run ({}): a run compared with itself passes whatever it \
                 measured; give runs of different nodes or moments",
                a.dir.display(),
                b.dir.display(),
                if a.run_id == b.run_id {
                    format!("run id {}", a.run_id)
                } else {
                    "identical figures".to_string()
                }
            );
        }
    }
    let benches = |r: &RunFigures| {
        let b: BTreeSet<&str> = r.figures.keys().map(|k| k.bench.as_str()).collect();
        match b.len() {
            0 => "no figure".to_string(),
            _ => b.into_iter().collect::<Vec<_>>().join(", "),
        }
    };
    for base in bases {
        let run = &runs[0];
        if !run.figures.keys().any(|k| base.figures.contains_key(k)) {
            anyhow::bail!(
                "nothing to compare: {} measured {} and the baseline {} measured {}; give a \
                 baseline of the same benches and sizes",
                run.run_id,
                benches(run),
                base.run_id,
                benches(base)
            );
        }
    }
    // A fleet judges a figure by the median of the runs that have it: a figure fewer than
    // MIN_FLEET runs measured is judged by nobody.
    if bases.is_empty() && runs.len() >= MIN_FLEET {
        let mut have: BTreeMap<&Key, usize> = BTreeMap::new();
        for key in runs.iter().flat_map(|r| r.figures.keys()) {
            *have.entry(key).or_default() += 1;
        }
        if !have.values().any(|&n| n >= MIN_FLEET) {
            let each: Vec<String> = runs
                .iter()
                .map(|r| format!("{} measured {}", r.run_id, benches(r)))
                .collect();
            anyhow::bail!(
                "nothing to compare: no figure was measured by {} or more of the {} runs ({}); \
                 a fleet check needs runs of the same benches and sizes, one per node",
                MIN_FLEET,
                runs.len(),
                each.join("; ")
            );
        }
    }
    Ok(())
}

/// Runs the check; returns whether it passed (no FAIL, and no WARN with `warn_exit`) and the
/// folders whose check.csv was written (their reports are refreshed by the caller).
pub fn run(opts: &CheckOptions) -> Result<(bool, Vec<PathBuf>)> {
    let started = std::time::Instant::now();
    if let Some(dir) = &opts.textfile {
        crate::record::metrics::check_dir(dir)?;
    }
    let policy = match &opts.policy {
        Some(p) => Policy::load(p)?,
        None => Policy::default(),
    };
    refuse_bad_comparison(opts)?;
    let runs: Vec<RunFigures> = opts
        .runs
        .iter()
        .map(|d| collect(d))
        .collect::<Result<_>>()?;
    let bases: Vec<RunFigures> = opts
        .baseline
        .iter()
        .map(|d| collect(d))
        .collect::<Result<_>>()?;
    refuse_empty_comparisons(&runs, &bases)?;
    let (report, title) = verdicts_and_title(&runs, &bases, &policy)?;
    let written = write_check(opts, &runs, &report)?;
    if let Some(dir) = &opts.textfile {
        metrics::textfile(&runs, &report, started.elapsed()).write(dir)?;
    }
    let passed = match report.worst() {
        Verdict::Fail => false,
        Verdict::Warn => !opts.warn_exit,
        // `check` judges every figure it lists: none is skipped.
        Verdict::Pass | Verdict::Skip => true,
    };
    print_verdict(opts, &report, &title, runs.len(), passed)?;
    Ok((passed, written))
}

/// Refuses a comparison the flags cannot make, before any run is read.
fn refuse_bad_comparison(opts: &CheckOptions) -> Result<()> {
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
        _ => Ok(()),
    }
}

/// The verdicts and the check's title: against the fleet (no baseline), one baseline run, or
/// several (their spread).
fn verdicts_and_title(
    runs: &[RunFigures],
    bases: &[RunFigures],
    policy: &Policy,
) -> Result<(Report, String)> {
    Ok(match bases {
        [] => {
            let title = format!("check a fleet of {} runs", runs.len());
            (against_fleet(runs, policy)?, title)
        }
        [base] => {
            let title = format!(
                "check {} ({}) against baseline {} ({})",
                runs[0].run_id,
                runs[0].label.short(),
                base.run_id,
                base.label.short()
            );
            (against_baseline(base, &runs[0], policy), title)
        }
        _ => {
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
            (repeated::against_baselines(bases, &runs[0], policy), title)
        }
    })
}

/// check.csv: into `--check-out`, or each judged run's own folder (its rows alone); returns the
/// run folders written.
fn write_check(opts: &CheckOptions, runs: &[RunFigures], report: &Report) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    if let Some(dir) = &opts.out {
        let cannot = || {
            format!(
                "cannot write the check to {}: give a writable folder with --check-out",
                dir.display()
            )
        };
        crate::safe_fs::make_dir(dir, &crate::safe_fs::CHECK_OUT)?;
        table::write(&dir.join("check.csv"), &report.outcomes).with_context(cannot)?;
        return Ok(written);
    }
    for run in runs {
        // A run folder may be anyone's: as root, check.csv goes only into one no other user
        // can put a link in (resolved first: `results/latest` is a link).
        let dir = std::fs::canonicalize(&run.dir)
            .with_context(|| format!("cannot resolve {}", run.dir.display()))?;
        crate::safe_fs::open_dir(&dir, &crate::safe_fs::RUN_FOLDER)?;
        let mine: Vec<Outcome> = report
            .outcomes
            .iter()
            .filter(|o| o.run_id == run.run_id)
            .cloned()
            .collect();
        table::write(&dir.join("check.csv"), &mine)?;
        written.push(run.dir.clone());
    }
    Ok(written)
}

/// The verdict as `--json`'s document, or the console's table.
fn print_verdict(
    opts: &CheckOptions,
    report: &Report,
    title: &str,
    runs: usize,
    passed: bool,
) -> Result<()> {
    let worst = report.worst();
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
        print!("{}", console(title, report, opts.all, runs > 1));
    }
    Ok(())
}

/// The run folder's check.csv, if it has one.
pub fn read(
    dir: &Path,
) -> Result<Option<Vec<crate::record::Line<CheckTable>>>, crate::record::DataError> {
    crate::record::read_optional::<CheckTable>(dir)
}

#[cfg(test)]
mod tests;
