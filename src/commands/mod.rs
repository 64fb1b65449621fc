//! What each subcommand does, once parsed: the dispatch from [`Cli`] to the benches, the
//! readers and the cluster launchers, and the exit code a command's verdict gives. `main.rs`
//! only parses, calls [`run`] and reports an error.

mod sim;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::config::SuiteConfig;
use crate::report::plot::charts::Format;
use crate::suite;

/// The exit code of an error: `check`, `fleet` and `sim --validate` tell a verdict (exit 1)
/// apart from an error (exit 2), as diff and grep do; every other command exits 1.
pub fn error_code(command: &Command) -> u8 {
    match command {
        Command::Check(_) | Command::Fleet(_) | Command::Health(_) => 2,
        Command::Sim(a) if a.validate.is_some() => 2,
        _ => 1,
    }
}

/// Runs the parsed command; the exit code is its verdict where it has one (`check`, `fleet`).
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // Every run folder ends with its summary.json, for automation.
    crate::record::run_dir::on_end(crate::report::summary::write_summary);
    if let Command::Check(a) = &cli.command {
        return check(a, &cli.global);
    }
    if let Command::Fleet(a) = &cli.command {
        return fleet(a, &cli.global);
    }
    if let Command::Health(a) = &cli.command {
        return health(a, &cli.global);
    }
    run_command(cli).map(|()| ExitCode::SUCCESS)
}

/// `morphbench check`: the verdict is the exit code; each judged run's report gains the check.
fn check(a: &crate::cli::CheckArgs, g: &crate::cli::GlobalArgs) -> anyhow::Result<ExitCode> {
    let opts = crate::check::CheckOptions {
        runs: a.runs.clone(),
        baseline: a.baseline.clone(),
        fleet: a.fleet,
        policy: a.policy.clone(),
        out: a.check_out.clone(),
        warn_exit: a.warn_exit,
        all: a.all,
        quiet: g.quiet,
        json: g.json,
        textfile: a.textfile.clone(),
    };
    let (passed, written) = crate::check::run(&opts)?;
    // The verdict is given (and with --json printed with its exit code): a report that cannot
    // be redrawn is a warning, never a change of the exit code.
    for dir in written {
        if dir.join("meta.json").exists() {
            if let Err(e) = plot(&dir, Format::Both, &[], true) {
                eprintln!(
                    "warning: the report of {} was not redrawn: {e:#}",
                    dir.display()
                );
            }
        }
    }
    Ok(if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `morphbench fleet`: rank 0's exit code is the gate's verdict (0 pass, 1 a node failed);
/// an error is 2.
fn fleet(a: &crate::cli::FleetArgs, g: &crate::cli::GlobalArgs) -> anyhow::Result<ExitCode> {
    if let Some(ranks) = a.launch.spawn_local() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let max = crate::cluster::launch::MAX_LOCAL;
        return crate::cluster::local::run_local_gate(ranks, max, &args).map(ExitCode::from);
    }
    let Some(outcome) = crate::bench::fleet::run(&a.options(g))? else {
        return Ok(ExitCode::SUCCESS);
    };
    if !g.quiet && !g.json {
        if let Err(e) = plot(&outcome.dir, Format::Both, &[], true) {
            eprintln!("warning: the fleet's report was not drawn: {e:#}");
        }
    }
    if g.json {
        println!("{}", serde_json::to_string_pretty(&outcome.summary)?);
    }
    Ok(ExitCode::from(outcome.exit_code))
}

/// `morphbench health`: the exit code is the node's health (0, 1, 2). With `--npd` an error
/// is still node-problem-detector's one line (Unknown, exit 2), the error itself on stderr.
fn health(a: &crate::cli::HealthArgs, g: &crate::cli::GlobalArgs) -> anyhow::Result<ExitCode> {
    use crate::bench::health;
    let opts = health::HealthOptions {
        baseline: a.baseline.clone(),
        slurm: a.slurm,
        npd: a.npd,
        json: g.json,
        quiet: g.quiet,
        textfile: a.textfile.clone(),
        out: g.out.clone(),
        backend: g.backend,
        adapter: g.adapter.clone(),
    };
    match health::run(&opts) {
        Ok(outcome) => Ok(ExitCode::from(health::report(&opts, &outcome)?)),
        Err(e) if a.npd => {
            let line = format!("morphbench: could not judge: {e:#}");
            println!("{}", crate::bench::health::one_line(&line, health::NPD_MAX));
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
        Err(e) => Err(e),
    }
}

fn run_command(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    // One bench from its subcommand, run into its own run folder.
    let one = |bench: suite::Planned, config: serde_json::Value, raw: bool| {
        let dir = suite::run(&g.options(raw), &[bench], Some(config))?;
        after_run(&dir.path, g)
    };
    match &cli.command {
        Command::Info(_) => crate::info::run(g.backend, g.json),
        Command::Bench(b) => {
            let planned = b.planned().map_err(anyhow::Error::msg)?;
            let bench = suite::Planned {
                name: b.name,
                bench: planned.bench,
            };
            one(bench, planned.config, planned.raw)
        }
        Command::Run(a) => {
            let cfg = match &a.config {
                Some(path) => SuiteConfig::load(path)?,
                None => SuiteConfig::embedded(),
            };
            let benches = cfg.benches()?;
            let config = serde_json::to_value(&cfg)?;
            if let Some(d) = &a.textfile {
                crate::record::metrics::check_dir(d)?;
            }
            let started = std::time::Instant::now();
            let dir = suite::run(&g.options(a.raw), &benches, Some(config))?;
            if let Some(d) = &a.textfile {
                crate::report::metrics::run_textfile(&dir.path, started.elapsed())?.write(d)?;
            }
            warn_noisy(&dir.path, g.quiet || g.json);
            if !a.no_plots {
                plot(&dir.path, Format::Both, &[], g.quiet || g.json)?;
            }
            print_summary(&dir.path, g.json)
        }
        Command::Plot(a) => {
            let outcome = plot(&a.run_dir, a.format, &a.compare, g.quiet || g.json)?;
            if g.json {
                println!("{}", serde_json::to_string_pretty(&outcome)?);
            }
            Ok(())
        }
        Command::Runs(a) => crate::report::document::print_runs(&a.dir, g.json),
        Command::Check(_) | Command::Fleet(_) | Command::Health(_) => {
            unreachable!("handled in run")
        }
        Command::Baseline(a) => {
            let b = crate::bench::fleet::baseline::Baseline::from_run(&a.run_dir)?;
            b.write(&a.output)?;
            if !g.quiet {
                let figures: usize = b.sku.iter().map(|s| s.figure.len()).sum();
                println!(
                    "baseline: {figures} figures of {} adapter/driver pair(s) from run {} -> {}",
                    b.sku.len(),
                    b.from_run,
                    a.output.display()
                );
            }
            Ok(())
        }
        Command::Sink(a) => crate::transport::sink::run_cli(
            &a.listen,
            a.max_payload,
            std::time::Duration::from_secs(a.timeout_s),
            a.once,
            g.quiet,
            a.transport,
            &a.rdma.choice(),
        ),
        Command::Rdma(a) => match crate::bench::rdma::run(&a.plan(), &g.options(false))? {
            Some(dir) => after_run(&dir, g),
            None => Ok(()),
        },
        Command::Pipeline(a) => {
            let opts = a.options(g).map_err(anyhow::Error::msg)?;
            if let Some(stages) = a.launch.spawn_local() {
                // Bad input is refused here, before any rank starts.
                opts.plan.validate(stages).map_err(anyhow::Error::msg)?;
                let args: Vec<String> = std::env::args().skip(1).collect();
                let max = crate::bench::pipeline::MAX_LOCAL_STAGES;
                return crate::cluster::local::run_local(stages, max, &args);
            }
            let dir = crate::bench::pipeline::run(&opts)?;
            after_ranked(dir.as_deref(), g)
        }
        Command::Links(a) => {
            if let Some(ranks) = a.launch.spawn_local() {
                let args: Vec<String> = std::env::args().skip(1).collect();
                let max = crate::cluster::launch::MAX_LOCAL;
                return crate::cluster::local::run_local(ranks, max, &args);
            }
            let dir = crate::bench::links::run(&a.options(g))?;
            after_ranked(dir.as_deref(), g)
        }
        Command::Sim(a) => sim::sim_command(a, g),
    }
}

/// After a multi-rank run, at rank 0 (the only rank with a run folder): its figures and
/// report (unless quiet), then its summary with `--json`.
fn after_ranked(dir: Option<&std::path::Path>, g: &crate::cli::GlobalArgs) -> anyhow::Result<()> {
    let Some(dir) = dir else {
        return Ok(());
    };
    if !g.quiet {
        plot(dir, Format::Both, &[], true)?;
    }
    print_summary(dir, g.json)
}

/// After a single-node run: its noisy rows named (unless quiet), then its summary with
/// `--json`.
pub(crate) fn after_run(dir: &std::path::Path, g: &crate::cli::GlobalArgs) -> anyhow::Result<()> {
    warn_noisy(dir, g.quiet || g.json);
    print_summary(dir, g.json)
}

/// Names the rows whose samples varied by more than the report's bound, where they are seen,
/// not only in the report.
fn warn_noisy(dir: &std::path::Path, quiet: bool) {
    use crate::noise::NOISY_CV;
    use crate::report::document::noisy_rows;
    let Ok(run) = crate::report::catalog::load(dir) else {
        return;
    };
    let noisy = noisy_rows(&run);
    if quiet || noisy.is_empty() {
        return;
    }
    let shown: Vec<&str> = noisy.iter().take(8).map(|s| s.as_str()).collect();
    eprintln!(
        "warning: {} row(s) varied by more than {:.0}% within the run: {}{}",
        noisy.len(),
        NOISY_CV * 100.0,
        shown.join("; "),
        if noisy.len() > 8 { "; ..." } else { "" }
    );
}

/// With `--json`, prints the run's summary.json (written when the run ended).
pub(crate) fn print_summary(dir: &std::path::Path, json: bool) -> anyhow::Result<()> {
    if json {
        let text = std::fs::read_to_string(dir.join("summary.json")).map_err(|e| {
            anyhow::anyhow!("cannot read {}: {e}", dir.join("summary.json").display())
        })?;
        println!("{text}");
    }
    Ok(())
}

/// Draws a run's figures and writes its report.
pub fn plot(
    dir: &std::path::Path,
    format: Format,
    compare: &[std::path::PathBuf],
    quiet: bool,
) -> anyhow::Result<crate::report::plot::PlotOutcome> {
    for d in std::iter::once(dir).chain(compare.iter().map(|p| p.as_path())) {
        let meta = crate::record::read_meta(d);
        let has_csv = crate::record::run_dir::holds_csv(d);
        match meta {
            Err(why) if !has_csv => {
                anyhow::bail!("{why}, and the folder holds no CSV: nothing to draw")
            }
            Ok(None) if !has_csv => anyhow::bail!(
                "{} is not a run folder (results/<run-id> with meta.json or CSVs): check the path",
                d.display()
            ),
            _ => {}
        }
    }
    let outcome = crate::report::draw::plot_run(dir, format, compare)?;
    crate::report::document::write_report(dir, &outcome)?;
    for w in &outcome.warnings {
        eprintln!("warning: {w}");
    }
    if !quiet {
        for f in &outcome.figures {
            for p in &f.files {
                println!("figure  {}", p.display());
            }
        }
        for s in &outcome.skipped {
            println!("skipped {s}");
        }
        println!("report  {}", dir.join("report.md").display());
        println!("report  {}", dir.join("report.html").display());
    }
    Ok(outcome)
}
