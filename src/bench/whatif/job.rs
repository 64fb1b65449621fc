//! A trace laid out for replay: every modelled op's recorded time on every lane (one lane per
//! step and DP rank), checked complete, with each op's launch delay and its own cost (a
//! compute op's duration; a collective member's transfer time after the last member started).

use std::collections::{BTreeSet, HashMap};

use anyhow::{bail, Context, Result};

use super::model::{self, Model, OpKey};
use super::trace::{OpType, Record};

/// A delay or transfer time more negative than this is clock skew, read as 0 (the artifact's
/// rule); smaller negative values are kept, as it keeps them.
const SKEW_S: f64 = 1e-2;

pub struct Job {
    pub model: Model,
    pub dp: usize,
    pub pp: usize,
    /// Model chunks per stage.
    pub vpp: usize,
    /// The op types the analysed steps record.
    pub types: BTreeSet<OpType>,
    pub steps: Vec<i64>,
    /// `steps.len() * dp`: lane `i * dp + d` is step `steps[i]` on DP rank d.
    pub lanes: usize,
    /// The trace's rank of each worker, `[dp * pp + stage]`.
    pub ranks: Vec<u32>,
    /// Each step as recorded: last end minus first start over all its ops.
    pub base_span: Vec<f64>,
    /// Recorded cost and launch delay, `[node * lanes + lane]`.
    pub cost: Vec<f64>,
    pub launch: Vec<f64>,
    /// The recorded timeline (seconds from each step's start).
    pub start: Vec<f64>,
    pub end: Vec<f64>,
}

/// The job's sizes, as its meta file, flags or trace give them.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sizes {
    pub dp: u32,
    pub pp: u32,
    pub tp: u32,
    pub vpp: u32,
    pub dsp: u32,
}

impl Job {
    pub fn new(records: &[Record], sizes: Sizes, steps: Option<&BTreeSet<i64>>) -> Result<Job> {
        check_sizes(records, sizes)?;
        let ovlp = records
            .iter()
            .any(|r| r.optype == OpType::SeparateGradsAllReduce);
        let model = model::build(records, sizes.dp * sizes.dsp > 1, ovlp)
            .context("building the step's dependency model")?;
        let all: BTreeSet<i64> = records.iter().map(|r| r.step).collect();
        let chosen: Vec<i64> = match steps {
            Some(want) => all.intersection(want).copied().collect(),
            None => all.iter().copied().collect(),
        };
        if chosen.is_empty() {
            bail!(
                "--steps names no step of the trace: it has steps {}",
                describe_steps(&all)
            );
        }
        let (dp, pp) = (sizes.dp as usize, sizes.pp as usize);
        let lanes = chosen.len() * dp;
        let step_index: HashMap<i64, usize> =
            chosen.iter().enumerate().map(|(i, s)| (*s, i)).collect();
        let mut first = vec![f64::INFINITY; chosen.len()];
        let mut last = vec![f64::NEG_INFINITY; chosen.len()];
        for r in records {
            if let Some(&i) = step_index.get(&r.step) {
                first[i] = first[i].min(r.start);
                last[i] = last[i].max(r.start + r.duration);
            }
        }
        let n = model.keys.len();
        let mut start = vec![f64::NAN; n * lanes];
        let mut end = vec![f64::NAN; n * lanes];
        let mut ranks = vec![u32::MAX; dp * pp];
        for r in records {
            let Some(&i) = step_index.get(&r.step) else {
                continue;
            };
            let key = OpKey {
                optype: r.optype,
                seq: r.seq_id,
                stage: r.stage,
            };
            ranks[r.dp_rank as usize * pp + r.stage as usize] = r.rank;
            let Some(&v) = model.index.get(&key) else {
                continue; // recorded, not modelled (a DP collective of a job with DP 1)
            };
            let at = v * lanes + i * dp + r.dp_rank as usize;
            if !start[at].is_nan() {
                bail!(
                    "step {}, worker {}:{}: {key} is recorded twice",
                    r.step,
                    r.dp_rank,
                    r.stage
                );
            }
            start[at] = r.start - first[i];
            end[at] = r.start + r.duration - first[i];
        }
        if let Some(at) = start.iter().position(|s| s.is_nan()) {
            let (v, lane) = (at / lanes, at % lanes);
            bail!(
                "step {}, worker {}:{} has no {}, which DP rank 0 of the first step has: every step \
                 and DP rank must record the same ops (give --steps to leave a cut-off step out)",
                chosen[lane / dp],
                lane % dp,
                model.keys[v].stage,
                model.keys[v]
            );
        }
        let mut job = Job {
            model,
            dp,
            pp,
            vpp: sizes.vpp as usize,
            types: records
                .iter()
                .filter(|r| step_index.contains_key(&r.step))
                .map(|r| r.optype)
                .collect(),
            base_span: first.iter().zip(&last).map(|(a, b)| b - a).collect(),
            steps: chosen,
            lanes,
            ranks,
            cost: Vec::new(),
            launch: Vec::new(),
            start,
            end,
        };
        job.launch = job.launch_delays();
        job.cost = job.costs();
        Ok(job)
    }

    /// Start minus the latest end among its dependencies (or its step's start).
    fn launch_delays(&self) -> Vec<f64> {
        let (lanes, graph) = (self.lanes, self.model.plan.graph());
        let mut out = vec![0.0; self.start.len()];
        let mut ready = vec![0.0; lanes];
        for v in 0..graph.nodes.len() {
            graph.ready(v, &self.end, lanes, &mut ready);
            for (l, r) in ready.iter().enumerate() {
                let d = self.start[v * lanes + l] - r;
                out[v * lanes + l] = if d <= -SKEW_S { 0.0 } else { d };
            }
        }
        out
    }

    /// Each op's own time: its duration, or for a collective member its end minus the latest
    /// start among the members (and among the step's DP ranks, for a DP collective).
    fn costs(&self) -> Vec<f64> {
        let (lanes, graph) = (self.lanes, self.model.plan.graph());
        let mut out: Vec<f64> = self
            .end
            .iter()
            .zip(&self.start)
            .map(|(e, s)| e - s)
            .collect();
        let mut latest = vec![0.0f64; lanes];
        for g in &graph.groups {
            graph.together(g, &self.start, lanes, self.dp, &mut latest);
            for &m in &g.members {
                for l in 0..lanes {
                    let t = self.end[m * lanes + l] - latest[l];
                    out[m * lanes + l] = if t <= -SKEW_S { 0.0 } else { t };
                }
            }
        }
        out
    }

    pub fn node_type(&self, v: usize) -> OpType {
        self.model.keys[v].optype
    }

    pub fn node_stage(&self, v: usize) -> usize {
        self.model.keys[v].stage as usize
    }
}

fn describe_steps(all: &BTreeSet<i64>) -> String {
    let v: Vec<String> = all.iter().take(12).map(i64::to_string).collect();
    let more = if all.len() > 12 { ", ..." } else { "" };
    format!("{}{more}", v.join(","))
}

/// The sizes must cover the trace: every dp_rank and stage inside them, and no fewer DP ranks
/// or stages recorded than they say.
fn check_sizes(records: &[Record], s: Sizes) -> Result<()> {
    let max_dp = records.iter().map(|r| r.dp_rank).max().unwrap_or(0);
    let max_stage = records.iter().map(|r| r.stage).max().unwrap_or(0);
    let max_mc = records.iter().map(|r| r.mc).max().unwrap_or(0).max(0) as u32;
    let problem = if max_dp + 1 != s.dp {
        Some(format!(
            "DP {} but the trace's dp_rank runs 0 to {max_dp}",
            s.dp
        ))
    } else if max_stage + 1 != s.pp {
        Some(format!(
            "PP {} but the trace's stage runs 0 to {max_stage}",
            s.pp
        ))
    } else if max_mc + 1 > s.vpp {
        Some(format!(
            "VPP {} but the trace's mc runs 0 to {max_mc}",
            s.vpp
        ))
    } else {
        None
    };
    if let Some(p) = problem {
        bail!("the job's sizes disagree with its trace: {p}; fix --meta (or --dp/--pp/--vpp), or leave them out to infer them from the trace");
    }
    Ok(())
}
