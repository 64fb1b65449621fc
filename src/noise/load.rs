//! Was the machine busy while a bench ran? Figures move with the host's load (a layernorm /
//! memcpy ratio went from 0.26 to 0.12 when one other process shared the two cores), so each
//! bench is bracketed by two samples of the host: the CPU time every process used (from
//! /proc/stat), the part this process used, steal time, and the load average. What other
//! processes used in between, in cores, is the figure the warning is made of.

use serde::Serialize;

/// One look at the host's CPU counters.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    at: std::time::Instant,
    /// CPU seconds every process used so far (user, nice, system, irq, softirq), all cores.
    busy_s: Option<f64>,
    steal_s: Option<f64>,
    /// CPU seconds this process used so far.
    own_s: Option<f64>,
    load1: Option<f64>,
    /// The sampling thread's run delay and its cgroup's throttled time so far (ns).
    run_delay_ns: Option<u64>,
    throttled_ns: Option<u64>,
}

/// Clock ticks per second of /proc/stat (USER_HZ, 100 on every Linux that matters).
const USER_HZ: f64 = 100.0;

impl Sample {
    pub fn now() -> Sample {
        let (busy_s, steal_s) = match std::fs::read_to_string("/proc/stat") {
            Ok(text) => parse_stat(&text),
            Err(_) => (None, None),
        };
        Sample {
            at: std::time::Instant::now(),
            busy_s,
            steal_s,
            own_s: crate::host::process_cpu_us().map(|us| us / 1e6),
            load1: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|t| t.split_whitespace().next()?.parse().ok()),
            run_delay_ns: crate::host::thread_run_delay_ns(),
            throttled_ns: crate::host::cgroup_throttled_ns(),
        }
    }
}

/// (busy, steal) CPU seconds from the first line of /proc/stat.
fn parse_stat(text: &str) -> (Option<f64>, Option<f64>) {
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (None, None);
    };
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 7 {
        return (None, None);
    }
    // user nice system idle iowait irq softirq steal ...
    let busy = f[0] + f[1] + f[2] + f[5] + f[6];
    (Some(busy / USER_HZ), f.get(7).map(|s| s / USER_HZ))
}

/// The host's load over one bench.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    pub seconds: f64,
    /// Cores' worth of CPU that other processes used, on average.
    pub other_cores: Option<f64>,
    /// Cores' worth of CPU every process used (this one included), and this one alone.
    pub machine_cores: Option<f64>,
    pub own_cores: Option<f64>,
    /// Share of the machine's CPU time the hypervisor took (steal).
    pub steal_fraction: Option<f64>,
    pub load1_before: Option<f64>,
    pub load1_after: Option<f64>,
    pub cores: usize,
    /// Whether the machine counts as busy ([`super::is_busy`]).
    pub busy: bool,
    /// Seconds the sampling thread was ready to run and did not (its own lost time), and the
    /// part its cgroup's CPU quota held it.
    pub paused_s: Option<f64>,
    pub throttled_s: Option<f64>,
}

/// A busy rank's warning: (its name in meta.json, `links r2`; the warning).
pub type BusyWarning = (String, String);

/// meta.json's `notes.host_load` for the busy ranks of a multi-rank run: one entry per
/// (name, warning), where the single-node benches keep theirs, so the report's warnings and
/// summary.json's `warnings` carry them.
pub fn busy_notes(warnings: &[BusyWarning]) -> serde_json::Map<String, serde_json::Value> {
    let mut notes = serde_json::Map::new();
    if !warnings.is_empty() {
        let entries: serde_json::Map<String, serde_json::Value> = warnings
            .iter()
            .map(|(name, w)| (name.clone(), serde_json::json!({ "warning": w })))
            .collect();
        notes.insert("host_load".into(), entries.into());
    }
    notes
}

impl Load {
    pub fn between(a: &Sample, b: &Sample) -> Load {
        let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let diff = |x: Option<f64>, y: Option<f64>| Some(y? - x?);
        let machine_cores = diff(a.busy_s, b.busy_s).map(|c| (c / seconds).max(0.0));
        let own_cores = diff(a.own_s, b.own_s).map(|c| (c / seconds).max(0.0));
        let other_cores = match (diff(a.busy_s, b.busy_s), diff(a.own_s, b.own_s)) {
            (Some(all), Some(own)) => Some(((all - own) / seconds).max(0.0)),
            _ => None,
        };
        let steal_fraction =
            diff(a.steal_s, b.steal_s).map(|s| (s / (seconds * cores as f64)).clamp(0.0, 1.0));
        let busy = super::is_busy(seconds, other_cores, steal_fraction);
        let ns = |x: Option<u64>, y: Option<u64>| Some(y?.saturating_sub(x?) as f64 / 1e9);
        Load {
            paused_s: ns(a.run_delay_ns, b.run_delay_ns),
            throttled_s: ns(a.throttled_ns, b.throttled_ns),
            seconds,
            other_cores,
            machine_cores,
            own_cores,
            steal_fraction,
            load1_before: a.load1,
            load1_after: b.load1,
            cores,
            busy,
        }
    }

    /// The console and report warning for a busy machine.
    pub fn warning(&self, bench: &str) -> Option<String> {
        self.busy.then(|| {
            format!(
                "the machine was busy during {bench}: other processes used {:.2} of {} cores on \
                 average, steal {:.1}%, load average {:.2} -> {:.2}; its figures may be low and \
                 noisy: rerun on a quiet machine",
                self.other_cores.unwrap_or(0.0),
                self.cores,
                100.0 * self.steal_fraction.unwrap_or(0.0),
                self.load1_before.unwrap_or(f64::NAN),
                self.load1_after.unwrap_or(f64::NAN)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_is_read_as_busy_and_steal_seconds() {
        let text = "cpu  1000 20 300 9000 50 7 3 40 0 0\ncpu0 1 2 3 4\n";
        let (busy, steal) = parse_stat(text);
        assert_eq!(busy, Some((1000.0 + 20.0 + 300.0 + 7.0 + 3.0) / 100.0));
        assert_eq!(steal, Some(0.4));
        assert_eq!(parse_stat("nothing"), (None, None));
    }

    #[test]
    fn other_processes_cpu_makes_a_bench_busy() {
        let t0 = std::time::Instant::now();
        let at = |s: f64| t0 + std::time::Duration::from_secs_f64(s);
        let sample = |t: f64, busy: f64, own: f64| Sample {
            at: at(t),
            busy_s: Some(busy),
            steal_s: Some(0.0),
            own_s: Some(own),
            load1: Some(1.0),
            run_delay_ns: Some((t * 1e8) as u64),
            throttled_ns: None,
        };
        // 10 s in which the machine used 15 CPU seconds, 14 of them ours: quiet.
        let quiet = Load::between(&sample(0.0, 100.0, 5.0), &sample(10.0, 115.0, 19.0));
        assert!(!quiet.busy && quiet.warning("x").is_none(), "{quiet:?}");
        // Its thread waited 1 s of the 10 to run; no cgroup quota was read.
        assert_eq!((quiet.paused_s, quiet.throttled_s), (Some(1.0), None));
        // Others used 8 CPU seconds in 10 s: busy, and the warning names the bench.
        let busy = Load::between(&sample(0.0, 100.0, 5.0), &sample(10.0, 122.0, 19.0));
        assert!(busy.busy);
        assert!(busy.warning("kernels").unwrap().contains("during kernels"));
    }
}
