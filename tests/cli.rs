//! The command line end to end: exit codes, files written, and errors for bad input.

mod common;

use common::*;

#[test]
fn info_lists_adapters_and_host() {
    let home = tempfile::tempdir().unwrap();
    let o = morphbench(&["info"], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("cpu") && text.contains("adapter 0"), "{text}");
    let o = morphbench(&["info", "--json"], home.path());
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["host"]["logical_cores"].as_u64().unwrap() >= 1);
    assert!(
        v["adapters"][0]["max_storage_buffer_binding_size"]
            .as_u64()
            .unwrap()
            > 0
    );
    // RDMA: the devices, or a plain reason why there are none.
    let rdma = &v["rdma"];
    assert!(
        rdma["devices"].as_array().is_some_and(|d| !d.is_empty())
            || rdma["unavailable"].is_string(),
        "{rdma}"
    );
    assert!(text.contains("rdma "), "{text}");
}

#[test]
fn rdma_bad_input_and_missing_devices_are_clear_errors() {
    fails_with(&["rdma"], "--server");
    fails_with(
        &["rdma", "--connect", "x", "--sizes", "0"],
        "at least 1 byte",
    );
    fails_with(&["rdma", "--connect", "x", "--sizes", "2G"], "1 GiB");
    fails_with(&["rdma", "--connect", "x", "--ib-port", "0"], "ib-port");
    fails_with(&["rdma", "--connect", "x", "--iters", "0"], "iters");
    // Without verbs the reason is given; with devices here, nothing listens on port 1.
    let unavailable =
        morphbench::transport::rdma::verbs::list_devices().map_or(true, |d| d.is_empty());
    if unavailable {
        fails_with(&["rdma", "--connect", "127.0.0.1:1"], "RDMA");
        fails_with(&["rdma", "--server", "--listen", "127.0.0.1:0"], "RDMA");
        fails_with(&["sink", "--transport", "rdma", "--once"], "RDMA");
        fails_with(
            &[
                "hol",
                "--transport",
                "rdma",
                "--mode",
                "offload",
                "--reps",
                "1",
            ],
            "RDMA",
        );
    } else {
        fails_with(&["rdma", "--connect", "127.0.0.1:1"], "cannot connect");
    }
}

#[test]
fn kernels_writes_verified_rows_with_baselines() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "kernels",
            "--gemm",
            "1x1x1,17x33x65,127x1x255",
            "--layernorm",
            "1x4096,3x1000",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--raw",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&out);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "complete");
    assert!(meta["adapter"]["name"].is_string());
    // Layernorm sizes that different variants fit get a probe each (hidden 4096 is too long
    // for a row held in registers, 1000 is not).
    let probes: Vec<&str> = meta["notes"]["variant_selection"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kernel"] == "layernorm")
        .map(|s| s["probe"].as_str().unwrap())
        .collect();
    assert_eq!(probes, ["1x4096", "3x1000"]);
    let (h, rows) = read_csv(&run.join("kernels.csv"));
    assert_eq!(
        &h[..4],
        &["schema_version", "run_id", "bench", "case"].map(String::from)
    );
    let kernel = col(&h, "kernel");
    let count = |k: &str| rows.iter().filter(|r| &r[kernel] == k).count();
    // GPU rows come in pairs (gpu and host timers); baselines once per size.
    assert!(count("gemm") >= 3 && count("cpu_sgemm") == 3, "{rows:?}");
    assert!(count("layernorm") >= 2 && count("memcpy") == 2, "{rows:?}");
    let (verified, n, p50) = (col(&h, "verified"), col(&h, "n"), col(&h, "p50_us"));
    for r in &rows {
        assert_eq!(&r[verified], "true");
        assert_eq!(&r[n], "3");
        assert!(r[p50].parse::<f64>().unwrap() > 0.0);
        assert!(r[col(&h, "rel_err")].parse::<f64>().unwrap() < 1e-5);
    }
    let (sh, samples) = read_csv(&run.join("kernels_samples.csv"));
    assert_eq!(sh.last().unwrap(), "sample_us");
    assert_eq!(samples.len(), rows.len() * 3);
}

#[test]
fn run_with_a_small_config() {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("small.toml");
    std::fs::write(
        &cfg,
        "[kernels]\ngemm = [\"33x17x9\"]\nlayernorm = [\"5x77\"]\niters = 2\nwarmup = 1\n",
    )
    .unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "-q",
        ],
        home.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "-q prints nothing: {}", stdout(&o));
    let run = only_run(&out);
    let (_, rows) = read_csv(&run.join("kernels.csv"));
    assert!(rows.len() >= 4);
}

#[test]
fn run_with_the_embedded_default() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(&["run", "--out", out.to_str().unwrap()], home.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let run = only_run(&out);
    let (h, rows) = read_csv(&run.join("kernels.csv"));
    let kernel = col(&h, "kernel");
    for k in ["gemm", "cpu_sgemm", "layernorm", "memcpy"] {
        assert!(rows.iter().any(|r| &r[kernel] == k), "no {k} row");
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "complete");
    assert!(meta["config"]["kernels"].is_object());
    // The run ends with its figures and report.
    assert!(run.join("report.md").exists() && run.join("report.html").exists());
    assert!(run.join("plots/kernels_gemm.png").exists());
    assert!(run.join("plots/hol_stall.svg").exists());
}

fn fails_with(args: &[&str], needle: &str) {
    let home = tempfile::tempdir().unwrap();
    let o = morphbench(args, home.path());
    assert!(!o.status.success(), "{args:?} should fail");
    let err = stderr(&o);
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gives_clear_errors() {
    fails_with(&["kernels", "--gemm", "0x4x4"], ">= 1");
    fails_with(&["kernels", "--gemm", "4x4"], "MxNxK");
    fails_with(&["kernels", "--gemm", "99999999999x1x1"], "too large");
    fails_with(&["kernels"], "nothing to run");
    fails_with(&["kernels", "--gemm", "8x8x8", "--iters", "0"], "--iters");
    fails_with(&["--backend", "opengl", "info"], "invalid value");
    fails_with(
        &["kernels", "--gemm", "8x8x8", "--adapter", "no-such-gpu"],
        "no adapter matches",
    );
    fails_with(
        &["kernels", "--gemm", "8x8x8", "--backend", "metal"],
        "mesa-vulkan-drivers",
    );
    fails_with(
        &["kernels", "--gemm", "8x8x8", "--variant", "fastest"],
        "unknown gemm variant",
    );
    fails_with(
        &["run", "--config", "/nonexistent/x.toml"],
        "cannot read config",
    );
    fails_with(
        &[
            "kernels",
            "--layernorm",
            "40000x1024",
            "--out",
            "/tmp/mb-test-limit",
        ],
        "max_storage_buffer_binding_size",
    );
    fails_with(
        &["kernels", "--gemm", "8x8x8", "--out", "/proc/no-such-dir"],
        "--out",
    );
}

#[test]
fn invalid_config_names_file_and_key() {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("bad.toml");
    std::fs::write(&cfg, "[kernels]\ngemm = [\"8x8x8\"]\nitres = 3\n").unwrap();
    let o = morphbench(&["run", "--config", cfg.to_str().unwrap()], home.path());
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("bad.toml") && err.contains("itres"), "{err}");
}

#[test]
fn interrupted_run_keeps_whole_rows_and_never_looks_complete() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let runtime = home.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args([
            "kernels",
            "--gemm",
            "8x8x8,9x9x9,10x10x10,11x11x11,12x12x12,13x13x13,14x14x14",
        ])
        .args([
            "--gemm",
            "15x15x15,16x16x16,256x256x256,256x256x256,256x256x256,256x256x256",
        ])
        .args([
            "--iters",
            "200",
            "--variant",
            "naive",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .env("XDG_RUNTIME_DIR", &runtime)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until some rows are on disk, then kill it mid-sweep.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let csv_path = loop {
        let found = std::fs::read_dir(&out)
            .ok()
            .and_then(|mut d| d.next())
            .map(|e| e.unwrap().path().join("kernels.csv"));
        if let Some(p) = found {
            let lines = std::fs::read_to_string(&p)
                .map(|t| t.lines().count())
                .unwrap_or(0);
            if lines >= 3 {
                break p;
            }
        }
        assert!(std::time::Instant::now() < deadline, "no rows appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run was interrupted before its end");
    let run = csv_path.parent().unwrap();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        meta["status"], "running",
        "an interrupted run never says complete"
    );
    // Every row on disk is whole: the reader accepts the file and each row has every column.
    let (h, rows) = read_csv(&csv_path);
    assert!(rows.len() >= 2);
    assert!(rows.iter().all(|r| r.len() == h.len()));
}

#[test]
fn sizes_over_device_limits_fail_before_anything_runs() {
    let home = tempfile::tempdir().unwrap();
    let out = home.path().join("out");
    let o = morphbench(
        &[
            "kernels",
            "--layernorm",
            "3x100,40000x1024",
            "--iters",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
        home.path(),
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("max_storage_buffer_binding_size"));
    let run = only_run(&out);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["status"], "failed");
    assert!(meta["error"]
        .as_str()
        .unwrap()
        .contains("max_storage_buffer_binding_size"));
    assert!(!run.join("kernels.csv").exists(), "nothing ran");
}

/// Inputs that once hung, panicked, or ran for minutes: each is refused at once, naming the
/// problem (and every run is bounded before it starts).
#[test]
fn absurd_inputs_are_refused_at_once() {
    let t0 = std::time::Instant::now();
    let home = tempfile::tempdir().unwrap();
    let trace = home.path().join("long.trace");
    let lines: String = (0..100_000).map(|i| format!("{i};0;{}\n", i % 7)).collect();
    std::fs::write(&trace, lines).unwrap();
    let trace = trace.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--adapter", "5", "kernels", "--gemm", "8x8x8"],
            "out of range",
        ),
        (
            &["sim", "--timeline", "1f1b", "--width", "65535"],
            "20..=1000",
        ),
        (&["sim", "--width", "18446744073709551615"], "--width"),
        (
            &["kernels", "--gemm", "8x8x8", "--warmup", "4294967295"],
            "--warmup",
        ),
        (&["d2h", "--warmup", "4294967295"], "--warmup"),
        (&["hol", "--reps", "4294967295"], "reps 4294967295"),
        (
            &["hol", "--mode", "inline", "--link-gbps", "1e-9"],
            "link-gbps",
        ),
        (
            &[
                "hol",
                "--mode",
                "offload",
                "--delay-ms",
                "60000",
                "--reps",
                "1000",
            ],
            "over the cap",
        ),
        (
            &["sim", "--stages", "3000", "--microbatches", "3000"],
            "over the cap",
        ),
        (&["sim", "--stages", "1000000000"], "over the cap"),
        (
            &["sim", "--stages", "725", "--microbatches", "725"],
            "stages x microbatches",
        ),
        (&["sim", "--tf", "1e308"], "at most 1000000 ms"),
        (&["sim", "--link-ms", "1e308"], "at most 1000000 ms"),
        (&["sim", "--slow", "0:1e308"], "at most 1000000 ms"),
        (&["sim", "--trace", trace], "over the cap of 10000"),
        (&["sink", "--timeout-s", "0"], "--timeout-s"),
        (&["sim", "--sweep", "0:1e308"], "at most 1000000 ms"),
        (
            &["kernels", "--gemm", "8192x8192x8192", "--iters", "100000"],
            "over the cap",
        ),
        (&["d2h", "--iters", "100000"], "over the cap"),
    ];
    for (args, needle) in cases {
        fails_with(args, needle);
    }
    assert!(t0.elapsed().as_secs() < 60, "{:?}", t0.elapsed());
}

/// A new multi-rank command is one file and one word in the registry: `roll-call` (test builds
/// only) gets its subcommand, `--local N`, the rendezvous with the job's secret, rank 0's run
/// folder and `--json` from the harness, and nothing names it anywhere else.
#[test]
fn a_multi_rank_command_is_a_file_and_a_registry_word() {
    let home = tempfile::tempdir().unwrap();
    let help = stdout(&morphbench(&["--help"], home.path()));
    assert!(help.contains("roll-call"), "{help}");
    let o = morphbench(&["roll-call", "--local", "3", "--json"], home.path());
    assert!(o.status.success(), "{}", output(&o));
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["status"], "complete", "{summary}");
    let run = only_run(&home.path().join("results"));
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("meta.json")).unwrap()).unwrap();
    let roll = meta["notes"]["roll"].as_array().expect("the roll").clone();
    let ranks: Vec<u64> = roll.iter().map(|p| p["rank"].as_u64().unwrap()).collect();
    assert_eq!(ranks, [0, 1, 2], "{meta}");
    let mut pids: Vec<u64> = roll.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 3, "each rank is a process of its own: {meta}");
    assert_eq!(meta["notes"]["auth"], "authenticated", "{meta}");
    // Over its bound, `--local` is refused before any rank starts.
    let o = morphbench(&["roll-call", "--local", "100000"], home.path());
    assert_eq!(o.status.code(), Some(1), "{}", output(&o));
}
