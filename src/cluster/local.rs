//! `--local N`: starts N ranks of this program on this machine, each told its rank, the world
//! size and a loopback rendezvous, and waits for them. The first rank to fail ends the others.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Starts `ranks` copies of this program with `args` (the command line as given, `--local`
/// included: a process that has `--rank` is a rank, not a launcher). Each gets its share of
/// the cores for a CPU driver (LP_NUM_THREADS); ranks above 0 are quiet.
pub fn run_local(ranks: u32, max: u32, args: &[String]) -> Result<()> {
    if !(1..=max).contains(&ranks) {
        bail!("--local {ranks}: give 1 to {max} ranks");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let exe = std::env::current_exe().context("cannot find this program to start its ranks")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / ranks as usize).max(1).to_string();
    let quiet = args.iter().any(|a| a == "-q" || a == "--quiet");
    // With --json this launcher's standard output is the one document: rank 0's is held back
    // and passed on only if every rank succeeds (a failed run's document is the launcher's).
    let json = args.iter().any(|a| a == "--json");
    let mut held: Option<std::thread::JoinHandle<Vec<u8>>> = None;
    let mut children = Vec::new();
    for r in 0..ranks {
        let mut cmd = Command::new(&exe);
        cmd.args(args)
            .args(["--rank", &r.to_string(), "--world", &ranks.to_string()])
            .args(["--rendezvous", &format!("127.0.0.1:{port}")]);
        if std::env::var_os("LP_NUM_THREADS").is_none() {
            cmd.env("LP_NUM_THREADS", &threads);
        }
        if r == 0 && json {
            cmd.stdout(Stdio::piped());
        }
        if r > 0 {
            cmd.stdout(Stdio::null());
            if !quiet {
                cmd.arg("-q");
            }
        }
        match cmd.spawn() {
            Ok(mut c) => {
                crate::interrupt::child_started(c.id());
                if let Some(mut out) = c.stdout.take() {
                    held = Some(std::thread::spawn(move || {
                        let mut doc = Vec::new();
                        let _ = std::io::Read::read_to_end(&mut out, &mut doc);
                        doc
                    }));
                }
                children.push((r, c));
            }
            Err(e) => {
                stop(&mut children);
                return Err(e).context("cannot start a rank");
            }
        }
    }
    let failed = wait_all(children)?;
    let doc = held
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    if !failed.is_empty() {
        let first = serde_json::from_slice::<serde_json::Value>(&doc)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string));
        match first {
            Some(e) => bail!("rank(s) {} failed; rank 0: {e}", failed.join(", ")),
            None => bail!(
                "rank(s) {} failed (their errors are above)",
                failed.join(", ")
            ),
        }
    }
    use std::io::Write;
    std::io::stdout().write_all(&doc)?;
    Ok(())
}

/// Waits for every child; once one fails, the others get half a second and are ended.
fn wait_all(mut running: Vec<(u32, Child)>) -> Result<Vec<String>> {
    let mut failed = Vec::new();
    while !running.is_empty() {
        let mut still = Vec::new();
        for (r, mut c) in running {
            match c.try_wait()? {
                Some(status) => {
                    crate::interrupt::child_ended(c.id());
                    if !status.success() {
                        failed.push(r.to_string());
                    }
                }
                None => still.push((r, c)),
            }
        }
        if !failed.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
            stop(&mut still);
            break;
        }
        running = still;
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(failed)
}

fn stop(children: &mut [(u32, Child)]) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
        crate::interrupt::child_ended(c.id());
    }
}
