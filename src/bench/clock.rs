//! The `clock` bench: the host clock every host-timed figure stands on. What one read of it
//! costs, the smallest step it shows, and how late a sleep wakes (the injected straggler
//! delays of `hol` and `pipeline --slow` are sleeps). Each is checked before it is reported:
//! reads never go back, a sleep never wakes early. Its headlines and the figures `check`
//! compares come with its table: a node whose clocksource fell back from the TSC (to HPET or
//! ACPI PM: a read 20 to 100 times dearer) fails against its baseline.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};

use super::descriptor::{command, from_toml, Descriptor, Settings};
use super::flags::{parse_iters, parse_warmup};
use super::shared::{check_iters, check_warmup};
use crate::record::csv::sig4;
use crate::record::view::figure::{Checked, Figure};
use crate::record::view::headline::{source, Headline};
use crate::record::view::loaded::Loaded;
use crate::record::{CsvSink, CsvTable, Line, TableSpec};
use crate::stats::Summary;

pub const BENCH: &str = "clock";

/// Reads of the clock per timed batch: one read is far below the clock's own step.
const READS_PER_BATCH: u32 = 1000;
/// The most time the sleeps of one run may take.
const MAX_SLEEP_S: f64 = 60.0;

/// `clock.csv`: one row per metric, its timing statistics in µs.
pub struct ClockTable;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClockParams {
    /// `read` (one clock read), `step` (the smallest nonzero step between reads), `sleep`
    /// (how much later than asked a sleep wakes).
    pub metric: String,
    /// The sleep asked for, µs (0 for the others).
    pub requested_us: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClockFigures {
    /// The median in nanoseconds, for the reads and steps far below a microsecond.
    pub p50_ns: f64,
    /// Reads never went back; sleeps never woke early.
    pub verified: bool,
}

impl CsvTable for ClockTable {
    const NAME: &'static str = BENCH;
    const WITH_STATS: bool = true;
    type Params = ClockParams;
    type Figures = ClockFigures;
}

/// `clock`'s settings: its flags, its `[clock]` keys and its defaults, declared once; checked,
/// they are its plan.
#[derive(Debug, Clone, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClockSettings {
    /// Samples per metric.
    #[arg(long, default_value_t = ClockSettings::default().iters, value_parser = parse_iters)]
    pub iters: u32,
    /// Untimed warm-up samples per metric (at most 100000).
    #[arg(long, default_value_t = ClockSettings::default().warmup, value_parser = parse_warmup)]
    pub warmup: u32,
    /// The sleep whose overshoot is measured, in µs.
    #[arg(long, default_value_t = ClockSettings::default().sleep_us)]
    pub sleep_us: u64,
}

impl Default for ClockSettings {
    fn default() -> Self {
        ClockSettings {
            iters: 200,
            warmup: 10,
            sleep_us: 1000,
        }
    }
}

impl Settings for ClockSettings {
    type Plan = ClockSettings;
    fn plan(&self) -> anyhow::Result<ClockSettings> {
        check_iters("clock.iters", self.iters)?;
        check_warmup("clock.warmup", self.warmup)?;
        if !(1..=1_000_000).contains(&self.sleep_us) {
            return Err(anyhow::anyhow!(
                "clock.sleep_us = {}: give 1 to 1000000 µs",
                self.sleep_us
            ));
        }
        let sleeps_s = (self.iters + self.warmup) as f64 * self.sleep_us as f64 / 1e6;
        if sleeps_s > MAX_SLEEP_S {
            return Err(anyhow::anyhow!(
                "clock: {} sleeps of {} µs take {sleeps_s:.0} s, over the cap of {MAX_SLEEP_S:.0} s: \
                 fewer iterations or a shorter sleep",
                self.iters + self.warmup,
                self.sleep_us
            ));
        }
        Ok(self.clone())
    }
}

/// The `clock` bench, for the registry.
pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: Some(from_toml::<ClockSettings>),
    command: command::<ClockSettings>(
        "The host clock: what a read costs, its smallest step, how late a sleep wakes; writes \
         clock.csv",
        "Examples:\n  morphbench clock\n  morphbench clock --iters 1000 --sleep-us 100",
    ),
    tables: || {
        vec![TableSpec::compared::<ClockTable>()
            .single_node()
            .headlines(headlines)]
    },
};

/// Each metric's median: a read and a step in ns, a sleep's lateness in µs.
fn headlines(run: &Loaded, out: &mut Vec<Headline>) {
    let Some(t) = run.table::<ClockTable>() else {
        return;
    };
    for (i, r) in t.iter().enumerate() {
        let (what, value, unit) = match r.params.metric.as_str() {
            "read" => ("Host clock read (p50)".to_string(), r.figures.p50_ns, "ns"),
            "step" => (
                "Host clock step, smallest (p50)".into(),
                r.figures.p50_ns,
                "ns",
            ),
            _ => (
                format!("Sleep of {} µs, lateness (p50)", r.params.requested_us),
                r.stats().p50_us,
                "µs",
            ),
        };
        out.push(Headline {
            bench: BENCH,
            what,
            value: Some(value),
            unit,
            text: format!("{value:.1} {unit}"),
            source: source("clock.csv", i),
        });
    }
}

/// Each metric by its median time, lower better; a sleep's lateness moves with the scheduler
/// and the machine's load, so it can warn but never fail.
impl Checked for ClockTable {
    fn figure(line: &Line<Self>) -> Option<Figure> {
        let mut fig = Figure::time(line.stats());
        if line.params.metric == "sleep" {
            fig.caveat = Some("a sleep's lateness is the scheduler's, not the clock's".into());
        }
        Some(fig)
    }
}

impl crate::suite::Bench for ClockSettings {
    fn points(&self) -> u64 {
        3
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (dir, progress) = (cx.dir, cx.progress);
        let mut table: CsvSink<ClockTable> = dir.table()?;
        let mut write = |metric: &str, requested_us: u64, samples_us: &[f64]| -> Result<()> {
            let s = Summary::of(samples_us)
                .ok_or_else(|| anyhow::anyhow!("clock {metric}: no samples"))?;
            table.write(&Line::new(
                &dir.id,
                metric,
                ClockParams {
                    metric: metric.into(),
                    requested_us,
                },
                Some(&s),
                ClockFigures {
                    p50_ns: sig4(s.p50 * 1e3),
                    verified: true,
                },
            ))?;
            progress.println(format!("clock {metric:<6} p50 {:>10.4} µs", s.p50));
            progress.inc();
            Ok(())
        };
        let (reads, steps) = reads_and_steps(self)?;
        write("read", 0, &reads)?;
        write("step", 0, &steps)?;
        write("sleep", self.sleep_us, &sleep_overshoots(self)?)?;
        super::shared::note(BENCH, "host clock: Instant (CLOCK_MONOTONIC)")
    }
}

/// µs per read (batches of [`READS_PER_BATCH`] bare reads), and the smallest nonzero step
/// between two reads in a row per batch (a loop of its own, which also checks that no read
/// goes back: the comparisons stay out of the read's timing).
fn reads_and_steps(plan: &ClockSettings) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut reads = Vec::with_capacity(plan.iters as usize);
    let mut steps = Vec::with_capacity(plan.iters as usize);
    let mut went_back = false;
    for i in 0..plan.warmup + plan.iters {
        let start = Instant::now();
        let mut last = start;
        for _ in 0..READS_PER_BATCH {
            last = std::hint::black_box(Instant::now());
        }
        let batch = last.duration_since(start);
        let mut previous = Instant::now();
        let mut smallest = Duration::MAX;
        for _ in 0..READS_PER_BATCH {
            let now = Instant::now();
            // None when it went back.
            match now.checked_duration_since(previous) {
                Some(d) if !d.is_zero() => smallest = smallest.min(d),
                Some(_) => {}
                None => went_back = true,
            }
            previous = now;
        }
        if i >= plan.warmup {
            reads.push(batch.as_secs_f64() * 1e6 / READS_PER_BATCH as f64);
            if smallest != Duration::MAX {
                steps.push(smallest.as_secs_f64() * 1e6);
            }
        }
    }
    ensure!(
        !went_back,
        "the host clock went back between two reads: its times cannot be trusted"
    );
    ensure!(
        !steps.is_empty(),
        "the host clock never moved within {READS_PER_BATCH} reads: its step is coarser than a batch"
    );
    Ok((reads, steps))
}

/// How much later than `sleep_us` each sleep woke, µs; refused if one woke early.
fn sleep_overshoots(plan: &ClockSettings) -> Result<Vec<f64>> {
    let asked = Duration::from_micros(plan.sleep_us);
    let mut out = Vec::with_capacity(plan.iters as usize);
    for i in 0..plan.warmup + plan.iters {
        let t0 = Instant::now();
        std::thread::sleep(asked);
        let slept = t0.elapsed();
        ensure!(
            slept >= asked,
            "a sleep of {} µs woke after {:.1} µs: the clock or the sleep cannot be trusted",
            plan.sleep_us,
            slept.as_secs_f64() * 1e6
        );
        if i >= plan.warmup {
            out.push((slept - asked).as_secs_f64() * 1e6);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::err_text;

    #[test]
    fn the_clock_is_read_stepped_and_slept_on() {
        let plan = ClockSettings {
            iters: 5,
            warmup: 1,
            sleep_us: 200,
        };
        let (reads, steps) = reads_and_steps(&plan).unwrap();
        assert_eq!(reads.len(), 5);
        assert!(reads.iter().all(|&r| r > 0.0 && r < 1000.0), "{reads:?}");
        assert!(steps.iter().all(|&s| s > 0.0), "{steps:?}");
        let late = sleep_overshoots(&plan).unwrap();
        assert_eq!(late.len(), 5);
        assert!(late.iter().all(|&l| l >= 0.0), "{late:?}");
    }

    #[test]
    fn a_run_too_long_or_a_bad_sleep_is_refused() {
        let cfg = |iters, sleep_us| ClockSettings {
            iters,
            warmup: 0,
            sleep_us,
        };
        let err = |iters, sleep_us| err_text(cfg(iters, sleep_us).plan());
        assert!(err(100_000, 1_000_000).contains("over the cap"));
        assert!(err(10, 0).contains("clock.sleep_us"));
        assert!(err(0, 10).contains("clock.iters"));
        assert_eq!(cfg(10, 10).plan().unwrap().sleep_us, 10);
    }

    /// One declaration, both ways in: a key left out of `[clock]` and a flag not given take
    /// the same default.
    #[test]
    fn flags_and_suite_keys_share_their_defaults() {
        use clap::FromArgMatches;
        let from_toml: ClockSettings = toml::from_str("sleep_us = 50").unwrap();
        let cmd = <ClockSettings as clap::Args>::augment_args(clap::Command::new("clock"));
        let m = cmd.get_matches_from(["clock", "--sleep-us", "50"]);
        let from_flags = ClockSettings::from_arg_matches(&m).unwrap();
        assert_eq!(
            serde_json::to_value(&from_toml).unwrap(),
            serde_json::to_value(&from_flags).unwrap()
        );
        assert_eq!((from_flags.iters, from_flags.warmup), (200, 10));
        assert!(toml::from_str::<ClockSettings>("sleep = 5").is_err());
    }
}
