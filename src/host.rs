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

/// The calling thread's run delay so far (ns): the time it was ready to run and did not, on a
/// run queue behind other work or held by its cgroup's CPU quota (`/proc/thread-self/schedstat`,
/// its second field). Measured: a thread spinning 2 s in a cgroup allowed a quarter of a CPU
/// gained 1,476 ms of run delay and its cgroup 1,476 ms of throttled time, so throttling is a
/// part of it.
pub fn thread_run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// How long this process's cgroup has been held by its CPU quota so far (ns): cgroup v2's
/// `cpu.stat` `throttled_usec`, or v1's `throttled_time` in the cpu controller's group.
pub fn cgroup_throttled_ns() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in groups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let (dir, key, scale) = if controllers.is_empty() {
            (format!("/sys/fs/cgroup{path}"), "throttled_usec", 1000)
        } else if controllers.split(',').any(|c| c == "cpu") {
            (
                format!("/sys/fs/cgroup/{controllers}{path}"),
                "throttled_time",
                1,
            )
        } else {
            continue;
        };
        // v1 mounts "cpu,cpuacct" under either name; "cpu" is the usual link.
        let stat = std::fs::read_to_string(format!("{dir}/cpu.stat"))
            .or_else(|_| std::fs::read_to_string(format!("/sys/fs/cgroup/cpu{path}/cpu.stat")));
        let Ok(stat) = stat else { continue };
        if let Some(v) = stat
            .lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
        {
            return Some(v * scale);
        }
    }
    None
}

/// The wall clock, in µs since the Unix epoch (the ranks' clocks are compared in it).
pub fn now_us() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e6)
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

/// Where a host buffer's memory came from, as far as this process can see: what share of
/// its mapping is in transparent huge pages, the NUMA node of its first page, and the CPU the
/// thread ran on. A copy's bandwidth depends on all three, so a reader can tell placement from
/// hardware (docs/fleet.md).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct Placement {
    /// Share (0 to 1) of the buffer's mapping backed by huge pages (/proc/self/smaps).
    pub huge_pages: Option<f64>,
    pub numa_node: Option<i32>,
    pub cpu: Option<u32>,
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |v: Option<String>| v.unwrap_or_else(|| "?".into());
        write!(
            f,
            "cpu {}, huge pages {}, node {}",
            or(self.cpu.map(|c| c.to_string())),
            or(self.huge_pages.map(|h| format!("{:.0}%", 100.0 * h))),
            or(self.numa_node.map(|n| n.to_string()))
        )
    }
}

/// The placement of `buf` (touched already) and of the calling thread.
pub fn placement_of(buf: &[u8]) -> Placement {
    Placement {
        huge_pages: huge_share(buf.as_ptr() as usize),
        numa_node: numa_node_of(buf.as_ptr()),
        cpu: current_cpu(),
    }
}

/// The share of the mapping holding `addr` that is in huge pages.
fn huge_share(addr: usize) -> Option<f64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut size = None;
    for line in smaps.lines() {
        let range = line
            .split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'));
        if let Some((lo, hi)) = range.filter(|_| !line.contains(':') || line.contains('-')) {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                size = (lo <= addr && addr < hi).then_some(hi - lo);
                continue;
            }
        }
        if let (Some(bytes), Some(kb)) = (size, line.strip_prefix("AnonHugePages:")) {
            let kb: f64 = kb.trim().trim_end_matches("kB").trim().parse().ok()?;
            return Some((kb * 1024.0 / bytes as f64).min(1.0));
        }
    }
    None
}

/// The NUMA node of the page at `ptr` (move_pages with no target nodes only reports).
#[allow(unsafe_code)]
fn numa_node_of(ptr: *const u8) -> Option<i32> {
    let mut pages = [ptr as *mut libc::c_void];
    let mut status = [-1i32];
    // SAFETY: move_pages with a null node list moves nothing and writes one status per page
    // into `status`, which has room for the one page asked about.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1usize,
            pages.as_mut_ptr(),
            std::ptr::null::<i32>(),
            status.as_mut_ptr(),
            0,
        )
    };
    (rc == 0 && status[0] >= 0).then_some(status[0])
}

/// The CPU the calling thread runs on now.
#[allow(unsafe_code)]
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes nothing and returns -1 on failure.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

/// The CPUs this thread may run on.
#[allow(unsafe_code)]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Binds the calling thread to `cpus` (all of them: the set it had); false if refused.
#[allow(unsafe_code)]
pub fn bind_thread(cpus: &[usize]) -> bool {
    // SAFETY: as in allowed_cpus; CPU_SET is given only numbers below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
