//! The noise policy: how a shared or noisy machine is told apart from a slow one. Every rule
//! lives here once, with its reason; links, fleet, check, pipeline and the report call it.
//!
//! - [`load`] samples the host around a bench, [`rank`] each rank of a multi-rank bench.
//! - Busy: other processes' CPU or the hypervisor's steal over a bench ([`is_busy`]).
//! - Explained: how much slower a busy machine's figure may be and still be the load's doing
//!   ([`explained_by_load`]); slower still is slow, busy or not.
//! - Slow: a figure counts as slow at [`SLOW`] times its peers, a CPU driver's kernels only at
//!   [`CPU_DRIVER_SLOW`] ([`slow_at`]).
//! - Confirmed: a suspect link is slow only when its retests agree ([`RETEST_PASSES`],
//!   [`CLEARLY_SLOW`], [`CLEARLY_SLOWER_US`]; the gate retests at most [`GATE_LINK_RETESTS`]).
//! - Noisy: a row whose samples vary by more than [`NOISY_CV`] is named as noisy.
//! - Tests stand in for a busy neighbour with [`injected_other_cores`], compiled only with the
//!   `test-hooks` feature.

pub mod load;
pub mod rank;

/// Other processes using more than this share of one core on average make a bench's machine
/// busy: on a 2-vCPU guest one other process halved a layernorm / memcpy ratio (0.26 to 0.12).
pub const BUSY_OTHER_CORES: f64 = 0.25;
/// A hypervisor stealing more than this share of the machine's time makes it busy.
pub const BUSY_STEAL: f64 = 0.05;
/// A window shorter than this is too short for /proc/stat's 10 ms ticks to call it busy.
pub const MIN_BUSY_WINDOW_S: f64 = 1.0;

/// Whether a window of `seconds` in which other processes used `other_cores` and the
/// hypervisor stole a `steal` share of the time was busy.
pub fn is_busy(seconds: f64, other_cores: Option<f64>, steal: Option<f64>) -> bool {
    seconds >= MIN_BUSY_WINDOW_S
        && (other_cores.is_some_and(|c| c > BUSY_OTHER_CORES)
            || steal.is_some_and(|s| s > BUSY_STEAL))
}

/// Whether a measurement was loaded: busy, or (in a window too short to call busy) with twice
/// the busy rule's load, half a core or a tenth of the time stolen.
pub fn is_loaded(busy: bool, other_cores: f64, steal: f64) -> bool {
    busy || other_cores >= 2.0 * BUSY_OTHER_CORES || steal >= 2.0 * BUSY_STEAL
}

/// How much slower than its peers a figure measured on a busy machine may be and still be put
/// down to the load: sharing the machine with `others` cores' worth of other work (when that
/// made it busy), a CPU-bound test gets at worst 1 / (1 + others) of a core, so its time can
/// grow (1 + others)-fold; twice that (scheduling, caches) and at least 4x. A hypervisor that
/// steals a `steal` share of the machine's time stretches it 1 / (1 - steal)-fold; twice that
/// (steal comes in bursts). Slower still is slow, busy or not: a GPU at a third of its peers'
/// speed is not 10% steal.
pub fn explained_by_load(others: f64, steal: f64) -> f64 {
    let cpu = if others >= BUSY_OTHER_CORES {
        (2.0 * (1.0 + others)).max(4.0)
    } else {
        1.0
    };
    cpu.max(2.0 / (1.0 - steal.clamp(0.0, 0.9)))
}

/// A slowdown at or above this, against the figure's peers, can be flagged (a link, a node's
/// figure on a GPU).
pub const SLOW: f64 = 1.35;

/// The slowdown at which a CPU driver's kernel figure fails. Its kernels are CPU code the
/// driver compiles in each process, whose speed differs between processes of one machine and
/// stays with the process, retest included (lavapipe on a 2-vCPU guest, nothing else running:
/// one rank's FMA at 0.72x the others', 0.66x on its retest; one's GEMM at 0.64x, then 0.61x;
/// 12 single processes' FMA 38-49 GFLOP/s). A GPU's kernels keep [`SLOW`].
pub const CPU_DRIVER_SLOW: f64 = 2.0;

/// The slowdown that counts as slow for a figure: [`CPU_DRIVER_SLOW`] for a CPU driver's
/// kernel or copy figure (`cpu_kernel`), else [`SLOW`].
pub fn slow_at(cpu_kernel: bool) -> f64 {
    if cpu_kernel {
        CPU_DRIVER_SLOW
    } else {
        SLOW
    }
}

/// The most retests of a suspect link: it stays flagged only if every one confirms it.
pub const RETEST_PASSES: usize = 3;
/// A link whose retest is this many times its group's baseline, and slower by at least
/// [`CLEARLY_SLOWER_US`], is slow beyond what a shared host's scheduling makes of a healthy
/// link: one retest confirms it. Anything less is retested until [`RETEST_PASSES`] agree.
/// Measured on the 2-vCPU virtual cluster: an 8 B ping-pong sits at 6 µs or, for a whole
/// connection, at 40-60 µs (up to 10x) depending on where the scheduler puts the two ends;
/// a 100 Mbit/s link is 60-85x slow by milliseconds at 64 KiB and 4 MiB.
pub const CLEARLY_SLOW: f64 = 10.0;
pub const CLEARLY_SLOWER_US: f64 = 1000.0;
/// Suspect links the fleet gate measures again, pair by pair, after its rounds (a few, on a
/// healthy fleet): what its bound allows for.
pub const GATE_LINK_RETESTS: u32 = 4;

/// A row whose samples' coefficient of variation is over this is named as noisy.
pub const NOISY_CV: f64 = 0.10;

/// Why a regression cannot fail a figure: the machine was busy during `bench` on `side`
/// ("this run", "the baseline", "both runs"). A busy machine's regression is at most a WARN.
pub fn busy_caveat(bench: &str, side: &str) -> String {
    format!("the machine was busy during {bench} in {side}")
}

/// Cores' worth of other processes' CPU a test says its machine had instead of measuring it
/// (a busy neighbour on one rank of a world that shares one machine). Read only in a build
/// with the `test-hooks` feature, which the tests enable; a release build never reads it.
#[cfg(feature = "test-hooks")]
pub fn injected_other_cores() -> Option<f64> {
    std::env::var("MORPHBENCH_INJECT_OTHER_CORES")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// Without the `test-hooks` feature nothing is injected.
#[cfg(not(feature = "test-hooks"))]
pub fn injected_other_cores() -> Option<f64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_takes_a_long_enough_window_and_other_work_or_steal() {
        assert!(is_busy(10.0, Some(0.8), Some(0.0)));
        assert!(is_busy(10.0, Some(0.0), Some(0.2)));
        assert!(!is_busy(10.0, Some(0.1), Some(0.01)));
        assert!(!is_busy(0.5, Some(1.5), None), "too short a window");
        assert!(!is_busy(10.0, None, None));
        assert!(is_loaded(false, 0.6, 0.0) && !is_loaded(false, 0.3, 0.05));
    }

    #[test]
    fn load_explains_a_bounded_slowdown_only() {
        assert_eq!(explained_by_load(0.0, 0.0), 2.0);
        assert_eq!(explained_by_load(1.0, 0.0), 4.0);
        assert!((explained_by_load(1.5, 0.0) - 5.0).abs() < 1e-12);
        assert!(explained_by_load(0.0, 0.5) == 4.0);
        // Steal beyond 90% is taken as 90%: the bound stays finite.
        assert!(explained_by_load(0.0, 1.0).is_finite());
        assert_eq!(slow_at(true), CPU_DRIVER_SLOW);
        assert_eq!(slow_at(false), SLOW);
    }
}
