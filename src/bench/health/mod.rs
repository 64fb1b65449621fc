//! `morphbench health`: one node, every GPU of it (one rank per adapter, as `fleet --local`
//! starts them), the gate's health level (quick's tests and inventory in short deadlines),
//! judged against a per-SKU baseline and confirmed before blaming, as the gate does. Built for
//! the tools that watch nodes: its whole run is bounded before it starts (Slurm's
//! HealthCheckProgram is killed at 60 s), and it speaks their conventions: a table, one JSON
//! document, Slurm's drain and resume (`--slurm`), node-problem-detector's plugin contract
//! (`--npd`), node_exporter's textfile (`--textfile`).
//!
//! Exit codes, one meaning each: 0 healthy, 1 unhealthy (a figure failed), 2 could not judge
//! (no baseline and too few GPUs to judge by each other, no adapter, a bad flag, the run cut).

pub mod args;
mod outcome;
mod output;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench::fleet::baseline::Baseline;
use crate::bench::fleet::checks::{Level, HEALTH_BUDGET, HEALTH_START};
use crate::bench::fleet::ops;
use crate::bench::fleet::table::FleetTable;
use crate::gpu::BackendChoice;
use crate::record::csv::Line;
use crate::slurm::{Action, Scontrol};
use crate::verdict::Verdict;

pub use outcome::{Health, Outcome};
pub use output::{npd_line, one_line, NPD_MAX};

/// The `health` command, for the registry (its rows are fleet.csv's, listed by `fleet`).
pub const DESCRIPTOR: crate::bench::descriptor::Descriptor = crate::bench::descriptor::Descriptor {
    name: "health",
    from_toml: None,
    command: args::command(run_command),
    tables: Vec::new,
};

/// `morphbench health`: the exit code is the node's health (0, 1, 2). With `--npd` an error
/// is still node-problem-detector's one line (Unknown, exit 2), the error itself on stderr.
fn run_command(
    m: &clap::ArgMatches,
    g: &crate::bench::descriptor::GlobalArgs,
) -> Result<crate::bench::descriptor::Ran> {
    use crate::bench::descriptor::Ran;
    let a: args::HealthArgs = crate::bench::descriptor::parsed(m)?;
    let opts = HealthOptions {
        baseline: a.baseline,
        slurm: a.slurm,
        npd: a.npd,
        json: g.json,
        quiet: g.quiet,
        textfile: a.textfile,
        out: g.out.clone(),
        backend: g.backend,
        adapter: g.adapter.clone(),
    };
    match run(&opts) {
        Ok(outcome) => Ok(Ran::code(report(&opts, &outcome)?)),
        Err(e) if opts.npd => {
            let line = format!("morphbench: could not judge: {e:#}");
            println!("{}", one_line(&line, NPD_MAX));
            eprintln!("error: {e:#}");
            Ok(Ran::code(2))
        }
        Err(e) => Err(e),
    }
}

/// Fewer GPUs than this cannot judge each other: the fleet's rule needs 3.
const MIN_PEERS: usize = 3;

#[derive(Debug, Clone)]
pub struct HealthOptions {
    pub baseline: Option<PathBuf>,
    pub slurm: bool,
    pub npd: bool,
    pub json: bool,
    pub quiet: bool,
    pub textfile: Option<PathBuf>,
    /// The run folder's parent (`--out`).
    pub out: PathBuf,
    pub backend: BackendChoice,
    pub adapter: Option<String>,
}

/// What is checked before anything runs, so that a bad flag changes nothing.
struct Ready {
    scontrol: Option<Scontrol>,
    judged_by_baseline: bool,
    gpus: Vec<(String, String)>,
}

fn preflight(opts: &HealthOptions) -> Result<Ready> {
    if let Some(path) = &opts.baseline {
        Baseline::load(path)?;
    }
    let scontrol = opts.slurm.then(Scontrol::find).transpose()?;
    if let Some(dir) = &opts.textfile {
        crate::record::metrics::check_dir(dir)?;
    }
    // The ranks' run folder goes under --out: what they would refuse (a link, as root a
    // folder another user owns or may write) is refused now, and nothing is made yet.
    crate::safe_fs::check_dir(&opts.out, &crate::safe_fs::OUT)?;
    let mut gpus = crate::gpu::local_adapters(opts.backend);
    if opts.adapter.is_some() {
        gpus.truncate(1);
    }
    if gpus.is_empty() {
        bail!(
            "no GPU adapter on this node (backend {:?}): is the GPU's driver loaded and its \
             Vulkan ICD installed? `morphbench info` lists what wgpu sees",
            opts.backend
        );
    }
    Ok(Ready {
        scontrol,
        judged_by_baseline: opts.baseline.is_some(),
        gpus,
    })
}

/// The arguments of the gate's ranks: the health level, its verdict as one JSON document.
fn rank_args(opts: &HealthOptions) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--out".into(),
        opts.out.display().to_string(),
        "--backend".into(),
        format!("{:?}", opts.backend).to_lowercase(),
    ];
    if let Some(a) = &opts.adapter {
        args.extend(["--adapter".into(), a.clone()]);
    }
    args.extend(["-q", "--json", "fleet", "--level", "health"].map(String::from));
    if let Some(b) = &opts.baseline {
        args.extend(["--baseline".into(), b.display().to_string()]);
    }
    args
}

/// Runs the check: the plan and its bound first, then the gate, then what the flags ask.
pub fn run(opts: &HealthOptions) -> Result<Outcome> {
    let started = Instant::now();
    let ready = preflight(opts)?;
    let node = crate::slurm::this_node();
    let cpu = ready.gpus.iter().all(|(_, t)| t == "Cpu");
    let n = ready.gpus.len() as u32;
    let plan = Level::Health.gate_bound(n, cpu) + HEALTH_START;
    // Another health check on this node (the periodic one beside a job's prolog) would halve
    // what both measure: they take turns, and the wait counts in the bound.
    let wait = HEALTH_BUDGET.saturating_sub(plan);
    let bound = plan + wait;
    let _turn = node_turn(started + wait)?;
    let adapter = ready.gpus[0].0.clone();
    if !(opts.quiet || opts.json || opts.npd) {
        println!(
            "health: {node}, {n} GPU{} ({}{}), quick's tests at the health level's \
             deadlines; ends within {:.0} s by its plan, {:.0} s at most",
            if n == 1 { "" } else { "s" },
            crate::sanitize::console(&adapter, crate::sanitize::CONSOLE_TEXT),
            if cpu { ", a CPU driver" } else { "" },
            plan.as_secs_f64().ceil(),
            bound.as_secs_f64().ceil()
        );
    }
    let max = crate::cluster::launch::MAX_LOCAL;
    let gate =
        crate::cluster::local::run_local_gate_within(n, max, &rank_args(opts), started + bound)?;
    let Some((_, doc)) = gate else {
        bail!(
            "the health check was cut at its bound of {:.0} s: a rank did not finish (a hung \
             GPU?); nothing was judged",
            bound.as_secs_f64()
        );
    };
    let summary: serde_json::Value = serde_json::from_slice(&doc)
        .context("the gate's ranks gave no verdict (its document did not parse)")?;
    let run_dir = summary
        .get("run_dir")
        .and_then(|d| d.as_str())
        .map(PathBuf::from)
        .context("the gate's verdict names no run folder")?;
    // The verdict as rank 0 handed it over (its document, on a pipe of this process's),
    // never read back from the run folder, which is only named.
    let (rows, pci) = ops::from_summary(&summary)?;
    let (health, judged_by) = health_of(&rows, &ready);
    let slurm = match &ready.scontrol {
        Some(s) => Some(slurm_action(s, &node, health, &rows)?),
        None => None,
    };
    let took = started.elapsed();
    let textfile = match &opts.textfile {
        Some(dir) => {
            let files = ops::textfiles(&pci, &rows, "health", took);
            let mut written = None;
            for file in files.values() {
                written = Some(file.write(dir)?);
            }
            written
        }
        None => None,
    };
    Ok(Outcome {
        node,
        health,
        judged_by,
        gpus: ready.gpus.len(),
        adapter,
        plan,
        bound,
        took,
        run_dir: Some(run_dir),
        rows,
        slurm,
        textfile,
    })
}

/// The node-wide lock health checks take turns by, as root: in /run, which only root may
/// write (a lock in /tmp could be a link another user put there, or held by one).
pub const TURN_LOCK: &str = "/run/morphbench-health.lock";

/// Where this process's health checks take turns: [`TURN_LOCK`] as root; another user's in
/// its own runtime folder (`$XDG_RUNTIME_DIR`, else the temporary folder), as it cannot write
/// /run.
pub fn turn_lock() -> PathBuf {
    // Test builds only: a lock elsewhere, so a test can put a link or a holder in its way.
    #[cfg(feature = "test-hooks")]
    if let Some(path) = std::env::var_os("MORPHBENCH_HEALTH_LOCK") {
        return PathBuf::from(path);
    }
    if crate::host::euid() == 0 {
        return PathBuf::from(TURN_LOCK);
    }
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(std::env::temp_dir);
    dir.join(format!("morphbench-health-{}.lock", crate::host::uid()))
}

/// Waits until `until` for this node's turn: no other health check measuring. The lock is
/// opened without following a link ([`crate::safe_fs::open_lock`]); a turn not had by then
/// is an error (exit 2, could not check) naming the lock and who holds it.
fn node_turn(until: Instant) -> Result<std::fs::File> {
    let path = turn_lock();
    let file = crate::safe_fs::open_lock(&path)
        .context("could not check: health checks take turns by this lock")?;
    let waited = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(std::fs::TryLockError::WouldBlock) => bail!(
                "could not check: {} is held by {} for longer than this check could wait \
                 ({:.0} s, within its bound); nothing was judged (another health check \
                 measuring this node, or a stuck process holding the lock: end it)",
                path.display(),
                crate::safe_fs::lock_holder(&file)
                    .unwrap_or_else(|| "another process (unknown)".into()),
                waited.elapsed().as_secs_f64()
            ),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("cannot lock {}", path.display()))
            }
        }
    }
}

/// The node's health from its rows: unhealthy on a FAIL; could not judge with a figure that
/// could not be checked (its test cut by its deadline twice) or with nothing to judge by;
/// else healthy.
fn health_of(rows: &[Line<FleetTable>], ready: &Ready) -> (Health, String) {
    let failed = rows.iter().any(|r| r.figures.verdict == Verdict::Fail);
    let peers = ready.gpus.len() >= MIN_PEERS;
    let unchecked = rows
        .iter()
        .find(|r| crate::bench::fleet::verdict::could_not_check(&r.figures));
    if let (false, Some(r)) = (failed, unchecked) {
        let p = &r.params;
        let why = format!(
            "{} {} of gpu {}: {}",
            p.test,
            p.figure,
            p.local_rank.unwrap_or(p.rank),
            r.figures.reason
        );
        let why = crate::sanitize::console(&why, crate::sanitize::CONSOLE_TEXT);
        return (Health::Unknown, why.into_owned());
    }
    match (failed, ready.judged_by_baseline, peers) {
        (true, _, _) => (Health::Unhealthy, judged_by(ready, peers)),
        (false, false, false) => (
            Health::Unknown,
            format!(
                "nothing was judged: no --baseline and {} GPU{} (the GPUs judge each other \
                 from {MIN_PEERS}); write one with `morphbench baseline RUN -o FILE`",
                ready.gpus.len(),
                if ready.gpus.len() == 1 { "" } else { "s" }
            ),
        ),
        (false, _, _) => (Health::Healthy, judged_by(ready, peers)),
    }
}

fn judged_by(ready: &Ready, peers: bool) -> String {
    match (ready.judged_by_baseline, peers) {
        (true, true) => "the baseline and the node's GPUs against each other".into(),
        (true, false) => "the baseline".into(),
        (false, true) => "the node's GPUs against each other (no baseline)".into(),
        (false, false) => "its own checks (verification, answers); no baseline".into(),
    }
}

/// Drains the node on a FAIL (the first failed figure its reason), resumes it on a PASS if
/// morphbench drained it; an unknown verdict changes nothing.
fn slurm_action(
    scontrol: &Scontrol,
    node: &str,
    health: Health,
    rows: &[Line<FleetTable>],
) -> Result<Action> {
    match health {
        Health::Unhealthy => {
            let host = rows
                .iter()
                .find(|r| r.figures.verdict == Verdict::Fail)
                .map(|r| r.params.host.clone())
                .unwrap_or_default();
            let reason = ops::drain_reason(rows, &host)
                .unwrap_or_else(|| format!("{} health FAIL", crate::slurm::REASON_PREFIX));
            scontrol.drain(node, &reason)
        }
        Health::Healthy => scontrol.resume_if_ours(node),
        Health::Unknown => Ok(Action::Unchanged {
            why: "could not judge".into(),
        }),
    }
}

/// Prints what the flags ask for and returns the exit code.
pub fn report(opts: &HealthOptions, outcome: &Outcome) -> Result<u8> {
    if opts.npd {
        println!("{}", npd_line(outcome));
    } else if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&output::document(outcome))?
        );
    } else if !opts.quiet {
        print!("{}", output::table(outcome));
    }
    Ok(outcome.health.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fleet::table::{FleetFigures, FleetParams};

    fn row(verdict: Verdict, reason: &str) -> Line<FleetTable> {
        let params = FleetParams {
            rank: 0,
            host: "n1".into(),
            local_rank: Some(0),
            adapter: "gpu".into(),
            driver: "d".into(),
            test: "bandwidth".into(),
            figure: "gbps".into(),
        };
        let figures = FleetFigures {
            verdict,
            reason: reason.into(),
            ..FleetFigures::default()
        };
        Line::new("run", "c", params, None, figures)
    }

    #[test]
    fn a_figure_left_unchecked_is_could_not_judge_and_a_fail_still_wins() {
        let ready = Ready {
            scontrol: None,
            judged_by_baseline: true,
            gpus: vec![("gpu".into(), "d".into())],
        };
        let cut = || {
            row(
                Verdict::Warn,
                "could not check: cut by its deadline after 2 samples (fewer than 3), so not \
                 judged",
            )
        };
        let (health, why) = health_of(&[row(Verdict::Pass, "ok"), cut()], &ready);
        assert_eq!(health, Health::Unknown);
        assert!(
            why.starts_with("bandwidth gbps of gpu 0: could not check"),
            "{why}"
        );
        let (health, _) = health_of(&[cut(), row(Verdict::Fail, "slow")], &ready);
        assert_eq!(health, Health::Unhealthy);
        let (health, _) = health_of(&[row(Verdict::Warn, "noisy, not blamed")], &ready);
        assert_eq!(health, Health::Healthy);
    }
}
