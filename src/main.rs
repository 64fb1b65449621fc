#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use morphbench::bench::sim::place::LinkCosts;
use morphbench::bench::sim::{calibrate_from, OneOrMany, SimBench, SimOutput, SimPlan};
use morphbench::bench::Bench;
use morphbench::cli::{Cli, Command};
use morphbench::config::SuiteConfig;
use morphbench::export::plot::charts::Format;
use morphbench::suite;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.quiet, cli.global.verbose);
    use_all_cores_for_cpu_baseline();
    // `check` tells a verdict (exit 1) apart from an error (exit 2), as diff and grep do.
    let error_code: u8 = match cli.command {
        Command::Check(_) | Command::Fleet(_) => 2,
        Command::Sim(ref a) if a.validate.is_some() => 2,
        _ => 1,
    };
    let json = cli.global.json;
    morphbench::interrupt::set_error_exit(error_code, json);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            // With --json, standard output is one JSON document whatever happens.
            if json {
                let doc = serde_json::json!({ "error": format!("{e:#}"), "exit_code": error_code });
                println!("{doc}");
            }
            ExitCode::from(error_code)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Command::Check(a) = &cli.command {
        return check(a, &cli.global);
    }
    if let Command::Fleet(a) = &cli.command {
        return fleet(a, &cli.global);
    }
    run_command(cli).map(|()| ExitCode::SUCCESS)
}

/// `morphbench check`: the verdict is the exit code; each judged run's report gains the check.
fn check(
    a: &morphbench::cli::CheckArgs,
    g: &morphbench::cli::GlobalArgs,
) -> anyhow::Result<ExitCode> {
    let opts = morphbench::check::CheckOptions {
        runs: a.runs.clone(),
        baseline: a.baseline.clone(),
        fleet: a.fleet,
        policy: a.policy.clone(),
        out: a.check_out.clone(),
        warn_exit: a.warn_exit,
        all: a.all,
        quiet: g.quiet,
        json: g.json,
    };
    let (passed, written) = morphbench::check::run(&opts)?;
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
fn fleet(
    a: &morphbench::cli::FleetArgs,
    g: &morphbench::cli::GlobalArgs,
) -> anyhow::Result<ExitCode> {
    if let Some(ranks) = a.launch.spawn_local() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let max = morphbench::cluster::launch::MAX_LOCAL;
        return morphbench::cluster::local::run_local_gate(ranks, max, &args).map(ExitCode::from);
    }
    let Some(outcome) = morphbench::bench::fleet::run(&a.options(g))? else {
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

fn run_command(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    // One bench from its subcommand, run into its own run folder.
    let one = |bench: Box<dyn Bench>, config: serde_json::Value, raw: bool| {
        let dir = suite::run(&g.options(raw), &[bench], Some(config))?;
        print_summary(&dir.path, g.json)
    };
    match &cli.command {
        Command::Info(_) => morphbench::info::run(g.backend, g.json),
        Command::Kernels(a) => {
            let kernels = a.plan().map_err(anyhow::Error::msg)?;
            let config = serde_json::to_value(&kernels)?;
            one(Box::new(kernels), config, a.raw)
        }
        Command::Run(a) => {
            let cfg = match &a.config {
                Some(path) => SuiteConfig::load(path)?,
                None => SuiteConfig::embedded(),
            };
            let benches = cfg.benches()?;
            let config = serde_json::to_value(&cfg)?;
            let dir = suite::run(&g.options(a.raw), &benches, Some(config))?;
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
        Command::Runs(a) => morphbench::export::report::print_runs(&a.dir, g.json),
        Command::Check(_) | Command::Fleet(_) => unreachable!("handled in run"),
        Command::Baseline(a) => {
            let b = morphbench::bench::fleet::baseline::Baseline::from_run(&a.run_dir)?;
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
        Command::D2h(a) => {
            let d2h = a.plan().map_err(anyhow::Error::msg)?;
            let config = serde_json::to_value(&d2h)?;
            one(Box::new(d2h), config, a.raw)
        }
        Command::Peak(a) => {
            let peak = a.plan().map_err(anyhow::Error::msg)?;
            let config = serde_json::to_value(&peak)?;
            one(Box::new(peak), config, false)
        }
        Command::Hol(a) => {
            let hol = a.plan()?;
            let config = serde_json::to_value(&hol)?;
            one(Box::new(hol), config, false)
        }
        Command::Sink(a) => morphbench::transport::sink::run_cli(
            &a.listen,
            a.max_payload,
            std::time::Duration::from_secs(a.timeout_s),
            a.once,
            g.quiet,
            a.transport,
            &a.rdma.choice(),
        ),
        Command::Rdma(a) => morphbench::bench::rdma::run(&a.plan(), &g.options(false)),
        Command::Pipeline(a) => {
            let opts = a.options(g).map_err(anyhow::Error::msg)?;
            if let Some(stages) = a.launch.spawn_local() {
                // Bad input is refused here, before any rank starts.
                opts.plan.validate(stages).map_err(anyhow::Error::msg)?;
                let args: Vec<String> = std::env::args().skip(1).collect();
                let max = morphbench::bench::pipeline::MAX_LOCAL_STAGES;
                return morphbench::cluster::local::run_local(stages, max, &args);
            }
            let dir = morphbench::bench::pipeline::run(&opts)?;
            after_ranked(dir.as_deref(), g)
        }
        Command::Links(a) => {
            if let Some(ranks) = a.launch.spawn_local() {
                let args: Vec<String> = std::env::args().skip(1).collect();
                let max = morphbench::cluster::launch::MAX_LOCAL;
                return morphbench::cluster::local::run_local(ranks, max, &args);
            }
            let dir = morphbench::bench::links::run(&a.options(g))?;
            after_ranked(dir.as_deref(), g)
        }
        Command::Sim(a) => sim_command(a, g),
    }
}

/// `morphbench sim`: the scenario from flags, a scenario file or a measured run (`--from`),
/// placed when asked (`--place`), run into its own run folder.
fn sim_command(
    a: &morphbench::cli::SimArgs,
    g: &morphbench::cli::GlobalArgs,
) -> anyhow::Result<()> {
    if let Some(file) = &a.validate {
        let dir = morphbench::bench::sim::validate::run(file, a.ablation, &g.options(false))?;
        return print_summary(&dir, g.json);
    }
    // With --json, standard output carries the summary alone.
    let quiet = g.quiet || g.json;
    let mut cfg = a.config()?;
    let links = match &a.from {
        Some(dir) if dir.join("links.csv").exists() => Some(sim_links(a, &mut cfg, dir, quiet)?),
        Some(dir) if a.place => anyhow::bail!(
            "--place needs a links run: {} has no links.csv (run `morphbench links`)",
            dir.display()
        ),
        _ => None,
    };
    if let Some(dir) = a
        .from
        .as_ref()
        .filter(|d| links.is_none() || d.join("kernels.csv").exists())
    {
        let cal = calibrate_from(dir, a.layers_per_stage)?;
        if !quiet {
            println!("{}", cal.note);
        }
        // Values given by flag or scenario file win over the calibration, and it says so.
        let given: Vec<&str> = [
            ("tf", cfg.tf.is_some()),
            ("tb", cfg.tb.is_some()),
            ("tw", cfg.tw.is_some()),
            ("d2h-ms", cfg.d2h_ms.is_some()),
            ("link-ms", cfg.link_ms.is_some()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect();
        if !quiet && !given.is_empty() {
            println!("given, so not calibrated: {}", given.join(", "));
        }
        let one = |x: f64| Some(OneOrMany::One(x));
        cfg.tf = cfg.tf.take().or(one(cal.tf_ms));
        cfg.tb = cfg.tb.take().or(one(cal.tb_ms));
        cfg.tw = cfg.tw.take().or(one(cal.tw_ms));
        cfg.d2h_ms = cfg.d2h_ms.or(cal.d2h_ms);
        cfg.link_ms = cfg.link_ms.or(cal.link_ms);
    }
    let trace = match &a.trace {
        Some(p) => Some(
            morphbench::export::read_input(p)
                .map_err(|e| anyhow::anyhow!("cannot read trace {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let plan = SimPlan::build(&cfg, trace.as_deref()).map_err(anyhow::Error::msg)?;
    if let (Some(costs), true) = (&links, a.place) {
        place(costs, &plan, quiet)?;
    }
    let timelines = match a.timeline.as_deref() {
        Some("none") => Vec::new(),
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None if plan.cases.first().is_some_and(|c| c.scenario.stages <= 32) => {
            vec!["static:1f1b".into(), "adaptive".into()]
        }
        None => Vec::new(),
    };
    let output = SimOutput {
        timelines,
        width: a.width as usize,
        trace_out: a.trace_out.clone(),
        bench_reps: if a.bench { 5 } else { 0 },
    };
    let bench: Box<dyn Bench> = Box::new(SimBench { plan, output });
    let dir = suite::run(
        &g.options(false),
        &[bench],
        Some(serde_json::to_value(&cfg)?),
    )?;
    print_summary(&dir.path, g.json)
}

/// `sim --from` a links run: the stages are its ranks in launcher order, each link costed at
/// the activation size (flags given still win). Returns the fitted costs for `--place`.
fn sim_links(
    a: &morphbench::cli::SimArgs,
    cfg: &mut morphbench::bench::sim::SimConfig,
    dir: &std::path::Path,
    quiet: bool,
) -> anyhow::Result<LinkCosts> {
    let costs = LinkCosts::from_run(dir, None, a.activation)?;
    match cfg.stages {
        Some(s) if s != costs.ranks => anyhow::bail!(
            "{} has {} ranks, so the pipeline has {} stages: drop --stages {s}",
            dir.display(),
            costs.ranks,
            costs.ranks
        ),
        _ => cfg.stages = Some(costs.ranks),
    }
    let launcher: Vec<usize> = (0..costs.ranks).collect();
    if cfg.link_ms.is_none() {
        let (link_ms, slow) = costs.links_of(&launcher);
        cfg.link_ms = Some(link_ms);
        cfg.slow.extend(
            slow.into_iter()
                .filter(|(_, d)| *d > 0.0)
                // To the µs: what a ping-pong's p50 supports, and what a label can show.
                .map(|(link, delay_ms)| morphbench::bench::sim::SlowLink {
                    link,
                    delay_ms: (delay_ms * 1e3).round() / 1e3,
                }),
        );
        cfg.occupy.extend(
            costs
                .occupancy_of(&launcher)
                .into_iter()
                .filter(|(_, ms)| *ms > 0.0)
                .map(|(link, ms)| morphbench::bench::sim::Occupy { link, ms }),
        );
    }
    if !quiet {
        println!("{}", costs.note());
        println!("launcher order: {}", costs.describe(&launcher));
    }
    Ok(costs)
}

/// `sim --place`: the best order of ranks into stages per schedule, against the launcher's.
fn place(costs: &LinkCosts, plan: &SimPlan, quiet: bool) -> anyhow::Result<()> {
    let base = &plan.cases[0].scenario;
    let schedules: Vec<morphbench::sim::Schedule> = ["adaptive", "1f1b"]
        .iter()
        .map(|s| s.parse().expect("built-in schedules"))
        .collect();
    let (found, exhaustive) =
        morphbench::bench::sim::place::place(costs, base, plan.mem_limit, &schedules)?;
    let n = costs.ranks;
    let how = if exhaustive {
        format!(
            "exhaustive over all {} orders",
            (1..=n as u64).product::<u64>()
        )
    } else {
        "heuristic: nearest-neighbour chains over the link costs, then pairwise swaps judged by the simulator (more than 8 ranks)"
            .to_string()
    };
    let show = |o: &[usize]| {
        o.iter()
            .map(|r| format!("r{r}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if quiet {
        return Ok(());
    }
    println!("placement of {n} ranks into stages ({how}), predicted iteration time:");
    println!(
        "  {:<10} {:<24} {:>12}   {:<24} {:>12} {:>8}",
        "schedule", "launcher order", "ms", "best order", "ms", "gain"
    );
    for p in &found {
        println!(
            "  {:<10} {:<24} {:>12.3}   {:<24} {:>12.3} {:>7.3}x",
            p.schedule,
            show(&(0..n).collect::<Vec<_>>()),
            p.launcher_ms,
            show(&p.best),
            p.best_ms,
            p.launcher_ms / p.best_ms
        );
    }
    for p in &found {
        println!("  best {} links: {}", p.schedule, costs.describe(&p.best));
    }
    Ok(())
}

/// After a multi-rank run, at rank 0 (the only rank with a run folder): its figures and
/// report (unless quiet), then its summary with `--json`.
fn after_ranked(
    dir: Option<&std::path::Path>,
    g: &morphbench::cli::GlobalArgs,
) -> anyhow::Result<()> {
    let Some(dir) = dir else {
        return Ok(());
    };
    if !g.quiet {
        plot(dir, Format::Both, &[], true)?;
    }
    print_summary(dir, g.json)
}

/// With `--json`, prints the run's summary.json (written when the run ended).
fn print_summary(dir: &std::path::Path, json: bool) -> anyhow::Result<()> {
    if json {
        let text = std::fs::read_to_string(dir.join("summary.json")).map_err(|e| {
            anyhow::anyhow!("cannot read {}: {e}", dir.join("summary.json").display())
        })?;
        println!("{text}");
    }
    Ok(())
}

/// Draws a run's figures and writes its report.
fn plot(
    dir: &std::path::Path,
    format: Format,
    compare: &[std::path::PathBuf],
    quiet: bool,
) -> anyhow::Result<morphbench::export::plot::PlotOutcome> {
    for d in std::iter::once(dir).chain(compare.iter().map(|p| p.as_path())) {
        let meta = morphbench::export::read_meta(d);
        let has_csv = std::fs::read_dir(d).is_ok_and(|mut it| {
            it.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == "csv")))
        });
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
    let outcome = morphbench::export::plot::plot_run(dir, format, compare)?;
    morphbench::export::report::write_report(dir, &outcome)?;
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

fn init_logging(quiet: bool, verbose: u8) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (_, 0) => "warn",
        (_, 1) => "morphbench=info,warn",
        _ => "morphbench=debug,info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// matrixmultiply sizes its thread pool from MATMUL_NUM_THREADS when first used; default it to
/// every core so the CPU baseline is the machine's, not one core's (it caps at 4 threads).
#[allow(unsafe_code)]
fn use_all_cores_for_cpu_baseline() {
    if std::env::var_os("MATMUL_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("MATMUL_NUM_THREADS", n.min(4).to_string()) };
    }
}
