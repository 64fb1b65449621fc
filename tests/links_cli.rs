//! `morphbench links` with ranks launched by hand on loopback (`--rank/--world/--rendezvous`):
//! every link measured once and verified, and the faults of a multi-rank run each ending it
//! within a bounded time with an error that names the rank: a rank that never arrives, a world
//! size that disagrees, a rank that dies mid-run.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{col, only_run, read_csv};

/// Starts one rank; `extra` comes after the common flags.
fn rank(home: &Path, rank: u32, world: u32, port: u16, extra: &[&str]) -> Child {
    rank_with_env(home, rank, world, port, extra, &[])
}

/// [`rank`] with environment variables of its own.
fn rank_with_env(
    home: &Path,
    rank: u32,
    world: u32,
    port: u16,
    extra: &[&str],
    vars: &[(&str, &str)],
) -> Child {
    let out = home.join("results");
    Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args([
            "links",
            "--rank",
            &rank.to_string(),
            "--world",
            &world.to_string(),
        ])
        .args(["--rendezvous", &format!("127.0.0.1:{port}")])
        .args(["--out", out.to_str().unwrap(), "--no-fingerprint", "-q"])
        .args(extra)
        .current_dir(home)
        .env("HOME", home)
        .env("MORPHBENCH_TOKEN", common::TOKEN)
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(c: Child) -> (bool, String) {
    let o = c.wait_with_output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const SMALL: &[&str] = &["--sizes", "8,64K", "--iters", "40", "--budget-ms", "20"];

#[test]
fn three_ranks_measure_every_link_once() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let ranks: Vec<Child> = (0..3)
        .map(|r| rank(home.path(), r, 3, port, SMALL))
        .collect();
    for (r, c) in ranks.into_iter().enumerate() {
        let (ok, err) = finish(c);
        assert!(ok, "rank {r}: {err}");
    }
    let run = only_run(&home.path().join("results"));
    let (h, all) = read_csv(&run.join("links.csv"));
    // 3 pairs x 2 sizes x (ping-pong, each way) in the rounds; a suspect pair measured again
    // alone, at the sizes of its suspect rows, adds 3 rows per size as `retest`.
    let (rows, retests): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|r| &r[col(&h, "round")] != "retest");
    assert_eq!(rows.len(), 18);
    assert_eq!(retests.len() % 3, 0);
    let key = |r: &csv::StringRecord| {
        let (a, b) = (&r[col(&h, "src_rank")], &r[col(&h, "dst_rank")]);
        (
            a.min(b).to_string(),
            a.max(b).to_string(),
            r[col(&h, "bytes")].to_string(),
        )
    };
    for t in &retests {
        // Only a suspect's sizes are measured again: its pair has a judged row at that size.
        assert!(
            rows.iter()
                .any(|r| key(r) == key(t) && !r[col(&h, "confirmed")].is_empty()),
            "a retest of no suspect: {t:?}"
        );
    }
    for r in &rows {
        let round: u32 = r[col(&h, "round")].parse().unwrap();
        assert!((1..=3).contains(&round), "{round}");
        // A row stays flagged only with a retest that confirmed it.
        if &r[col(&h, "flagged")] == "true" {
            assert_eq!(&r[col(&h, "confirmed")], "true");
        }
    }
    let pairs: std::collections::BTreeSet<(String, String)> = rows
        .iter()
        .map(|r| {
            let (a, b) = (&r[col(&h, "src_rank")], &r[col(&h, "dst_rank")]);
            (a.min(b).to_string(), a.max(b).to_string())
        })
        .collect();
    assert_eq!(pairs.len(), 3, "{pairs:?}");
    for r in &rows {
        assert_eq!(&r[col(&h, "verified")], "true");
        assert_eq!(&r[col(&h, "intra_node")], "true");
        assert!(!r[col(&h, "slowdown")].is_empty(), "judged at the end");
        let n: usize = r[col(&h, "n")].parse().unwrap();
        assert!((5..=40).contains(&n), "{n}");
        let streams = &r[col(&h, "direction")] == "oneway";
        assert_eq!(!r[col(&h, "gbps")].is_empty(), streams);
    }
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"status\": \"complete\""), "{meta}");
}

#[test]
fn a_rank_that_never_arrives_is_named_in_bounded_time() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let started = Instant::now();
    let wait = ["--wait-s", "2"];
    let zero = rank(home.path(), 0, 3, port, &wait);
    let one = rank(home.path(), 1, 3, port, &wait);
    let (ok, err) = finish(zero);
    assert!(!ok);
    assert!(err.contains("rank(s) 2 of 3 never arrived"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
    let (ok, err) = finish(one);
    assert!(!ok && err.contains("never arrived"), "{err}");
}

#[test]
fn disagreeing_world_sizes_are_named() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let zero = rank(home.path(), 0, 2, port, &["--wait-s", "5"]);
    let one = rank(home.path(), 1, 3, port, &["--wait-s", "5"]);
    let (ok, err) = finish(zero);
    assert!(
        !ok && err.contains("says the world is 3 ranks, rank 0 says 2"),
        "{err}"
    );
    let (ok, err) = finish(one);
    assert!(!ok && err.contains("rank 0 ended the run"), "{err}");
}

#[test]
fn a_rank_that_dies_mid_run_ends_the_run_and_is_named() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    // Long tests, so the death falls inside the first round.
    let slow = [
        "--sizes",
        "8,64K",
        "--budget-ms",
        "1500",
        "--iters",
        "1000000",
    ];
    let mut ranks: Vec<Child> = (0..3)
        .map(|r| rank(home.path(), r, 3, port, &slow))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let mut victim = ranks.remove(2);
    victim.kill().unwrap();
    let killed = Instant::now();
    let _ = victim.wait();
    let mut rest = ranks.into_iter();
    let (ok, err) = finish(rest.next().unwrap());
    let took = killed.elapsed();
    assert!(!ok);
    assert!(
        err.contains("rank 2 (") && err.contains("died mid-run"),
        "{err}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let (ok, _) = finish(rest.next().unwrap());
    assert!(!ok, "rank 1 exits non-zero too");
    let run = only_run(&home.path().join("results"));
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"status\": \"failed\""), "{meta}");
    assert!(meta.contains("died mid-run"), "{meta}");
    // Rows written before the death are whole (here: the header at least).
    let (h, _rows) = read_csv(&run.join("links.csv"));
    assert!(h.contains(&"flagged".to_string()));
}

/// A rank stopped mid-run (SIGSTOP: alive, silent) is named by its silence within a few seconds,
/// far inside `--timeout-s`, and the run is failed with the rows so far.
#[test]
fn a_stopped_rank_is_named_within_seconds() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let slow = [
        "--sizes",
        "8,64K",
        "--budget-ms",
        "1500",
        "--iters",
        "1000000",
        "--timeout-s",
        "30",
    ];
    let mut ranks: Vec<Child> = (0..3)
        .map(|r| rank(home.path(), r, 3, port, &slow))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let mut victim = ranks.remove(2);
    let signal = |sig: &str| {
        Command::new("kill")
            .args([sig, &victim.id().to_string()])
            .status()
            .unwrap()
    };
    assert!(signal("-STOP").success());
    let stopped = Instant::now();
    let mut rest = ranks.into_iter();
    let (ok, err) = finish(rest.next().unwrap());
    let took = stopped.elapsed();
    let _ = victim.kill();
    let _ = victim.wait();
    assert!(!ok);
    assert!(
        err.contains("rank 2 (") && err.contains("stopped answering"),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
    let _ = finish(rest.next().unwrap());
    let run = only_run(&home.path().join("results"));
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"status\": \"failed\""), "{meta}");
}

#[test]
fn json_under_local_is_one_document_whether_the_ranks_succeed_or_fail() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let run = |extra: &[&str]| {
        let mut args = vec!["links", "--json", "--no-fingerprint", "--sizes", "8"];
        args.extend_from_slice(&["--budget-ms", "20", "--out", out.to_str().unwrap()]);
        args.extend_from_slice(extra);
        common::morphbench(&args, home.path())
    };
    // A world of one fails on rank 0 and in the launcher: one document, the launcher's, with
    // rank 0's reason in it and the process's exit code.
    let o = run(&["--local", "1"]);
    let text = common::stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&text).expect("stdout is one JSON document");
    assert_eq!(
        v["exit_code"].as_i64(),
        o.status.code().map(i64::from),
        "{text}"
    );
    assert!(
        v["error"].as_str().unwrap().contains("a world of 1 rank"),
        "{text}"
    );
    // Two ranks succeed: rank 0's summary is the document.
    let o = run(&["--local", "2"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let text = common::stdout(&o);
    let v: serde_json::Value = serde_json::from_str(&text).expect("stdout is one JSON document");
    assert_eq!(v["status"], "complete", "{text}");
}

#[test]
fn four_ranks_started_by_torchrun_variables_alone_measure_every_link() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let out = home.path().join("results");
    let ranks: Vec<Child> = (0..4u32)
        .map(|r| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_morphbench"));
            c.args(["links", "--out", out.to_str().unwrap(), "-q"])
                .args(["--sizes", "8", "--iters", "20", "--budget-ms", "20"])
                .current_dir(home.path())
                .env("HOME", home.path())
                // Only torchrun's variables: no other launcher, no rendezvous flag.
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "4")
                .env("LOCAL_RANK", r.to_string())
                .env("LOCAL_WORLD_SIZE", "4")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, _) in std::env::vars() {
                let other = ["SLURM_", "OMPI_", "PMI_", "MORPHBENCH_", "TORCHELASTIC_"];
                if other.iter().any(|p| k.starts_with(p)) || k == "JOB_COMPLETION_INDEX" {
                    c.env_remove(&k);
                }
            }
            // The job's secret, as a torchrun job passes any variable on.
            c.env("MORPHBENCH_TOKEN", common::TOKEN);
            c.spawn().unwrap()
        })
        .collect();
    for (r, c) in ranks.into_iter().enumerate() {
        let (ok, err) = finish(c);
        assert!(ok, "rank {r}: {err}");
    }
    let run = only_run(&out);
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"launcher\": \"torchrun\""), "{meta}");
    let (h, rows) = read_csv(&run.join("links.csv"));
    let pairs: std::collections::BTreeSet<(String, String)> = rows
        .iter()
        .filter(|r| &r[col(&h, "round")] != "retest")
        .map(|r| {
            let (a, b) = (&r[col(&h, "src_rank")], &r[col(&h, "dst_rank")]);
            (a.min(b).to_string(), a.max(b).to_string())
        })
        .collect();
    assert_eq!(pairs.len(), 6, "{pairs:?}");
    // Each rank's fingerprint carries the local rank torchrun gave it.
    let (h, nodes) = read_csv(&run.join("nodes.csv"));
    for n in &nodes {
        assert_eq!(&n[col(&h, "local_rank")], &n[col(&h, "rank")], "{n:?}");
    }
}

/// The control plane at fleet scale, on one machine: 128 ranks on loopback, the quick pattern,
/// the smallest tests. The run completes with every rank in 3 rounds of 64 pairs; in a second
/// run, a rank killed once the rows have started is named and the run fails.
#[test]
fn a_hundred_and_twenty_eight_ranks_complete_and_a_killed_one_is_named() {
    const N: u32 = 128;
    let quick = [
        "--pattern",
        "quick",
        "--seed",
        "11",
        "--sizes",
        "8",
        "--iters",
        "20",
        "--budget-ms",
        "10",
        "--wait-s",
        "120",
    ];
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let ranks: Vec<Child> = (0..N)
        .map(|r| rank(home.path(), r, N, port, &quick))
        .collect();
    for (r, c) in ranks.into_iter().enumerate() {
        let (ok, err) = finish(c);
        assert!(ok, "rank {r}: {err}");
    }
    let run = only_run(&home.path().join("results"));
    let (h, rows) = read_csv(&run.join("links.csv"));
    let matrix: Vec<_> = rows
        .iter()
        .filter(|r| &r[col(&h, "round")] != "retest")
        .collect();
    // 3 rounds x 64 pairs x (ping-pong, each way).
    assert_eq!(matrix.len(), 3 * 64 * 3);
    let mut met = vec![std::collections::BTreeSet::new(); N as usize];
    for r in &matrix {
        let (a, b): (usize, usize) = (
            r[col(&h, "src_rank")].parse().unwrap(),
            r[col(&h, "dst_rank")].parse().unwrap(),
        );
        met[a].insert(b);
        met[b].insert(a);
    }
    assert!(
        met.iter().all(|m| m.len() >= 2),
        "every rank met several partners"
    );
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"status\": \"complete\""), "{meta}");
    assert!(
        meta.contains("\"pattern\": \"quick\"") && meta.contains("\"seed\": 11"),
        "{meta}"
    );

    // Again, with longer tests; rank 77 is killed once rank 0 has written rows.
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let slow = [
        "--pattern",
        "quick",
        "--sizes",
        "8",
        "--iters",
        "1000000",
        "--budget-ms",
        "400",
        "--wait-s",
        "120",
    ];
    let mut ranks: Vec<Child> = (0..N)
        .map(|r| rank(home.path(), r, N, port, &slow))
        .collect();
    let out = home.path().join("results");
    let started = Instant::now();
    let rows_written = || {
        std::fs::read_dir(&out)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| {
                let csv = std::fs::read_to_string(d.path().join("links.csv")).unwrap_or_default();
                csv.lines().count() > 1
            })
    };
    while !rows_written() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no rows within 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut victim = ranks.remove(77);
    victim.kill().unwrap();
    let killed = Instant::now();
    let _ = victim.wait();
    let mut rest = ranks.into_iter();
    let (ok, err) = finish(rest.next().unwrap());
    assert!(!ok);
    assert!(
        err.contains("rank 77 (") && err.contains("died mid-run"),
        "{err}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(20),
        "{:?}",
        killed.elapsed()
    );
    for c in rest {
        let (ok, _) = finish(c);
        assert!(!ok, "every rank exits non-zero");
    }
    let run = only_run(&out);
    let meta = std::fs::read_to_string(run.join("meta.json")).unwrap();
    assert!(meta.contains("\"status\": \"failed\""), "{meta}");
}

#[test]
fn a_topology_file_classes_every_link_and_a_broken_one_is_refused_before_it_starts() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let host = common::stdout(&Command::new("hostname").output().unwrap());
    let good = home.path().join("topology.conf");
    std::fs::write(
        &good,
        format!(
            "SwitchName=leaf0 Nodes={}\nSwitchName=spine Switches=leaf0\n",
            host.trim()
        ),
    )
    .unwrap();
    let bad = home.path().join("bad.conf");
    std::fs::write(
        &bad,
        "SwitchName=leaf0 Nodes=a\nSwitchName=spine Switches=leaf9\n",
    )
    .unwrap();
    let run = |file: &Path| {
        let mut args = vec!["links", "--local", "2", "--no-fingerprint", "--sizes", "8"];
        args.extend_from_slice(&["--budget-ms", "20", "--out", out.to_str().unwrap()]);
        args.extend_from_slice(&["--topology", file.to_str().unwrap()]);
        common::morphbench(&args, home.path())
    };
    let o = run(&bad);
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let err = common::stderr(&o);
    assert!(
        err.contains("line 2: switch spine names leaf9, not defined"),
        "{err}"
    );
    assert!(
        !out.exists()
            || std::fs::read_dir(&out).unwrap().all(|d| {
                let meta = d.unwrap().path().join("meta.json");
                !std::fs::read_to_string(meta)
                    .unwrap_or_default()
                    .contains("\"complete\"")
            })
    );
    let o = run(&good);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let run_dir = std::fs::read_dir(&out)
        .unwrap()
        .map(|d| d.unwrap().path())
        .find(|p| {
            std::fs::read_to_string(p.join("meta.json")).is_ok_and(|m| m.contains("\"complete\""))
        })
        .expect("a complete run");
    let (h, rows) = read_csv(&run_dir.join("links.csv"));
    assert!(!rows.is_empty());
    // Both ranks on this host: the link is within the node.
    assert!(
        rows.iter()
            .all(|r| &r[col(&h, "hop_class")] == "intra-node"),
        "{rows:?}"
    );
    let meta = std::fs::read_to_string(run_dir.join("meta.json")).unwrap();
    assert!(meta.contains("topology.conf"), "{meta}");
}

/// Busy is not slow: one rank told its machine has 1.5 cores of other work (the injected load
/// source) makes every row it is an end of busy, and the summary names it.
#[test]
// The busy neighbour is injected, which only a build with the test hooks reads.
#[cfg_attr(
    not(feature = "test-hooks"),
    ignore = "needs --features test-hooks (scripts/test)"
)]
fn a_rank_with_a_busy_machine_is_named_busy_on_every_row_it_measured() {
    let home = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let busy = [("MORPHBENCH_INJECT_OTHER_CORES", "1.5")];
    let ranks: Vec<Child> = (0..4)
        .map(|r| {
            let vars: &[(&str, &str)] = if r == 2 { &busy } else { &[] };
            rank_with_env(home.path(), r, 4, port, SMALL, vars)
        })
        .collect();
    let mut errs = Vec::new();
    for (r, c) in ranks.into_iter().enumerate() {
        let (ok, err) = finish(c);
        assert!(ok, "rank {r}: {err}");
        errs.push(err);
    }
    let run = only_run(&home.path().join("results"));
    let (h, rows) = read_csv(&run.join("links.csv"));
    for r in &rows {
        let touches = &r[col(&h, "src_rank")] == "2" || &r[col(&h, "dst_rank")] == "2";
        if touches {
            assert_eq!(&r[col(&h, "busy")], "true", "{r:?}");
            let others: f64 = r[col(&h, "others_cores")].parse().unwrap();
            assert!(others >= 1.5, "{r:?}");
        }
    }
    // Rank 0 (quiet) names the busy rank on standard error, and summary.json (what --json
    // prints) carries the same line.
    assert!(errs[0].contains("busy: rank 2"), "{}", errs[0]);
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    let warnings = summary["warnings"].as_array().expect("warnings").clone();
    // (A host whose hypervisor steals is busy too: rank 2 is one of them, not the only one.)
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("busy: rank 2")),
        "{summary}"
    );
}
