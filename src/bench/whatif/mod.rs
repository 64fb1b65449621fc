//! `whatif`: a real training job's per-op trace (DP x PP x VPP, the OSDI '25 artifact's schema)
//! replayed on the simulator's engine, to say what stragglers cost the job, who causes it, and
//! what would fix it. Writes whatif.csv (per step), whatif_attribution.csv (the slowdown split
//! by op type, DP rank, stage and worker), whatif.json (everything, for summary.json), Perfetto
//! traces of the step as recorded and without stragglers, and with `--hosts`, drain.txt.

pub mod analysis;
pub mod charts;
pub mod job;
pub mod load;
pub mod meta;
pub mod model;
pub mod output;
pub mod parquet;
pub mod schedules;
pub mod synth;
pub mod trace;

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::descriptor::{command, Descriptor, Settings};
use crate::record::TableSpec;

pub const BENCH: &str = "whatif";

pub const DESCRIPTOR: Descriptor = Descriptor {
    name: BENCH,
    from_toml: None,
    command: command::<WhatifSettings>(
        "What-if on a real training job's trace (DP x PP x VPP): what stragglers cost, who \
         causes it, what would fix it; writes whatif.csv and whatif_attribution.csv",
        "Examples:\n  morphbench whatif --trace trace.parquet --meta meta.yaml\n  \
         morphbench whatif --trace trace.csv --steps 20-40 --hosts hosts.txt\n\n\
         The trace has one row per op: dp_rank,stage,rank,step,optype,start_ts,duration,seq_id,\
         mc,mb_id,gmc (github ByteDance-Seed/StragglerAnalysis's schema), as parquet or CSV.",
    ),
    tables: || {
        vec![
            TableSpec::of::<output::WhatifTable>().single_node(),
            TableSpec::of::<output::AttributionTable>()
                .single_node()
                .charts(crate::record::Charts::OfFirst(charts::whatif_charts)),
            TableSpec::of::<output::SchedulesTable>().single_node(),
        ]
    },
};

/// What-if on a real training job's trace: `morphbench whatif`'s flags and their defaults,
/// declared once (it has no suite table: a suite has no trace to give it).
#[derive(Debug, Clone, clap::Args, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WhatifSettings {
    /// The trace: parquet or CSV, the artifact's columns.
    #[arg(long)]
    pub trace: PathBuf,
    /// The job's meta YAML (dp_size, pp_size, tp_size, vpp_size, world_size).
    #[arg(long)]
    pub meta: Option<PathBuf>,
    /// The case to analyse, in a trace holding several (pipeline_trace.csv).
    #[arg(long)]
    pub case: Option<String>,
    /// Steps to analyse, e.g. 12,20-23 (default: all).
    #[arg(long)]
    pub steps: Option<String>,
    /// The job's sizes, when there is no meta file (inferred from the trace otherwise).
    #[arg(long)]
    pub dp: Option<u32>,
    #[arg(long)]
    pub pp: Option<u32>,
    #[arg(long)]
    pub tp: Option<u32>,
    #[arg(long)]
    pub vpp: Option<u32>,
    /// Dimensions to split the slowdown by (each costs one replay per key).
    #[arg(long, default_value_t = WhatifSettings::default().split)]
    pub split: String,
    /// Refuse a trace file larger than this.
    #[arg(long, default_value_t = WhatifSettings::default().max_trace_mb)]
    pub max_trace_mb: u64,
    /// Worker rank to hostname (`RANK HOST` per line): write drain.txt with the workers whose
    /// removal recovers at least --drain-threshold of the step.
    #[arg(long)]
    pub hosts: Option<PathBuf>,
    /// Share of the step a worker's removal must recover to be drained.
    #[arg(long, default_value_t = WhatifSettings::default().drain_threshold)]
    pub drain_threshold: f64,
    /// For the schedules what-if: the share of Megatron's backward-compute that is the weight
    /// gradient (W; the rest is B). Zero Bubble measures B and W about equal.
    #[arg(long, default_value_t = WhatifSettings::default().w_fraction)]
    pub w_fraction: f64,
}

impl Default for WhatifSettings {
    fn default() -> Self {
        WhatifSettings {
            trace: PathBuf::new(),
            meta: None,
            case: None,
            steps: None,
            dp: None,
            pp: None,
            tp: None,
            vpp: None,
            split: "optype,dp_rank,stage,worker".into(),
            max_trace_mb: load::DEFAULT_MAX_TRACE_MB,
            hosts: None,
            drain_threshold: 0.05,
            w_fraction: 0.5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhatifPlan {
    pub trace: PathBuf,
    pub meta: Option<PathBuf>,
    pub case: Option<String>,
    pub steps: Option<BTreeSet<i64>>,
    pub sizes: meta::SizeFlags,
    pub split: Vec<String>,
    pub max_trace_mb: u64,
    pub hosts: Option<PathBuf>,
    pub drain_threshold: f64,
    pub w_fraction: f64,
}

impl Settings for WhatifSettings {
    type Plan = WhatifPlan;
    fn plan(&self) -> anyhow::Result<WhatifPlan> {
        let plan = WhatifPlan {
            trace: self.trace.clone(),
            meta: self.meta.clone(),
            case: self.case.clone(),
            steps: self.steps.as_deref().map(parse_steps).transpose()?,
            sizes: meta::SizeFlags {
                dp: self.dp,
                pp: self.pp,
                tp: self.tp,
                vpp: self.vpp,
            },
            split: self
                .split
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            max_trace_mb: self.max_trace_mb,
            hosts: self.hosts.clone(),
            drain_threshold: self.drain_threshold,
            w_fraction: self.w_fraction,
        };
        for s in &plan.split {
            if !["optype", "dp_rank", "stage", "worker"].contains(&s.as_str()) {
                return Err(anyhow::anyhow!(
                    "--split {s:?}: give a list of optype, dp_rank, stage, worker"
                ));
            }
        }
        if !(0.0..1.0).contains(&plan.drain_threshold) {
            return Err(anyhow::anyhow!(
                "--drain-threshold {}: give a share of the step from 0 to 1, e.g. 0.05",
                plan.drain_threshold
            ));
        }
        if !(0.0..1.0).contains(&plan.w_fraction) {
            return Err(anyhow::anyhow!(
                "--w-fraction {}: give the weight gradient's share of a backward, 0 to under 1",
                plan.w_fraction
            ));
        }
        Ok(plan)
    }
}

/// `12,20-23` -> {12, 20, 21, 22, 23}.
pub fn parse_steps(text: &str) -> anyhow::Result<BTreeSet<i64>> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || anyhow::anyhow!("--steps {part:?}: give steps as 12,20-23");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i64, i64) = (
                    a.trim().parse().map_err(|_| bad())?,
                    b.trim().parse().map_err(|_| bad())?,
                );
                if b < a || b - a > 1_000_000 {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().map_err(|_| bad())?);
            }
        }
    }
    if out.is_empty() {
        return Err(anyhow::anyhow!("--steps is empty: give steps as 12,20-23"));
    }
    Ok(out)
}

impl crate::suite::Bench for WhatifPlan {
    fn points(&self) -> u64 {
        1
    }
    fn run(&self, cx: &crate::suite::Context) -> Result<crate::suite::Notes> {
        let (dir, progress) = (cx.dir, cx.progress);
        let t0 = std::time::Instant::now();
        let records = load::read(&self.trace, self.max_trace_mb, self.case.as_deref())?;
        let sizes = meta::sizes(self.meta.as_deref(), &self.sizes, &records)?;
        let job = job::Job::new(&records, sizes, self.steps.as_ref())
            .with_context(|| format!("--trace {}", self.trace.display()))?;
        drop(records);
        let has = |s: &str| self.split.iter().any(|x| x == s);
        let splits = analysis::Splits {
            optype: has("optype"),
            dp_rank: has("dp_rank"),
            stage: has("stage"),
            worker: has("worker"),
        };
        job.check_cost(splits, self.hosts.is_some())?;
        let answer = job.analyse(splits)?;
        let hosts = self.hosts.as_deref().map(output::read_hosts).transpose()?;
        let drains = match &hosts {
            Some(h) => output::drains(&job, &answer, h, self.drain_threshold)?,
            None => Vec::new(),
        };
        let schedules = schedules::run(&job, &answer, self.w_fraction)?;
        output::write(dir, &job, &answer, sizes, &drains, hosts.is_some())?;
        output::write_schedules(dir, &schedules)?;
        for line in output::answer_text(&job, &answer, &drains, &schedules) {
            progress.println(line);
        }
        progress.inc();
        let mut notes = crate::suite::Notes::new();
        notes.insert("whatif_seconds".into(), t0.elapsed().as_secs_f64().into());
        notes.insert("whatif_sizes".into(), serde_json::to_value(sizes)?);
        Ok(notes)
    }
}

#[cfg(test)]
mod tests;
