//! Beyond the artifact: the job under every schedule `sim` knows. Each DP rank's pipeline
//! (its stages' mean forward and backward times per microbatch, as recorded, or every stage at
//! the typical time) runs through the schedule simulator; the step is the slowest DP rank's
//! pipeline plus the step's tail after the last compute (the DP collectives, clipping, the
//! optimizer), as the replay found it with and without stragglers.

use anyhow::Result;
use serde::Serialize;

use super::analysis::Answer;
use super::job::Job;
use super::trace::OpType;
use crate::sim::{default_mem_limit, evaluate, Scenario, Schedule};

/// The schedules a job is tried under (interleaved with the job's own chunks, at least 2).
pub fn names(vpp: u32) -> Vec<String> {
    let v = vpp.max(2);
    [
        "1f1b".to_string(),
        format!("interleaved:{v}"),
        "zb-h1".into(),
        "zb-h2".into(),
        "zb-v".into(),
        "adaptive".into(),
    ]
    .to_vec()
}

#[derive(Debug, Clone, Serialize)]
pub struct ScheduleRow {
    pub schedule: String,
    /// A step with the job's stragglers (each DP rank's recorded stage times), seconds.
    pub with_stragglers_s: Option<f64>,
    /// A step with every stage at the typical time.
    pub without_s: Option<f64>,
    /// Why the simulator could not run it here, if it could not.
    pub refused: Option<String>,
}

/// Per DP rank and stage: mean forward and backward time per microbatch (all chunks), ms.
fn stage_times(job: &Job, cost: &[f64], d: Option<usize>) -> (Vec<f64>, Vec<f64>, usize) {
    let (mut f, mut b) = (vec![0.0; job.pp], vec![0.0; job.pp]);
    let (mut nf, mut nb) = (vec![0usize; job.pp], vec![0usize; job.pp]);
    for (v, key) in job.model.keys.iter().enumerate() {
        let s = key.stage as usize;
        let (sum, n) = match key.optype {
            OpType::ForwardCompute => (&mut f[s], &mut nf[s]),
            OpType::BackwardCompute => (&mut b[s], &mut nb[s]),
            _ => continue,
        };
        for l in 0..job.lanes {
            if d.is_none_or(|d| l % job.dp == d) {
                *sum += cost[v * job.lanes + l];
                *n += 1;
            }
        }
    }
    // Microbatches: the first stage's forwards of one step and DP rank, over its chunks.
    let per_step = nf[0] / (job.lanes / job.dp) / d.map_or(job.dp, |_| 1);
    let m = (per_step / job.vpp.max(1)).max(1);
    let ms = |sum: &[f64], n: &[usize]| -> Vec<f64> {
        sum.iter()
            .zip(n)
            .map(|(s, n)| s / *n.max(&1) as f64 * job.vpp as f64 * 1e3)
            .collect()
    };
    (ms(&f, &nf), ms(&b, &nb), m)
}

/// The step's tail after the last compute, mean over steps, seconds.
fn tail(job: &Job, t: &crate::sim::replay::Timeline) -> f64 {
    let ends = t.ends_of(&job.model.optimizers, job.dp);
    let computes: Vec<usize> = (0..job.model.keys.len())
        .filter(|&v| job.node_type(v).is_compute())
        .collect();
    let last = t.ends_of(&computes, job.dp);
    ends.iter().zip(&last).map(|(e, c)| e - c).sum::<f64>() / ends.len() as f64
}

pub fn run(job: &Job, a: &Answer, w_fraction: f64) -> Result<Vec<ScheduleRow>> {
    // The typical receive's transfer (every forward receive has the same typical cost).
    let link_ms = (0..job.model.keys.len())
        .find(|&n| job.node_type(n) == OpType::ForwardRecv)
        .map_or(0.0, |n| a.ideal_cost[n * job.lanes] * 1e3);
    let (tail_real, tail_ideal) = (tail(job, &a.nodelay), tail(job, &a.ideal));
    let scenario = |f: &[f64], b: &[f64], m: usize| -> Result<Scenario> {
        let tb: Vec<f64> = b.iter().map(|x| x * (1.0 - w_fraction)).collect();
        let tw: Vec<f64> = b.iter().map(|x| x * w_fraction).collect();
        Scenario::builder(job.pp, m)
            .times(f, &tb, &tw)
            .link_ms(link_ms)
            .build()
            .map_err(|e| anyhow::anyhow!("{e}"))
    };
    let mut rows = Vec::new();
    for name in names(job.vpp as u32) {
        let schedule: Schedule = name.parse()?;
        let time = |sc: &Scenario| -> anyhow::Result<f64> {
            evaluate(&schedule, sc, default_mem_limit(sc))
                .map(|(_, run)| run.iteration_ms / 1e3)
                .map_err(anyhow::Error::from)
        };
        let (fi, bi, m) = stage_times(job, &a.ideal_cost, None);
        let ideal = time(&scenario(&fi, &bi, m)?).map(|t| t + tail_ideal);
        let mut worst: anyhow::Result<f64> = Ok(0.0);
        for d in 0..job.dp {
            let (f, b, m) = stage_times(job, &job.cost, Some(d));
            let t = time(&scenario(&f, &b, m)?);
            worst = match (worst, t) {
                (Ok(a), Ok(b)) => Ok(a.max(b)),
                (Err(e), _) | (_, Err(e)) => Err(e),
            };
        }
        let real = worst.map(|t| t + tail_real);
        rows.push(ScheduleRow {
            schedule: name,
            with_stragglers_s: real.as_ref().ok().copied(),
            without_s: ideal.as_ref().ok().copied(),
            refused: real.err().or(ideal.err()).map(|e| e.to_string()),
        });
    }
    Ok(rows)
}
