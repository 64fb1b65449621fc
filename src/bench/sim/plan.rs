//! What a `sim` run simulates: its cases (a sweep or a trace over a base scenario), its
//! schedules and memory limit, the tail run; planned from the config and bounded before it
//! starts.

use std::path::Path;

use super::scenario::{MemLimit, OneOrMany, SimConfig};
use super::tail::{self, TailPlan};
use crate::sim::model::MAX_MS;
use crate::sim::{default_mem_limit, CommModel, Run, Scenario, Schedule, DEFAULT_SCHEDULES};

/// One scenario to simulate, with a label for the `case` column.
#[derive(Debug, Clone)]
pub struct Case {
    pub label: String,
    pub iteration: u64,
    pub scenario: Scenario,
}

#[derive(Debug, Clone)]
pub struct SimPlan {
    pub cases: Vec<Case>,
    pub schedules: Vec<Schedule>,
    /// Microbatches in flight adaptive keeps to (no cap when the limit is in bytes).
    pub mem_limit: usize,
    /// The limit as given, for the CSV: microbatches or a size.
    pub mem_limit_label: String,
    /// Each stage's parameters in bytes, when the model's shape was given.
    pub param_bytes: Option<f64>,
    /// Random stalls over the base case, when asked ([`tail`]).
    pub tail: Option<TailPlan>,
}

/// Iterations a tail run draws by default.
pub const TAIL_ITERATIONS: u32 = 1000;

/// The model's shape and the memory limit laid on the base scenario: (microbatches in flight
/// adaptive keeps to, the limit as the CSV shows it).
fn memory_of(cfg: &SimConfig, base: &mut Scenario) -> anyhow::Result<(usize, String)> {
    if let Some(shape) = &cfg.model {
        if let Some(problem) = shape.problem() {
            return Err(anyhow::anyhow!(problem));
        }
        base.activation = Some(shape.activation());
    }
    let limit = match &cfg.mem_limit {
        None => {
            let n = default_mem_limit(base);
            (n, n.to_string())
        }
        Some(MemLimit::Microbatches(0)) => {
            return Err(anyhow::anyhow!("mem_limit must be at least 1 microbatch"))
        }
        Some(MemLimit::Microbatches(n)) => (*n, n.to_string()),
        Some(MemLimit::Size(text)) => {
            let bytes = crate::units::parse_byte_count(text)? as f64;
            let Some(shape) = &cfg.model else {
                return Err(anyhow::anyhow!(
                    "mem_limit {text} is in bytes: give the model's shape ([model] or \
                     --hidden, --heads, --seq-len, --micro-batch) or a number of microbatches"
                ));
            };
            let left = bytes - shape.param_bytes();
            if left < shape.activation().held {
                return Err(anyhow::anyhow!(
                    "mem_limit {text}: the parameters ({}) leave room for less than one \
                     microbatch's activations ({}); raise it",
                    crate::units::human_bytes(shape.param_bytes() as u64),
                    crate::units::human_bytes(shape.activation().held as u64)
                ));
            }
            base.activation_limit = Some(left);
            (usize::MAX, crate::units::human_bytes(bytes as u64))
        }
    };
    Ok(limit)
}

/// A PyTorch schedule CSV as a schedule named by its file.
fn read_schedule_file(path: &Path) -> anyhow::Result<Schedule> {
    let text = crate::record::read_input(path)
        .map_err(|e| anyhow::anyhow!("cannot read schedule file {}: {e}", path.display()))?;
    let schedule = crate::sim::torch_csv::parse(&text)
        .map_err(|e| anyhow::anyhow!("schedule file {}: {e}", path.display()))?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "schedule".into());
    Ok(Schedule::File {
        name,
        schedule: Box::new(schedule),
    })
}

pub(super) fn slow_label(delays: &[f64]) -> String {
    let parts: Vec<String> = delays
        .iter()
        .enumerate()
        .filter(|(_, &d)| d > 0.0)
        .map(|(l, d)| format!("{l}:{d}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(";")
    }
}

/// The scenario every case varies: stages and microbatches (from the flags, else the
/// schedule file, else 4 and 12), op times (10 ms unless given), links, occupancy, tfb.
fn base_scenario(cfg: &SimConfig, file: Option<&Schedule>) -> anyhow::Result<Scenario> {
    let ten = OneOrMany::One(10.0);
    let slow: Vec<(usize, f64)> = cfg.slow.iter().map(|s| (s.link, s.delay_ms)).collect();
    let from_file = |f: fn(&crate::sim::torch_csv::TorchSchedule) -> usize| {
        file.map(|s| match s {
            Schedule::File { schedule, .. } => f(schedule),
            _ => unreachable!("read_schedule_file gives a file schedule"),
        })
    };
    let occupy: Vec<(usize, f64)> = cfg.occupy.iter().map(|o| (o.link, o.ms)).collect();
    let sc = Scenario::builder(
        cfg.stages.or(from_file(|s| s.ranks)).unwrap_or(4),
        cfg.microbatches
            .or(from_file(|s| s.microbatches))
            .unwrap_or(12),
    )
    .times(
        &cfg.tf.as_ref().unwrap_or(&ten).values(),
        &cfg.tb.as_ref().unwrap_or(&ten).values(),
        &cfg.tw.as_ref().unwrap_or(&ten).values(),
    )
    .link_ms(cfg.link_ms.unwrap_or(0.0))
    .slow(&slow)
    .comm(
        cfg.comm.unwrap_or(CommModel::Latency),
        cfg.d2h_ms.unwrap_or(0.5),
    )
    .build()?
    .with_occupancy(&occupy)?;
    match &cfg.tfb {
        Some(tfb) => Ok(sc.with_tfb(&tfb.values())?),
        None => Ok(sc),
    }
}

/// The schedules named (the default set unless a file gives its own), then the file's.
fn schedules_of(cfg: &SimConfig, file: Option<Schedule>) -> anyhow::Result<Vec<Schedule>> {
    let names = match (&cfg.schedules, &file) {
        (Some(names), _) => names.clone(),
        (None, Some(_)) => Vec::new(),
        (None, None) => DEFAULT_SCHEDULES.split(',').map(String::from).collect(),
    };
    let mut schedules = names
        .iter()
        .map(|s| s.parse::<Schedule>())
        .collect::<Result<Vec<_>, _>>()?;
    schedules.extend(file);
    if schedules.is_empty() {
        return Err(anyhow::anyhow!("schedules is empty: name at least one"));
    }
    Ok(schedules)
}

/// A case's label, iteration and link delays, before its scenario is made from the base.
type CaseDelays = (String, u64, Vec<f64>);

/// One case per iteration of a link-delay trace, its delays on top of the base's.
fn trace_cases(base: &[f64], links: usize, text: &str) -> anyhow::Result<Vec<CaseDelays>> {
    let mut cases = Vec::new();
    for (iteration, mut extra) in crate::sim::trace::parse_link_trace(text, links)? {
        // A wrap link's delay (`--slow`) stays on it.
        extra.resize(base.len(), 0.0);
        let delays = base.iter().zip(&extra).map(|(a, b)| a + b).collect();
        cases.push((format!("iteration {iteration}"), iteration, delays));
    }
    Ok(cases)
}

/// One case per swept delay of each swept link, checked: a link that exists, a delay in range.
fn sweep_cases(cfg: &SimConfig, base: &[f64], sweepable: usize) -> anyhow::Result<Vec<CaseDelays>> {
    let mut cases = Vec::new();
    for sw in &cfg.sweep {
        if sw.link >= sweepable {
            return Err(anyhow::anyhow!(
                "sweep link {} does not exist: links are 0..={} (link i joins stages i and \
                 i+1; from 3 stages on the last is the wrap link, last stage to first)",
                sw.link,
                sweepable as i64 - 1
            ));
        }
        for &d in &sw.delays_ms {
            if !d.is_finite() || !(0.0..=MAX_MS).contains(&d) {
                return Err(anyhow::anyhow!(
                    "sweep delay {d}: delays must be finite, >= 0 and at most {MAX_MS} ms"
                ));
            }
            let mut delays = base.to_vec();
            delays.resize(delays.len().max(sw.link + 1), 0.0);
            delays[sw.link] += d;
            cases.push((format!("link {} +{d} ms", sw.link), 0, delays));
        }
    }
    Ok(cases)
}

impl SimPlan {
    /// Builds the base scenario from a config (defaults: S = 4, N = 12, 10 ms ops, no delay).
    pub fn from_config(cfg: &SimConfig) -> anyhow::Result<SimPlan> {
        Self::build(cfg, None)
    }

    /// Like `from_config`, with per-iteration link delays from a trace.
    pub fn build(cfg: &SimConfig, trace: Option<&str>) -> anyhow::Result<SimPlan> {
        let file = cfg
            .schedule_file
            .as_deref()
            .map(read_schedule_file)
            .transpose()?;
        let mut base = base_scenario(cfg, file.as_ref())?;
        let schedules = schedules_of(cfg, file)?;
        let (mem_limit, mem_limit_label) = memory_of(cfg, &mut base)?;
        let links = base.stages - 1;
        let tail = Self::tail_plan(cfg, links)?;
        let mut delays = match trace {
            Some(text) => trace_cases(&base.delay_ms, links, text)?,
            None if cfg.sweep.is_empty() => {
                let label = format!("slow {}", slow_label(&base.delay_ms));
                vec![(label, 0, base.delay_ms.clone())]
            }
            None => Vec::new(),
        };
        let sweepable = crate::sim::links_of(base.stages);
        delays.extend(sweep_cases(cfg, &base.delay_ms, sweepable)?);
        let cases = delays
            .into_iter()
            .map(|(label, iteration, delays)| Case {
                label,
                iteration,
                scenario: base.with_delays(delays),
            })
            .collect();
        let plan = SimPlan {
            cases,
            schedules,
            mem_limit,
            mem_limit_label,
            param_bytes: cfg.model.map(|m| m.param_bytes()),
            tail,
        };
        plan.check_cost()?;
        Ok(plan)
    }

    /// The tail run a config asks for (stalls given), checked: links that exist, at most
    /// [`tail::MAX_ITERATIONS`].
    fn tail_plan(cfg: &SimConfig, links: usize) -> anyhow::Result<Option<TailPlan>> {
        if cfg.stall.is_empty() && cfg.measured_tail.is_empty() {
            if cfg.iterations.is_some() || cfg.seed.is_some() {
                return Err(anyhow::anyhow!(
                    "--iterations and --seed draw stalls: give --stall LINK:PROB:MS (or \
                            --from a links run that stalled)"
                ));
            }
            return Ok(None);
        }
        let drawn = cfg.stall.iter().map(|s| s.link);
        let beyond = drawn
            .chain(cfg.measured_tail.iter().map(|m| m.link))
            .find(|&l| l >= links);
        if let Some(link) = beyond {
            return Err(anyhow::anyhow!(
                "stall link {link} does not exist: links are 0..={} (link i joins stages i and i+1)",
                links as i64 - 1
            ));
        }
        let iterations = cfg.iterations.unwrap_or(TAIL_ITERATIONS);
        if iterations == 0 || iterations > tail::MAX_ITERATIONS {
            return Err(anyhow::anyhow!(
                "--iterations {iterations}: give 1 to {}",
                tail::MAX_ITERATIONS
            ));
        }
        Ok(Some(TailPlan {
            stalls: cfg.stall.clone(),
            measured: cfg.measured_tail.clone(),
            iterations,
            seed: cfg.seed.unwrap_or(0),
            measured_healthy: cfg.measured_healthy.clone(),
        }))
    }

    /// Ops the run will simulate, counting the adaptive planner's candidate runs and the
    /// delay-free run each static replay is taken from.
    pub fn estimated_ops(&self) -> u64 {
        let per_case: u64 = self
            .schedules
            .iter()
            .map(|s| match s {
                Schedule::Adaptive => ADAPTIVE_RUNS,
                Schedule::Static(_) => 2,
                _ => 1,
            })
            .sum();
        let cases: u64 = self
            .cases
            .iter()
            .map(|c| 3 * (c.scenario.stages * c.scenario.microbatches) as u64 * per_case)
            .sum();
        // A tail run: each schedule planned once, then run every iteration.
        let tail = match (&self.tail, self.cases.first()) {
            (Some(t), Some(c)) => {
                let ops = 3 * (c.scenario.stages * c.scenario.microbatches) as u64;
                ops * (per_case + self.schedules.len() as u64 * t.iterations as u64)
            }
            _ => 0,
        };
        cases + tail
    }

    /// Refuses, before anything runs, a plan over the case or op caps.
    fn check_cost(&self) -> anyhow::Result<()> {
        if self.cases.len() > MAX_CASES {
            return Err(anyhow::anyhow!(
                "{} cases (trace iterations and sweep delays) is over the cap of {MAX_CASES}: \
                 split the trace or the sweep",
                self.cases.len()
            ));
        }
        let ops = self.estimated_ops();
        if ops > MAX_SIM_OPS {
            return Err(anyhow::anyhow!(
                "this run would simulate about {ops} ops, over the cap of {MAX_SIM_OPS} \
                 (about a minute of simulation): use fewer stages, microbatches, cases or schedules"
            ));
        }
        Ok(())
    }
}

/// The most cases (trace iterations plus sweep delays) one run simulates.
pub const MAX_CASES: usize = 10_000;
/// The most ops one run simulates (estimated before it starts, see `estimated_ops`).
pub const MAX_SIM_OPS: u64 = 250_000_000;
/// Runs the adaptive planner makes per case: 18 candidate plans, the two delay-free runs its
/// static candidates replay, and the winner once more.
pub(crate) const ADAPTIVE_RUNS: u64 = 22;
/// The most rows `sim_timeline.csv` gets in one run; later cases get none (and it says so).
pub const MAX_TIMELINE_ROWS: usize = 500_000;

/// What one schedule did on one case.
pub struct Outcome {
    pub case: String,
    pub schedule: String,
    pub plan: String,
    pub run: Run,
    /// The model chunks each rank held (for exporting the order).
    pub layout: crate::sim::Layout,
}

/// Scenarios with more ops than this per schedule get no `sim_timeline.csv` rows.
pub(super) const TIMELINE_MAX_OPS: usize = 12_288;
