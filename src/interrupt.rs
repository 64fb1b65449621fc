//! Ctrl-C and SIGTERM: nothing is lost and nothing is left behind. Every run folder open in
//! this process is finished as `aborted` (its rows so far stay, meta.json says so), every rank
//! this process started (`--local`) is ended, and the process exits with 128 + the signal, as
//! a shell expects. And the one other way a process ends from outside its work: a rank whose
//! rank 0 is gone gives up at once ([`give_up`]), whatever its test is doing.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

/// How an open run folder is kept as aborted (why: the signal or the cause): the record layer
/// says how when it opens one, so this module knows no file format.
pub type MarkAborted = fn(&Path, &str) -> anyhow::Result<()>;

static OPEN_RUNS: Mutex<Vec<(PathBuf, MarkAborted)>> = Mutex::new(Vec::new());
static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static INSTALL: Once = Once::new();
/// How this command reports an error: its exit code, and whether standard output must be one
/// JSON document (`--json`).
static ERROR_EXIT: Mutex<(u8, bool)> = Mutex::new((1, false));

/// How this process's errors end it (main sets it once it knows the command).
pub fn set_error_exit(code: u8, json: bool) {
    *lock(&ERROR_EXIT) = (code, json);
}

/// Ends the process now with `why` as its error, as main would have had the error come back
/// to it: for a thread that finds the run cannot go on while the main thread is held in work
/// that cannot be cut short (a follower's test, when rank 0 is gone). The ranks this process
/// started are ended and its open run folders kept as aborted, with their rows.
pub fn give_up(why: &str) -> ! {
    let runs = lock(&OPEN_RUNS);
    stop_children();
    for (dir, mark_aborted) in runs.iter() {
        let _ = mark_aborted(dir, why);
    }
    std::process::exit(i32::from(report_error(why)))
}

/// Prints `why` as this command's error (on stderr; with `--json`, standard output is the one
/// JSON document `{"error", "exit_code"}`) and returns the exit code it ends with.
pub fn report_error(why: &str) -> u8 {
    let (code, json) = *lock(&ERROR_EXIT);
    eprintln!("error: {why}");
    if json {
        println!("{}", serde_json::json!({ "error": why, "exit_code": code }));
    }
    code
}

/// Starts the thread that waits for SIGINT and SIGTERM (once per process).
pub fn install() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
            tracing::warn!("cannot watch for Ctrl-C: an interrupted run stays marked running");
            return;
        };
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // Held until the process exits: a run that fails because of the signal (its
                // ranks ended) cannot finish itself as failed over the abort.
                let runs = lock(&OPEN_RUNS);
                stop_children();
                abort_open_runs(&runs, sig);
                std::process::exit(128 + sig);
            }
        });
    });
}

/// A run folder now open (its meta.json is rewritten as aborted on a signal).
pub fn opened(path: PathBuf, mark_aborted: MarkAborted) {
    install();
    lock(&OPEN_RUNS).push((path, mark_aborted));
}

/// A run folder finished: a signal no longer touches it.
pub fn closed(path: &Path) {
    lock(&OPEN_RUNS).retain(|(p, _)| p != path);
}

/// A rank this process started: a signal ends it too.
pub fn child_started(pid: u32) {
    install();
    lock(&CHILDREN).push(pid);
}

pub fn child_ended(pid: u32) {
    lock(&CHILDREN).retain(|&p| p != pid);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends SIGTERM to every rank this process started (by the system call: no `kill` program
/// is looked up on PATH).
fn stop_children() {
    for &pid in lock(&CHILDREN).iter() {
        // SIGTERM first: a rank that is itself a run's rank 0 finishes its folder as aborted.
        terminate(pid);
    }
}

/// SIGTERM to the process `pid`, best effort (one already gone is no error).
#[allow(unsafe_code)]
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // Never 0 or negative: those would signal a whole process group.
    if pid > 0 {
        // SAFETY: kill takes two integers and touches no memory of this process; it signals
        // only the one process `pid` (a child this process started), checked positive above.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

fn abort_open_runs(runs: &[(PathBuf, MarkAborted)], sig: i32) {
    let name = if sig == signal_hook::consts::SIGINT {
        "SIGINT (Ctrl-C)"
    } else {
        "SIGTERM"
    };
    for (dir, mark_aborted) in runs {
        if let Err(e) = mark_aborted(dir, name) {
            eprintln!("cannot mark {} aborted: {e:#}", dir.display());
        } else {
            eprintln!(
                "interrupted by {name}: {} kept with the rows written so far (status aborted)",
                dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_child_is_ended_by_sigterm_without_a_kill_program() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // Only this test's child (stop_children would end every test's).
        super::terminate(child.id());
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
        // Nothing for a pid that does not fit, or 0 (which would be the process group).
        super::terminate(u32::MAX);
        super::terminate(0);
    }
}
