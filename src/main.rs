#![deny(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use morphbench::commands;
use morphbench::commands::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.global.quiet, cli.global.verbose);
    use_all_cores_for_cpu_baseline();
    give_mesa_a_runtime_dir();
    // Errors end the process as this command's do, from main or from a thread that must end
    // it (a follower whose rank 0 is gone).
    morphbench::interrupt::set_error_exit(commands::error_code(&cli.command), cli.global.json);
    match commands::run(cli) {
        Ok(code) => code,
        Err(e) => ExitCode::from(morphbench::interrupt::report_error(&format!("{e:#}"))),
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
#[allow(unsafe_code)]
fn use_all_cores_for_cpu_baseline() {
    if std::env::var_os("MATMUL_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("MATMUL_NUM_THREADS", n.min(4).to_string()) };
    }
}

/// Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not set in the
/// environment" at every adapter probe when the variable is missing or not a directory, as it
/// is where Slurm's HealthCheckProgram, a prolog or a DaemonSet starts the binary (26 such
/// lines in one `health`). A private directory (mode 0700, as the variable requires) silences
/// them; a valid one is left alone.
#[allow(unsafe_code)]
fn give_mesa_a_runtime_dir() {
    let valid = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| !d.is_empty() && std::path::Path::new(&d).is_dir());
    if valid {
        return;
    }
    let dir = std::env::temp_dir().join(format!("morphbench-runtime-{}", morphbench::host::uid()));
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    // Only a real directory of this user's, private to it (not another user's, not a link).
    let ours = std::fs::symlink_metadata(&dir)
        .is_ok_and(|m| m.is_dir() && m.uid() == morphbench::host::uid() && m.mode() & 0o077 == 0);
    if ours {
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
}
