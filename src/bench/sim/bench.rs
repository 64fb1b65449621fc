//! The `sim` bench as the suite runs it: the scenarios planned, and what to show of them.

use anyhow::{anyhow, Result};

use super::plan::SimPlan;
use super::runner::{export_torch, print_timelines, run, throughput_bench, write_trace};
use super::scenario::SimConfig;
use super::tail;

/// `[sim]` in a suite config.
pub fn from_toml(v: toml::Value) -> anyhow::Result<Box<dyn crate::suite::Bench>> {
    let plan = SimPlan::from_config(&crate::bench::shared::table::<SimConfig>(v)?)?;
    Ok(Box::new(SimBench {
        plan,
        output: SimOutput::default(),
    }))
}

/// What `sim` shows besides sim.csv.
#[derive(Debug, Clone)]
pub struct SimOutput {
    /// Schedules whose ASCII timelines are printed.
    pub timelines: Vec<String>,
    pub width: usize,
    pub trace_out: Option<std::path::PathBuf>,
    /// Repetitions of the simulator throughput benchmark (none when 0).
    pub bench_reps: u32,
    /// Write the first case's orders as PyTorch schedule CSVs to this path (one file per
    /// schedule when there are several).
    pub export_torch: Option<std::path::PathBuf>,
}

impl Default for SimOutput {
    fn default() -> Self {
        SimOutput {
            timelines: vec!["adaptive".into()],
            width: 100,
            trace_out: None,
            bench_reps: 0,
            export_torch: None,
        }
    }
}

/// The `sim` bench: the scenarios to simulate and what to show of them.
#[derive(Debug, Clone)]
pub struct SimBench {
    pub plan: SimPlan,
    pub output: SimOutput,
}

impl crate::suite::Bench for SimBench {
    fn points(&self) -> u64 {
        self.plan.cases.len() as u64
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (dir, progress) = (cx.dir, cx.progress);
        let out = &self.output;
        // The tail first, so the first case's rows in sim.csv carry its iterations' spread.
        let mut tails = Vec::new();
        if let (Some(t), Some(case)) = (&self.plan.tail, self.plan.cases.first()) {
            tails = tail::run(
                &case.scenario,
                &self.plan.schedules,
                self.plan.mem_limit,
                (&t.stalls, &t.measured),
                t.iterations,
                t.seed,
            )
            .map_err(|e| anyhow!("tail: {e}"))?;
        }
        let outcomes = run(&self.plan, dir, progress, &tails)?;
        if let Some(t) = &self.plan.tail {
            tail::print(&tails, t);
            tail::write(&tails, t, dir)?;
        }
        let shown: Vec<_> = outcomes
            .iter()
            .filter(|o| out.timelines.iter().any(|t| t == &o.schedule))
            .collect();
        print_timelines(&shown, out.width, progress);
        if let Some(path) = &out.trace_out {
            write_trace(&outcomes, path)?;
            progress.println(format!("trace written to {}", path.display()));
        }
        if let Some(path) = &out.export_torch {
            for written in export_torch(&outcomes, path)? {
                progress.println(format!("PyTorch schedule written to {}", written.display()));
            }
        }
        if out.bench_reps == 0 {
            return Ok(crate::suite::Notes::new());
        }
        progress.println("simulator throughput (S = 64, N = 1024):".into());
        let rate = throughput_bench(dir, out.bench_reps, progress)?;
        crate::bench::shared::note("sim_ops_per_s", rate)
    }
}
