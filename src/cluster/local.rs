//! `--local N`: starts N ranks of this program on this machine, each told its rank, the world
//! size and a loopback rendezvous, and waits for them. The first rank to fail ends the others.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Starts `ranks` copies of this program with `args` (the command line as given, `--local`
/// included: a process that has `--rank` is a rank, not a launcher). Each gets its share of
/// the cores for a CPU driver (LP_NUM_THREADS); ranks above 0 are quiet.
pub fn run_local(ranks: u32, max: u32, args: &[String]) -> Result<()> {
    let (children, held) = spawn(ranks, max, args, Cores::Shared)?;
    let failed = wait_all(children)?;
    let doc = held
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    if !failed.is_empty() {
        bail_with(&failed, &doc)?;
    }
    use std::io::Write;
    std::io::stdout().write_all(&doc)?;
    Ok(())
}

/// As [`run_local`] for a gate (`fleet`), whose rank 0 judges every rank and whose exit code is
/// its verdict: a rank that fails does not end the others (rank 0 names it), and once rank 0
/// has ended, with 0 (all pass) or 1 (a node failed), the others get a few seconds and its
/// code is returned. Any other end of rank 0 is an error. Every rank gets all the cores: the
/// gate's ranks of one machine take turns on what a CPU driver shares, and a rank held to one
/// core measures that core (on a VM, one vCPU may run at 0.6x of the other beside another
/// tenant's load, unseen as steal), not the machine.
pub fn run_local_gate(ranks: u32, max: u32, args: &[String]) -> Result<u8> {
    let (mut children, held) = spawn(ranks, max, args, Cores::All)?;
    let mut root = children.remove(0).1;
    let status = root.wait()?;
    crate::interrupt::child_ended(root.id());
    let_end(&mut children, Duration::from_secs(5))?;
    let doc = held
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    match status.code() {
        Some(code @ (0 | 1)) => {
            use std::io::Write;
            std::io::stdout().write_all(&doc)?;
            Ok(code as u8)
        }
        _ => bail_with(&["0".to_string()], &doc).map(|()| 2),
    }
}

/// As [`run_local_gate`] with `--json` among `args`, for a caller that reads the verdict
/// itself (`morphbench health`): rank 0's document is returned, not printed, and every rank is
/// ended at `deadline`, when `None` is returned.
pub fn run_local_gate_within(
    ranks: u32,
    max: u32,
    args: &[String],
    deadline: std::time::Instant,
) -> Result<Option<(u8, Vec<u8>)>> {
    let (mut children, held) = spawn(ranks, max, args, Cores::All)?;
    let status = loop {
        if let Some(status) = children[0].1.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            stop(&mut children);
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let root = children.remove(0).1;
    crate::interrupt::child_ended(root.id());
    let_end(&mut children, Duration::from_secs(2))?;
    let doc = held
        .map(|t| t.join().unwrap_or_default())
        .unwrap_or_default();
    match status.code() {
        Some(code @ (0 | 1)) => Ok(Some((code as u8, doc))),
        _ => bail_with(&["0".to_string()], &doc).map(|()| None),
    }
}

/// The error of a failed local run, with rank 0's reason when its document has one.
fn bail_with(failed: &[String], doc: &[u8]) -> Result<()> {
    let first = serde_json::from_slice::<serde_json::Value>(doc)
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

type Held = Option<std::thread::JoinHandle<Vec<u8>>>;

/// The cores each rank's CPU driver may use.
#[derive(Clone, Copy, PartialEq)]
enum Cores {
    /// Its share: the ranks run at once.
    Shared,
    /// All of them: the ranks take turns.
    All,
}

/// Starts the ranks, rank 0 first; with --json rank 0's standard output is held.
fn spawn(ranks: u32, max: u32, args: &[String], cores: Cores) -> Result<(Vec<(u32, Child)>, Held)> {
    if !(1..=max).contains(&ranks) {
        bail!("--local {ranks}: give 1 to {max} ranks");
    }
    // Rank 0's listener is bound here and handed to it (no gap between choosing the port and
    // binding it in which another process could take it), and the ranks get a secret of
    // their own, in their environment (readable by this user and root alone).
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let token = super::auth::fresh_token();
    let exe = std::env::current_exe().context("cannot find this program to start its ranks")?;
    let all = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = match cores {
        Cores::Shared => (all / ranks as usize).max(1),
        Cores::All => all,
    }
    .to_string();
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
        cmd.env(super::auth::TOKEN_ENV, &token);
        if r == 0 {
            hand_over(&mut cmd, &listener);
        } else {
            cmd.env_remove(super::world::LISTEN_FD_ENV);
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
    Ok((children, held))
}

/// The descriptor rank 0 finds its listener at.
const HANDED_FD: i32 = 3;

/// Gives rank 0 `listener` as descriptor [`HANDED_FD`], named in its environment.
#[allow(unsafe_code)]
fn hand_over(cmd: &mut Command, listener: &std::net::TcpListener) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = listener.as_raw_fd();
    cmd.env(super::world::LISTEN_FD_ENV, HANDED_FD.to_string());
    // SAFETY: between fork and exec only async-signal-safe calls (dup2, fcntl) on descriptors
    // this process owns; dup2 onto another number leaves the copy open across exec, and a
    // listener that already is descriptor 3 has its close-on-exec flag cleared instead.
    unsafe {
        cmd.pre_exec(move || {
            let rc = if fd == HANDED_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, HANDED_FD)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
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

/// Gives the ranks left after rank 0 up to `grace` to end on their own, then ends them.
fn let_end(children: &mut [(u32, Child)], grace: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        let mut all_done = true;
        for (_, c) in children.iter_mut() {
            all_done &= c.try_wait()?.is_some();
        }
        if all_done {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop(children);
    Ok(())
}

fn stop(children: &mut [(u32, Child)]) {
    for (_, c) in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
        crate::interrupt::child_ended(c.id());
    }
}
