//! Helpers shared by the integration tests: running the binary in a private environment.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The job's secret every multi-rank test run proves (MORPHBENCH_TOKEN): the tests start
/// ranks by hand, as a launcher would, and hand each the same one.
pub const TOKEN: &str = "morphbench-tests-own-job-secret";

pub fn morphbench(args: &[&str], home: &Path) -> Output {
    morphbench_with_env(args, home, &[])
}

/// As [`morphbench`], with extra environment variables (an injected load, say).
pub fn morphbench_with_env(args: &[&str], home: &Path, vars: &[(&str, &str)]) -> Output {
    let runtime = home.join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    Command::new(env!("CARGO_BIN_EXE_morphbench"))
        .args(args)
        // The default --out (results/) then lands in the test's temporary folder, never in
        // the project's own results/.
        .current_dir(home)
        // A private variant cache, so each test probes for itself.
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_RUNTIME_DIR", runtime)
        .env("MORPHBENCH_TOKEN", TOKEN)
        .envs(vars.iter().copied())
        .output()
        .expect("run morphbench")
}

/// `cmd` in the test's private environment (`home` as its folder, cache and runtime dir),
/// its output piped.
pub fn in_home<'a>(cmd: &'a mut Command, home: &Path) -> &'a mut Command {
    cmd.current_dir(home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_RUNTIME_DIR", home)
        .env("MORPHBENCH_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Both streams, for a failed assertion on the exit code: the verdicts are on stdout.
pub fn output(o: &Output) -> String {
    format!("stderr:\n{}\nstdout:\n{}", stderr(o), stdout(o))
}

/// The single run folder under `out`.
pub fn only_run(out: &Path) -> std::path::PathBuf {
    let runs: Vec<_> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    assert_eq!(
        runs.len(),
        1,
        "expected one run folder in {}",
        out.display()
    );
    runs[0].clone()
}

pub fn read_csv(path: &Path) -> (Vec<String>, Vec<csv::StringRecord>) {
    let mut rd = csv::Reader::from_path(path).unwrap();
    let headers = rd.headers().unwrap().iter().map(String::from).collect();
    let rows = rd.records().map(|r| r.unwrap()).collect();
    (headers, rows)
}

pub fn col(headers: &[String], name: &str) -> usize {
    headers
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}"))
}

/// A loopback port free a moment ago, for a test's rendezvous.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
