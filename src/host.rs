//! What the host is: CPU model, cores, memory, OS and kernel (Linux /proc, best effort elsewhere).

use serde::Serialize;

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub cpu_model: String,
    pub logical_cores: usize,
    pub memory_bytes: Option<u64>,
    pub os: String,
    pub kernel: String,
}

/// CPU time this process has used so far, all threads together, in microseconds (`None` where
/// the OS has no per-process CPU clock). A CPU driver such as lavapipe runs kernels on this
/// process's own threads, so this also counts their work.
#[allow(unsafe_code)]
pub fn process_cpu_us() -> Option<f64> {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime only writes the timespec it is given a valid pointer to.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as f64 * 1e6 + ts.tv_nsec as f64 / 1e3)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// This process's user id (for per-user paths such as a private runtime directory).
#[allow(unsafe_code)]
pub fn uid() -> u32 {
    // SAFETY: getuid has no arguments and cannot fail.
    unsafe { libc::getuid() }
}

/// This process's effective user id: 0 when it runs as root (set-uid or `sudo` included), which
/// is when what it writes must stay root's (see [`crate::safe_fs`]).
#[allow(unsafe_code)]
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// This process's peak resident memory so far, in bytes (`VmHWM`; None where /proc has none).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Where sysfs is: `/sys`, or (test builds only) `MORPHBENCH_SYSFS_ROOT`, so tests read a
/// fake tree (PCIe link state, RDMA port counters).
pub fn sysfs_root() -> std::path::PathBuf {
    #[cfg(feature = "test-hooks")]
    if let Some(root) = std::env::var_os("MORPHBENCH_SYSFS_ROOT") {
        return std::path::PathBuf::from(root);
    }
    std::path::PathBuf::from("/sys")
}

/// /etc/machine-id (the hostname where there is none): processes that share it share a
/// machine (the GPUs of one node, or network namespaces on one host).
pub fn machine_id() -> String {
    // Read once: callers sample it around every timed iteration.
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        read("/etc/machine-id")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| HostInfo::probe().hostname)
    })
    .clone()
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

impl HostInfo {
    pub fn probe() -> HostInfo {
        let hostname = read("/proc/sys/kernel/hostname")
            .or_else(|| std::env::var("HOSTNAME").ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown-host".into());
        let cpu_model = read("/proc/cpuinfo")
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let memory_bytes = read("/proc/meminfo").and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
                .map(|kb| kb * 1024)
        });
        let os = read("/etc/os-release")
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("PRETTY_NAME="))
                    .map(|l| l["PRETTY_NAME=".len()..].trim_matches('"').to_string())
            })
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        let kernel = read("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        HostInfo {
            hostname,
            cpu_model,
            logical_cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            memory_bytes,
            os,
            kernel,
        }
    }
}
