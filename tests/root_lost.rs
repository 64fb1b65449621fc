//! Rank 0 gone mid-test (stopped by SIGSTOP, or killed): every follower of `links`, `pipeline`
//! and `fleet` notices within the heartbeat budget (3 s of silence, at once on a closed
//! connection) whatever it is doing, stops its test and exits non-zero naming rank 0, and the
//! rows rank 0 wrote before the fault stay readable.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One case at a time: three ranks each, on a 2-core machine, with a deadline to meet.
static TURN: Mutex<()> = Mutex::new(());

/// 3 s of silence and the margin the issue allows.
const NOTICED_WITHIN: Duration = Duration::from_secs(5);

fn start(home: &Path, bench: &[&str], rank: u32, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(bench)
        .args(["--rank", &rank.to_string(), "--world", "3"])
        .args(["--rendezvous", &format!("127.0.0.1:{port}")])
        .args(["--out", home.join("results").to_str().unwrap(), "-q"])
        .current_dir(home)
        .env("HOME", home)
        .env("MORPHBENCH_TOKEN", common::TOKEN)
        .env("XDG_RUNTIME_DIR", home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Rank 0's run folder once its `file` holds more than `lines` lines (with meta.json, 0: the
/// world has formed and the tests begin).
fn wait_for(home: &Path, file: &str, lines: usize, started: Instant) -> std::path::PathBuf {
    let out = home.join("results");
    loop {
        assert!(started.elapsed() < Duration::from_secs(120), "no {file}");
        let run = std::fs::read_dir(&out)
            .ok()
            .and_then(|mut d| d.find_map(|e| e.ok().map(|e| e.path()).filter(|p| !p.is_symlink())));
        if let Some(run) = run {
            let text = std::fs::read_to_string(run.join(file)).unwrap_or_default();
            if text.lines().count() > lines {
                return run;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// When to fault rank 0: once its run folder's `file` has more than `lines` lines, and
/// `settle` later.
struct Mid {
    file: &'static str,
    lines: usize,
    settle: Duration,
}

/// Starts three ranks of `bench`, faults rank 0 with `signal` mid-test, and checks what every
/// follower did and that rank 0's rows of `csv` (if it wrote any) are whole.
fn rank_0_lost(bench: &[&str], csv: &str, mid: Mid, signal: &str) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let started = Instant::now();
    let mut ranks: Vec<Child> = (0..3).map(|r| start(home.path(), bench, r, port)).collect();
    let run = wait_for(home.path(), mid.file, mid.lines, started);
    std::thread::sleep(mid.settle);
    let mut zero = ranks.remove(0);
    let kill = |sig: &str, pid: u32| {
        Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
    };
    let kept = std::fs::read_to_string(run.join(csv)).unwrap_or_default();
    assert!(kill(signal, zero.id()).success());
    let faulted = Instant::now();
    for (i, follower) in ranks.into_iter().enumerate() {
        let o = follower.wait_with_output().unwrap();
        let took = faulted.elapsed();
        let err = common::stderr(&o);
        let rank = i + 1;
        eprintln!("{bench:?} {signal}: rank {rank} exited {took:?} after");
        assert!(
            took < NOTICED_WITHIN,
            "rank {rank} took {took:?} after {signal}: {err}"
        );
        assert!(!o.status.success(), "rank {rank} exited 0: {err}");
        assert!(err.contains("rank 0 ("), "rank {rank}: {err}");
        // Killed: its connections close, and a follower measuring a link with rank 0 itself
        // may hear it there first.
        let why: &[&str] = if signal == "-STOP" {
            &["stopped answering"]
        } else {
            &["died mid-run", "closed"]
        };
        assert!(
            why.iter().any(|w| err.contains(w)),
            "rank {rank} after {signal}: {err}"
        );
    }
    let _ = kill("-KILL", zero.id());
    let _ = zero.wait();
    // The rows rank 0 had written stay whole: each one read back as a record.
    if !kept.is_empty() {
        let now = std::fs::read_to_string(run.join(csv)).unwrap();
        assert!(now.starts_with(&kept), "rows were lost");
        let (h, records) = common::read_csv(&run.join(csv));
        assert!(records.iter().all(|r| r.len() == h.len()));
    }
}

const LINKS: &[&str] = &[
    "links",
    "--no-fingerprint",
    "--sizes",
    "8,64K,1M",
    "--budget-ms",
    "500",
    "--iters",
    "1000000",
];

const PIPELINE: &[&str] = &[
    "pipeline",
    "--layers",
    "1",
    "--hidden",
    "32",
    "--tokens",
    "16",
    "--microbatches",
    "4",
    "--iters",
    "10000",
    "--schedule",
    "1f1b",
    "--comm",
    "inline",
];

const FLEET: &[&str] = &["fleet", "--level", "quick"];

/// Links: once rank 0 has written a row (a pair test of the first round is done, the next
/// under way).
const LINKS_MID: Mid = Mid {
    file: "links.csv",
    lines: 1,
    settle: Duration::from_millis(300),
};

/// `secs` after the run folder appeared: the ranks at their tests (the pipeline's first case
/// runs for minutes; the quick gate's tests for about 10 s).
fn started(secs: u64) -> Mid {
    Mid {
        file: "meta.json",
        lines: 0,
        settle: Duration::from_secs(secs),
    }
}

#[test]
fn links_followers_give_up_on_a_stopped_rank_0() {
    rank_0_lost(LINKS, "links.csv", LINKS_MID, "-STOP");
}

#[test]
fn links_followers_give_up_on_a_killed_rank_0() {
    rank_0_lost(LINKS, "links.csv", LINKS_MID, "-KILL");
}

#[test]
fn pipeline_followers_give_up_on_a_stopped_rank_0() {
    rank_0_lost(PIPELINE, "pipeline.csv", started(3), "-STOP");
}

#[test]
fn pipeline_followers_give_up_on_a_killed_rank_0() {
    rank_0_lost(PIPELINE, "pipeline.csv", started(3), "-KILL");
}

#[test]
fn fleet_followers_give_up_on_a_stopped_rank_0() {
    rank_0_lost(FLEET, "fleet.csv", started(2), "-STOP");
}

#[test]
fn fleet_followers_give_up_on_a_killed_rank_0() {
    rank_0_lost(FLEET, "fleet.csv", started(2), "-KILL");
}
