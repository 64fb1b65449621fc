use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use morphbench::cli::{Cli, Command};
use morphbench::config::SuiteConfig;
use morphbench::suite::{self, SuitePlan};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.quiet, cli.global.verbose);
    use_all_cores_for_cpu_baseline();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let g = &cli.global;
    match &cli.command {
        Command::Info(a) => morphbench::info::run(g.backend, a.json),
        Command::Kernels(a) => {
            let plan = SuitePlan {
                kernels: Some(a.plan().map_err(anyhow::Error::msg)?),
            };
            suite::run(g, &plan, None, a.raw).map(|_| ())
        }
        Command::Run(a) => {
            let cfg = match &a.config {
                Some(path) => SuiteConfig::load(path)?,
                None => SuiteConfig::embedded(),
            };
            let plan = SuitePlan::from_config(&cfg)?;
            suite::run(g, &plan, Some(serde_json::to_value(&cfg)?), a.raw).map(|_| ())
        }
    }
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
fn use_all_cores_for_cpu_baseline() {
    if std::env::var_os("MATMUL_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("MATMUL_NUM_THREADS", n.min(4).to_string()) };
    }
}
