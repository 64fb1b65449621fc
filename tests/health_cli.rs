//! `morphbench health` on this machine's adapter: bounded by its printed plan, judged by a
//! baseline (a slower SKU's passes, a faster SKU's fails), each output convention (the table,
//! `--json`, `--npd`'s one line, `--textfile`), Slurm's drain and resume through a stand-in
//! `scontrol` that keeps the node's state in a file (the real Slurm is in scripts/ops-test),
//! and bad input: exit 2, nothing changed.

mod common;

use std::path::{Path, PathBuf};

use common::{col, read_csv};

/// Held while a health check measures: it takes every core.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A stand-in `scontrol` in its own folder: `show node` prints the state file, `update`
/// rewrites it (DRAIN with the reason, RESUME back to IDLE); each call is logged.
struct FakeSlurm {
    bin: PathBuf,
    state: PathBuf,
    log: PathBuf,
}

impl FakeSlurm {
    fn new(dir: &Path) -> FakeSlurm {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let script = r#"#!/bin/bash
echo "$*" >> "$SCONTROL_LOG"
case "$1" in
  show) cat "$SCONTROL_STATE" ;;
  update)
    for a in "$@"; do case "$a" in Reason=*) reason=${a#Reason=} ;; esac; done
    case "$*" in
      *State=DRAIN*) printf 'NodeName=n1 Arch=x86_64\n   State=IDLE+DRAIN ThreadsPerCore=1\n   Reason=%s [root@2026-12-04T10:00:00]\n' "$reason" > "$SCONTROL_STATE" ;;
      *State=RESUME*) printf 'NodeName=n1 Arch=x86_64\n   State=IDLE ThreadsPerCore=1\n' > "$SCONTROL_STATE" ;;
    esac ;;
esac
"#;
        let path = bin.join("scontrol");
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        FakeSlurm {
            bin,
            state: dir.join("state"),
            log: dir.join("log"),
        }
    }

    fn set(&self, state: &str, reason: Option<&str>) {
        let mut text = format!("NodeName=n1 Arch=x86_64\n   State={state} ThreadsPerCore=1\n");
        if let Some(r) = reason {
            text.push_str(&format!("   Reason={r} [ops@2026-12-04T09:00:00]\n"));
        }
        std::fs::write(&self.state, text).unwrap();
        let _ = std::fs::remove_file(&self.log);
    }

    fn updates(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("update"))
            .map(String::from)
            .collect()
    }

    fn env(&self) -> Vec<(String, String)> {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        vec![
            ("PATH".into(), path),
            // scontrol is never looked up on PATH: Slurm's folder is named.
            (
                "MORPHBENCH_SLURM_BIN".into(),
                self.bin.display().to_string(),
            ),
            ("SCONTROL_STATE".into(), self.state.display().to_string()),
            ("SCONTROL_LOG".into(), self.log.display().to_string()),
            ("SLURMD_NODENAME".into(), "n1".into()),
        ]
    }
}

fn health(home: &Path, args: &[&str], env: &[(String, String)]) -> std::process::Output {
    let out = home.join("runs");
    let mut all = vec!["--out", out.to_str().unwrap(), "health"];
    all.extend_from_slice(args);
    let vars: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    common::morphbench_with_env(&all, home, &vars)
}

/// A baseline of the run in `run` with every expected value times `scale`.
fn scaled_baseline(home: &Path, run: &Path, scale: f64, name: &str) -> PathBuf {
    let path = home.join(name);
    let o = common::morphbench(
        &[
            "baseline",
            run.to_str().unwrap(),
            "-o",
            path.to_str().unwrap(),
        ],
        home,
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::output(&o));
    let mut doc: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for sku in doc["sku"].as_array_mut().unwrap() {
        for f in sku["figure"].as_array_mut().unwrap() {
            let e = f["expected"].as_float().unwrap();
            f["expected"] = toml::Value::Float(e * scale);
        }
    }
    std::fs::write(&path, toml::to_string(&doc).unwrap()).unwrap();
    path
}

#[test]
fn health_is_bounded_judged_by_its_baseline_and_drains_only_what_it_may() {
    let _turn = measuring();
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let metrics = home.join("metrics");
    std::fs::create_dir_all(&metrics).unwrap();

    // No baseline, one GPU: measured and reported, nothing judged (exit 2), within its bound.
    let o = health(
        home,
        &["--json", "--textfile", metrics.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", common::output(&o));
    let doc: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
    assert_eq!(doc["health"], "unknown", "{doc}");
    assert!(doc["judged_by"]
        .as_str()
        .unwrap()
        .contains("nothing was judged"));
    let (wall, bound) = (
        doc["wall_s"].as_f64().unwrap(),
        doc["bound_s"].as_f64().unwrap(),
    );
    assert!(
        wall <= bound && bound <= 45.0,
        "{wall} s of a {bound} s bound"
    );
    let run = PathBuf::from(doc["run_dir"].as_str().unwrap());

    // Every figure of fleet.csv is in the textfile with the same value, and its verdict.
    let prom = std::fs::read_to_string(metrics.join("morphbench_health.prom")).unwrap();
    let (h, rows) = read_csv(&run.join("fleet.csv"));
    for r in rows.iter().filter(|r| !r[col(&h, "value")].is_empty()) {
        let (test, figure) = (&r[col(&h, "test")], &r[col(&h, "figure")]);
        let value: f64 = r[col(&h, "value")].parse().unwrap();
        let name = format!("morphbench_{test}_{figure}{{");
        let line = prom
            .lines()
            .find(|l| l.starts_with(&name))
            .unwrap_or_else(|| {
                panic!("{name} missing:\n{prom}");
            });
        let got: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(got, value, "{line}");
        assert!(
            line.contains("Hostname=") && line.contains("gpu=\"0\""),
            "{line}"
        );
    }
    assert!(prom.contains("morphbench_verdict{"), "{prom}");
    assert!(
        prom.contains("morphbench_last_run_timestamp_seconds{"),
        "{prom}"
    );

    let slow_sku = scaled_baseline(home, &run, 0.5, "slower.toml");
    let fast_sku = scaled_baseline(home, &run, 10.0, "faster.toml");
    let slurm = FakeSlurm::new(home);
    let env = slurm.env();
    let (slow, fast) = (slow_sku.to_str().unwrap(), fast_sku.to_str().unwrap());

    // A faster SKU's baseline: unhealthy, the node drained with a reason others can match,
    // npd's one line names the first failed figure.
    slurm.set("IDLE", None);
    let o = health(home, &["--baseline", fast, "--slurm", "--npd"], &env);
    assert_eq!(o.status.code(), Some(1), "{}", common::output(&o));
    let line = common::stdout(&o);
    assert_eq!(line.lines().count(), 1, "{line}");
    let line = line.trim_end();
    assert!(
        line.starts_with("morphbench FAIL gpu0 ") && line.chars().count() <= 80,
        "{line}"
    );
    let updates = slurm.updates();
    assert_eq!(updates.len(), 1, "{updates:?}");
    let reason = updates[0].split("Reason=").nth(1).unwrap();
    assert!(updates[0].starts_with("update NodeName=n1 State=DRAIN Reason=[morphbench] "));
    assert!(
        reason.chars().count() <= 128 && reason.contains(" vs "),
        "{reason}"
    );

    // A fitting baseline: healthy, and the node morphbench drained is resumed.
    let _ = std::fs::remove_file(&slurm.log);
    let o = health(home, &["--baseline", slow, "--slurm"], &env);
    assert_eq!(o.status.code(), Some(0), "{}", common::output(&o));
    assert!(
        common::stdout(&o).contains("slurm: resumed n1"),
        "{}",
        common::output(&o)
    );
    assert_eq!(slurm.updates(), vec!["update NodeName=n1 State=RESUME"]);

    // An operator's drain stays, whatever morphbench finds.
    for baseline in [slow, fast] {
        slurm.set("IDLE+DRAIN", Some("bad fan, ticket 42"));
        let o = health(home, &["--baseline", baseline, "--slurm", "--json"], &env);
        let doc: serde_json::Value = serde_json::from_str(&common::stdout(&o)).unwrap();
        assert!(doc["slurm"]["unchanged"].is_object(), "{doc}");
        assert!(slurm.updates().is_empty(), "{:?}", slurm.updates());
    }
}

#[test]
fn bad_input_is_exit_2_and_changes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    let garbage = home.join("garbage.toml");
    std::fs::write(&garbage, "this is = not [a baseline").unwrap();
    let slurm = FakeSlurm::new(home);
    slurm.set(
        "IDLE+DRAIN",
        Some("[morphbench] gemm gflops: 1 vs 2 GFLOP/s"),
    );
    // Not in the folder named, and not taken from PATH even where PATH has one.
    let no_scontrol = vec![
        (
            "MORPHBENCH_SLURM_BIN".to_string(),
            "/nonexistent".to_string(),
        ),
        (
            "PATH".to_string(),
            format!(
                "{}:{}",
                slurm.bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ),
    ];
    type Env = Vec<(String, String)>;
    let cases: Vec<(Vec<&str>, Env, &str)> = vec![
        (
            vec!["--baseline", garbage.to_str().unwrap(), "--slurm"],
            slurm.env(),
            "not a baseline",
        ),
        (
            vec!["--baseline", "/nonexistent/b.toml"],
            vec![],
            "--baseline /nonexistent/b.toml",
        ),
        (
            vec!["--slurm"],
            no_scontrol,
            "scontrol is not in /nonexistent",
        ),
        (
            vec!["--textfile", "/nonexistent/dir"],
            vec![],
            "no such folder",
        ),
        // Not writable even for root.
        (vec!["--textfile", "/proc"], vec![], "cannot write there"),
    ];
    for (args, env, says) in cases {
        let o = health(home, &args, &env);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", common::output(&o));
        assert!(
            common::stderr(&o).contains(says),
            "{args:?}: {}",
            common::output(&o)
        );
        assert!(!home.join("runs").exists(), "{args:?} left a run folder");
    }
    assert!(slurm.updates().is_empty(), "{:?}", slurm.updates());
    // node-problem-detector gets its one line and Unknown even then.
    let o = health(
        home,
        &["--npd", "--baseline", garbage.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    let out = common::stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.starts_with("morphbench: could not judge: --baseline "),
        "{out}"
    );
    assert!(out.trim_end().chars().count() <= 80, "{out}");
}

#[test]
fn a_symlinked_out_or_lock_is_refused_and_nothing_is_written_through_it() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    // What a link would lead root to: a file and a folder that are not the run's.
    let secret = home.join("secret");
    std::fs::write(&secret, "root's").unwrap();
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    // A link in place of --out: refused before anything runs (exit 2), nothing made there.
    let out = home.join("out");
    std::os::unix::fs::symlink(&elsewhere, &out).unwrap();
    let o = common::morphbench(&["--out", out.to_str().unwrap(), "-q", "health"], home);
    assert_eq!(o.status.code(), Some(2), "{}", common::output(&o));
    let err = common::stderr(&o);
    assert!(
        err.contains(&format!("--out {}: a symbolic link", out.display())),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // A link in place of the lock: could not check (exit 2), naming the lock; the file it
    // leads to is untouched.
    let lock = home.join("health.lock");
    std::os::unix::fs::symlink(&secret, &lock).unwrap();
    let runs = home.join("runs");
    let o = common::morphbench_with_env(
        &["--out", runs.to_str().unwrap(), "-q", "health"],
        home,
        &[("MORPHBENCH_HEALTH_LOCK", lock.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(2), "{}", common::output(&o));
    let err = common::stderr(&o);
    assert!(err.contains("could not check"), "{err}");
    assert!(
        err.contains(&format!(
            "the health lock {}: a symbolic link",
            lock.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root's");
    assert!(!runs.exists(), "a run folder was made");
}
