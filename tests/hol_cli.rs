//! `d2h`, `hol` and `sink` end to end on the adapter present (lavapipe in CI).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn rows_where<'a>(
    h: &[String],
    rows: &'a [csv::StringRecord],
    column: &str,
    value: &str,
) -> Vec<&'a csv::StringRecord> {
    let c = col(h, column);
    rows.iter().filter(|r| &r[c] == value).collect()
}

#[test]
fn d2h_writes_every_direction_and_part() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "d2h",
            "--sizes",
            "4,4K,1M",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (h, rows) = read_csv(&only_run(&out).join("d2h.csv"));
    for d in ["d2h", "h2d", "memcpy"] {
        assert!(
            !rows_where(&h, &rows, "direction", d).is_empty(),
            "no {d} rows"
        );
    }
    for p in ["gpu_copy", "map", "copy_out", "end_to_end"] {
        assert!(!rows_where(&h, &rows, "part", p).is_empty(), "no {p} rows");
    }
    let (bytes, gbps, verified) = (col(&h, "bytes"), col(&h, "gbps"), col(&h, "verified"));
    for r in &rows {
        assert!(["4", "4096", "1048576"].contains(&&r[bytes]));
        assert!(r[gbps].parse::<f64>().unwrap() > 0.0);
        assert_eq!(&r[verified], "true");
    }
    let bad = morphbench(&["d2h", "--sizes", "6"], home.path());
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("multiple of 4"));
}

fn hol_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["hol", "--ops", "8", "--reps", "1", "--out", out];
    if !extra.contains(&"--hidden") {
        v.extend_from_slice(&["--tokens", "64", "--hidden", "64"]);
    }
    if !extra.contains(&"--every") {
        v.extend_from_slice(&["--every", "2"]);
    }
    v.extend_from_slice(extra);
    v
}

#[test]
fn hol_offload_removes_the_stall_inline_causes() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let out_s = out.to_str().unwrap().to_string();
    let o = morphbench(&hol_args(&out_s, &["--delay-ms", "0,20"]), home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let (h, rows) = read_csv(&only_run(&out).join("hol.csv"));
    for c in [
        "mode",
        "delay_ms",
        "bytes",
        "every",
        "makespan_us",
        "busy_fraction",
        "stall_mean_us",
        "stall_p50_us",
        "stall_p99_us",
        "stall_max_us",
        "d2h_copy_us",
        "map_us",
        "send_us",
        "receive_us",
    ] {
        col(&h, c);
    }
    let (mode, delay, stall) = (
        col(&h, "mode"),
        col(&h, "delay_ms"),
        col(&h, "stall_mean_us"),
    );
    let get = |m: &str, d: &str| -> f64 {
        rows.iter()
            .find(|r| &r[mode] == m && &r[delay] == d)
            .unwrap_or_else(|| panic!("no {m} {d}"))[stall]
            .parse()
            .unwrap()
    };
    // A 20 ms stand-in on the queue stalls the op behind it; offloading takes it off the queue.
    assert!(get("inline", "20") > 4.0 * get("offload", "20"), "{rows:?}");
    let off = rows
        .iter()
        .find(|r| &r[mode] == "offload" && &r[delay] == "20")
        .unwrap();
    assert!(off[col(&h, "send_us")].parse::<f64>().unwrap() > 0.0);
    assert!(!off[col(&h, "stall_removed")].is_empty());
    assert_eq!(&off[col(&h, "verified")], "true");
    assert_eq!(off[col(&h, "transfers")].parse::<u32>().unwrap(), 4);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(only_run(&out).join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["notes"]["hol"]["standin_calibration"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn hol_sends_to_a_sink_on_another_process() {
    let home = tempfile::tempdir().unwrap();
    let mut sink = Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(["sink", "--listen", "127.0.0.1:0", "--once"])
        .env("XDG_RUNTIME_DIR", home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(sink.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split_whitespace()
        .nth(3)
        .expect("sink prints its address")
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{first}");
    let out = home.path().join("out");
    let out_s = out.to_str().unwrap().to_string();
    let o = morphbench(
        &hol_args(
            &out_s,
            &["--mode", "offload", "--delay-ms", "1", "--peer", &addr],
        ),
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let status = sink.wait().unwrap();
    let mut rest = String::new();
    sink.stdout
        .take()
        .unwrap()
        .read_to_string(&mut rest)
        .unwrap();
    assert!(status.success(), "{rest}");
    assert!(
        rest.contains("4 payloads") && rest.contains("verified"),
        "{rest}"
    );
}

fn hol_fails_with(extra: &[&str], needle: &str) {
    let home = tempfile::tempdir().unwrap();
    let o = morphbench(&hol_args("/tmp/mb-hol-bad", extra), home.path());
    assert!(!o.status.success(), "{extra:?} should fail");
    let err = stderr(&o);
    assert!(
        err.contains(needle),
        "{extra:?}: expected '{needle}' in {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn hol_bad_input_and_unreachable_peers() {
    hol_fails_with(&["--delay-ms", "-5"], "out of range");
    hol_fails_with(&["--delay-ms", "1e9"], "out of range");
    hol_fails_with(&["--bytes", "1G"], "bytes");
    hol_fails_with(&["--every", "0"], "every");
    hol_fails_with(&["--hidden", "66"], "multiple of 4");
    hol_fails_with(
        &["--tokens", "100000", "--hidden", "1024"],
        "max_storage_buffer_binding_size",
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let peer = format!("127.0.0.1:{port}");
    let t0 = Instant::now();
    hol_fails_with(&["--mode", "offload", "--peer", &peer], "cannot connect");
    assert!(t0.elapsed() < Duration::from_secs(30));
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("t.txt");
    std::fs::write(&trace, "0;5\n1;oops\n").unwrap();
    hol_fails_with(&["--trace", trace.to_str().unwrap()], "line 2");
}

#[test]
fn receiver_that_closes_early_fails_the_run_but_keeps_rows() {
    // A peer that completes the hello, reads a little, then hangs up.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut hello = [0u8; 16];
        s.read_exact(&mut hello).unwrap();
        s.write_all(&hello).unwrap();
        let mut some = [0u8; 64];
        let _ = s.read(&mut some);
    });
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let out_s = out.to_str().unwrap().to_string();
    let t0 = Instant::now();
    let o = morphbench(
        &hol_args(
            &out_s,
            &["--mode", "none,offload", "--delay-ms", "0", "--peer", &addr],
        ),
        home.path(),
    );
    assert!(!o.status.success());
    assert!(t0.elapsed() < Duration::from_secs(60));
    let err = stderr(&o);
    assert!(
        err.contains("offload send failed") || err.contains("closed"),
        "{err}"
    );
    let run = only_run(&out);
    let (_, rows) = read_csv(&run.join("hol.csv"));
    assert_eq!(
        rows.len(),
        1,
        "the none row written before the failure stays"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "failed");
}
